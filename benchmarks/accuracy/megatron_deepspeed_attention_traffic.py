"""Trace the s x s memory traffic of Megatron-DeepSpeed's attention chains against the fused reference.

    python -m benchmarks.accuracy.megatron_deepspeed_attention_traffic          # the per-op table and the counts
    python -m benchmarks.accuracy.megatron_deepspeed_attention_traffic --json   # the same as JSON
    python -m benchmarks.accuracy.megatron_deepspeed_attention_traffic --smoke  # smallest sizes, JSON, nothing kept

The method is attention_chain_traffic.py's (the 2019 Megatron-LM chain): the chain is written from the code the
rows ran, op for op, and run under the same TorchDispatchMode, which counts each aten op's reads and writes of
the [b x heads, s, s] tensors, forward and backward apart; the reference is what planner/throughput/compute.py
charges on its eager-attention path (the scores and the probabilities written once each).

Both forks fuse the scale, mask and softmax into one kernel at these rows' sequence (FusedScaleMaskSoftmax,
`16 < sq <= 2048`; megatron/model/fused_softmax.py lines 134-154 of github.com/bigscience-workshop/Megatron-DeepSpeed
at ae6277f5, 2022-02-21; BLOOM's launch script aborts if its constraints are unmet,
`--abort-on-unmet-fused-kernel-constraints`, tr11-176B-ml.slurm of github.com/bigscience-workshop/bigscience at
9e64edec). What they add to the fused reference:

- attention dropout: `self.attention_dropout(attention_probs)` after the softmax (BigScience's
  megatron/model/transformer.py line 358 at ae6277f5; Microsoft's megatron/model/transformer.py line 315 at
  1ac4a442, 2021-12-10, MT-NLG's time), p = 0.1 by default in both (arguments.py line 452 at ae6277f5, line 347
  at 1ac4a442). BLOOM kept it: "The default Megatron-LM dropout settings are inherited: ... --attention-dropout
  0.1" (train/tr11-176B-ml/README.md lines 308-312 at 9e64edec). One kernel on CUDA writing the output and a
  byte mask (native_dropout); its backward writes the input's gradient.
- ALiBi (BigScience's fork, `--position-embedding-type alibi`): the scores are `torch.baddbmm(alibi, q, k^T,
  beta=1 or 1/layer_number, alpha=1/norm_factor)` into the [b x heads, 1, s] bias (transformer.py lines 290-291
  and 322-326 at ae6277f5; the bias built at lines 591-618), where the path without ALiBi passes an empty
  tensor with beta = 0 (lines 283-289, 306-311). PyTorch's CUDA baddbmm of that time copies the broadcast input
  into the output when beta != 0 and runs the batched GEMM with beta over it (aten/src/ATen/native/cuda/Blas.cpp,
  baddbmm_out_cuda: `expand_size(self, ...)`, then baddbmm_out_cuda_impl: `if (beta != 0.0) result.copy_(self)`,
  read in a stored copy of PyTorch's source); traced here as the same two passes: the expanded bias made
  contiguous (the copy), then baddbmm reading it (the GEMM's beta term). The bias needs no gradient. The
  copy's read is of the [b x heads, 1, s] bias, which the byte count takes at its expanded size; the writes, the
  unit charged, are exact.

The difference of the traces, counted in 16-bit s x s tensors written (the unit `elementwise_seconds` charges),
is what planner/throughput/attention_chain.py adds for the megatron-deepspeed kernel stacks.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import torch

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks.accuracy import attention_chain_traffic as chain_traffic  # noqa: E402

ATTENTION_DROPOUT = 0.1  # --attention-dropout's default in both forks (arguments.py: above)


def _fused_softmax(scores: torch.Tensor, scale: float) -> torch.Tensor:
    """ScaledUpperTriangMaskedSoftmax: one kernel each way (the reference's custom op, not traced inside)."""
    return chain_traffic.fused_scale_mask_softmax(scores.unsqueeze(0), scale).squeeze(0)


def reference_probs(query: torch.Tensor, key: torch.Tensor, alibi: torch.Tensor) -> torch.Tensor:
    """What compute.py charges: QK^T, then one fused scale-mask-softmax."""
    return _fused_softmax(torch.bmm(query, key.transpose(1, 2)), 1.0 / math.sqrt(query.shape[-1]))


def dropout_probs(query: torch.Tensor, key: torch.Tensor, alibi: torch.Tensor) -> torch.Tensor:
    """Without ALiBi (Microsoft's fork, BigScience's with learned positions): baddbmm with beta 0 into an empty
    tensor (no copy: QK^T with alpha, here folded into the query, which is not s x s), the fused softmax, dropout."""
    scores = torch.bmm(query * (1.0 / math.sqrt(query.shape[-1])), key.transpose(1, 2))
    return torch.native_dropout(_fused_softmax(scores, 1.0), ATTENTION_DROPOUT, True)[0]


def alibi_probs(query: torch.Tensor, key: torch.Tensor, alibi: torch.Tensor) -> torch.Tensor:
    """BigScience's fork with ALiBi: the bias copied out to [b x heads, s, s], baddbmm over it, the fused softmax,
    dropout."""
    batches, seq, head_dim = query.shape
    bias = alibi.expand(batches, seq, seq).contiguous()  # CUDA baddbmm's result.copy_(self) when beta != 0
    scores = torch.baddbmm(bias, query, key.transpose(1, 2), beta=1.0, alpha=1.0 / math.sqrt(head_dim))
    return torch.native_dropout(_fused_softmax(scores, 1.0), ATTENTION_DROPOUT, True)[0]


CHAINS = {"fused": reference_probs, "dropout": dropout_probs, "alibi_dropout": alibi_probs}


def trace(chain, batches: int, seq: int, head_dim: int) -> dict:
    """In bf16 (BLOOM's --bf16); the ALiBi bias [b x heads, 1, s], as _build_alibi_tensor makes it."""
    alibi = torch.randn(batches, 1, seq, dtype=torch.bfloat16)
    return chain_traffic.trace_batched(chain, batches, seq, head_dim, torch.bfloat16, alibi)


def main(argv: list[str] | None = None) -> int:
    return chain_traffic.run_against_fused(argv, __doc__.splitlines()[0], CHAINS, trace)


if __name__ == "__main__":
    sys.exit(main())

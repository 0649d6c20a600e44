"""Trace the s x s memory traffic of Megatron-LM v1.1.5's unfused attention chain (ZeRO-Infinity's code).

    python -m benchmarks.accuracy.megatron_v115_attention_traffic          # the per-op table and the counts
    python -m benchmarks.accuracy.megatron_v115_attention_traffic --json   # the same as JSON
    python -m benchmarks.accuracy.megatron_v115_attention_traffic --smoke  # smallest sizes, JSON, nothing kept

The method is attention_chain_traffic.py's: the chain is written from the code the rows ran, op for op, and run
under the same TorchDispatchMode, which counts each aten op's reads and writes of the [b x heads, s, s] tensors,
forward and backward apart; the reference is what planner/throughput/compute.py charges on its eager-attention
path (the scores and the probabilities written once each).

ZeRO-Infinity's runs (Rajbhandari et al. 2021) are DeepSpeedExamples' Megatron-LM-v1.1.5-ZeRO3: the paper's
example is github.com/microsoft/DeepSpeedExamples at bdf8e59a ("ZeRO-Infinity examples (#98)", 2021-04-18, the day
of DeepSpeed's ZeRO-Infinity release), which changed the linear layers and the checkpointing flags of the ZeRO-3
example at 2cd968f2 but not the attention chain. Its script (examples/ds_pretrain_gpt2-zero3.sh) passes --fp16 but
neither --scaled-upper-triang-masked-softmax-fusion nor --scaled-masked-softmax-fusion (store_true, off by default:
megatron/arguments.py lines 249-256 at bdf8e59a), nor --apply-query-key-layer-scaling or
--attention-softmax-in-fp32 (lines 346-351). So FusedScaleMaskSoftmax (megatron/model/fused_softmax.py, the same
at both commits) takes its torch branch with `softmax_in_fp32` false and `scale` None: no cast, no multiply; the
mask function, then torch.nn.Softmax. The chain, in megatron/model/transformer.py at bdf8e59a:

- the scores: `torch.baddbmm(matmul_result, q, k^T, beta=0.0, alpha=1/norm_factor)` into a `torch.empty` buffer
  (lines 324-335): with beta 0 nothing is read from it, so traced as one batched GEMM with the alpha folded into
  the query (which is not s x s);
- the mask: `attention_scores.masked_fill_(ltor_mask, -10000.0)` (megatron/model/gpt2_model.py line 32), in place
  on the scores, the mask a bool [1, 1, s, s] (`attention_mask < 0.5`, megatron/utils.py line 173);
- `torch.nn.Softmax(dim=-1)` in fp16 (fused_softmax.py, the else branch; called at transformer.py line 364);
- attention dropout, `self.attention_dropout(attention_probs)` under the model-parallel rng fork (line 370),
  p = 0.1 by default (`--attention-dropout`, arguments.py line 202), which the script does not set.

The difference of the traces, counted in 16-bit s x s tensors written (the unit `elementwise_seconds` charges),
is what planner/throughput/attention_chain.py adds for the megatron-v1.1.5 kernel stack.
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

ATTENTION_DROPOUT = 0.1  # --attention-dropout's default (arguments.py line 201 at 2cd968f2)


def reference_probs(query: torch.Tensor, key: torch.Tensor, ltor_mask: torch.Tensor) -> torch.Tensor:
    """What compute.py charges: QK^T, then one fused scale-mask-softmax."""
    scores = torch.bmm(query, key.transpose(1, 2))
    return chain_traffic.fused_scale_mask_softmax(scores.unsqueeze(0), 1.0 / math.sqrt(query.shape[-1])).squeeze(0)


def v115_probs(query: torch.Tensor, key: torch.Tensor, ltor_mask: torch.Tensor) -> torch.Tensor:
    """The ops the code calls: baddbmm (beta 0) for the scores, masked_fill_ in place, torch's softmax in fp16,
    attention dropout. The charged count."""
    scores = torch.bmm(query * (1.0 / math.sqrt(query.shape[-1])), key.transpose(1, 2))
    scores.masked_fill_(ltor_mask[0], -10000.0)
    probs = torch.nn.Softmax(dim=-1)(scores)
    # torch.nn.Dropout on a CUDA tensor is one kernel writing the output and a byte mask (native_dropout); on the
    # CPU it decomposes into four ops, so the CUDA op is called.
    return torch.native_dropout(probs, ATTENTION_DROPOUT, True)[0]


def v115_view_probs(query: torch.Tensor, key: torch.Tensor, ltor_mask: torch.Tensor) -> torch.Tensor:
    """The same ops with the masked_fill_ on a [b, np, s, s] view of the GEMM's output, as transformer.py line 291
    has it: today's autograd then runs the in-place op's backward through CopySlices and the view's as_strided
    backward, copies the run's PyTorch (not stated in the paper) may not have made. Traced, not charged."""
    scores = torch.bmm(query * (1.0 / math.sqrt(query.shape[-1])), key.transpose(1, 2))
    viewed = scores.view(1, *scores.shape)
    viewed.masked_fill_(ltor_mask, -10000.0)
    probs = torch.nn.Softmax(dim=-1)(viewed)
    return torch.native_dropout(probs, ATTENTION_DROPOUT, True)[0].view(*scores.shape)


CHAINS = {"fused": reference_probs, "v1.1.5": v115_probs, "v1.1.5_on_a_view": v115_view_probs}


def trace(chain, batches: int, seq: int, head_dim: int) -> dict:
    """In fp16 (the script's --fp16); the mask a bool, True above the diagonal (get_ltor_masks_and_position_ids)."""
    ltor_mask = torch.ones(1, 1, seq, seq).tril() < 0.5
    return chain_traffic.trace_batched(chain, batches, seq, head_dim, torch.float16, ltor_mask)


def main(argv: list[str] | None = None) -> int:
    return chain_traffic.run_against_fused(argv, __doc__.splitlines()[0], CHAINS, trace)


if __name__ == "__main__":
    sys.exit(main())

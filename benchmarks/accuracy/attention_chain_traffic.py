"""Trace the memory traffic of the 2019 Megatron-LM attention-softmax chain against a fused one.

    python -m benchmarks.accuracy.attention_chain_traffic          # the per-op table and the pass counts
    python -m benchmarks.accuracy.attention_chain_traffic --json   # the same as JSON
    python -m benchmarks.accuracy.attention_chain_traffic --smoke  # smallest sizes, JSON printed, nothing kept

The ZeRO (2020) and ZeRO-Offload (2021) papers ran the Megatron-LM code of September 2019, which
DeepSpeedExamples copies in its `Megatron-LM` folder (docs/accuracy.md, "The mechanism, read in the code").
Its attention (Megatron-LM/mpu/transformer.py at commit 5426d18a, lines 127-140) takes the [b, heads, s, s]
scores through separate torch ops: QK^T, `/ math.sqrt(head_dim)`, `torch.mul(scores, ltor_mask)`,
`- 10000.0 * (1.0 - ltor_mask)`, `torch.nn.Softmax`, attention dropout (p = 0.1 by default, arguments.py
line 34), all in fp16 (pretrain_gpt2.py lines 78-86: `model.half()` and FP16_Module). The chain below is
written from those lines, op for op, and run under a TorchDispatchMode that counts the bytes each aten op reads
and writes of tensors with b x heads x s x s elements (the [1, 1, s, s] mask, shared by every head, is not
counted), forward and backward apart.

The reference is what planner/throughput/compute.py charges on its eager-attention path: the scores and the
probabilities written once each, i.e. QK^T followed by one fused scale-mask-softmax kernel (a custom op here,
so its inside is not traced, as Megatron-LM v1.1.5's ScaledUpperTriangMaskedSoftmax is one CUDA kernel each
way), without dropout. The difference of the two traces, counted in s x s tensors written (the unit
`elementwise_seconds` charges), is what planner/throughput/attention_chain.py adds for the 2019 code.
Under `--checkpoint-activations` that code reruns each layer's forward in the backward
(mpu/transformer.py lines 406-412, one layer per checkpoint), so the forward passes are paid twice; the
trace counts one forward, the estimator adds the recompute as it does for every block.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

DROPOUT = 0.1  # Megatron-LM 2019's --attention-dropout default (arguments.py line 34 at 5426d18a)


class ScoreTraffic(TorchDispatchMode):
    """Bytes read and written, per aten op, of the tensors holding `square` elements (b x heads x s x s).
    Views (outputs sharing an input's storage) move nothing and are not counted; an in-place op's output, which
    shares its input's storage too, is written and is counted."""

    def __init__(self, square: int):
        super().__init__()
        self.square = square
        self.ops: list[dict] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        inputs = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        outputs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        storages = {t.untyped_storage().data_ptr() for t in inputs}
        if not func._schema.is_mutable and all(t.untyped_storage().data_ptr() in storages for t in outputs):
            return out  # a view (transpose, _unsafe_view): nothing moves
        written = [t for t in outputs if t.numel() == self.square and t.untyped_storage().data_ptr() not in storages]
        if func._schema.is_mutable:  # an in-place op (masked_fill_) writes the tensor it was given
            written += [t for t in outputs if t.numel() == self.square and t.untyped_storage().data_ptr() in storages]
        read = [t for t in inputs if t.numel() == self.square]
        if written or read:
            self.ops.append(
                {
                    "op": str(func.overloadpacket.__name__),
                    "read_bytes": sum(t.numel() * t.element_size() for t in read),
                    "written_bytes": sum(t.numel() * t.element_size() for t in written),
                    "writes": len(written),
                    "written_16bit": sum(1 for t in written if t.element_size() == 2),
                    "written_32bit": sum(1 for t in written if t.element_size() == 4),
                }
            )
        return out


# The fused reference: one op forward and one backward (Megatron-LM v1.1.5's fused_softmax.py has the same
# shape: the kernel saves its output, the backward reads the output and its gradient).
@torch.library.custom_op("attention_chain_traffic::fused_scale_mask_softmax", mutates_args=())
def fused_scale_mask_softmax(scores: torch.Tensor, scale: float) -> torch.Tensor:
    s = scores.shape[-1]
    causal = torch.ones(s, s, dtype=torch.bool, device=scores.device).tril()
    return torch.softmax((scores.float() * scale).masked_fill(~causal, -10000.0), dim=-1).to(scores.dtype)


@torch.library.custom_op("attention_chain_traffic::fused_scale_mask_softmax_backward", mutates_args=())
def fused_scale_mask_softmax_backward(grad: torch.Tensor, probs: torch.Tensor, scale: float) -> torch.Tensor:
    g, p = grad.float(), probs.float()
    return ((g - (g * p).sum(-1, keepdim=True)) * p * scale).to(grad.dtype)


@fused_scale_mask_softmax.register_fake
def _(scores, scale):
    return torch.empty_like(scores)


@fused_scale_mask_softmax_backward.register_fake
def _(grad, probs, scale):
    return torch.empty_like(grad)


def _fused_setup(ctx, inputs, output):
    ctx.scale = inputs[1]
    ctx.save_for_backward(output)


def _fused_backward(ctx, grad):
    (probs,) = ctx.saved_tensors
    return fused_scale_mask_softmax_backward(grad, probs, ctx.scale), None


fused_scale_mask_softmax.register_autograd(_fused_backward, setup_context=_fused_setup)


def megatron_2019_probs(query: torch.Tensor, key: torch.Tensor, ltor_mask: torch.Tensor) -> torch.Tensor:
    """mpu/transformer.py lines 127-140 at 5426d18a (the rng-tracker fork around the dropout aside)."""
    scores = torch.matmul(query, key.transpose(-1, -2))
    scores = scores / math.sqrt(query.shape[-1])
    scores = torch.mul(scores, ltor_mask) - 10000.0 * (1.0 - ltor_mask)
    probs = torch.nn.Softmax(dim=-1)(scores)
    # torch.nn.Dropout on a CUDA tensor is one kernel writing the output and a byte mask (_fused_dropout in
    # 2019's torch, native_dropout now); on the CPU it decomposes into four ops, so the CUDA op is called.
    return torch.native_dropout(probs, DROPOUT, True)[0]


def fused_probs(query: torch.Tensor, key: torch.Tensor, ltor_mask: torch.Tensor) -> torch.Tensor:
    """What compute.py charges: the scores and the probabilities, written once each."""
    scores = torch.matmul(query, key.transpose(-1, -2))
    return fused_scale_mask_softmax(scores, 1.0 / math.sqrt(query.shape[-1]))


def trace(chain, batch: int, heads: int, seq: int, head_dim: int) -> dict:
    """One forward and backward of `chain` then PV, in fp16, the s x s traffic of each."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(batch, heads, seq, head_dim, dtype=torch.float16, requires_grad=True) for _ in range(3))
    ltor_mask = torch.ones(1, 1, seq, seq, dtype=torch.float16).tril()  # pretrain_gpt2.py: attention_mask.half()
    return trace_phases(lambda: torch.matmul(chain(q, k, ltor_mask), v), batch * heads * seq * seq)


def trace_phases(forward_pass: Callable[[], torch.Tensor], square: int) -> dict:
    """The s x s traffic of `forward_pass` (returning the attention's context) and of its backward, apart."""
    forward = ScoreTraffic(square)
    with forward:
        context = forward_pass()
    backward = ScoreTraffic(square)
    with backward:
        context.backward(torch.ones_like(context))
    return {phase: _totals(mode.ops, square) for phase, mode in (("forward", forward), ("backward", backward))}


def _totals(ops: list[dict], square: int) -> dict:
    return {
        "ops": ops,
        "writes": sum(op["written_16bit"] for op in ops),  # fp16 s x s tensors written: elementwise_seconds' unit
        "read_bytes_per_element": sum(op["read_bytes"] for op in ops) / square,
        "written_bytes_per_element": sum(op["written_bytes"] for op in ops) / square,
    }


def measure(batch: int, heads: int, seq: int, head_dim: int) -> dict:
    chains = {"megatron_2019": megatron_2019_probs, "fused": fused_probs}
    traces = {name: trace(chain, batch, heads, seq, head_dim) for name, chain in chains.items()}
    extra = {
        phase: traces["megatron_2019"][phase]["writes"] - traces["fused"][phase]["writes"]
        for phase in ("forward", "backward")
    }
    return {"shape": {"batch": batch, "heads": heads, "seq": seq, "head_dim": head_dim}, "traces": traces,
            "extra_score_writes": extra}  # fmt: skip


def trace_batched(chain: Callable[..., torch.Tensor], batches: int, seq: int, head_dim: int, dtype: torch.dtype,
                  side: torch.Tensor) -> dict:  # fmt: skip
    """One forward and backward of `chain(q, k, side)` then PV over [batches, seq, head_dim] (batch x heads folded, as
    the baddbmm-based codes have them), in `dtype`, the s x s traffic of each."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(batches, seq, head_dim, dtype=dtype, requires_grad=True) for _ in range(3))
    return trace_phases(lambda: torch.bmm(chain(q, k, side), v), batches * seq * seq)


def against_fused(chains: dict, trace: Callable[..., dict], batches: int, seq: int, head_dim: int) -> dict:
    """Each chain's trace over [batches, seq, head_dim] heads, and each non-reference chain's s x s writes beyond
    the "fused" reference's, per phase (megatron_deepspeed_ and megatron_v115_attention_traffic.py)."""
    traces = {name: trace(chain, batches, seq, head_dim) for name, chain in chains.items()}
    extra = {
        name: {phase: traces[name][phase]["writes"] - traces["fused"][phase]["writes"] for phase in traces[name]}
        for name in chains
        if name != "fused"
    }
    return {"shape": {"batches": batches, "seq": seq, "head_dim": head_dim}, "traces": traces,
            "extra_score_writes": extra}  # fmt: skip


def print_against_fused(result: dict) -> None:
    """against_fused's result: the traces, then each chain's extra writes."""
    print_traces(result["traces"])
    for name, extra in result["extra_score_writes"].items():
        print(f"extra s x s writes of {name}: forward {extra['forward']}, backward {extra['backward']}")


def run_against_fused(argv: list[str] | None, description: str, chains: dict, trace: Callable[..., dict]) -> int:
    """The command line of a script tracing `chains` against the fused reference."""
    return run_cli(argv, description, lambda: against_fused(chains, trace, 2, 16, 8),
                   lambda: against_fused(chains, trace, 8, 128, 32), print_against_fused)  # fmt: skip


def print_traces(traces: dict) -> None:
    """Each chain's s x s writes and bytes per phase, op by op (megatron_deepspeed_attention_traffic.py too)."""
    for name, phases in traces.items():
        for phase, totals in phases.items():
            print(f"{name} {phase}: {totals['writes']} 16-bit s x s writes, "
                  f"{totals['read_bytes_per_element']:.0f} B read + {totals['written_bytes_per_element']:.0f} B "
                  "written per s x s element")  # fmt: skip
            for op in totals["ops"]:
                print(f"    {op['op']:<34} read {op['read_bytes']:>8} B  written {op['written_bytes']:>8} B")


def run_cli(argv: list[str] | None, description: str, smoke: Callable[[], dict], full: Callable[[], dict],
            print_table: Callable[[dict], None]) -> int:  # fmt: skip
    """`--smoke` (the smallest sizes, JSON), `--json`, or the table; both trace scripts' command line."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--smoke", action="store_true", help="smallest sizes, JSON printed, nothing written")
    parser.add_argument("--json", action="store_true", help="print JSON instead of the table")
    args = parser.parse_args(argv)
    # The counts do not depend on the sizes (every op touches each element once); small sizes keep it quick.
    result = smoke() if args.smoke else full()
    if args.smoke or args.json:
        print(json.dumps(result, indent=1))
    else:
        print_table(result)
    return 0


def _print_table(result: dict) -> None:
    print_traces(result["traces"])
    extra = result["extra_score_writes"]
    print(f"extra s x s writes of the 2019 chain: forward {extra['forward']}, backward {extra['backward']}")


def main(argv: list[str] | None = None) -> int:
    return run_cli(argv, __doc__.splitlines()[0], lambda: measure(1, 2, 16, 8), lambda: measure(2, 4, 128, 32),
                   _print_table)  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())

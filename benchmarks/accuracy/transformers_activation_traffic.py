"""Trace the memory traffic of transformers' MLP activations (our own stack) against a one-kernel activation.

    python -m benchmarks.accuracy.transformers_activation_traffic          # the per-op table and the bytes
    python -m benchmarks.accuracy.transformers_activation_traffic --json   # the same as JSON
    python -m benchmarks.accuracy.transformers_activation_traffic --smoke  # smallest sizes, JSON, nothing kept

The method is attention_chain_traffic.py's: a TorchDispatchMode counts each aten op's bytes read and written of the
tensors with as many elements as the MLP activation (b x s x ffn), forward and backward apart. The activations are
transformers' own modules, the installed version's (transformers 5.24.0, activations.py ACT2CLS, lines 324-349), called
as the MLPs call them (`ACT2FN[config.activation_function]`, `ACT2FN[config.hidden_act]`):

- gelu_new, NewGELUActivation (lines 59-66): `0.5 * input * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (input +
  0.044715 * torch.pow(input, 3.0))))`, a chain of element-wise ops (GPT-2, GPT-J, T5 v1.1's gated-gelu);
- gelu_fast, FastGELUActivation (lines 95-101): the same without pow (GPT-NeoX-20B);
- quick_gelu, QuickGELUActivation (lines 104-111): `input * torch.sigmoid(1.702 * input)` (CLIP);
- gelu (GELUActivation, lines 69-87: `nn.functional.gelu`), gelu_pytorch_tanh (GELUTanh, lines 31-52:
  `nn.functional.gelu(approximate="tanh")`), silu (SiLUActivation, lines 90-92: `nn.functional.silu`) and relu
  (`nn.ReLU`): one kernel each way, as the reference;
- bloom_gelu: BLOOM's BloomGelu (models/bloom/modeling_bloom.py lines 112-164), an autograd Function whose forward
  and backward are both chains of element-wise ops (bloom_gelu_forward, bloom_gelu_back).

The hub kernels `use_kernel_forward_from_hub` names replace these only when the `kernels` package is installed and the
model is kernelized, which our strategies do not do.

The reference is a fused activation: torch's `gelu(approximate="tanh")`, one kernel forward (read the input, write the
output) and one backward (read the gradient and the input, write the input's gradient), what Megatron's bias-GeLU and
transformers' gelu_pytorch_tanh run.

As CUDA runs them under autocast (the planner's bf16-mixed and fp16-mixed plans; weights in fp32), the names without a
suffix: the MLP's first linear gives its output in the autocast dtype (bf16 here; fp16 moves the same bytes), so the
activation's input is bf16; element-wise ops are in neither of CUDA autocast's lists and run in their inputs' dtype,
except `pow`, which is in CUDA autocast's fp32 list (torch.amp docs, "CUDA Ops that can autocast to float32"): its
input is cast to fp32 and its output is fp32, so gelu_new's chain runs in fp32 from the pow on (type promotion), its
output is fp32, and the next linear's autocast casts it back to bf16 (counted here, as part of the chain). The CPU's
autocast lists differ from CUDA's, so autocast is not switched on: the cast to fp32 before pow is done by a
TorchFunctionMode, as CUDA's autocast does it, and the cast back after the chain by hand. In pure bf16 (bf16 weights,
no autocast) and in fp32 nothing is cast ("@bf16", "@fp32").

The extra bytes per element of the activation, forward and backward, are the chain's less the reference's; they are
what planner/throughput/kernel_stack.py charges the hf-eager kernel stack at the HBM rate, by activation and precision.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch.overrides import TorchFunctionMode

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks.accuracy import attention_chain_traffic as chain_traffic  # noqa: E402

# The activations traced: transformers' ACT2FN names, plus BLOOM's own module.
ACTIVATIONS = ("gelu_new", "gelu_fast", "quick_gelu", "gelu", "gelu_pytorch_tanh", "silu", "relu", "bloom_gelu")
PRECISIONS = {"autocast": torch.bfloat16, "bf16": torch.bfloat16, "fp32": torch.float32}
_POW = {torch.pow, torch.Tensor.pow, torch.Tensor.__pow__}


class CudaAutocastPow(TorchFunctionMode):
    """CUDA autocast's fp32 policy for pow, the one op of these chains in its lists: 16-bit inputs cast to fp32."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _POW:
            args = tuple(a.float() if isinstance(a, torch.Tensor) and a.dtype in (torch.bfloat16, torch.float16) else a
                         for a in args)  # fmt: skip
        return func(*args, **kwargs)


def activation(name: str):
    """The module the MLP calls: transformers' ACT2FN[name], or BLOOM's BloomGelu, or the fused reference."""
    if name == "fused":
        return lambda x: torch.nn.functional.gelu(x, approximate="tanh")
    if name == "bloom_gelu":
        from transformers.models.bloom.modeling_bloom import BloomGelu

        return BloomGelu()
    from transformers.activations import ACT2FN

    return ACT2FN[name]


def trace(name: str, elements: int, precision: str) -> dict:
    """One forward and backward of the activation over `elements` values in `precision`: the traffic of each phase."""
    dtype = PRECISIONS[precision]
    torch.manual_seed(0)
    x = torch.randn(elements, dtype=dtype, requires_grad=True)
    act = activation(name)

    def forward_pass() -> torch.Tensor:
        if precision != "autocast":
            return act(x)
        with CudaAutocastPow():
            out = act(x)
        return out.to(dtype)  # the next linear's autocast cast (nothing when the output is already 16-bit)

    return chain_traffic.trace_phases(forward_pass, elements)


def measure(elements: int) -> dict:
    traces, extra = {}, {}
    for precision in PRECISIONS:
        suffix = "" if precision == "autocast" else f"@{precision}"
        run = {name: trace(name, elements, precision) for name in ("fused", *ACTIVATIONS)}
        for name, phases in run.items():
            traces[name + suffix] = phases
            if name != "fused":
                extra[name + suffix] = {
                    phase: phases[phase]["read_bytes_per_element"] + phases[phase]["written_bytes_per_element"]
                    - run["fused"][phase]["read_bytes_per_element"] - run["fused"][phase]["written_bytes_per_element"]
                    for phase in ("forward", "backward")
                }  # fmt: skip
    return {"elements": elements, "traces": traces, "extra_bytes_per_element": extra}


def _print_table(result: dict) -> None:
    for name, phases in result["traces"].items():
        for phase, totals in phases.items():
            print(f"{name} {phase}: {len(totals['ops'])} ops, {totals['read_bytes_per_element']:.0f} B read + "
                  f"{totals['written_bytes_per_element']:.0f} B written per element")  # fmt: skip
            for op in totals["ops"]:
                print(f"    {op['op']:<34} read {op['read_bytes']:>8} B  written {op['written_bytes']:>8} B")
    for name, extra in result["extra_bytes_per_element"].items():
        print(f"extra bytes per element of {name}: forward {extra['forward']:.0f}, backward {extra['backward']:.0f}")


def main(argv: list[str] | None = None) -> int:
    return chain_traffic.run_cli(argv, __doc__.splitlines()[0], lambda: measure(64), lambda: measure(1 << 16),
                                 _print_table)  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())

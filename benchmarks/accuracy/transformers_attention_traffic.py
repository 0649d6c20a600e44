"""Trace the s x s memory traffic of transformers' eager attention (our own stack) against the fused reference.

    python -m benchmarks.accuracy.transformers_attention_traffic          # the per-op table and the counts
    python -m benchmarks.accuracy.transformers_attention_traffic --json   # the same as JSON
    python -m benchmarks.accuracy.transformers_attention_traffic --smoke  # smallest sizes, JSON, nothing kept

The method is attention_chain_traffic.py's: a TorchDispatchMode counts each aten op's reads and writes of the
[b, heads, s, s] tensors, forward and backward apart, against the reference planner/throughput/compute.py charges
on its eager-attention path (the scores and the probabilities written once each). Here the chain is not rewritten
from the code: transformers' own `eager_attention_forward` is called, the installed version's
(transformers 5.24.0):

- GPT-2, models/gpt2/modeling_gpt2.py lines 55-73: `matmul(q, k^T) * scaling`, `+ attention_mask`,
  `softmax(dim=-1)`, `.type(value.dtype)`, `dropout(p=attn_pdrop)` (0.1 by default; line 219 passes it in
  training), then PV;
- Llama, models/llama/modeling_llama.py lines 180-202 (the function most families copy): `repeat_kv`, the same
  product and scale, `+ attention_mask`, `softmax(dim=-1, dtype=torch.float32).to(query.dtype)`,
  `dropout(p=attention_dropout)` (0.0 by default, configuration_llama.py line 81), then PV;
- Gemma-2, models/gemma2/modeling_gemma2.py lines 176-207: Llama's chain with the scores soft-capped before the
  mask (`/ softcap`, tanh, `* softcap`); what the soft-capping adds is the difference of its trace and Llama's.

As CUDA runs them under bf16 autocast (the planner's bf16-mixed and fp16-mixed plans; weights in fp32), the names
without a suffix:

- q, k and v come out of autocast's linear layers in bf16, and the two products are autocast's lower-precision
  ops, so they are traced in bf16 without autocast (the CPU's autocast lists differ from CUDA's);
- the causal mask is a float [b, 1, s, s] tensor in the input embeddings' dtype (masking_utils.py line 965,
  `dtype = inputs_embeds.dtype`; eager_mask lines 558-617): fp32 under autocast, the embeddings being fp32
  weights. The add is in neither autocast list, so type promotion makes the scores fp32; softmax is in CUDA
  autocast's fp32 list, so it runs in fp32 (it is given fp32 here; Llama asks for fp32 anyway). The mask, shared
  by the heads, is not an s x s tensor of the count, as in the other traces;
- dropout on a CUDA tensor is one kernel writing the output and a byte mask (native_dropout); with p = 0 it is no
  op (aten's dropout returns its input). `torch.nn.functional.dropout` is replaced by that kernel during the call,
  the CPU's decomposing into four ops.

In pure bf16 (bf16 weights, no autocast) the embeddings, and so the mask, are bf16 and nothing promotes: GPT-2's
softmax runs in bf16, while Llama's `softmax(dtype=torch.float32)` on a bf16 tensor is a cast then an fp32 softmax on
CUDA as on the CPU (aten/src/ATen/native/SoftMax.cpp, `softmax(input, dim, dtype)`: the one-kernel `half_to_float`
path is taken for fp16 CUDA tensors only). In fp32 everything is fp32. Those chains are traced too ("@bf16",
"@fp32"; the names without a suffix are autocast's).

The count is in the unit `elementwise_seconds` charges, a value written at the compute width (2 bytes, 4 in fp32):
under autocast an fp32 s x s tensor counts two. The difference of the traces is what planner/throughput/
attention_chain.py adds for the hf-eager kernel stack (by precision, fp32 softmax and attention dropout).
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import torch

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks.accuracy import attention_chain_traffic as chain_traffic  # noqa: E402

GPT2_ATTENTION_DROPOUT = 0.1  # GPT2Config.attn_pdrop's default


def _native_dropout(x: torch.Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> torch.Tensor:
    """CUDA's dropout: one native_dropout kernel for 0 < p < 1, nothing otherwise (aten/native/Dropout.cpp)."""
    if not training or p == 0.0:
        return x
    return torch.native_dropout(x, p, True)[0]


def _call_eager(forward, dropout: float, query, key, value, mask, **extra) -> torch.Tensor:
    module = SimpleNamespace(training=True, num_key_value_groups=1)
    original = torch.nn.functional.dropout
    torch.nn.functional.dropout = _native_dropout  # type: ignore[assignment]
    try:
        output, _ = forward(module, query, key, value, mask, scaling=query.shape[-1] ** -0.5, dropout=dropout, **extra)
    finally:
        torch.nn.functional.dropout = original
    return output.transpose(1, 2)  # back to [b, heads, s, head_dim]: a view


def gpt2_chain(dropout: float):
    from transformers.models.gpt2.modeling_gpt2 import eager_attention_forward

    return lambda q, k, v, mask: _call_eager(eager_attention_forward, dropout, q, k, v, mask)


def llama_chain(dropout: float):
    from transformers.models.llama.modeling_llama import eager_attention_forward

    return lambda q, k, v, mask: _call_eager(eager_attention_forward, dropout, q, k, v, mask)


def gemma2_chain(dropout: float):
    """Llama's chain with the scores soft-capped first: `/ softcap`, tanh, `* softcap` (models/gemma2/modeling_gemma2.py
    lines 176-207; `attn_logit_softcapping` 50.0 by default, configuration_gemma2.py line 90)."""
    from transformers.models.gemma2.modeling_gemma2 import eager_attention_forward

    return lambda q, k, v, mask: _call_eager(eager_attention_forward, dropout, q, k, v, mask, softcap=50.0)


def fused_chain(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """What compute.py charges: QK^T, one fused scale-mask-softmax, PV."""
    scores = torch.matmul(q, k.transpose(-1, -2))
    return torch.matmul(chain_traffic.fused_scale_mask_softmax(scores, q.shape[-1] ** -0.5), v)


# (q, k and v's dtype, the causal mask's dtype) per precision: under autocast the linears give bf16 and the fp32
# embeddings an fp32 mask; pure bf16 (bf16 weights, no autocast) gives both in bf16; fp32 both in fp32.
PRECISIONS = {
    "autocast": (torch.bfloat16, torch.float32),
    "bf16": (torch.bfloat16, torch.bfloat16),
    "fp32": (torch.float32, torch.float32),
}


def trace(chain, batch: int, heads: int, seq: int, head_dim: int, precision: str = "autocast") -> dict:
    """q, k, v and the float [b, 1, s, s] causal mask (0 or the dtype's minimum) in `precision`'s dtypes. The values
    written are counted at the compute width (2 bytes, 4 in fp32), `elementwise_seconds`' unit."""
    activations, mask_dtype = PRECISIONS[precision]
    torch.manual_seed(0)
    q, k, v = (torch.randn(batch, heads, seq, head_dim, dtype=activations, requires_grad=True) for _ in range(3))
    causal = torch.ones(seq, seq, dtype=torch.bool).tril()
    mask = torch.zeros(batch, 1, seq, seq, dtype=mask_dtype).masked_fill(~causal, torch.finfo(mask_dtype).min)
    result = chain_traffic.trace_phases(lambda: chain(q, k, v, mask), batch * heads * seq * seq)
    width = torch.finfo(activations).bits // 8
    for totals in result.values():
        totals["written_32bit"] = sum(op["written_32bit"] for op in totals["ops"])
        totals["values_written"] = (2 * totals["writes"] + 4 * totals["written_32bit"]) // width
    return result


def measure(batch: int, heads: int, seq: int, head_dim: int) -> dict:
    chains = {
        "fused": fused_chain,
        "gpt2": gpt2_chain(GPT2_ATTENTION_DROPOUT),
        "gpt2_no_dropout": gpt2_chain(0.0),
        "llama": llama_chain(0.0),
        "llama_dropout": llama_chain(GPT2_ATTENTION_DROPOUT),
        "gemma2": gemma2_chain(0.0),
    }
    traces, extra = {}, {}
    for precision in PRECISIONS:
        suffix = "" if precision == "autocast" else f"@{precision}"  # autocast's names unadorned
        run = {name: trace(chain, batch, heads, seq, head_dim, precision) for name, chain in chains.items()}
        for name, phases in run.items():
            traces[name + suffix] = phases
            if name != "fused":
                extra[name + suffix] = {
                    phase: phases[phase]["values_written"] - run["fused"][phase]["values_written"]
                    for phase in ("forward", "backward")
                }
    return {"shape": {"batch": batch, "heads": heads, "seq": seq, "head_dim": head_dim}, "traces": traces,
            "extra_score_writes": extra}  # fmt: skip


def _print_table(result: dict) -> None:
    chain_traffic.print_traces(result["traces"])
    for name, phases in result["traces"].items():
        print(f"{name}: fp32 s x s writes forward {phases['forward']['written_32bit']}, "
              f"backward {phases['backward']['written_32bit']}")  # fmt: skip
    for name, extra in result["extra_score_writes"].items():
        print(f"extra s x s writes of {name}: forward {extra['forward']}, backward {extra['backward']}")


def main(argv: list[str] | None = None) -> int:
    return chain_traffic.run_cli(argv, __doc__.splitlines()[0], lambda: measure(1, 2, 16, 8),
                                 lambda: measure(2, 4, 128, 32), _print_table)  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())

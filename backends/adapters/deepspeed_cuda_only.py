"""DeepSpeed switches whose kernels exist for CUDA only: a run folder that sets them cannot rehearse on CPU.

ZeRO++'s quantized weight gathers and quantized gradients (`zero_quantized_weights`, `zero_quantized_gradients`;
docs/search.md, "ZeRO++") run DeepSpeed's quantizer op (op_builder.QuantizerBuilder), which has no CPU backend: a
CPU rank fails in its first gather with "This op had not been implemented on CPU backend". Both doors refuse it
first, in one line: `hardware-selector train` before torchrun starts, and the DeepSpeed adapter in the ranks (the
run folder's launch.sh starts them without the CLI).
"""

from __future__ import annotations

from planner.errors import UserInputError

CUDA_ONLY_ZERO_KEYS = ("zero_quantized_weights", "zero_quantized_gradients")


def refuse_cuda_only_keys_on_cpu(ds_config: dict | None) -> None:
    """Raise the one-line refusal if `ds_config` turns on a CUDA-only ZeRO switch (call it for CPU ranks)."""
    zero = (ds_config or {}).get("zero_optimization") or {}
    quantized = [key for key in CUDA_ONLY_ZERO_KEYS if zero.get(key)]
    if quantized:
        raise UserInputError(
            f"this plan runs DeepSpeed's ZeRO++ ({', '.join(quantized)} in ds_config.json), whose quantization "
            "kernels are CUDA ops: CPU processes cannot rehearse it; run it on its GPUs, or re-plan without --zeropp "
            "to rehearse plain ZeRO-3"
        )

"""The 16-bit type a serving plan computes and stores in on this GPU, and what the answer says about it.

Every serving format computes in 16 bits or fp8 (int8/int4 are weight-only:
they dequantize to 16 bits). A GPU without bf16 (V100, T4) serves a bf16
checkpoint in fp16, as vLLM casts it: the same bytes, the GPU's own 16-bit
type; the answer's title and reasons say so (docs/inference.md, "Formats").
A device with neither (a CPU) has no format the serving model covers.
"""

from __future__ import annotations

from planner.errors import UserInputError
from planner.hardware.cluster import ClusterSpec
from planner.inference.flags import PLAN_SERVING_FLAGS, ServingFlags
from planner.inference.request import InferenceRequest, KvFormat, WeightFormat


def check_sixteen_bit(cluster: ClusterSpec, flags: ServingFlags = PLAN_SERVING_FLAGS) -> None:
    """Refuse a device with no 16-bit matmuls: no weight or KV-cache format would serve on it. `flags`: how the
    asking path names the GPU (--gpu L4, or the API's gpu='L4')."""
    gpu = cluster.gpu
    if not gpu.supports("bf16") and not gpu.supports("fp16"):
        raise UserInputError(
            f"{gpu.name} has no bf16 or fp16 matmuls, and every serving format computes in them (or fp8); "
            f"plan serving on a GPU, e.g. {flags.set(flags.gpu, 'L4')} or {flags.set(flags.gpu, 'H100-80GB')}"
        )


def sixteen_bit_for(cluster: ClusterSpec, request: InferenceRequest) -> InferenceRequest:
    """bf16 on a GPU without it (V100, T4) serves in fp16, as vLLM casts it: same bytes, the GPU's own 16-bit type."""
    if cluster.gpu.supports("bf16"):
        return request
    update: dict[str, WeightFormat | KvFormat] = {}
    if request.weights is WeightFormat.BF16:
        update["weights"] = WeightFormat.FP16
    if request.kv_cache is KvFormat.BF16:
        update["kv_cache"] = KvFormat.FP16
    return request.model_copy(update=update)


def sixteen_bit_note(cluster: ClusterSpec, request: InferenceRequest) -> str | None:
    """The line that says a bf16 request is planned in fp16 here, or None when nothing was switched."""
    switched = [
        what
        for what, asked in (("weights", request.weights.value), ("KV cache", request.kv_cache.value))
        if asked == "bf16" and not cluster.gpu.supports("bf16")
    ]
    if not switched:
        return None
    return (
        f"{' and '.join(switched)} in fp16, not bf16: {cluster.gpu.name} has no bf16 (served in fp16 as vLLM "
        "casts a bf16 checkpoint there: the same bytes)"
    )

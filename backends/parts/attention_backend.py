"""Which attention kernel torch's SDPA runs on this GPU, against the one the plan's speed estimate assumed.

On Hopper (sm90) and Blackwell (sm100) the plan times our attention as cuDNN's (docs/accuracy.md, "GPU library
efficiency"): torch's SDPA puts cuDNN's kernel first there when the runtime cuDNN is newer than 9.15 and
TORCH_CUDNN_SDPA_DEPRIORITIZED is not set (`check_prefer_cudnn_attention`, aten/src/ATen/native/transformers/cuda/
sdp_utils.cpp). torch's CUDA 13 builds ship such a cuDNN; its CUDA 12 builds an older one, and then SDPA runs
FlashAttention-2, 1.5-1.8x the attention time on Hopper and 2.7-3.4x on Blackwell by length (cudnn-frontend's
measurements, the same page). The runner says so at start rather than leave a slower run unexplained.
"""

from __future__ import annotations

import os
from typing import Any

# FlashAttention-2's attention time over cuDNN's, by compute capability major (docs/accuracy.md).
_SLOWER = {9: "1.5-1.8x", 10: "2.7-3.4x"}


def sdpa_kernel_note(major: int, cudnn_version: int | None, deprioritized: bool) -> str | None:
    """One line when SDPA will not run the cuDNN attention the plan assumed on this GPU, else None."""
    if major not in _SLOWER:
        return None
    if deprioritized:
        why = "TORCH_CUDNN_SDPA_DEPRIORITIZED is set"
    elif cudnn_version is None or cudnn_version <= 91500:
        found = "no cuDNN" if cudnn_version is None else f"cuDNN {cudnn_version // 10000}.{cudnn_version // 100 % 100}"
        why = f"its cuDNN attention needs cuDNN newer than 9.15 and this torch has {found}"
    else:
        return None
    return (
        f"note: torch's attention runs FlashAttention-2 on this GPU ({why}): {_SLOWER[major]} the attention time the "
        "plan assumed with cuDNN's kernel; torch's CUDA 13 build has it (README, \"Choosing the torch build\")"
    )


def sdpa_notes(device: Any, context_parallel: int = 1) -> list[str]:
    """The note for this rank's device, if any: none on the CPU, and none under context parallelism, whose chunks
    run FlashAttention-2 whatever the build, as the plan counts them (planner/throughput/implementation.py,
    Implementation.attention_speedup)."""
    if getattr(device, "type", "cpu") != "cuda" or context_parallel > 1:
        return []
    import torch

    major, _ = torch.cuda.get_device_capability(device)
    version = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    flag = os.environ.get("TORCH_CUDNN_SDPA_DEPRIORITIZED", "").strip() == "1"
    note = sdpa_kernel_note(major, version, flag)
    return [note] if note else []

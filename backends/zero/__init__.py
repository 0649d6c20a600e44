"""Our ZeRO: stage 0 (replicated), 1 (optimizer states sharded), 2 (+ gradients), 3 (+ parameters)."""

from __future__ import annotations

from typing import Any


def zero_optimizer_class(stage: int) -> Any:
    from backends.zero.stage1 import ZeroStage0, ZeroStage1
    from backends.zero.stage2 import ZeroStage2
    from backends.zero.stage3 import ZeroStage3

    return {0: ZeroStage0, 1: ZeroStage1, 2: ZeroStage2, 3: ZeroStage3}[stage]

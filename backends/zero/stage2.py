"""ZeRO-2: stage 1 plus gradient sharding, with the reduce-scatter overlapped with backward.

At a boundary micro-step a post-accumulate hook counts each bucket's
gradients; when the last one lands, the bucket is flattened, its full
gradients are dropped and its reduce-scatter starts asynchronously while
backward carries on with earlier layers. end_backward waits on the handles.
Non-boundary micro-steps only accumulate locally.
"""

from __future__ import annotations

from typing import Any

from .stage1 import ZeroStage1


class ZeroStage2(ZeroStage1):
    stage = 2

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.overlap = self.config.zero_optimization.overlap_comm
        for unit in self.units:
            for param in unit.params:
                param.register_post_accumulate_grad_hook(self._gradient_arrived)

    def _gradient_arrived(self, param: Any) -> None:
        if not (self.boundary and self.overlap):
            return
        unit = self.owner[id(param)]
        unit.ready += 1
        if unit.ready == len(unit.params) and not unit.launched:
            self.launch_reduce(unit)

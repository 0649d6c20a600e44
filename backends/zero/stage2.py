"""ZeRO-2: stage 1 plus gradient sharding, with the reduce-scatter overlapped with backward.

At a boundary micro-step the post-accumulate hook (stage 1's, which moves each
gradient into its bucket) also counts each bucket's gradients; when the last
one lands, its reduce-scatter starts asynchronously while backward carries on
with earlier layers. Once more than in_flight (optimizer.py) reductions are running, the
oldest is waited on and its bucket's pages discarded (grad_arena.py), so
backward does not end holding every bucket's full gradients beside the
reduced shard. end_backward waits on the rest.
Non-boundary micro-steps only accumulate locally.
"""

from __future__ import annotations

from typing import Any

from backends.zero.stage1 import ZeroStage1


class ZeroStage2(ZeroStage1):
    stage = 2

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.overlap = self.config.zero_optimization.overlap_comm

    def _gradient_arrived(self, param: Any) -> None:
        super()._gradient_arrived(param)  # into the bucket first
        if not (self.boundary and self.overlap):
            return
        unit = self.owner[id(param)]
        unit.ready += 1
        if unit.ready == len(unit.params) and not unit.launched:
            self.launch_reduce(unit)
            self.settle_reduces(keep=self.in_flight)

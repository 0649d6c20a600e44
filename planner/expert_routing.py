"""Expert routing: how much routed work the busiest expert-parallel rank does (docs/parallelism.md, "Routing").

An even router gives each of the ep ranks T*k/ep of a layer's T*k (token, expert)
assignments. Real routers are uneven: the rank that holds the most-chosen experts
receives more, and every other rank waits for it at the combine all-to-all. Two
numbers describe this:

- load_imbalance (>= 1): the busiest rank's assignments over the even share,
  the max/mean "tokens per EP rank" a router's statistics report. 1.0, the
  default, assumes an even router; it is an assumption, and the estimate's
  notes say so.
- capacity_factor: the engine's capacity (backends/expert_parallel/dispatch.py):
  a rank sends each expert at most ceil(c * T * k / E) assignments and drops the
  rest. 0 drops nothing.

A rank receives at most c even shares under capacity c (its experts' caps
summed), and load_imbalance even shares offered, so the busiest rank runs
min(load_imbalance, c) even shares, and at least 1 - c / load_imbalance of the
assignments offered to it are dropped. With ep 1 every expert is local, so the
rank runs all assignments that survive capacity: min(1, c) even shares.

The expert matmuls (planner/throughput/compute.py), their activations
(planner/memory/activations.py) and the all-to-all bytes
(planner/throughput/communication.py) scale by that load. The FLOPs the MFU
counts do not: they are the model's, whatever the router does.
Proof: tests/test_expert_routing.py replays skewed routings through the engine's
capacity rule and checks the load and the drops.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class ExpertRouting(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    capacity_factor: float = Field(default=0.0, ge=0.0, le=64.0)
    load_imbalance: float = Field(default=1.0, ge=1.0, le=64.0)

    @property
    def is_default(self) -> bool:
        return self.capacity_factor == 0.0 and self.load_imbalance == 1.0

    def offered(self, ep: int) -> float:
        """Assignments offered to the busiest rank, in even shares."""
        return self.load_imbalance if ep > 1 else 1.0

    def busiest_rank_load(self, ep: int) -> float:
        """Assignments the busiest expert-parallel rank runs, in even shares (an upper bound)."""
        offered = self.offered(ep)
        return min(offered, self.capacity_factor) if self.capacity_factor > 0 else offered

    def dropped_share(self, ep: int) -> float:
        """Share of the assignments offered to the busiest rank that capacity drops (a lower bound)."""
        return 1.0 - self.busiest_rank_load(ep) / self.offered(ep)

    def note(self, ep: int) -> str:
        """One line for the estimate's notes: what was assumed and what it costs."""
        load = self.busiest_rank_load(ep)
        if self.load_imbalance == 1.0 and ep > 1:
            source = "an even router assumed (--expert-imbalance from your router's statistics)"
        else:
            source = f"--expert-imbalance {self.load_imbalance:g}" if ep > 1 else "ep 1: every expert is local"
        line = f"experts: the busiest rank runs {load:.2f}x an even share of routed tokens ({source})"
        if self.capacity_factor > 0:
            dropped = self.dropped_share(ep)
            line += f"; capacity {self.capacity_factor:g} drops at least {dropped:.0%} of its assignments"
        return line

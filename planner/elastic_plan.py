"""The layouts an elastic run falls back to when it starts on another number of nodes (docs/running.md, "Elastic").

`plan --emit DIR --elastic MIN:MAX` searches once for every node count in the range (planner/search/elastic.py)
and stores the answers in plan.json's "elastic" block, so a runner that restarts on the nodes that remain picks
its new layout without running the search: torchrun restarts the survivors, and each rank reads the same table.

Each fallback keeps what the checkpoint and the training depend on: the model, the data, the optimizer, the
precision and the global batch (micro-batch x accumulation x dp absorbs the change). Its strategy stays in the
family whose checkpoints reshard to one another (RESHARDABLE): our engine's ZeRO stages and tp/pp/ep layouts
(backends/checkpoint/reshard.py), FSDP over any dp, DDP over any dp (DCP reads any sharding). A node count on
which nothing of that family fits records why, in one line.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from planner.errors import UserInputError
from planner.hardware.cluster import ClusterSpec
from planner.memory.estimate import MemoryEstimate
from planner.plan import Plan
from planner.throughput.result import ThroughputEstimate
from planner.training_config import Strategy, TrainingConfig

# The search names a fallback may use, by the plan's strategy: those whose checkpoints this one's reshard to.
RESHARDABLE: dict[Strategy, tuple[str, ...]] = {
    Strategy.ENGINE: ("engine",),
    Strategy.FSDP: ("fsdp",),
    Strategy.DDP: ("ddp",),
}
MAX_NODE_COUNTS = 16  # one search per node count; a wider range is refused in one line


def reshardable_strategies(strategy: Strategy) -> tuple[str, ...]:
    """The search names a fallback of a `strategy` plan may use; one line for a strategy that does not reshard."""
    names = RESHARDABLE.get(strategy)
    if names is None:
        raise UserInputError(
            f"--elastic: a {strategy.display_name} checkpoint is not resharded to another world size here; "
            "plan with --strategies engine (our ZeRO 1-3 and tp/pp reshard), fsdp or ddp"
        )
    return names


class Fallback(BaseModel):
    """What the run does on `num_nodes` nodes: a plan of the same family, or why nothing fits."""

    model_config = ConfigDict(frozen=True)

    num_nodes: int = Field(ge=1)
    world_size: int = Field(ge=1)
    cluster: ClusterSpec | None = None
    config: TrainingConfig | None = None
    memory: MemoryEstimate | None = None
    throughput: ThroughputEstimate | None = None
    reasons: list[str] = Field(default_factory=list)
    why_not: str = ""  # set when nothing fits

    @property
    def fits(self) -> bool:
        return self.config is not None

    def plan(self, base: Plan) -> Plan:
        """The fallback as a Plan of `base`'s model (the table stores the model once, at plan.json's top)."""
        if self.config is None or self.cluster is None or self.memory is None:
            raise UserInputError(f"nothing fits on {self.num_nodes} node(s): {self.why_not}")
        return base.model_copy(
            update={
                "cluster": self.cluster,
                "config": self.config,
                "memory": self.memory,
                "throughput": self.throughput,
                "reasons": self.reasons,
            }
        )

    @classmethod
    def of(cls, plan: Plan) -> Fallback:
        return cls(
            num_nodes=plan.cluster.num_nodes,
            world_size=plan.cluster.world_size,
            cluster=plan.cluster,
            config=plan.config,
            memory=plan.memory,
            throughput=plan.throughput,
            reasons=plan.reasons,
        )


class ElasticPlan(BaseModel):
    """plan.json's "elastic" block: the node range torchrun may run with, and a fallback for every count in it."""

    model_config = ConfigDict(frozen=True)

    min_nodes: int = Field(ge=1)
    max_nodes: int = Field(ge=1)
    gpus_per_node: int = Field(ge=1)
    max_restarts: int = Field(default=3, ge=0)
    fallbacks: list[Fallback]

    def fallback_for(self, world_size: int) -> Fallback | None:
        return next((entry for entry in self.fallbacks if entry.world_size == world_size), None)

    @property
    def fitting_world_sizes(self) -> list[int]:
        return [entry.world_size for entry in self.fallbacks if entry.fits]

    @property
    def node_range(self) -> str:
        """torchrun's --nnodes value."""
        return f"{self.min_nodes}:{self.max_nodes}"

    @property
    def requested_range(self) -> tuple[int, int]:
        """The range --elastic asked for: the table holds every count of it, the node range only those from the
        smallest that fits (planner/search/elastic.py, fitting_range)."""
        counts = [entry.num_nodes for entry in self.fallbacks] or [self.min_nodes]
        return min(counts[0], self.min_nodes), max(counts[-1], self.max_nodes)

    def narrowing(self) -> str | None:
        """One line when the node range is narrower than asked for, naming the counts that fit no plan."""
        low, high = self.requested_range
        if (low, high) == (self.min_nodes, self.max_nodes):
            return None
        dropped = list(range(low, self.min_nodes))
        if len(dropped) == 1:
            counts = "1 node fits" if dropped[0] == 1 else f"{dropped[0]} nodes fit"
        elif len(dropped) == 2:
            counts = f"{dropped[0]} and {dropped[1]} nodes fit"
        else:
            counts = f"{dropped[0]}-{dropped[-1]} nodes fit"
        only = f" (torchrun restarts on {self.max_nodes} nodes only)" if self.min_nodes == self.max_nodes else ""
        return f"--elastic {low}:{high} narrowed to {self.node_range}: {counts} no plan{only}"


def parse_node_range(text: str, plan_nodes: int) -> tuple[int, int]:
    """(min, max) nodes of `--elastic MIN:MAX`, which must hold the plan's own node count."""
    parts = str(text).strip().split(":")
    try:
        if len(parts) > 2:
            raise ValueError(text)  # 1:2:3 is no range: the format's line, not the order's
        low, high = (int(parts[0]), int(parts[1])) if len(parts) == 2 else (int(parts[0]), int(parts[0]))
    except ValueError:
        raise UserInputError(f"--elastic takes a node range MIN:MAX (e.g. 1:2), not {text!r}") from None
    if not 1 <= low < high:
        raise UserInputError(
            f"--elastic {text}: the range needs 1 <= MIN < MAX nodes (one node count is no elastic run; "
            "drop --elastic to run on exactly that many)"
        )
    if not low <= plan_nodes <= high:
        raise UserInputError(
            f"--elastic {text} does not hold the plan's own {plan_nodes} node(s); widen the range or set --nodes"
        )
    if high - low + 1 > MAX_NODE_COUNTS:
        raise UserInputError(
            f"--elastic {text} spans {high - low + 1} node counts; the run folder holds at most {MAX_NODE_COUNTS}"
        )
    return low, high

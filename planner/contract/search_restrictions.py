"""SearchRestrictions: plan.json's `run.search` block, what the search that found the plan was kept to.

In a file of its own (RunConfig holds it, planner/contract/run_config.py): every searched Plan carries one
(planner/plan.py), and `plan` should not build the whole run contract to print a plan (docs/performance.md,
the `plan` start-up goal).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from planner.contract.choices import DEFAULT_SEARCHED_CHECKPOINTING, ActivationCheckpointing


class SearchRestrictions(BaseModel):
    """What the search that found the plan was kept to (`plan --strategies, --fsdp-sharding, --ac, --no-offload,
    --micro-batch, --objective, --tokens`), so `tune RUN_DIR` measures the top of the same search. The defaults are
    the unrestricted search: what a plan.json written before this block was searched with."""

    model_config = ConfigDict(frozen=True, extra="forbid")  # as every block of RunConfig

    # Names the search takes (planner/search/request.py's SEARCH_STRATEGIES); --fsdp-sharding is folded in
    # as the pinned name (fsdp-full, say).
    strategies: tuple[str, ...] = ("ddp", "fsdp", "deepspeed", "engine")
    activation_checkpointing: tuple[ActivationCheckpointing, ...] = DEFAULT_SEARCHED_CHECKPOINTING
    allow_offload: bool = True
    micro_batch: int | None = Field(default=None, ge=1, le=1 << 20)
    objective: Literal["throughput", "cost", "time-to-train"] = "throughput"
    train_tokens: float | None = Field(default=None, gt=0, allow_inf_nan=False)  # --tokens; None: 20 per parameter

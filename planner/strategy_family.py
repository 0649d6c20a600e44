"""The strategy family a benchmark record belongs to: what a calibration correction is fitted for
(planner/calibration.py), what tune and `db list` call a run (docs/benchmarks.md, "Calibration")."""

from __future__ import annotations

import re

from planner.training_config import FsdpSharding, Offload, Strategy, TrainingConfig


def strategy_family(config: TrainingConfig) -> str:
    """The group a correction is fitted for: strategies differ in what they communicate and when, and an
    offloading variant in what it moves to and from the host each step (offload_suffix)."""
    if config.strategy is Strategy.FSDP:
        family = f"fsdp-{config.fsdp_sharding.value}"
    elif config.strategy is Strategy.DEEPSPEED:
        family = f"zero{config.zero_stage}"
    elif config.strategy is Strategy.ENGINE:
        family = f"engine-tp{config.tensor_parallel}-pp{config.pipeline_parallel}"
    else:
        family = config.strategy.value
    return family + offload_suffix(config)


def offload_suffix(config: TrainingConfig) -> str:
    """'+nvme' when anything is offloaded to NVMe, '+offload' when to the CPU, '' when nothing. An offloading step
    pays host transfers and a CPU optimizer step the plain strategy never does, so its measured-over-predicted
    ratio says nothing of the plain one's: a ZeRO-2 + offload trial once corrected every plain ZeRO-2 plan
    (docs/benchmarks.md, "Calibration")."""
    where = {config.offload_optimizer, config.offload_params}
    return "+nvme" if Offload.NVME in where else "+offload" if Offload.CPU in where else ""


STRATEGY_FAMILIES_SAID = (
    "ddp, fsdp, deepspeed, engine, fsdp-full|grad-op|hybrid|none, zero0-3 or engine-tp<N>-pp<M>, "
    "each with +offload or +nvme when it offloads"
)


def is_strategy_family(name: str) -> bool:
    """Whether `name` is one strategy_family() can return (or a run's plain strategy, as the runner records it)."""
    plain = {strategy.value for strategy in Strategy}
    fsdp = {f"fsdp-{sharding.value}" for sharding in FsdpSharding}
    text = re.sub(r"\+(offload|nvme)$", "", name.strip().lower())
    return text in plain | fsdp or re.fullmatch(r"zero[0-3]|engine-tp\d+-pp\d+", text) is not None

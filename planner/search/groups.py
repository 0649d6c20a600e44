"""The search's bookkeeping: one layout's candidates on one cluster, grouped by precision and by activation
checkpointing level, and what it records of the ones it scored.

A group's candidates differ only in AC level, micro-batch and accumulation, so
what they share is derived once per group (the validated config, the
throughput plan) or once per level (the config at that level, the memory
estimator's peaks), and each candidate costs a few lookups and its own
arithmetic (docs/performance.md, "Planner speed").
"""

from __future__ import annotations

from dataclasses import dataclass, field

from planner.hardware.cluster import ClusterSpec
from planner.memory.phases import BatchPeaks
from planner.search.config_copy import with_batch, with_checkpointing
from planner.search.strategy_layout import StrategyLayout
from planner.throughput.estimate import CandidateStep, ThroughputPlan, estimate_of
from planner.throughput.result import ThroughputEstimate
from planner.training_config import ActivationCheckpointing, Precision, TrainingConfig


@dataclass(slots=True)
class Scored:
    """One fitting candidate with its estimates.

    Its TrainingConfig and ThroughputEstimate (pydantic models) are built when first read: the search scores
    thousands of candidates from plain values and reports the configs and estimates of a few."""

    layout: StrategyLayout
    cluster: ClusterSpec
    score: float  # higher is better under the request's objective
    step: CandidateStep
    plan: ThroughputPlan  # the layout's, which types the step as an estimate
    level: Level  # the group's AC level the candidate is at
    batch: tuple[int, int]  # (micro-batch, accumulation)
    estimate: ThroughputEstimate | None = None  # the typed estimate, once built (or throughput_adjust's)

    @property
    def config(self) -> TrainingConfig:
        return self.level.config_at(self.batch)

    @property
    def throughput(self) -> ThroughputEstimate:
        if self.estimate is None:
            self.estimate = estimate_of(self.plan, self.step)
        return self.estimate


@dataclass
class FamilyRecord:
    """What happened to one strategy family across all its candidates."""

    family: str
    fitting: list[Scored] = field(default_factory=list)
    # The least memory any non-fitting candidate needed, and that candidate: its level, batch and cluster.
    smallest_miss: tuple[int, Level, tuple[int, int], ClusterSpec] | None = None
    infeasible: str | None = None  # why no candidate could even be built


@dataclass(slots=True)
class Level:
    """A group's candidates at one activation checkpointing level: they differ in the micro-batch (each with
    its one accumulation)."""

    config: TrainingConfig  # the group's config at this level, micro-batch and accumulation at their defaults
    # (micro-batch, accumulation) -> (per-GPU total bytes, fits): the lightest-candidate check and the scan at
    # the most recomputation ask about the same candidates.
    memory: dict[tuple[int, int], tuple[int, bool]] = field(default_factory=dict)
    # The memory estimator's peaks of this config by (micro-batch, accumulation) (phases.batch_peaks), looked
    # up at the level's first estimate: a peak found there (an earlier search's) needs no config built.
    peaks: BatchPeaks | None = None
    configs: dict[int, TrainingConfig] = field(default_factory=dict)  # the candidates' configs by micro-batch

    def config_at(self, pair: tuple[int, int]) -> TrainingConfig:
        """The candidate's config at (micro-batch, accumulation), copied from the level's once."""
        config = self.configs.get(pair[0])
        if config is None:
            config = self.configs[pair[0]] = with_batch(self.config, pair[0], pair[1])
        return config


@dataclass(slots=True)
class Group:
    """One layout at one precision on one cluster: the candidates that differ in AC and micro-batch."""

    layout: StrategyLayout
    record: FamilyRecord
    cluster: ClusterSpec
    batches: list[tuple[int, int]]  # (micro-batch, accumulation), ascending
    precision: Precision
    usable_bytes: int  # per-GPU memory a candidate may use: the GPU's less the request's headroom
    validated: TrainingConfig  # the group's config at its first AC level, validated
    levels: dict[ActivationCheckpointing, Level] = field(default_factory=dict)
    # What every throughput estimate of the group shares (hardware, links, data-parallel collectives), made
    # at its first estimate: the micro-batch and AC do not change it.
    throughput_plan: ThroughputPlan | None = None

    def level(self, checkpointing: ActivationCheckpointing) -> Level:
        level = self.levels.get(checkpointing)
        if level is None:
            config = self.validated
            if checkpointing is not config.activation_checkpointing:
                config = with_checkpointing(config, checkpointing)
            level = self.levels[checkpointing] = Level(config)
        return level

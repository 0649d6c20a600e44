"""Calibrate the analytical throughput model with measured benchmark runs.

Two uses of the records of the current hardware:
- a config that was measured gets the measured step time instead of the
  prediction, marked "measured: benchmark record <id> (<date>)";
- every other config gets a per-(GPU, strategy) correction fitted from the
  records: step_time = overhead_s + scale * predicted_step_time. The fixed
  overhead is what a FLOP/byte model cannot see (Python, kernel launches,
  collective latency per step); the scale absorbs achieved-vs-peak efficiency;
- a config of a strategy family with no record of its own gets the GPU's
  pooled correction, fitted on every family's records there: otherwise
  families measured slower than predicted would lose the ranking to families
  never measured, on the formula's word alone (docs/benchmarks.md).

The records arrive as plain pydantic data (MeasuredRun, planner/measured_runs.py); reading them from the
DuckDB store is benchmarks_db's job, so the planner never imports duckdb.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from planner.contract.sources import CORRECTED_SOURCES
from planner.hardware.gpus import normalize_gpu_name
from planner.measured_runs import MeasuredRun, config_key, copied_predictions, newest_per_config
from planner.strategy_family import offload_suffix, strategy_family
from planner.throughput.result import ThroughputEstimate
from planner.training_config import TrainingConfig
from planner.units import counted, format_seconds

# An affine fit needs more points than parameters to mean anything.
MIN_RECORDS_FOR_AFFINE = 3
# How far (either way, as a factor) a correction is carried beyond the predicted step times it was fitted on.
EXTRAPOLATION_LIMIT = 10.0
# How a step time moved by the records is sourced (rescaled(): CORRECTED_SOURCES, planner/contract/sources.py,
# which the run contract reads too), and the note a correction out of range leaves.
NOT_APPLIED = "calibration not applied: "


def uncalibrated_summary(gpu_name: str, records_read: int) -> str:
    """Calibration.summary where no successful record of the GPU was read (`plan` says it without fitting
    anything when the database's GPU index has no record of the GPU: benchmarks_db/gpu_index.py)."""
    return f"not calibrated: no benchmark records for {gpu_name} ({counted(records_read, 'record')} read)"


class Correction(BaseModel):
    """step_time = overhead_s + scale * predicted, for one GPU and strategy family."""

    model_config = ConfigDict(frozen=True, defer_build=True)  # built on first use, as Calibration

    gpu: str
    family: str
    form: Literal["affine", "ratio"]
    scale: float = Field(gt=0)
    overhead_s: float = Field(ge=0)
    records: int = Field(ge=1)  # the successful runs behind it, re-measurements of one config included
    # The distinct configs it was fitted on, each once by its newest run (None: one per record, as by hand).
    configs: int | None = Field(default=None, ge=1)
    # The predicted step times the fit saw (None: not recorded, as in a Correction made by hand).
    predicted_min_s: float | None = Field(default=None, gt=0)
    predicted_max_s: float | None = Field(default=None, gt=0)
    newest_id: str | None = None  # the newest record it was fitted on, so a corrected figure names a record
    offloaded: bool = False  # fitted on offloading families' records (a pooled correction: Calibration.correction)

    def apply(self, predicted_step_time_s: float) -> float:
        return self.overhead_s + self.scale * predicted_step_time_s

    def covers(self, predicted_step_time_s: float) -> bool:
        """Whether a prediction lies within a decade of those the fit saw. A ratio or line fitted on steps of
        milliseconds (a --tiny run: fixed per-step costs dominate) says nothing about a step of seconds, where
        per-token work dominates, and the reverse (docs/benchmarks.md, "Calibration")."""
        if self.predicted_min_s is None or self.predicted_max_s is None:
            return True
        low, high = self.predicted_min_s / EXTRAPOLATION_LIMIT, self.predicted_max_s * EXTRAPOLATION_LIMIT
        return low <= predicted_step_time_s <= high

    def fitted_range(self) -> str:
        if self.predicted_min_s is None or self.predicted_max_s is None:
            return "an unrecorded range"
        return f"{format_seconds(self.predicted_min_s)}-{format_seconds(self.predicted_max_s)}"

    def describe(self) -> str:
        records = counted(self.records, "record")
        if self.configs is not None and self.configs < self.records:  # re-measured configs: each counted once
            records += f" of {counted(self.configs, 'config')}"
        if self.newest_id:
            records += f": {self.newest_id[:8]}" if self.records == 1 else f", newest {self.newest_id[:8]}"
        if self.form == "ratio":
            return f"{self.family} on {self.gpu}: x{self.scale:.3g} ({records})"
        return f"{self.family} on {self.gpu}: {self.overhead_s * 1e3:.3g} ms + x{self.scale:.3g} ({records})"


def pooled_family(families: list[str], offloaded: bool = False) -> str:
    """The name a pooled correction goes by: it stands for the families that have no records, from these."""
    return f"{'offload ' if offloaded else ''}families without records (pooled from {', '.join(families)})"


def fit_correction(gpu: str, family: str, runs: list[MeasuredRun], behind: dict[str, int] | None = None) -> Correction:
    """Least squares on relative error, so fast and slow configs weigh alike. `runs` are one per config
    (newest_per_config), and `behind` says how many records each stands for (None: itself alone)."""
    pairs = [
        (run.predicted_step_time_s, run.step_time_s) for run in runs if run.predicted_step_time_s and run.step_time_s
    ]  # fit() passes only runs with both
    seen = {"predicted_min_s": min(p for p, _ in pairs), "predicted_max_s": max(p for p, _ in pairs)}
    newest = max(runs, key=lambda run: run.measured_at).id if runs else None
    distinct = len({round(p, 12) for p, _ in pairs})
    used = [run for run in runs if run.predicted_step_time_s and run.step_time_s]
    counts = {
        "records": sum((behind or {}).get(run.id, 1) for run in used),
        "configs": len(used) if behind is not None else None,
    }
    if len(pairs) >= MIN_RECORDS_FOR_AFFINE and distinct >= 2:
        # Minimise sum((a + b p_i) / m_i - 1)^2: linear in (a, b) with rows (1/m_i, p_i/m_i).
        s11 = sum(1 / m**2 for p, m in pairs)
        s12 = sum(p / m**2 for p, m in pairs)
        s22 = sum(p**2 / m**2 for p, m in pairs)
        t1 = sum(1 / m for p, m in pairs)
        t2 = sum(p / m for p, m in pairs)
        det = s11 * s22 - s12**2
        if det > 0:
            overhead = (t1 * s22 - t2 * s12) / det
            scale = (s11 * t2 - s12 * t1) / det
            if overhead >= 0 and scale > 0:
                return Correction(
                    gpu=gpu,
                    family=family,
                    form="affine",
                    scale=scale,
                    overhead_s=overhead,
                    newest_id=newest,
                    **seen,
                    **counts,
                )
    # Too few points, or an affine fit that makes no physical sense: one geometric-mean ratio.
    ratio = math.exp(sum(math.log(m / p) for p, m in pairs) / len(pairs))
    return Correction(
        gpu=gpu, family=family, form="ratio", scale=ratio, overhead_s=0.0, newest_id=newest, **seen, **counts
    )


def _split_free(config: TrainingConfig) -> str:
    """The config with its global batch's split left out: what siblings of one measured config share."""
    tokens = config.micro_batch * config.grad_accum
    return config.model_copy(update={"micro_batch": 1, "grad_accum": tokens}).model_dump_json()


def _batch_free(config: TrainingConfig) -> str:
    """The config with its batch left out (micro-batch and accumulation): what its kin at other global batches
    share."""
    return config.model_copy(update={"micro_batch": 1, "grad_accum": 1}).model_dump_json()


# How a sibling correction names what it was fitted on, by the key that groups its measured configs.
_KIN = {_split_free: "measured at another micro-batch x accumulation", _batch_free: "measured at another global batch"}


# A record this far from the formula's step (either way) is said where it replaces the prediction: a busy machine's
# run would stand for that config unseen (a new user's audit: one loaded run at 28x the formula's step).
FAR_FROM_FORMULA = 5.0


def far_from_formula(run: MeasuredRun, estimate: ThroughputEstimate) -> str:
    """ "" or the words that say the record's step is FAR_FROM_FORMULA or more from the formula's, or puts the
    MFU above the GPU's peak (an audit: "MFU 307%" printed without a word)."""
    formula, measured = estimate.formula_step_s, run.step_time_s
    mfu = estimate.mfu * estimate.step_time_s / measured if measured else 0.0
    above = f" (MFU {mfu:.0%}: above the GPU's peak, so the catalog's peak for this machine or the record is wrong)"
    words = above if mfu > 1 else ""
    if formula and measured and not 1 / FAR_FROM_FORMULA < measured / formula < FAR_FROM_FORMULA:
        why = "a busy machine measures so" if measured > formula else "other hardware or settings than planned?"
        words = (f" ({measured / formula:.3g}x the formula's {format_seconds(formula)}: {why}; `tune --remeasure` or "
                 "a new run of it replaces the record, the newest counts)") + words  # fmt: skip
    return words


def rescaled(estimate: ThroughputEstimate, step_time_s: float, source: str, note: str) -> ThroughputEstimate:
    """The estimate with a new step time; rates follow it, the breakdown keeps its proportions."""
    factor = estimate.step_time_s / step_time_s
    breakdown = estimate.breakdown.model_copy(
        update={name: value / factor for name, value in estimate.breakdown.model_dump().items()}
    )
    sources = dict(estimate.sources)
    for key in ("step_time_s", "tokens_per_s", "samples_per_s", "tflops_per_gpu", "mfu", "hfu"):
        sources[key] = source
    # Each part of the step moves with it: its source says so, and which record or correction moved it.
    for name, value in estimate.breakdown.model_dump().items():
        if value:
            sources[name] = f"{source}; the formula's share of the step, scaled with it"
    return estimate.model_copy(
        update={
            "step_time_s": step_time_s,
            "tokens_per_s": estimate.tokens_per_s * factor,
            "samples_per_s": estimate.samples_per_s * factor,
            "tflops_per_gpu": estimate.tflops_per_gpu * factor,
            "mfu": estimate.mfu * factor,
            "hfu": estimate.hfu * factor,
            "breakdown": breakdown,
            "sources": sources,
            "notes": [*estimate.notes, note],
            "formula_step_time_s": estimate.formula_step_s,  # kept for the record a run of it writes
        }
    )


class Calibration(BaseModel):
    """Corrections and measured runs for whatever hardware the records describe."""

    model_config = ConfigDict(frozen=True, defer_build=True)  # `plan` without records of its GPU makes none

    corrections: list[Correction] = Field(default_factory=list)
    # Per GPU, fitted on all its families' records: for the families with none of their own.
    pooled: list[Correction] = Field(default_factory=list)
    measured: list[MeasuredRun] = Field(default_factory=list)  # successful runs, newest first
    records_read: int = 0

    # Records whose prediction is an older record's measurement (copied_predictions()): left out of the fits.
    copied: list[str] = Field(default_factory=list)
    # Records a newer record of the same config replaces in the fits (newest_per_config): each config counts once.
    superseded: list[str] = Field(default_factory=list)

    @classmethod
    def fit(cls, runs: list[MeasuredRun]) -> Calibration:
        ok = sorted((run for run in runs if run.ok and run.step_time_s), key=lambda r: r.measured_at, reverse=True)
        copied = copied_predictions(ok)
        # Each config once, by its newest fittable run: a config measured ten times must not weigh ten times.
        fittable = [run for run in ok if run.predicted_step_time_s and run.id not in copied]
        newest, behind = newest_per_config(fittable)
        superseded = sorted({run.id for run in fittable} - set(behind))
        groups: dict[tuple[str, str], list[MeasuredRun]] = {}
        for run in sorted(newest, key=lambda r: r.measured_at, reverse=True):
            groups.setdefault((normalize_gpu_name(run.gpu_name), run.family), []).append(run)
        corrections = [
            fit_correction(group[0].gpu_name, family, group, behind) for (_, family), group in sorted(groups.items())
        ]
        # One pool per GPU for the plain families and one for the offloading ones: an offloaded step's ratio
        # (host transfers, a CPU optimizer step) would inflate every plain family without records, and the
        # reverse. A kind with no records of its own takes the other kind's pool (correction()).
        by_kind: dict[tuple[str, bool], list[MeasuredRun]] = {}
        for (gpu, _), group in sorted(groups.items()):
            by_kind.setdefault((gpu, offload_suffix(group[0].config) != ""), []).extend(group)
        pooled = [
            fit_correction(
                group[0].gpu_name, pooled_family(sorted({run.family for run in group}), offloaded), group, behind
            ).model_copy(update={"offloaded": offloaded})
            for (_, offloaded), group in by_kind.items()
        ]
        return cls(
            corrections=corrections,
            pooled=pooled,
            measured=ok,
            records_read=len(runs),
            copied=sorted(copied),
            superseded=superseded,
        )

    def for_gpu(self, gpu_name: str) -> Calibration:
        key = normalize_gpu_name(gpu_name)
        return Calibration(
            corrections=[c for c in self.corrections if normalize_gpu_name(c.gpu) == key],
            pooled=[c for c in self.pooled if normalize_gpu_name(c.gpu) == key],
            measured=[run for run in self.measured if normalize_gpu_name(run.gpu_name) == key],
            records_read=self.records_read,
            copied=self.copied,
            superseded=self.superseded,
        )

    def correction(self, gpu_name: str, config: TrainingConfig) -> Correction | None:
        """The family's own correction on this GPU, else the GPU's pool of its kind (plain or offloading), else
        the other kind's: a family measured nowhere must not win the ranking on the formula's word alone, and
        the pool says where it came from in its name (None without records)."""
        key, family = normalize_gpu_name(gpu_name), strategy_family(config)
        own = next((c for c in self.corrections if normalize_gpu_name(c.gpu) == key and c.family == family), None)
        pools = sorted(
            (c for c in self.pooled if normalize_gpu_name(c.gpu) == key),
            key=lambda c: c.offloaded != (offload_suffix(config) != ""),  # its own kind first
        )
        return own or next(iter(pools), None)

    def measured_run(
        self, gpu_name: str, world_size: int, nodes: int, spec_hash: str, config: TrainingConfig
    ) -> MeasuredRun | None:
        key = normalize_gpu_name(gpu_name)
        for run in self.measured:  # newest first
            if (
                normalize_gpu_name(run.gpu_name) == key
                and run.world_size == world_size
                and run.nodes == nodes
                and run.model_spec_hash == spec_hash
                and run.config == config
            ):
                return run
        return None

    def corrected(
        self, estimate: ThroughputEstimate, gpu_name: str, config: TrainingConfig, correction: Correction | None = None
    ) -> ThroughputEstimate:
        """The estimate shifted by `correction`, else its (GPU, strategy) correction; unchanged without one."""
        correction = correction or self.correction(gpu_name, config)
        if correction is None:
            return estimate
        formula = estimate.formula_step_s  # what the correction was fitted on: never a corrected figure
        if not correction.covers(formula):
            note = (
                f"{NOT_APPLIED}the correction {correction.describe()} was fitted on predicted steps of "
                f"{correction.fitted_range()}; this plan's {format_seconds(formula)} is more than "
                f"{EXTRAPOLATION_LIMIT:g}x outside that range"
            )
            return estimate.model_copy(update={"notes": [*estimate.notes, note]})
        source = f"{CORRECTED_SOURCES[0]}{correction.describe()}"
        return rescaled(estimate, correction.apply(formula), source, source)

    def adjuster(
        self, gpu_name: str, world_size: int, nodes: int, spec_hash: str, *, use_measured: bool = True
    ) -> Callable[[TrainingConfig, ThroughputEstimate], ThroughputEstimate]:
        """The search's `throughput_adjust` hook for one model on one cluster."""

        # The same global batch split otherwise first (its correction is the measured configs' own, so a sibling
        # the formula times alike ties with them), then the same config at another global batch: both this model
        # on this cluster, closer evidence than the family's fit over every model of the GPU.
        kin = [
            (group, self.sibling_corrections(gpu_name, world_size, nodes, spec_hash, group) if use_measured else {})
            for group in (_split_free, _batch_free)
        ]

        def adjust(config: TrainingConfig, estimate: ThroughputEstimate) -> ThroughputEstimate:
            run = self.measured_run(gpu_name, world_size, nodes, spec_hash, config) if use_measured else None
            if run is not None and run.step_time_s:
                source = f"{CORRECTED_SOURCES[1]}benchmark {run.label}" + far_from_formula(run, estimate)
                return rescaled(estimate, run.step_time_s, source, f"step time measured ({run.label})")
            for group, corrections in kin:
                sibling = corrections.get(group(config))
                if sibling is not None and sibling.covers(estimate.formula_step_s):
                    return self.corrected(estimate, gpu_name, config, sibling)
            return self.corrected(estimate, gpu_name, config)

        return adjust

    def sibling_corrections(
        self, gpu_name: str, world_size: int, nodes: int, spec_hash: str, group: Callable = _split_free
    ) -> dict[str, Correction]:
        """For configs of this model on this cluster that differ from measured ones only in how the global batch is
        split into micro-batch x accumulation (`group` _split_free; _batch_free: only in the batch, its size too):
        a correction fitted on those measured configs, each by its newest measurement (the step it is planned
        with itself). The family's fit spans every model and cluster of the GPU; corrected by it, a split never
        run that the formula times like the measured one beat it whenever the measured config ran slower than its
        family's mean (docs/benchmarks.md, "Calibration")."""
        key, copied = normalize_gpu_name(gpu_name), set(self.copied)
        newest: dict[str, MeasuredRun] = {}
        for run in self.measured:  # newest first
            if (
                normalize_gpu_name(run.gpu_name) == key
                and (run.world_size, run.nodes, run.model_spec_hash) == (world_size, nodes, spec_hash)
                and run.predicted_step_time_s
                and run.id not in copied
            ):
                newest.setdefault(run.config.model_dump_json(), run)
        groups: dict[str, list[MeasuredRun]] = {}
        for run in newest.values():
            groups.setdefault(group(run.config), []).append(run)
        return {
            shared: fit_correction(gpu_name, f"{runs[0].family} {_KIN[group]}", runs) for shared, runs in groups.items()
        }

    def usable(self, gpu_name: str, world_size: int, nodes: int, spec_hash: str) -> bool:
        """Whether any record can change a plan of this model on this cluster: a fitted correction, or a run of it."""
        mine = self.for_gpu(gpu_name)
        return bool(mine.corrections) or any(
            run.world_size == world_size and run.nodes == nodes and run.model_spec_hash == spec_hash
            for run in mine.measured
        )

    def summary(self, gpu_name: str, usable: bool = True) -> str:
        """One line for `plan`: whether and how it was calibrated, on how many records (`usable`: see usable())."""
        mine = self.for_gpu(gpu_name)
        if not mine.measured:
            return uncalibrated_summary(gpu_name, self.records_read)
        if not usable:
            return (
                f"not calibrated: {counted(len(mine.measured), 'measured run')} for {gpu_name}, none usable "
                "(no prediction to fit a correction on, and none of this model on this cluster; "
                "--tiny measures the shrunken model)"
            )
        runs = counted(len(mine.measured), "measured run")
        configs = len({config_key(run) for run in mine.measured})
        if configs < len(mine.measured):  # re-measured configs: say how many configs the runs are of
            runs += f" of {counted(configs, 'config')}"
        fitted = sum(c.records for c in mine.corrections)
        fitted_configs = sum(c.configs or c.records for c in mine.corrections)
        used = (
            f"{fitted} used in corrections"
            if fitted_configs == fitted
            else f"{counted(fitted_configs, 'config')} used in corrections, each once by its newest run"
        )
        families = (
            ", ".join(c.describe() for c in [*mine.corrections, *mine.pooled]) or "none (records lack predictions)"
        )
        return (
            f"calibrated on {runs} for {gpu_name} ({used}: {families}); measured configs use their measured step "
            f"time; newest: {mine.measured[0].label}"
        )

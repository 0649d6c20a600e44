"""The end of a run: measured step time, throughput and memory beside the plan's predictions.

"measured 1.93 s/step vs predicted 1.80 s/step (+7%; formula)", the prediction's source beside it (a measured
record, a calibration or the formula: plan.json's throughput_source). The median step excludes
the first step (start-up, allocator warm-up) when there are others. Memory
is CUDA's peak allocation on GPUs and the peak resident set on CPU
processes (which also counts Python and the libraries, so it is not
compared with a GPU estimate). Rank 0 writes run_summary.json and, with
--record, stores the pair in the benchmark database, which calibrates later
plans (docs/benchmarks.md).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from backends.monitoring.peak_memory import peak_memory_bytes
from planner.contract.sources import prediction_source
from planner.errors import UserInputError
from planner.files import write_json_atomic

if TYPE_CHECKING:
    from pathlib import Path

    from backends.adapters.base import Adapter
    from planner.contract.run_config import RunConfig
    from planner.plan import Plan


class StepTimes:
    def __init__(self) -> None:
        self.values: list[float] = []

    def add(self, seconds: float) -> None:
        self.values.append(seconds)

    def steady(self) -> list[float]:
        return self.values[1:] if len(self.values) > 1 else list(self.values)

    def median(self) -> float | None:
        steady = self.steady()
        return statistics.median(steady) if steady else None

    def spread(self) -> float:
        steady = self.steady()
        if len(steady) < 2:
            return 0.0
        quartiles = statistics.quantiles(steady, n=4)
        return quartiles[2] - quartiles[0]


def _everyones_peak(adapter: Adapter) -> list[int]:
    import torch.distributed as dist

    peak = peak_memory_bytes(adapter.device)
    if not adapter.distributed:
        return [peak]
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, peak)
    return [int(value) for value in gathered]


def comparison(
    label: str, measured: float, predicted: float | None, unit: str, fmt: str, source: str | None = None
) -> str:
    """`label: measured X unit vs predicted Y unit (+N%; source)`: the prediction with where it came from (a
    measured record, a calibration or the formula), so a record's figure is never read as the formula's."""
    text = f"{label}: measured {format(measured, fmt)} {unit}"
    if predicted:
        where = f"; {source}" if source else ""
        text += f" vs predicted {format(predicted, fmt)} {unit} ({(measured / predicted - 1) * 100:+.0f}%{where})"
    return text


def finish_summary(
    *,
    spec: Any,
    run: Any,
    args: Any,
    adapter: Any,
    times: StepTimes,
    steps: int,
    eval_rows: list[dict],
    resumed_from: str | None,
    wall_s: float,
    stopped: str | None,
    guard: Any,
    say: Callable[[str], None] | None,
    runner: str = "backends.run",
) -> dict[str, Any]:
    """Collective (memory peaks); rank 0 prints and writes the summary. Returns it on every rank.

    runner: the program the benchmark record names as the one that measured it (the Trainer door says so)."""
    peaks = _everyones_peak(adapter)
    median = times.median()
    tokens_per_step = run.global_batch * run.seq_len
    # `train --nproc`, --seq-len or --strategy: the prediction is for another step
    moved = _other_shape(spec.plan, run, spec.strategy.value)
    step_comparable = step_time_comparable(spec.plan, run, tiny=bool(args.tiny), strategy=spec.strategy.value)
    predicted = run.predicted
    summary: dict[str, Any] = {
        "strategy": spec.strategy.value,
        "model": run.model.name,
        "steps": steps,
        "world_size": run.world_size,
        "layout": run.layout.model_dump(mode="json"),
        "global_batch": run.global_batch,
        "seq_len": run.seq_len,
        "median_step_time_s": median,
        "step_time_spread_s": times.spread(),
        "tokens_per_s": tokens_per_step / median if median else None,
        "peak_memory_per_rank_bytes": peaks,
        "memory_kind": "cuda max allocated" if run.device == "cuda" else "host peak RSS",
        # What the plan said (calibrated or measured when the records moved it: its source says which), and the
        # formula's own step, the one the benchmark record stores under predicted_step_time_s (None: a plan.json
        # from before the formula's step was kept, calibrated). docs/running.md, "At the end".
        "predicted_step_time_s": predicted.step_time_s,
        "predicted_step_source": predicted.throughput_source,
        "formula_step_time_s": predicted.fitting_step_time_s(),
        "predicted_peak_memory_bytes": predicted.peak_memory_bytes,
        # Memory is compared where the step is: on GPUs, and on the CPU processes a `--gpu cpu` plan predicts (its
        # estimate models a CPU rank: the CPU's kernels and its process baseline, docs/hardware.md), RSS with RSS.
        "comparable_to_prediction": step_comparable,
        "step_time_comparable": step_comparable,
        "eval": eval_rows[-1] if eval_rows else None,
        "resumed_from": resumed_from,
        "wall_s": wall_s,
        "stopped": stopped,
        "anomalies": dict(guard.counts),
        "tiny": bool(args.tiny),
        "metrics": str(args.metrics or spec.run_dir / "metrics.jsonl"),
    }
    if adapter.rank != 0:
        return summary
    lines = []
    if median:
        line = comparison("step time", median, predicted.step_time_s if step_comparable else None, "s/step", ".3g",
                          prediction_source(predicted.throughput_source))  # fmt: skip
        lines.append(line + (f" (not compared: {moved})" if moved and not args.tiny else ""))
    gib = max(peaks) / 2**30
    if step_comparable:
        estimate = (predicted.peak_memory_bytes or 0) / 2**30 or None
        phase = f"formula, peak at {predicted.memory_source}" if predicted.memory_source else "formula"
        if run.device != "cuda":
            phase = f"host peak RSS; {phase}"
        lines.append(comparison("peak memory", gib, estimate, "GiB", ".2f", phase))
    else:
        why = "--tiny run" if args.tiny else moved if moved else "CPU processes of a GPU plan"
        lines.append(
            f"peak memory: {gib:.2f} GiB ({summary['memory_kind']}; {why}, so not compared with the plan's estimate)"
        )
    if eval_rows:
        last = eval_rows[-1]
        lines.append(f"eval loss {last['eval_loss']:.4f}, perplexity {last['perplexity']:.2f} at step {last['step']}")
    if say is not None:
        for line in lines:
            say(line)
    summary["lines"] = lines
    if args.record and median and not args.tiny:  # a --tiny smoke run measures no plan
        record_id, line = record_or_warn(spec.plan, spec.strategy.value, run, summary, args.db, runner)
        if record_id is not None:
            summary["record_id"] = record_id
            line += " (--no-record skips this)"
        if say is not None:
            say(line)
    path = spec.run_dir / "run_summary.json"
    write_json_atomic(path, summary, indent=1)
    return summary


def step_time_comparable(plan: Plan, run: RunConfig, *, tiny: bool, strategy: str | None = None) -> bool:
    """Whether the measured step time is the one the plan predicted: the plan's own step (not a --tiny run, nor
    another process count, batch, sequence length or `strategy`), on GPUs, or on the CPU processes a plan made for
    the `cpu` pseudo-GPU predicts (their memory too: that estimate models a CPU rank), as tune's trials on it do:
    compared, and recorded beside the prediction to calibrate the next plan."""
    if tiny or _other_shape(plan, run, strategy) is not None:
        return False
    return run.device == "cuda" or plan.cluster.gpu.name == "cpu"


def _other_shape(plan: Plan, run: RunConfig, strategy: str | None = None) -> str | None:
    """How the run's step differs from the one the plan predicted (None: the same), for the summary's lines.
    `strategy`: the one that ran (`train --strategy`), where it may not be the plan's."""
    if strategy is not None and strategy != plan.config.strategy.value:
        return f"run with {strategy}, the plan predicts {plan.config.strategy.value}"
    planned = (plan.cluster.world_size, plan.config.micro_batch, plan.config.grad_accum, plan.config.seq_len)
    ran = (run.world_size, run.micro_batch, run.grad_accum, run.seq_len)
    if ran == planned:
        return None

    def shape(world: int, micro_batch: int, accumulation: int, seq: int) -> str:
        processes = "1 process" if world == 1 else f"{world} processes"
        return f"{processes} x micro-batch {micro_batch} x accumulation {accumulation}, seq {seq}"

    return f"run as {shape(*ran)}, the plan predicts {shape(*planned)}"


def record_or_warn(
    plan: Plan, strategy: str, run: RunConfig, summary: dict[str, Any], db: str | Path | None, runner: str
) -> tuple[str | None, str]:
    """record(), and the line that says so; a database it cannot write (or a record it cannot make) is a warning
    line, never an exception: the run has trained, and its model is still to be saved."""
    try:
        record_id = record(plan, strategy, run, summary, db, runner=runner)
    except (UserInputError, OSError, ValueError) as error:  # ValueError: pydantic's, a value the record refuses
        return None, f"warning: the run was not recorded in the benchmark database: {str(error).splitlines()[0]}"
    return record_id, f"recorded run {record_id[:12]} in the benchmark database"


def record(
    plan: Plan,
    strategy: str,
    run: RunConfig,
    summary: dict[str, Any],
    db: str | Path | None = None,
    runner: str = "backends.run",
) -> str:
    """Store the measured run beside its prediction (benchmarks_db); returns the record id."""
    from benchmarks_db.environment import current_environment
    from benchmarks_db.record import RunRecord, RunStatus, measured_rates, spec_hash
    from benchmarks_db.store import BenchmarkStore

    # What ran: a re-planned (elastic) run's micro-batch too, so the record's columns and config agree.
    config = plan.config.model_copy(
        update={"micro_batch": run.micro_batch, "grad_accum": run.grad_accum, "seq_len": run.seq_len}
    )
    median = summary["median_step_time_s"]
    formula = run.predicted.fitting_step_time_s()
    measured: dict[str, Any] = {}
    speed = plan.throughput
    step_comparable = summary.get("step_time_comparable", summary["comparable_to_prediction"])
    if speed is not None and step_comparable:  # none above the GPU's peak (benchmarks_db/record.py)
        measured |= measured_rates(speed.tflops_per_gpu, speed.mfu, speed.step_time_s, median)
    entry = RunRecord(
        # The hardware and software, not the user: no hostname, and no data paths anywhere in the record.
        **current_environment().model_dump(),
        gpu_name=plan.cluster.gpu.name if run.device == "cuda" else "cpu",
        gpu_count=run.world_size,
        nodes=run.num_nodes,
        interconnect="host-memory" if run.device == "cpu" else "local",
        model_name=plan.model.name,
        model_spec_hash=spec_hash(plan.model),
        tiny=summary["tiny"],
        strategy=strategy,
        config_json=config.model_dump_json(),
        micro_batch=run.micro_batch,
        grad_accum=run.grad_accum,
        global_batch=run.global_batch,
        seq_len=run.seq_len,
        precision=config.precision.value,
        step_time_median_s=median,
        step_time_spread_s=summary["step_time_spread_s"],
        steps_measured=max(0, summary["steps"] - 1),
        tokens_per_s=summary["tokens_per_s"],
        peak_memory_per_rank_bytes=summary["peak_memory_per_rank_bytes"],
        # The formula's step, not the calibrated one the plan said (and the run's line compared): the calibration
        # fits measured against the formula, and a calibrated figure stored here compounded with each run.
        predicted_step_time_s=formula if step_comparable else None,
        # The same rate tune's records carry (benchmarks/harness/runner.py), under the same rule as the step time:
        # `db list` shows it in its "predicted" column, which read "-" for every run `train` recorded.
        predicted_tokens_per_s=_formula_rate(run) if step_comparable else None,
        predicted_peak_memory_bytes=run.predicted.peak_memory_bytes,
        # What the plan said (its calibrated step and the source of it) beside the formula's, so a reader of the
        # record can tell the two apart (docs/benchmarks.md, "Calibration").
        prediction_json=run.predicted.model_dump_json() if step_comparable else None,
        status=RunStatus.OK,
        runner=runner,
        **measured,
    )
    BenchmarkStore(db).add(entry)  # None: $HARDWARE_SELECTOR_DB or the cache folder
    return entry.id


def _formula_rate(run: RunConfig) -> float | None:
    """The formula's tokens/s: the plan's rate at the formula's step (the rate moves with the step: rescaled())."""
    predicted, formula = run.predicted, run.predicted.fitting_step_time_s()
    if not (predicted.tokens_per_s and predicted.step_time_s and formula):
        return None
    return predicted.tokens_per_s * predicted.step_time_s / formula

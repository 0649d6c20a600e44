"""Measure a benchmark matrix's configs with the project's one runner, those of one world size in one launch.

Each config becomes a Plan, the emitters write its run folder with a trial.json saying what to time
(planner/rundir/trial.py), and one torchrun launch of `python -m backends.runner.trials` runs the folders in
turn (benchmarks/harness/trials.py), each through `python -m backends.run`'s own entry with the adapter its
strategy names (ddp, fsdp, deepspeed, engine) on synthetic tokens: every rank imports torch and starts its
process group once, not once per config. Each config's per-step metrics (metrics.jsonl, rank 0) and summary
(every rank's peak memory) become its result. A config that fails (out of memory, an error, a hang past its
timeout) ends the launch; it is reported from the launch's output and the configs after it are launched
again (docs/benchmarks.md). Nothing here trains or imports the engine: the runner is a separate process.
With --tiny, backends.run trains at most TINY_SEQ_LEN tokens per sequence, so
tiny matrices meant for this runner use that sequence length.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from benchmarks.harness.jobs import MeasureJob, MeasureResult
from benchmarks.harness.processes import LaunchOutcome, run_torchrun_command
from benchmarks.harness.trials import TrialRun, launch_trials, prepare_trials
from planner.errors import UserInputError
from planner.rundir.trial import TrialRequest

RUNNER_NAME = "backends.run"


def available() -> bool:
    from importlib.util import find_spec

    return find_spec("backends.run") is not None and find_spec("planner.emit") is not None


def _plan_for(job: MeasureJob, nproc: int):
    from planner.hardware.cluster import make_cluster
    from planner.memory.estimate import estimate_memory
    from planner.memory.runtime import runtime_for
    from planner.models.resolve import resolve_model
    from planner.plan import Plan

    spec = resolve_model(job.model)  # the full catalog model: backends.run shrinks it itself with --tiny
    cluster = make_cluster(job.gpu, gpus_per_node=nproc)
    memory = estimate_memory(
        spec,
        job.config,
        world_size=nproc,
        gpus_per_node=nproc,
        gpu_capacity_bytes=cluster.gpu.memory_bytes,
        cpu_capacity_per_node_bytes=cluster.cpu_ram_per_node_bytes,
        runtime=runtime_for(cluster.gpu),  # the cpu device: its offloaded states stay in its RAM
    )
    return Plan(model=spec, cluster=cluster, config=job.config, memory=memory)


def backends_run_launch(
    jobs: list[MeasureJob],
    nproc: int,
    timeout_s: float,
    *,
    scratch: Path | None = None,
    on_ended: Callable[[str], None] | None = None,
    on_run: Callable[[TrialRun], None] | None = None,
    run_command=run_torchrun_command,
) -> list[TrialRun]:
    """The jobs (all on `nproc` ranks) as trials of as few launches as it takes, each job's run in their order.
    timeout_s is each job's own (launch_trials' per_trial). scratch: where the run folders are kept, so a
    matrix stopped in the middle of a launch finds the trials it had finished (default: a temporary folder).
    on_ended: told of each job's key as its trial ends (from the launch's watcher thread); on_run: given each
    run on this thread as soon as it is known (launch_trials)."""
    runs: list[TrialRun] = []
    plans, requests = [], []
    for job in jobs:
        try:
            plans.append(_plan_for(job, nproc))
        except UserInputError as error:
            failed = MeasureResult(key=job.key, world_size=nproc, error=f"cannot emit its run folder: {error}")
            runs.append(TrialRun(key=job.key, outcome=LaunchOutcome(returncode=2, results={job.key: failed})))
            if on_run is not None:
                on_run(runs[-1])
            if on_ended is not None:
                on_ended(job.key)
            continue
        requests.append(TrialRequest(key=job.key, warmup=job.warmup, steps=job.steps, tiny=job.tiny))
    with _folder(scratch) as where:
        folders = prepare_trials(plans, requests, where)
        keys = {folder: request.key for folder, request in zip(folders, requests, strict=True)}
        tell = None if on_ended is None else (lambda folder: on_ended(keys[folder]))
        runs += launch_trials(folders, nproc, timeout_s, run_command, tell, per_trial=True, on_run=on_run)
    order = {job.key: index for index, job in enumerate(jobs)}
    return sorted(runs, key=lambda run: order[run.key])


@contextmanager
def _folder(scratch: Path | None) -> Iterator[Path]:
    if scratch is not None:
        yield scratch
        return
    with tempfile.TemporaryDirectory(prefix="hs-bench-") as temporary:
        yield Path(temporary)

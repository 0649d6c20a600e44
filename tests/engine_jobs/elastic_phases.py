"""torchrun job: one phase of an elastic run on several run folders, ended as a lost node ends it.

Usage: elastic_phases.py OUT.json STOP_STEP RUN_DIR [RUN_DIR ...]. Each folder's runner starts the way torchrun
restarts it (set-up re-plans for this world size, resume reshards the newest checkpoint), trains up to STOP_STEP,
checkpoints there and stops, as if a node were lost right after that checkpoint; a STOP_STEP at or past the
run's last step runs the whole of `train`. Rank 0 writes, per folder, the phase's metrics rows, the summary (last
phase) and a digest of every sample row each rank consumed, so the test can count samples by their content.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import torch.distributed as dist

from backends.runner.loop import RunSession
from backends.runner.options import parse_args


def _recorded(stream, seen: list[str]):
    for micro_batch in stream:
        seen += [hashlib.sha1(row.numpy().tobytes()).hexdigest() for row in micro_batch]
        yield micro_batch


def phase(run_dir: str, stop: int) -> dict:
    args = parse_args(["--plan", run_dir, "--save-every", "0", "--no-record"])
    seen: list[str] = []
    summary = None
    session = RunSession.set_up(args)
    session.resume()
    session.open_stream()
    session.stream = _recorded(session.stream, seen)
    if stop < session.steps:
        session.steps = stop  # the loop ends here; the schedule keeps the run's whole length
        try:
            session.train_steps()
            session.save(stop)
        finally:
            session.progress.close()
            session.metrics.close()
    else:
        session.train_steps()
        session.evaluate(session.step)
        session.export(session.step)
        session.progress.close()
        session.metrics.close()
        summary = session.finish(None, wall_s=1.0)
    everyone: list = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, (session.adapter.data_rank, seen))
    by_data_rank: dict[int, list[str]] = {}
    agree = True  # the tp/pp ranks of one data-parallel rank read the same rows
    for data_rank, digests in everyone:
        agree &= by_data_rank.setdefault(data_rank, digests) == digests
    rows = [json.loads(line) for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]
    samples = [digest for digests in by_data_rank.values() for digest in digests]
    return {"rows": rows, "summary": summary, "samples": samples, "replicas_agree": agree, "world": len(everyone)}


def main(out_path: str, stop: int, run_dirs: list[str]) -> None:
    dist.init_process_group("gloo")
    results = {Path(run_dir).name: phase(run_dir, stop) for run_dir in run_dirs}
    if dist.get_rank() == 0:
        Path(out_path).write_text(json.dumps(results, default=str), encoding="utf-8")


if __name__ == "__main__":
    from backends.distributed_init import exit_worker

    main(sys.argv[1], int(sys.argv[2]), sys.argv[3:])
    exit_worker(0)

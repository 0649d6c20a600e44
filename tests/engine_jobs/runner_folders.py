"""torchrun job: the runner (`backends.runner.loop.train`) on several run folders in one process group.

Usage: runner_folders.py OUT.json RUN_DIR [RUN_DIR ...] [-- RUNNER_OPTION ...]: each folder trained with the runner
options given (--save-every 0 when none are). Rank 0 writes, per folder, the runner's summary and its metrics rows.
One job instead of one per folder keeps the test within its time budget (process start-up dominates on this
machine).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch.distributed as dist

from backends.runner.loop import train
from backends.runner.options import parse_args
from tests.engine_jobs.common import start_group


def main(argv: list[str]) -> None:
    out_path, *rest = argv
    run_dirs, options = (rest[: rest.index("--")], rest[rest.index("--") + 1 :]) if "--" in rest else (rest, [])
    start_group()
    results = {}
    for run_dir in run_dirs:
        try:
            summary = train(parse_args(["--plan", run_dir, *(options or ["--save-every", "0"])]))
        except Exception as error:  # the launch ends here (see one_launch.py); say which folder ended it
            raise RuntimeError(f"the run folder {run_dir} failed") from error
        rows = [json.loads(line) for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]
        results[Path(run_dir).name] = {"summary": summary, "rows": rows}
    if dist.get_rank() == 0:
        Path(out_path).write_text(json.dumps(results, default=str), encoding="utf-8")


if __name__ == "__main__":
    from backends.distributed_init import exit_worker

    main(sys.argv[1:])
    exit_worker(0)

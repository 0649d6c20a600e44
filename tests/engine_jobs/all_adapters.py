"""torchrun job: backends.run on several run folders in one process group; rank 0 writes their results as JSON.

Usage: all_adapters.py OUT.json RUN_DIR [RUN_DIR ...]. One job instead of one
per adapter keeps the test within its time budget (process start-up dominates).
"""

from __future__ import annotations

import json
import sys

import torch.distributed as dist

from backends.run import parse_args, train


def main(out_path: str, run_dirs: list[str]) -> None:
    dist.init_process_group("gloo")
    results = [train(parse_args(["--plan", run_dir, "--tiny", "--steps", "3"])) for run_dir in run_dirs]
    if dist.get_rank() == 0:
        with open(out_path, "w", encoding="utf-8") as handle:
            json.dump(results, handle)
    dist.destroy_process_group()


if __name__ == "__main__":
    from backends.distributed_init import exit_worker

    main(sys.argv[1], sys.argv[2:])
    exit_worker(0)

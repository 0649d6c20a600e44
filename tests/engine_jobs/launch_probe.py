"""What a rank sees of its launch, for tests/test_warm_launch.py: `launch_probe.py OUT [fail]`.

Each rank writes OUT.rankN.json: its command line, directory, launcher variables, the job's own variable, the
multiprocessing start method, a sum over a 2-worker DataLoader, an all-reduce and the pid of a `sleep` it leaves
behind; with `fail`, rank 1 raises.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

import torch
import torch.distributed as dist


def main(argv: list[str]) -> None:
    out = Path(argv[0])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if argv[1:] == ["fail"] and rank == 1:
        raise RuntimeError("rank 1 fails on purpose")
    loader = torch.utils.data.DataLoader(torch.arange(8.0), batch_size=2, num_workers=2)
    total = torch.tensor([float(sum(batch.sum() for batch in loader))])
    dist.all_reduce(total)
    seen = {
        "argv": sys.argv[1:],
        "cwd": os.getcwd(),
        "main": __name__,
        "variables": {key: os.environ.get(key) for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_PORT",
                                                             "TORCHELASTIC_RUN_ID", "PROBE_VARIABLE")},
        "start_method": multiprocessing.get_start_method(),
        "all_reduced_sum": total.item(),
        "left_behind": subprocess.Popen(["sleep", "600"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).pid,
    }  # fmt: skip
    out.with_name(f"{out.name}.rank{rank}.json").write_text(json.dumps(seen), encoding="utf-8")
    print(f"rank {rank} done", flush=True)
    from backends.distributed_init import exit_worker

    exit_worker(0)


if __name__ == "__main__":
    main(sys.argv[1:])

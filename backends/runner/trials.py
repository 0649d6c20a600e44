"""One launch, several trials: `python -m backends.runner.trials FOLDER [FOLDER ...]` (docs/running.md, "Tune").

A tune measures K plans. A torchrun launch per plan costs every rank its imports (torch, transformers) and
a process group each time (benchmarks/speed/tune_overhead.py measures it). Here one launch runs the trial
folders in turn, each through the runner's own entry (backends/run.py) with the arguments its trial.json asks
for (planner/rundir/trial.py): the process group is kept, the model, data and optimizer are built anew, and
the peak memory is counted afresh for each trial (backends/monitoring/peak_memory.py). After the first trial,
the collectives' bandwidth is probed once on that process group (backends/monitoring/link_probe.py), so a
tune can say whether the links explain a miss.

A trial that ends well leaves trial_done.json; a folder that has one is passed over, so a launch started
again runs only what remains. A trial that fails ends the launch with its exit code after its one line: a
rank that failed alone would leave its peers waiting in a collective, so nothing more runs in this process,
and the harness records the failure and launches the rest again (benchmarks/harness/trials.py).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    import torch

    from backends import run
    from backends.distributed_init import exit_worker
    from backends.monitoring.link_probe import probe_links
    from backends.monitoring.peak_memory import reset_peak_memory
    from planner.files import write_json_atomic
    from planner.rundir.trial import DONE_FILE, REQUEST_FILE, TrialDone, TrialRequest

    given = sys.argv[1:] if argv is None else argv
    # The DeepSpeed launcher adds --local_rank=N; the rank comes from the environment anyway.
    folders = [Path(folder) for folder in given if not folder.startswith(("--local_rank", "--local-rank"))]
    if not folders:
        print("error: name the trial folders: python -m backends.runner.trials FOLDER [FOLDER ...]", file=sys.stderr)
        return run.EXIT_BAD_INPUT
    device_type = "cuda" if torch.cuda.is_available() else "cpu"
    probed = False
    for folder in folders:
        if (folder / DONE_FILE).is_file():
            continue
        request = TrialRequest.model_validate_json((folder / REQUEST_FILE).read_text(encoding="utf-8"))
        reset_peak_memory(device_type)
        began = time.time()
        code = run.main(request.runner_args(folder))
        if code != 0:
            exit_worker(code)  # the launcher ends the peers; the harness launches the trials left
        wall_s = time.time() - began
        _all_ranks_done()
        links, probed = ({} if probed else probe_links()), True  # once per launch, on the group the trials share
        if run._rank() == 0:
            done = TrialDone(key=request.key, began=began, wall_s=wall_s, link_GBps=links)
            write_json_atomic(folder / DONE_FILE, done.model_dump())
    return 0


def _all_ranks_done() -> None:
    """Every rank has finished the trial before any starts the next (its peers' last collectives included)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()


if __name__ == "__main__":
    from backends.distributed_init import exit_worker

    exit_worker(main())

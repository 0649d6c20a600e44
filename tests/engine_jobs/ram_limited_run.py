"""One process: run the runner once to warm up, then cap its data segment and run it on a corpus 3x the cap.

Usage: ram_limited_run.py WARM_DIR BIG_DIR SPARE_CORPUS BUDGET_MB. The cap is RLIMIT_DATA (heap and
anonymous memory; the memory-mapped token file is not counted, which is the point of mapping it): the
process's data segment after warming up plus BUDGET_MB. Warming up (a run, then tokenizing one more small
corpus) creates the thread pools and arenas that tokenizing allocates once per process, whatever the
corpus size. Arrow's allocator is the system's (its default reserves a large virtual arena up front).
Prints one line `RAM_LIMITED {json}`.
"""

from __future__ import annotations

import json
import os
import resource
import sys
from pathlib import Path

os.environ["ARROW_DEFAULT_MEMORY_POOL"] = "system"
os.environ["TOKENIZERS_PARALLELISM"] = "false"


def data_segment_bytes() -> int:
    with open("/proc/self/status", encoding="utf-8") as status:
        for line in status:
            if line.startswith("VmData:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmData in /proc/self/status")


def main(warm_dir: str, big_dir: str, spare_corpus: str, budget_mb: int) -> None:
    import gc
    import shutil

    from backends.data import prepare_data
    from backends.run import RANK_YOUNG_THRESHOLD
    from backends.runner.loop import train
    from backends.runner.options import parse_args
    from planner.contract.run_config import DataConfig
    from planner.rundir.plan_file import read_plan_file

    # The collector as a rank started by `python -m backends.run` runs it: the cap must hold under it too.
    gc.set_threshold(RANK_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
    shutil.rmtree(Path(warm_dir) / "data", ignore_errors=True)  # the warm-up must tokenize, not hit the cache
    train(parse_args(["--plan", warm_dir, "--steps", "2", "--save-every", "0"]))  # every lazy import and pool
    _, run = read_plan_file(Path(warm_dir))
    prepare_data(
        DataConfig(train=[spare_corpus]),
        run_dir=Path(warm_dir),
        tokenizer_dir=run.model.tokenizer_dir,
        model_name=run.model.name,
        seq_len=run.seq_len,
        vocab_size=int(run.model.hf_config["vocab_size"]),
        global_batch=run.global_batch,
        local_rank=0,
        seed=0,
    )
    baseline = data_segment_bytes()
    cap = baseline + budget_mb * 2**20
    resource.setrlimit(resource.RLIMIT_DATA, (cap, cap))
    summary = train(parse_args(["--plan", big_dir, "--steps", "2", "--save-every", "0"]))
    print(
        "RAM_LIMITED "
        + json.dumps({"baseline": baseline, "cap": cap, "after": data_segment_bytes(), "steps": summary["steps"]}),
        flush=True,
    )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))

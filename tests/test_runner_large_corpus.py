"""A corpus three times larger than the memory a run may use is tokenized and trained on.

One process runs the runner to warm up, then caps its own data segment
(RLIMIT_DATA: heap and anonymous memory) at what it holds plus a budget, and
runs again on a corpus of three budgets (tests/engine_jobs/ram_limited_run.py).
Reading goes a chunk at a time, tokens go straight to the token file, and the
blocks come from a memory map, so the run fits; a pipeline that held the text
or the tokens in memory would die with MemoryError.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from planner.contract.run_config import DataConfig
from planner.rundir.write import RunOptions, emit_run_folder
from scripts.demo_checkpoint import make_local_gpt2, write_corpus
from tests.distributed import REPO_ROOT, cpu_env
from tests.emit_plans import make_plan

# 24 MiB above the warmed-up process: at 16 a backward allocation crossed the cap about one run in four
# under CI load (glibc's per-thread arenas, pinned to one by MALLOC_ARENA_MAX below, were part of it).
BUDGET_MB = 24
pytestmark = pytest.mark.slow


def test_a_corpus_three_times_the_memory_cap_tokenizes_and_trains(tmp_path):
    model_dir, corpus = make_local_gpt2(tmp_path / "user")
    # Ten copies of one corpus: as many tokens to write and blocks to map as ten times the text, and a tenth
    # of the seconds to make it (writing it word by word took 8 s of the test's CPU).
    part = write_corpus(tmp_path / "part.txt", 59_000, seed=5).read_text(encoding="utf-8")
    big = tmp_path / "big.txt"
    big.write_text("\n\n".join([part] * 10), encoding="utf-8")
    assert big.stat().st_size >= 3 * BUDGET_MB * 2**20
    spare = write_corpus(tmp_path / "spare.txt", 300, seed=9)
    for name, text in (("warm", corpus), ("big", big)):
        plan = make_plan(str(model_dir), gpus_per_node=1, strategy="ddp", seq_len=64, micro_batch=4, grad_accum=1)
        emit_run_folder(plan, tmp_path / name, options=RunOptions(data=DataConfig(train=[str(text)], eval_fraction=0)))
    completed = subprocess.run(
        [
            sys.executable,
            "tests/engine_jobs/ram_limited_run.py",
            str(tmp_path / "warm"),
            str(tmp_path / "big"),
            str(spare),
            str(BUDGET_MB),
        ],
        cwd=REPO_ROOT,
        # One malloc arena: a thread that starts after the cap (autograd's, a pool's) would otherwise reserve
        # its own 64 MiB arena, which RLIMIT_DATA counts, and fail the run at random (seen under CI load).
        env=cpu_env({"MALLOC_ARENA_MAX": "1"}),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    line = next(line for line in completed.stdout.splitlines() if line.startswith("RAM_LIMITED "))
    result = json.loads(line.removeprefix("RAM_LIMITED "))
    assert result["steps"] == 2 and result["after"] <= result["cap"]
    meta = json.loads(next((tmp_path / "big" / "data").glob("tokens-*.json")).read_text())
    assert meta["tokens"] * 2 > BUDGET_MB * 2**20  # the token file alone is larger than the budget

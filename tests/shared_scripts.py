"""Several unchanged scripts in one torchrun job: `python tests/shared_scripts.py CASES.json`, for the tests of
the documentation's scripts (tests/test_selector_docs.py, tests/test_integrations_docs.py) and the tutorial's
chapters (tests/tutorial_chapters.py).

A torchrun job per script costs every rank its imports again (torch, transformers, DeepSpeed: seconds each),
while the tiny models train in a fraction of that. Here each case runs its script as its own `__main__` with
its own argv, environment and working folder; only the process and its process group are shared: the first
script's `init_process_group` starts the group, the later ones find it started, and every script's
`destroy_process_group` waits until the last case has run (a default group started again on torchrun's store
after being destroyed waits forever on this torch). A test keeps one launch of its own for the command its
page prints, so the scripts' own start and end of the group stay covered.

CASES.json: {"out": PATH, "cases": [{"name", "script", "argv", "env", "cwd", "skip_deepspeed_shm"}]}. Each
rank writes the lines its cases printed to OUT.rankN.json (name -> output). A case that raises names itself
(and the rank) on stderr before the job ends, with the tail of what it printed, so a failing shared job still
says which case failed.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import runpy
import sys
from pathlib import Path
from typing import Any

import torch.distributed as dist


def run_cases(out: Path, cases: list[dict[str, Any]]) -> None:
    start, destroy = dist.init_process_group, dist.destroy_process_group
    dist.init_process_group = lambda *args, **kwargs: None if dist.is_initialized() else start(*args, **kwargs)
    dist.destroy_process_group = lambda *args, **kwargs: None
    printed = {case["name"]: _run_case(case) for case in cases}
    destroy()
    out.with_name(f"{out.name}.rank{os.environ['RANK']}.json").write_text(json.dumps(printed), encoding="utf-8")


def _run_case(case: dict[str, Any]) -> str:
    script = Path(case["script"])
    saved_env, saved_cwd, saved_path = dict(os.environ), os.getcwd(), list(sys.path)
    os.environ.update(case.get("env", {}))
    os.chdir(case.get("cwd", script.parent))
    sys.path.insert(0, str(script.parent))  # the script's own imports (the tutorial's common.py), as `python SCRIPT`
    sys.argv = [str(script), *case.get("argv", [])]
    if case.get("skip_deepspeed_shm"):  # CI time, not behaviour: no JIT build of DeepSpeed's CPU shm op
        from backends.cpu_distributed import skip_deepspeed_shm_build

        skip_deepspeed_shm_build()
    captured = io.StringIO()
    try:
        with contextlib.redirect_stdout(captured):
            runpy.run_path(str(script), run_name="__main__")
    except BaseException:
        rank = os.environ.get("RANK", "?")
        print(f"--- shared_scripts: case {case['name']!r} failed on rank {rank}; it printed:\n"
              f"{captured.getvalue()[-3000:]}", file=sys.stderr, flush=True)  # fmt: skip
        raise
    finally:
        os.environ.clear()  # what a script or the libraries it drives set (ACCELERATE_USE_DEEPSPEED) is its own
        os.environ.update(saved_env)
        os.chdir(saved_cwd)
        sys.path[:] = saved_path
        _forget_trainer_state()
    return captured.getvalue()


def _forget_trainer_state() -> None:
    """A Trainer keeps its strategy in process-wide singletons (accelerate's state, transformers' DeepSpeed
    config); the next case plans its own, as it would in a process of its own. The process group stays."""
    if "accelerate.state" in sys.modules:
        from accelerate.state import AcceleratorState

        AcceleratorState._reset_state(reset_partial_state=True)
    if "transformers.integrations.deepspeed" in sys.modules:
        from transformers.integrations.deepspeed import unset_hf_deepspeed_config

        unset_hf_deepspeed_config()


def launch_cases(out: Path, cases: list[dict[str, Any]], *, timeout: float = 600) -> list[dict[str, str]]:
    """Run `cases` in one 2-rank torchrun job; each rank's printed lines by case name (rank 0 first)."""
    from tests.distributed import run_torchrun

    spec = out.with_name(f"{out.name}.cases.json")
    spec.write_text(json.dumps({"out": str(out), "cases": cases}), encoding="utf-8")
    run_torchrun([__file__, str(spec)], nproc=2, timeout=timeout)
    return [json.loads(out.with_name(f"{out.name}.rank{rank}.json").read_text()) for rank in (0, 1)]


if __name__ == "__main__":
    spec = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    run_cases(Path(spec["out"]), spec["cases"])

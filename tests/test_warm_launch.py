"""tests/warm_launch.py against torchrun: a rank forked from the warm server sees what a torchrun rank sees.

The reference is the same probe (tests/engine_jobs/launch_probe.py) started by `python -m torch.distributed.run`:
its command line, directory, `__main__`, launcher variables, the job's own variable, a DataLoader's worker
processes (the platform's start method, not the server's) and an all-reduce. A failing rank fails the job
with its traceback, what a rank leaves running ends with the launch, and a job that sets an import-time
variable of its own starts cold.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from pathlib import Path

import pytest

from tests.distributed import REPO_ROOT, cpu_env, run_torchrun
from tests.warm_launch import can_start_warm

PROBE = "tests/engine_jobs/launch_probe.py"


def _seen(out: Path) -> list[dict]:
    return [json.loads(out.with_name(f"{out.name}.rank{rank}.json").read_text()) for rank in (0, 1)]


@pytest.fixture(scope="module")
def both_ways(tmp_path_factory) -> dict[str, list[dict]]:
    root = tmp_path_factory.mktemp("launch_probe")
    seen = {}
    for way, switch in (("warm", "0"), ("cold", "1")):
        out = root / way / "probe"
        out.parent.mkdir()
        saved = os.environ.get("TESTS_COLD_LAUNCH")
        os.environ["TESTS_COLD_LAUNCH"] = switch
        try:
            completed = run_torchrun([PROBE, str(out), "--flag"], nproc=2, env={"PROBE_VARIABLE": way}, timeout=300)
        finally:
            os.environ.pop("TESTS_COLD_LAUNCH")
            if saved is not None:
                os.environ["TESTS_COLD_LAUNCH"] = saved
        assert "rank 0 done" in completed.stdout and "rank 1 done" in completed.stdout, completed.stdout
        seen[way] = _seen(out)
    for rank in seen["cold"]:  # torchrun leaves a rank's own subprocess behind; the test ends it itself
        with contextlib.suppress(ProcessLookupError):
            os.kill(rank["left_behind"], signal.SIGKILL)
    return seen


@pytest.mark.slow
def test_a_warm_rank_sees_what_a_torchrun_rank_sees(both_ways):
    for warm, cold in zip(both_ways["warm"], both_ways["cold"], strict=True):
        assert warm["argv"][1:] == cold["argv"][1:] == ["--flag"]
        for key in ("cwd", "main", "start_method", "all_reduced_sum"):
            assert warm[key] == cold[key], key
        assert warm["all_reduced_sum"] == 2 * sum(range(8))  # each rank's DataLoader sum, all-reduced
        for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
            assert warm["variables"][key] == cold["variables"][key], key
        assert warm["variables"]["MASTER_PORT"] and warm["variables"]["TORCHELASTIC_RUN_ID"]
        assert (warm["variables"]["PROBE_VARIABLE"], cold["variables"]["PROBE_VARIABLE"]) == ("warm", "cold")
    assert [rank["variables"]["RANK"] for rank in both_ways["warm"]] == ["0", "1"]


@pytest.mark.slow
def test_a_warm_launch_ends_what_its_ranks_left_behind(both_ways):
    for rank in both_ways["warm"]:
        assert not Path(f"/proc/{rank['left_behind']}").exists() or _zombie(rank["left_behind"]), rank["left_behind"]


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True
    assert both_ways["warm"][0]["cwd"] == str(REPO_ROOT)


def test_a_failing_warm_rank_fails_the_job_with_its_traceback(tmp_path):
    with pytest.raises(AssertionError, match="rank 1 fails on purpose"):
        run_torchrun([PROBE, str(tmp_path / "probe"), "fail"], nproc=2, timeout=300)


def test_an_import_time_variable_or_torchrun_options_start_cold():
    base = cpu_env()
    assert can_start_warm(cpu_env({"PROBE_VARIABLE": "x", "PYTHONPATH": "/elsewhere"}), base, None)
    assert not can_start_warm(cpu_env({"HF_HOME": "/elsewhere"}), base, None)
    assert not can_start_warm(cpu_env({"TORCH_LOGS": "dynamo"}), base, None)
    assert not can_start_warm(cpu_env(), base, ["--max-restarts=2"])


def test_a_job_whose_path_holds_another_copy_of_our_packages_starts_cold(tmp_path):
    """The server preloads our engine and runner; a rank whose path finds another copy first would import
    that one when started cold, so such a job is."""
    base = cpu_env()
    other = tmp_path / "other-checkout"
    (other / "backends").mkdir(parents=True)
    (other / "train.py").write_text("")
    assert can_start_warm(base, base, None, ["-m", "backends.run"], REPO_ROOT)
    assert can_start_warm(base, base, None, [PROBE], REPO_ROOT)
    assert not can_start_warm(base, base, None, ["-m", "backends.run"], other)
    assert not can_start_warm(base, base, None, [str(other / "train.py")], REPO_ROOT)
    elsewhere = cpu_env({"PYTHONPATH": f"{other}{os.pathsep}{REPO_ROOT}"})
    assert not can_start_warm(elsewhere, base, None, ["-m", "backends.run"], tmp_path)

"""hardware_selector.main runs commands with the collector of hardware_selector_cli/collector.py: the young
generation's threshold raised while a command runs and restored after it, the heap frozen at exit."""

from __future__ import annotations

import gc
import subprocess
import sys

import pytest

import hardware_selector
import hardware_selector_cli.app
from hardware_selector_cli.collector import YOUNG_THRESHOLD
from tests.distributed import REPO_ROOT


@pytest.fixture
def threshold_during_command(monkeypatch):
    """main's command replaced by one that notes the collector's threshold while it runs."""
    seen: list[tuple[int, int, int]] = []

    def command(args):
        seen.append(gc.get_threshold())
        return 0

    monkeypatch.setattr(hardware_selector_cli.app, "main", command)
    return seen


def test_a_command_runs_with_the_raised_threshold_and_the_callers_comes_back(threshold_during_command):
    before = gc.get_threshold()
    assert hardware_selector.main(["models"]) == 0
    assert threshold_during_command == [(max(before[0], YOUNG_THRESHOLD), before[1], before[2])]
    assert gc.get_threshold() == before


def test_automatic_collection_left_off_stays_off(threshold_during_command):
    before = gc.get_threshold()
    gc.set_threshold(0)
    try:
        assert hardware_selector.main(["models"]) == 0
        assert threshold_during_command[0][0] == 0 and gc.get_threshold()[0] == 0
    finally:
        gc.set_threshold(*before)


PROBE = """
import atexit, gc, sys
atexit.register(lambda: print(f"FROZEN={{gc.get_freeze_count() > 0}}", file=sys.stderr))  # runs after main's
from hardware_selector import main
print(f"BEFORE={{gc.get_freeze_count() > 0}}", file=sys.stderr)
sys.exit(main({argv!r}))
"""


def test_the_heap_is_frozen_at_exit_not_before():
    completed = subprocess.run(
        [sys.executable, "-c", PROBE.format(argv=["models", "--json"])],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stderr.split() == ["BEFORE=False", "FROZEN=True"], completed.stderr


def test_what_a_command_made_is_promoted_to_the_oldest_generation_not_walked(threshold_during_command):
    before = gc.get_threshold()
    gc.set_threshold(1_000_000, *before[1:])  # the objects below stay young, as a command's do
    try:
        made = [[] for _ in range(5_000)]
        assert {id(item) for item in made} <= {id(item) for item in gc.get_objects(generation=0)}
        hardware_selector.main(["models"])
        assert gc.get_count()[0] < 100  # the caller's next allocations do not set off a walk of them
    finally:
        gc.set_threshold(*before)
    assert {id(item) for item in made} <= {id(item) for item in gc.get_objects(generation=2)}
    assert gc.get_freeze_count() == 0


def test_what_the_caller_froze_stays_frozen(threshold_during_command):
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        hardware_selector.main(["models"])
        # Neither unfrozen (the count would fall to 0) nor added to (a command makes tens of thousands); a few
        # frozen objects may die meanwhile (a cache dropping its entries), which lowers the count by as many.
        assert frozen - 100 < gc.get_freeze_count() <= frozen
    finally:
        gc.unfreeze()

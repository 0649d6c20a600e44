"""A rank started by `python -m backends.run` collects its young generation every 100,000 new objects, not
CPython's 700 (docs/performance.md, "Rank start-up"); a process whose collector is off keeps it off."""

from __future__ import annotations

import gc

import pytest

from backends.run import RANK_YOUNG_THRESHOLD, main


@pytest.fixture
def saved_threshold():
    before = gc.get_threshold()
    yield before
    gc.set_threshold(*before)


def test_the_runner_raises_the_young_generations_threshold_from_its_first_line(saved_threshold, capsys):
    gc.set_threshold(700, *saved_threshold[1:])  # CPython's default
    assert main(["--no-such-option"]) == 2  # refused before any import: the threshold was set first
    assert "error:" in capsys.readouterr().err
    assert gc.get_threshold() == (RANK_YOUNG_THRESHOLD, *saved_threshold[1:]) and RANK_YOUNG_THRESHOLD == 100_000


def test_a_collector_that_is_off_stays_off(saved_threshold, capsys):
    gc.set_threshold(0, *saved_threshold[1:])
    assert main(["--no-such-option"]) == 2
    assert gc.get_threshold()[0] == 0

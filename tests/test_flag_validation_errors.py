"""A value pydantic refuses is said in the words of the flag that gave it, with the value (as `train`'s run
options are: planner/rundir/run_overrides.py), never by the model's field name (`lora_rank: Input should be
...`). Reference: the rule the field states (PlanRequest.lora_rank and TrainingConfig.lora_rank: ge=0), and
every option of `plan` and `estimate` given a negative number."""

from __future__ import annotations

import re

import pytest

from hardware_selector_cli.app import _click_command, main

BASE = ["--model", "gpt2", "--gpu", "A100-80GB"]
FIELD_NAMED = re.compile(r"^error: [a-z_]+(\.[a-z_0-9]+)*: ")  # pydantic's location, e.g. "lora_rank: "


@pytest.mark.parametrize("command", ["plan", "estimate"])
def test_lora_rank_below_zero_names_the_flag_and_the_rule(capsys, command: str) -> None:
    assert main([command, *BASE, "--lora-rank", "-3"]) == 2
    assert capsys.readouterr().err == "error: --lora-rank must be greater than or equal to 0, not -3\n"


@pytest.mark.parametrize("command", ["plan", "estimate"])
def test_no_option_is_refused_by_its_field_name(capsys, monkeypatch, tmp_path, command: str) -> None:
    monkeypatch.chdir(tmp_path)  # an option that takes a path (--emit) writes here, not into the repository
    options = [
        max(param.opts, key=len)
        for param in _click_command([command]).commands[command].params
        if param.opts and param.opts[0].startswith("--") and not getattr(param, "is_flag", False)
    ]
    assert "--lora-rank" in options
    for flag in options:
        if flag in ("--model", "--gpu", "--emit"):
            continue
        code = main([command, *BASE, flag, "-3"])
        err = capsys.readouterr().err
        if code == 2:
            assert len(err.splitlines()) == 1 and not FIELD_NAMED.match(err), (flag, err)

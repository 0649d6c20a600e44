"""One run vocabulary: one table of run options, rendered for both doors, and one table of strategy names.

The references are the tables themselves (planner/rundir/run_option_table.py, planner/contract/choices.py):
each door must offer exactly their rows, and each row must reach the run config through RunOverrides.
"""

from __future__ import annotations

import argparse

import pytest
from typer.main import get_command

from backends.runner.options import STRATEGIES, add_run_options
from hardware_selector_cli.app import app
from hardware_selector_cli.training_options import STRATEGY_CHOICES, strategy_from_name
from planner.contract.choices import STRATEGY_ALIASES, Strategy, strategy_named
from planner.errors import UserInputError
from planner.rundir.run_option_table import RUN_OPTIONS
from planner.rundir.run_overrides import RunOverrides
from planner.search.request import SEARCH_STRATEGIES, ZERO_STAGE_KINDS
from planner.training_config import TrainingConfig


def _argparse_flags() -> set[str]:
    parser = argparse.ArgumentParser()
    add_run_options(parser)
    return {flag for action in parser._actions for flag in action.option_strings if flag.startswith("--")}


def _plan_flags() -> set[str]:
    command = get_command(app).commands["plan"]
    return {flag for param in command.params for flag in getattr(param, "opts", [])}


def test_every_row_is_a_run_override_and_every_override_has_a_row():
    keys = [option.key for option in RUN_OPTIONS]
    assert len(keys) == len(set(keys)) and len({option.flag for option in RUN_OPTIONS}) == len(keys)
    assert set(keys) == set(RunOverrides.model_fields) - {"resume"}  # --no-resume is the runner's own switch


def test_the_runner_renders_every_row_and_plan_the_emit_rows():
    assert _argparse_flags() == {option.flag for option in RUN_OPTIONS} | {"--help"}
    emit_flags = {option.flag for option in RUN_OPTIONS if option.at_emit}
    assert emit_flags <= _plan_flags()
    assert not ({option.flag for option in RUN_OPTIONS} - emit_flags) & _plan_flags()


def test_both_doors_give_the_same_overrides():
    """`plan --emit --lr 1e-3 --data a b` and `python -m backends.run --lr 1e-3 --data a b` mean one RunOverrides."""
    from backends.runner.options import override_values, parse_args
    from hardware_selector_cli.run_options import run_option_values
    from planner.rundir.run_overrides import overrides_from

    runner = overrides_from(override_values(parse_args(["--plan", "x", "--lr", "1e-3", "--data", "a", "b"])))
    emit_values = {option.key: None for option in RUN_OPTIONS if option.at_emit}
    plan = run_option_values(**{**emit_values, "learning_rate": 1e-3, "data": ["a", "b"]}).overrides()
    assert runner == plan == RunOverrides(learning_rate=1e-3, data=["a", "b"])


def test_a_choice_outside_the_table_is_one_line_at_both_doors():
    from backends.runner.options import parse_args
    from hardware_selector_cli.run_options import run_option_values

    with pytest.raises(UserInputError, match="--text-unit must be line, paragraph or document, not 'word'"):
        run_option_values(text_unit="word")
    with pytest.raises(UserInputError, match="python -m backends.run: argument --text-unit: invalid choice: 'word'"):
        parse_args(["--plan", "x", "--text-unit", "word"])
    with pytest.raises(UserInputError, match="^hardware-selector train: unrecognized arguments: --bogus; see "):
        parse_args(["--plan", "x", "--bogus"], prog="hardware-selector train")  # the door the user called


def test_every_strategy_name_is_a_valid_training_config():
    for name, fields in STRATEGY_ALIASES.items():
        config = TrainingConfig(**fields)
        assert config.strategy is fields["strategy"], name


def test_every_door_spells_strategies_from_the_one_table():
    assert set(STRATEGY_CHOICES) <= set(STRATEGY_ALIASES)
    assert set(STRATEGIES) == {strategy.value for strategy in Strategy}
    assert set(SEARCH_STRATEGIES) <= set(STRATEGY_ALIASES)
    assert ZERO_STAGE_KINDS == {"zero1": 1, "zero2": 2, "zero3": 3}
    assert strategy_from_name("ZeRO3") == (Strategy.DEEPSPEED, 3)
    assert strategy_from_name("engine") == (Strategy.ENGINE, None)
    assert strategy_named("DeepSpeed") == {"strategy": Strategy.DEEPSPEED}
    with pytest.raises(UserInputError, match="--strategy must be one of ddp|fsdp"):
        strategy_from_name("zero4")


def test_every_row_names_the_run_config_field_it_sets():
    from planner.contract.run_config import RunConfig
    from planner.rundir.run_option_table import SETS

    assert set(SETS) == {option.key for option in RUN_OPTIONS}
    for key, fields in SETS.items():
        for where in fields.split("|"):
            block, _, field = where.partition(".")
            assert field in RunConfig.model_fields[block].annotation.model_fields, key  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "overrides, message",
    [
        # The flag the user typed, not the field it sets (once: "run option 'optim.max_steps': Input should be ...").
        ({"steps": 0}, "--steps must be greater than or equal to 1, not 0"),
        ({"learning_rate": 20.0}, "--lr must be less than or equal to 10, not 20"),
        ({"save_every": -1}, "--save-every must be greater than or equal to 0, not -1"),
        ({"eval_fraction": 2.0}, "--eval-fraction must be less than 1, not 2"),
        # NaN fails every bound, so pydantic named one ("--lr nan": "<= 10"); it is not a number.
        ({"learning_rate": float("nan")}, "--lr nan: nan is not a number; give --lr a finite number"),
        ({"epochs": float("inf")}, "--epochs inf: inf is not a finite number; give --epochs a finite number"),
        # A warmup longer than the run never reaches the peak learning rate.
        ({"warmup_steps": 50, "steps": 10}, "--warmup-steps 50 is more than --steps 10: the learning rate would"),
        # --seed sets data.seed and optim.seed; the first was named as "run option 'data.seed'"
        ({"seed": -1}, "--seed must be greater than or equal to 0, not -1"),
        # a NaN factor failed the range check as "must be less than or equal to 1000000"
        ({"on_loss_spike": "stop:nan"}, "--on-loss-spike 'stop:nan': the factor after ':' must be a number above 1"),
    ],
)
def test_a_run_option_out_of_range_is_one_line_naming_the_flag_typed(overrides, message):
    from planner.rundir.run_options import run_config
    from planner.rundir.run_overrides import apply_overrides
    from tests.emit_plans import make_plan

    with pytest.raises(UserInputError) as raised:
        apply_overrides(run_config(make_plan()), RunOverrides(**overrides))
    assert str(raised.value).startswith(message) and "\n" not in str(raised.value), str(raised.value)


def test_a_warmup_longer_than_the_runs_own_steps_says_whose_steps():
    from planner.rundir.run_options import run_config
    from planner.rundir.run_overrides import apply_overrides
    from tests.emit_plans import make_plan

    run = apply_overrides(run_config(make_plan()), RunOverrides(steps=10))
    with pytest.raises(UserInputError, match="^--warmup-steps 11 is more than the run's --steps 10: "):
        apply_overrides(run, RunOverrides(warmup_steps=11))
    assert apply_overrides(run, RunOverrides(warmup_steps=10)).optim.warmup_steps == 10  # as long as the run: fine

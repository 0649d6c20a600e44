"""The range of each run flag, checked on its own before `plan --emit` searches.

`plan --emit DIR --steps -1` used to search with -1 steps' worth of tokens and fail inside the request
("train_tokens: Input should be greater than 0"), and `--steps 0` or `--lr -1` beside a model that fits nowhere
printed "no plan fits", exit 1: an answer, for a mistake. The run's RunConfig is only built after the search,
so each numeric flag is checked here against the field it sets (run_option_table.SETS), with the words
`train` uses for the same value (`--steps must be greater than or equal to 1, not -1`).
"""

from __future__ import annotations

from typing import cast

from pydantic import BaseModel, ValidationError

from planner.contract.run_config import RunConfig
from planner.errors import UserInputError
from planner.rundir.run_option_table import RUN_OPTIONS, SETS
from planner.rundir.run_overrides import RunOverrides, check_finite


def check_override_ranges(overrides: RunOverrides) -> None:
    """A one-line UserInputError for the first numeric run flag outside its RunConfig field's range."""
    check_finite(overrides)
    for option in RUN_OPTIONS:
        value = getattr(overrides, option.key)
        if option.kind not in (int, float) or value is None:
            continue
        for place in SETS[option.key].split("|"):
            block_name, _, field = place.partition(".")
            block = cast(type[BaseModel], RunConfig.model_fields[block_name].annotation)
            try:
                block.model_validate({field: value})  # every other field of the block keeps its default
            except ValidationError as error:
                problem = str(error.errors()[0]["msg"]).removeprefix("Value error, ").replace("Input should be ", "")
                shown = f"{value:g}" if isinstance(value, float) else value
                raise UserInputError(f"{option.flag} must be {problem}, not {shown}") from None

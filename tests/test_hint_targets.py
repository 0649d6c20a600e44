"""A hint names help that applies: the help a parse error points to lists the option at fault, and an empty corpus
is pointed to --text-field only where the data has fields (.txt refuses --text-field).

References: the named help itself, run through the door it names; check_text_field_applies, the refusal of a
--text-field for .txt data.
"""

from __future__ import annotations

import re

import pytest

from backends.runner.options import parse_args
from planner.contract.run_config import DataConfig
from planner.errors import UserInputError
from planner.rundir.data_sources import check_text_field_applies
from planner.rundir.run_option_table import RUN_OPTIONS
from planner.rundir.run_options import run_config
from planner.rundir.write import RunOptions
from tests.distributed import cli_in_process
from tests.emit_plans import make_plan


def test_a_runner_option_refused_under_train_points_to_help_that_lists_it(tmp_path, capsys):
    """Found by an audit: `train RUN_DIR --steps abc` said "see hardware-selector train --help", whose help lists
    only --nproc, --max-restarts and --dry-run: --steps is the runner's, which train passes on."""
    with pytest.raises(UserInputError) as refused:
        parse_args(["--plan", str(tmp_path), "--steps", "abc"], prog="hardware-selector train")
    named = re.search(r"see (.+?) --help", str(refused.value))
    assert named is not None, refused.value
    if named.group(1) == "python -m backends.run":
        with pytest.raises(SystemExit):
            parse_args(["--help"])
        shown = capsys.readouterr().out
    else:  # the hint names a hardware-selector command's help
        shown = cli_in_process(*named.group(1).split()[1:], "--help").stdout
    # Documented there, not merely named: the option's own help line (train's help names --steps among the
    # options it passes on, and says nothing of its value).
    (row,) = [option for option in RUN_OPTIONS if option.flag == "--steps"]
    assert " ".join(row.help.split()[:4]) in " ".join(shown.split()), str(refused.value)


@pytest.mark.parametrize(("name", "content", "has_fields"), [("empty.txt", "\n\n  \n", False),
                                                             ("empty.jsonl", '{"text": ""}\n', True)])  # fmt: skip
def test_an_empty_corpus_names_text_field_only_where_the_data_has_fields(
    tmp_path, monkeypatch, name, content, has_fields
):
    """Found by an audit: `train RUN_DIR --dry-run --data empty.txt` said "check the files and --text-field",
    and --text-field is refused for .txt data."""
    from backends.runner import preflight

    monkeypatch.setattr("backends.data.prepare.load_tokenizer", lambda *args, **kwargs: None)  # no tokenizer here
    (tmp_path / name).write_text(content)
    data = DataConfig(train=[str(tmp_path / name)])
    (tmp_path / "tok").mkdir()
    (tmp_path / "tok" / "tokenizer.json").write_text("{}")  # a folder run_config accepts; it is not loaded here
    options = RunOptions(data=data, tokenizer=str(tmp_path / "tok"))
    run = run_config(make_plan("gpt2", gpus_per_node=1), options=options)
    with pytest.raises(UserInputError, match="holds no text") as refused:
        preflight.check_data(run, vocab_size=50257)
    assert ("--text-field" in str(refused.value)) == has_fields, refused.value
    if has_fields:
        check_text_field_applies(data.train, "body")  # the advice applies: a field is accepted for this data
    else:
        with pytest.raises(UserInputError, match="drop --text-field"):
            check_text_field_applies(data.train, "body")


def test_no_flag_is_shown_taking_a_value_in_any_commands_help():
    """Audit: every flag's help read `--json <bool>`, yet `--json true` is an error (a flag takes no value). Every
    command's help: a flag shows no type, and an option that takes a value still shows its own."""
    from hardware_selector_cli.app import COMMAND_MODULES

    for command in COMMAND_MODULES:
        shown = cli_in_process(command, "--help").stdout
        assert "<bool>" not in shown, command
    plan = cli_in_process("plan", "--help").stdout
    assert re.search(r"--json\s+Print one JSON object", plan) and re.search(r"--gpu\s+-g\s+<str>", plan)

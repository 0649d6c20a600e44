"""click's usage errors as one line (hardware_selector_cli/app.py, usage_message): a bare group prints its help
and says what is missing, never an empty "error: ;"; a missing argument is named as the help shows it."""

from __future__ import annotations

import pytest

from hardware_selector_cli.app import main


@pytest.mark.parametrize("argv, path", [([], "hardware-selector"), (["db"], "hardware-selector db")])
def test_a_bare_group_prints_its_help_and_one_useful_line(capsys, argv, path):
    assert main(argv) == 2  # click's no_args_is_help exits 2 after the help
    captured = capsys.readouterr()
    assert "Usage:" in captured.out + captured.err and "Commands" in captured.out + captured.err
    lines = [line for line in captured.err.splitlines() if line.startswith("error:")]
    assert lines == [f"error: {path} needs a command (listed above); run '{path} COMMAND --help' for one's options"]


def test_a_missing_argument_is_one_clean_line(capsys):
    """It read "Missing argument 'run_dir'.; run ...": the sentence's period before the hint's semicolon."""
    assert main(["report"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "error: Missing argument 'run_dir'; run 'hardware-selector report --help'"

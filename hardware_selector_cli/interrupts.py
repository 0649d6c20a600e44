"""Ctrl-C outside a launch ends in one `interrupted:` line and exit code 130 (docs/running.md, "Run status").

typer turns a KeyboardInterrupt into exit code 130 without a word (click before it: "Aborted!", exit 1), so a
`train` stopped during its checks, or a `tune` at any point, said nothing of what state it left. While torchrun
runs, `train` handles the signal itself (launcher_output.run_logged) and says where the next run resumes.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

import typer

INTERRUPTED_EXIT = 130  # 128 + SIGINT, as a shell reports a process Ctrl-C ended


@contextmanager
def said_when_interrupted(line: str) -> Iterator[None]:
    """A KeyboardInterrupt inside becomes `line` on stderr and exit code 130."""
    try:
        yield
    except KeyboardInterrupt:
        print(line, file=sys.stderr)
        raise typer.Exit(INTERRUPTED_EXIT) from None

"""Ctrl-C or SIGTERM outside a launch ends in one `interrupted:` line and exit code 128 + the signal (130, 143)
(docs/running.md, "Run status").

typer turns a KeyboardInterrupt into exit code 130 without a word (click before it: "Aborted!", exit 1), so a
`train` stopped during its checks, or a `tune` at any point, said nothing of what state it left; a SIGTERM (`kill`,
a scheduler's time limit) ended them with nothing said at all. While torchrun runs, `train` handles both signals
itself (launcher_output.run_logged) and says where the next run resumes.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

import typer

INTERRUPTED_EXIT = 130  # 128 + SIGINT, as a shell reports a process Ctrl-C ended
TERMINATED_EXIT = 128 + signal.SIGTERM


def exit_code_of(line: str) -> int:
    """128 + the signal an `interrupted: SIG... ` line names (130 SIGINT, 143 SIGTERM), as a shell reports a
    process that signal ended, whichever process (train, torchrun, a rank) it reached first."""
    name = line.removeprefix("interrupted: ").split(" ", 1)[0]
    return 128 + signal.Signals[name] if name in signal.Signals.__members__ else INTERRUPTED_EXIT


class _Terminated(BaseException):
    """SIGTERM, raised where the main thread is, as Python raises KeyboardInterrupt for SIGINT (a BaseException
    too, so that no `except Exception` on the way swallows it)."""


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    raise _Terminated


@contextmanager
def said_when_interrupted(line: str) -> Iterator[None]:
    """A KeyboardInterrupt or a SIGTERM inside becomes `line` on stderr, its `{signal}` naming which (SIGINT,
    SIGTERM), and exit code 130 or 143. A subprocess.run waiting inside kills its child as the exception passes."""
    main_thread = threading.current_thread() is threading.main_thread()  # signal handlers live there only
    previous = signal.signal(signal.SIGTERM, _raise_terminated) if main_thread else None
    try:
        yield
    except KeyboardInterrupt:
        print(line.format(signal="SIGINT"), file=sys.stderr)
        raise typer.Exit(INTERRUPTED_EXIT) from None
    except _Terminated:
        print(line.format(signal="SIGTERM"), file=sys.stderr)
        raise typer.Exit(TERMINATED_EXIT) from None
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)

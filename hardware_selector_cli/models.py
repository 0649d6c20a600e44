"""`models`: list and search the model catalog."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    pass

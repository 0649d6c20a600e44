"""`gpus` and `detect`: the GPU catalog and what this machine has."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    pass

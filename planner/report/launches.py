"""A run's launches, from metrics.jsonl: each `train` (a resume, another --nproc) writes a "launch" row before
its steps (backends/runner/metrics.py write_launch: the runner's loop and the HF Trainer door), so the page
measures the whole run, not only the last launch that run_summary.json describes (each launch rewrites that
file).

A launch's first step pays its start-up (allocator warm-up, compilation), so each launch's first train row is
left out of the steady steps, as run_summary.json leaves out its launch's first. A metrics.jsonl written before
launch rows were (or a --metrics file of a trial) counts as one launch.
"""

from __future__ import annotations

import statistics
from typing import Any

from pydantic import BaseModel, ConfigDict


class Launch(BaseModel):
    model_config = ConfigDict(frozen=True)

    resumed_at: int  # the checkpoint's step this launch resumed from; 0 for a fresh start
    first_step: int | None  # its first and last train rows' steps (None: it trained no step)
    last_step: int | None
    world_size: int | None  # processes, as its launch row says (None before launch rows)


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _launch_rows(rows: list[dict[str, Any]]) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """(launch row, its train rows) in file order; train rows before any launch row form a launch of their own."""
    groups: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []
    for row in rows:
        if row.get("kind") == "launch":
            groups.append((row, []))
        elif row.get("kind") == "train" and _number(row.get("step")) is not None:
            if not groups:
                groups.append(({}, []))
            groups[-1][1].append(row)
    return groups


def launches(rows: list[dict[str, Any]]) -> list[Launch]:
    """The run's launches, oldest first."""
    found = []
    for launch, trained in _launch_rows(rows):
        steps = [int(row["step"]) for row in trained]
        world = _number(launch.get("world_size"))
        found.append(
            Launch(
                resumed_at=int(_number(launch.get("step")) or 0),
                first_step=steps[0] if steps else None,
                last_step=steps[-1] if steps else None,
                world_size=int(world) if world is not None else None,
            )
        )
    return found


def steady_median(rows: list[dict[str, Any]], field: str) -> float | None:
    """The median of `field` over every launch's train rows past that launch's first (its start-up)."""
    values = []
    for _, trained in _launch_rows(rows):
        logged = [value for row in trained if (value := _number(row.get(field))) is not None]
        values += logged[1:] if len(logged) > 1 else logged
    return statistics.median(values) if values else None


def run_peak(rows: list[dict[str, Any]], field: str = "peak_memory_bytes") -> float | None:
    """The largest `field` any train row of any launch logged (rank 0's, as metrics.jsonl holds)."""
    values = [value for row in rows if row.get("kind") == "train" and (value := _number(row.get(field))) is not None]
    return max(values) if values else None


def launch_lines(found: list[Launch]) -> list[str]:
    """One sentence per launch, for the page: where it started (resumed at step N) and what it ran."""
    lines = []
    for number, launch in enumerate(found, start=1):
        ran = f"steps {launch.first_step}-{launch.last_step}" if launch.first_step is not None else "no step"
        plural = "process" if launch.world_size == 1 else "processes"
        world = f" on {launch.world_size} {plural}" if launch.world_size is not None else ""
        began = f"resumed at step {launch.resumed_at}" if launch.resumed_at else "from the start"
        lines.append(f"launch {number} of {len(found)}: {began}, {ran}{world}")
    return lines

"""run_status.json (rank 0): what a run is doing, for `hardware-selector watch` and for scripts.

    {"state": "running" | "finished" | "stopped" | "failed", "step": .., "total_steps": ..,
     "started_at": unix time, "updated_at": .., "strategy": .., "model": .., "world_size": .., "message": ..}

Written atomically at the start, after every checkpoint and at the end, so a
reader never sees half a file. metrics.jsonl carries the per-step detail.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from planner.files import write_json_atomic

STATUS_FILE = "run_status.json"


class RunStatus:
    def __init__(self, run_dir: Path, *, enabled: bool, **facts: Any):
        self.path = run_dir / STATUS_FILE
        self.enabled = enabled
        self.document: dict[str, Any] = {"state": "running", "started_at": time.time(), **facts}

    def update(self, **changes: Any) -> None:
        if not self.enabled:
            return
        self.document.update(changes, updated_at=time.time())
        write_json_atomic(self.path, self.document, indent=1)


def read_status(run_dir: Path) -> dict[str, Any]:
    path = run_dir / STATUS_FILE
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}

"""metrics.jsonl (rank 0): one row per step and per evaluation, plus TensorBoard events when installed.

Train rows: step, loss, lr, grad_norm, tokens_per_s, mfu (GPUs only), peak
memory, and the seconds spent in data, forward/backward and the optimizer.
Eval rows: step, eval_loss, perplexity. Launch rows, one as each launch starts (write_launch: the runner's
loop and the HF Trainer door): step (the checkpoint's it resumed from, 0 afresh), world_size, resumed_from
(planner/report/launches.py). Every row carries "kind" and the wall time. On resume the rows past the
checkpoint's step are dropped first, so the file holds each step once and its curve continues where the
checkpoint left it. `hardware-selector watch DIR` reads this file.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from planner.files import write_text_atomic


class MetricsLog:
    def __init__(self, path: Path, *, enabled: bool, tensorboard_dir: Path | None = None):
        self.path = path
        self.enabled = enabled
        self.writer: Any = None
        if enabled and tensorboard_dir is not None:
            self.writer = _tensorboard_writer(tensorboard_dir)

    def truncate_after(self, step: int) -> None:
        """Keep the rows of steps up to `step` (the checkpoint resumed from), atomically."""
        if not self.enabled or not self.path.is_file():
            return
        kept = []
        with open(self.path, encoding="utf-8") as handle:
            for line in handle:
                try:
                    row = json.loads(line)
                except ValueError:
                    continue  # a line cut short by a kill
                if int(row.get("step", 0)) <= step:
                    kept.append(json.dumps(row))
        write_text_atomic(self.path, "".join(line + "\n" for line in kept))

    def write(self, kind: str, row: dict[str, Any]) -> None:
        if not self.enabled:
            return
        record = {"kind": kind, **row, "time": time.time()}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")
        if self.writer is not None:
            step = int(row["step"])
            for key, value in row.items():
                if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool):
                    self.writer.add_scalar(f"{kind}/{key}", value, step)

    def write_launch(self, *, step: int, world_size: int, resumed_from: str | None) -> None:
        """The launch row, as each launch starts (the runner's loop and the Trainer door): where it began, the
        checkpoint's step it resumed from (0 afresh), on how many processes. The report splits the run's steps here
        (planner/report/launches.py)."""
        self.write("launch", {"step": step, "world_size": world_size, "resumed_from": resumed_from})

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def _tensorboard_writer(folder: Path) -> Any:
    """A SummaryWriter when the tensorboard extra is installed, else None (metrics.jsonl has everything)."""
    try:
        import tensorboard  # noqa: F401  (torch's writer needs it)
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        return None
    return SummaryWriter(log_dir=str(folder))


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """Every complete row of a metrics.jsonl (a line cut short by a kill is skipped)."""
    rows = []
    if not path.is_file():
        return rows
    with open(path, encoding="utf-8", errors="replace") as handle:  # a damaged byte spoils its line, not the file
        for line in handle:
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict):  # a line edited into another JSON value is no row
                rows.append(row)
    return rows


def train_row(
    step: int, outcome: Any, lr: float, data_s: float, step_s: float, run: Any, tiny: bool, adapter: Any, verdict: Any
) -> dict[str, Any]:
    from backends.monitoring.peak_memory import peak_memory_bytes

    tokens = run.global_batch * run.seq_len
    row: dict[str, Any] = {
        "step": step,
        "loss": outcome.loss,
        "lr": lr,
        "grad_norm": outcome.grad_norm,
        "tokens_per_s": tokens / step_s if step_s > 0 else 0.0,
        "step_s": step_s,
        "data_s": data_s,
        "forward_backward_s": outcome.compute_s,
        "optimizer_s": outcome.optimizer_s,
        "peak_memory_bytes": peak_memory_bytes(adapter.device),
        "applied": outcome.applied,
    }
    predicted = run.predicted
    if run.device == "cuda" and not tiny and predicted.model_flops_per_token and predicted.peak_flops_per_device:
        row["mfu"] = (
            row["tokens_per_s"] * predicted.model_flops_per_token / (run.world_size * predicted.peak_flops_per_device)
        )
    if outcome.overflow:
        row["overflow"] = True
    if verdict.action != "ok":
        row["anomaly"] = {"action": verdict.action, "reason": verdict.reason}
    return row

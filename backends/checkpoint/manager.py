"""CheckpointManager: the engine's checkpoint format for any model and optimizer in a hand-written loop.

    manager = CheckpointManager("ckpt", keep_last=3, async_save=True)
    manager.save(step, model, optimizer, extra={"data_position": n})   # collective under torch.distributed
    step, extra = manager.load(model, optimizer)                        # the newest intact one; (0, {}) if none

The state goes through torch.distributed.checkpoint's get/set_state_dict, so
it is sharded where the model is (FSDP2 and DTensor shards stay on their
ranks, DDP and plain modules save one copy) and loads at another world size. A ZeroOptimizer
(backends/zero/standalone.py) is saved as its sharded fp32 master weights and optimizer states, each rank's
partition written once, and restored at any world size, the model's weights with it.
Every save is written to `.partial-<tag>`, sealed by a manifest of sizes and
checksums and renamed (backends/checkpoint/layout.py), `latest` names it, and
only the newest keep_last stay; a load skips a damaged checkpoint for the one
before it, saying so. With async_save the tensors are copied to host memory
and written in the background: save returns at once, and the checkpoint is
sealed by the next save, load or wait().
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from backends.checkpoint.layout import read_json
from backends.checkpoint.save import begin_partial, seal
from backends.ranks import dcp_quietly, distributed, rank
from planner.errors import known_keywords

STATE_FOLDER = "state"
EXTRA = "extra.json"


class CheckpointManager:
    @known_keywords
    def __init__(self, directory: str | Path, keep_last: int = 2, async_save: bool = False):
        if not isinstance(directory, (str, Path)) or not str(directory).strip():
            raise ValueError(f"directory is the folder of the checkpoints (a str or Path), not {directory!r}")
        if not isinstance(keep_last, int) or isinstance(keep_last, bool) or keep_last < 1:
            raise ValueError(f"keep_last must be a whole number of at least 1, not {keep_last!r}")
        if not isinstance(async_save, bool):  # "false" is true to Python
            raise ValueError(f"async_save must be True or False, not {async_save!r}")
        if Path(directory).exists() and not Path(directory).is_dir():
            raise ValueError(f"{directory} is a file; CheckpointManager needs a folder for its checkpoints")
        self.directory = Path(directory)
        self.keep_last = keep_last
        self.async_save = async_save
        self._pending: tuple[Any, Path, str] | None = None  # (future, partial folder, tag) of an async save

    @known_keywords
    def save(self, step: int, model: Any, optimizer: Any = None, extra: dict | None = None) -> Path:
        """Checkpoint `global_step<step>`; returns its folder (sealed now, or by the next call when async)."""
        import torch
        import torch.distributed.checkpoint as dcp

        if not isinstance(step, int) or isinstance(step, bool) or step < 0:
            raise ValueError(f"step is the whole number of the optimizer step saved (0 or more), not {step!r}")
        if not isinstance(model, torch.nn.Module) or not (
            optimizer is None or isinstance(optimizer, torch.optim.Optimizer) or _is_zero(optimizer)
        ):
            raise ValueError(
                "save(step, model, optimizer): model is a torch module, optimizer a torch optimizer, a ZeroOptimizer "
                f"or None; got {type(model).__name__} and {type(optimizer).__name__}"
            )
        try:
            extra_text = json.dumps({"step": step, **(extra or {})})
        except (TypeError, ValueError):
            raise ValueError(f"extra must be a dict of JSON values (numbers, strings, lists), not {extra!r}") from None
        self.wait()
        tag = f"global_step{int(step)}"
        partial = begin_partial(self.directory, tag)
        if rank() == 0:
            (partial / EXTRA).write_text(extra_text, encoding="utf-8")
        state = _state(model, optimizer)
        target = str(partial / STATE_FOLDER)
        with dcp_quietly():
            if self.async_save:
                future = dcp.async_save(state, checkpoint_id=target, no_dist=not distributed())
                self._pending = (future, partial, tag)
                return self.directory / tag
            dcp.save(state, checkpoint_id=target, no_dist=not distributed())
        self._seal(partial, tag)
        return self.directory / tag

    def wait(self) -> Path | None:
        """Finish and seal the save in flight, if any; returns its folder."""
        if self._pending is None:
            return None
        future, partial, tag = self._pending
        self._pending = None
        future.result()
        self._seal(partial, tag)
        return self.directory / tag

    def _seal(self, partial: Path, tag: str) -> None:
        seal(self.directory, partial, tag, self.keep_last)

    @known_keywords
    def load(self, model: Any, optimizer: Any = None, tag: str | None = None) -> tuple[int, dict]:
        """Restore the newest intact checkpoint (or `tag`) into model and optimizer: (its step, its extra)."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import set_state_dict

        from backends.checkpoint.load import choose_checkpoint, rank0_choice

        self.wait()
        error, choice = None, None
        if rank() == 0:
            try:
                choice = choose_checkpoint(self.directory, tag)
            except Exception as failure:  # a UserInputError: every rank raises it
                error = str(failure)
        error, choice = rank0_choice(error, choice)
        if error:
            from planner.errors import UserInputError

            raise UserInputError(error)
        if choice is None:
            return 0, {}
        state = _state(model, optimizer)
        with dcp_quietly():
            dcp.load(state, checkpoint_id=str(Path(choice) / STATE_FOLDER), no_dist=not distributed())
        if _is_zero(optimizer):  # its master weights are the model's: restoring them restores the model
            optimizer.loaded(state["zero"], _state(model, optimizer)["zero"])
        elif optimizer is None:
            set_state_dict(model, [], model_state_dict=state["model"], optim_state_dict={})
        else:
            set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
        extra = read_json(Path(choice) / EXTRA)
        return int(extra.pop("step")), extra


def _is_zero(optimizer: Any) -> bool:
    from backends.zero.standalone import ZeroOptimizer

    return isinstance(optimizer, ZeroOptimizer)


def _state(model: Any, optimizer: Any) -> dict[str, Any]:
    from torch.distributed.checkpoint.state_dict import get_state_dict

    if _is_zero(optimizer):  # the weights live in its sharded fp32 master; the model keeps only its buffers
        buffers = {name: buffer for name, buffer in model.named_buffers()}
        return {"zero": optimizer.checkpoint_views(), "buffers": buffers}
    if optimizer is None:
        model_state, _ = get_state_dict(model, [])
        return {"model": model_state}
    model_state, optimizer_state = get_state_dict(model, optimizer)
    return {"model": model_state, "optimizer": optimizer_state}

"""Data-parallel gradient communication with compression.

The gradients and the optimizer's master weights stay fp32; only the bytes
on the wire shrink. engine.json's `hardware_selector.compression` picks the
mode for the engine's ZeRO reductions (backends/zero/optimizer.py encodes
each bucket before its reduce-scatter / all-reduce and decodes the result):

- "none": the gradients as they are, in the compute dtype (the reference);
- "fp32": upcast first (DeepSpeed's communication_data_type fp32 under
  fp16/bf16 training; nothing to do in an fp32 run);
- "bf16" / "fp16": cast, sum, cast back (2x less traffic). Each rank's
  values are divided by the group size before the sum so fp16 cannot
  overflow, and multiplied back after;
- "int8": one scale per bucket (the group-wide max |g| / 127), values rounded
  to integers in [-127, 127] and summed as int32 (gloo has no int8 sum, and an
  int8 sum of several ranks would overflow), so today the saving is the
  rounding, not the bytes. What rounding drops is kept per bucket and added
  to the next step's gradient (error feedback), so the error does not
  accumulate. The scale needs one small MAX all-reduce per bucket first.

The brief's 1-bit (sign + scale) variant is left out: with error feedback it
needs a warm-up phase (as DeepSpeed's 1-bit Adam has) to converge, which is
more than a codec.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
import torch.distributed as dist

MODES = ("none", "fp32", "bf16", "fp16", "int8")
_WIRE_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def _check_mode(mode: str) -> None:
    if mode not in MODES:
        from planner.errors import UserInputError

        raise UserInputError(f"gradient compression '{mode}' is unknown; use one of {', '.join(MODES)}")


class BucketCodec:
    """Encodes a flat gradient bucket for a SUM collective and decodes the summed result to fp32.

    `group_max(tensor)` must MAX-reduce a one-element tensor in place over the same group (int8's scale).
    Error-feedback residuals are kept per bucket key between steps.
    """

    def __init__(self, mode: str, world: int, group_max: Callable[[torch.Tensor], None]):
        _check_mode(mode)
        self.mode, self.world, self.group_max = mode, world, group_max
        self.residuals: dict[Any, torch.Tensor] = {}
        self.scales: dict[Any, torch.Tensor] = {}

    @property
    def active(self) -> bool:
        return self.mode != "none" and self.world > 1

    def encode(self, key: Any, flat: torch.Tensor) -> torch.Tensor:
        """What this rank contributes to the sum (`flat` itself when nothing is compressed)."""
        if not self.active:
            return flat
        if self.mode == "fp32":
            return flat.float()
        if self.mode != "int8":
            return (flat.float() / self.world).to(_WIRE_DTYPES[self.mode])
        corrected = flat.float()
        if key in self.residuals:
            corrected = corrected + self.residuals[key]
        scale = (corrected.abs().max() / 127.0).reshape(1)
        self.group_max(scale)
        scale = scale.clamp(min=torch.finfo(torch.float32).tiny)
        quantized = torch.round(corrected / scale).clamp_(-127, 127)
        self.residuals[key] = corrected - quantized * scale
        self.scales[key] = scale
        return quantized.to(torch.int32)

    def decode(self, key: Any, summed: torch.Tensor) -> torch.Tensor:
        """The sum over ranks, for the fp32 gradient shard, from the summed wire tensor (or any slice of it)."""
        if not self.active or self.mode == "fp32":
            return summed
        if self.mode != "int8":
            return summed.float() * self.world
        return summed.float() * self.scales[key]


class GradientReducer:
    """Averages .grad over a data-parallel group outside the engine (one bucket: all the parameters)."""

    def __init__(self, group=None, mode: str = "none"):
        _check_mode(mode)
        self.group = group
        self.mode = mode
        self.codec: BucketCodec | None = None

    def _group_max(self, tensor: torch.Tensor) -> None:
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX, group=self.group)

    def reduce(self, params: Iterable[torch.nn.Parameter]) -> None:
        params = [p for p in params if p.requires_grad]
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        size = dist.get_world_size(self.group)
        if size == 1 or not params:
            return
        self.codec = self.codec or BucketCodec(self.mode, size, self._group_max)
        flat = torch.cat([p.grad.reshape(-1).float() for p in params])
        wire = self.codec.encode("all", flat)
        dist.all_reduce(wire, group=self.group)
        averaged = self.codec.decode("all", wire) / size
        offset = 0
        for p in params:
            count = p.numel()
            p.grad.copy_(averaged[offset : offset + count].view_as(p.grad))
            offset += count


def reduce_gradients(params: Iterable[torch.nn.Parameter], group=None, mode: str = "none") -> None:
    """One-off average (no error feedback state; use GradientReducer for int8)."""
    GradientReducer(group, mode).reduce(params)

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
- "int8" / "onebit": 1 byte or 1 bit per element on the wire, with error
  feedback: a sum in two phases of compressed chunks, each rank adding up
  what it received (backends/parts/compressed_sum.py, DeepSpeed 1-bit Adam's
  compressed all-reduce). ZeRO-1/2's partitioned buckets need only the first
  phase (a reduce-scatter); ZeRO-0 and GradientReducer take both.
  The engine's onebit is not a gradient codec: it is 1-bit Adam on ZeRO-0,
  whose optimizer sums the momentum so (backends/parts/onebit_adam.py;
  sign-compressed gradients break Adam's variance, docs/parallelism.md).
  GradientReducer's onebit still averages signs of .grad, for callers who
  bring their own optimizer.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
import torch.distributed as dist

MODES = ("none", "fp32", "bf16", "fp16", "int8", "onebit")
_WIRE_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
SUMMED_MODES = ("int8", "onebit")  # compressed_sum.py's: no wire dtype sums them


def _check_mode(mode: str) -> None:
    if mode not in MODES:
        from planner.errors import UserInputError

        raise UserInputError(f"gradient compression '{mode}' is unknown; use one of {', '.join(MODES)}")


class BucketCodec:
    """Encodes a flat gradient bucket for a SUM collective and decodes the summed result to fp32; for int8 and
    onebit, `summer` takes the whole sum instead (a collective of its own, on `group`)."""

    def __init__(self, mode: str, world: int, group: Any = None, warmup_steps: int = 0):
        _check_mode(mode)
        self.mode, self.world = mode, world
        self.warmup_steps, self.steps = warmup_steps, 0
        self.summer = None
        if mode in SUMMED_MODES and world > 1:
            from backends.parts.compressed_sum import CompressedSum

            self.summer = CompressedSum(mode, group)

    @property
    def compressing(self) -> bool:
        """The compressed sum is on: int8 / onebit, past the warm-up (before it: the fp32 sum of `flat`)."""
        return self.summer is not None and self.steps >= self.warmup_steps

    def count_step(self) -> None:
        self.steps += 1

    @property
    def active(self) -> bool:
        return self.mode != "none" and self.world > 1

    def encode(self, key: Any, flat: torch.Tensor) -> torch.Tensor:
        """What this rank contributes to the sum (`flat` itself when nothing is cast)."""
        if not self.active or self.summer is not None:
            return flat
        if self.mode == "fp32":
            return flat.float()
        return (flat.float() / self.world).to(_WIRE_DTYPES[self.mode])

    def decode(self, key: Any, summed: torch.Tensor) -> torch.Tensor:
        """The sum over ranks, for the fp32 gradient shard, from the summed wire tensor (or any slice of it)."""
        if not self.active or self.mode == "fp32" or self.summer is not None:
            return summed
        return summed.float() * self.world


class GradientReducer:
    """Averages .grad over a data-parallel group outside the engine (one bucket: all the parameters)."""

    def __init__(self, group=None, mode: str = "none"):
        _check_mode(mode)
        self.group = group
        self.mode = mode
        self.codec: BucketCodec | None = None

    def reduce(self, params: Iterable[torch.nn.Parameter]) -> None:
        params = [p for p in params if p.requires_grad]
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        size = dist.get_world_size(self.group)
        if size == 1 or not params:
            return
        self.codec = self.codec or BucketCodec(self.mode, size, self.group)
        flat = torch.cat([p.grad.reshape(-1).float() for p in params])
        if self.codec.summer is not None:
            averaged = self.codec.summer.all_reduce("all", flat) / size
        else:
            wire = self.codec.encode("all", flat)
            dist.all_reduce(wire, group=self.group)
            averaged = self.codec.decode("all", wire) / size
        offset = 0
        for p in params:
            count = p.numel()
            p.grad.copy_(averaged[offset : offset + count].view_as(p.grad))
            offset += count


def reduce_gradients(params: Iterable[torch.nn.Parameter], group=None, mode: str = "none") -> None:
    """One-off average (no error feedback state; use GradientReducer for int8 and onebit)."""
    GradientReducer(group, mode).reduce(params)

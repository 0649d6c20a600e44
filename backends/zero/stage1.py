"""ZeRO-0 and ZeRO-1: replicated parameters and gradients; optimizer states sharded (stage 1) or not (0).

Gradients accumulate locally over the micro-steps; at the boundary every
bucket is reduce-scattered (stage 1) or all-reduced (stage 0) after backward
(a few at a time in flight; a reduced bucket's pages are discarded, see
grad_arena.py), so the micro-steps in between communicate nothing.

Contiguous gradients: each parameter's .grad is a view of its bucket's flat
buffer, and autograd accumulates into it in place, so the reduction reads the
bucket without a copy. A new buffer is not zeroed up front: a parameter's
first gradient of the accumulation window is copied into its view when it
arrives (a post-accumulate hook), so the buffer's pages become resident while
backward frees activations instead of all before backward starts, when
activations peak (on GPT-2-small in fp32 that moved ~470 MiB off ZeRO-1/2's
peak). Views no gradient reached are zeroed before the reduction.

Every bucket's buffer is a view of one GradientArena (grad_arena.py), so no
bucket is allocated per step. Stage 0 zeroes the buffers after the reduction;
stages 1 and 2 release the arena's memory until the next backward, so the
optimizer step, whose temporaries are the size of the shard, does not run
beside a full copy of the gradients.
"""

from __future__ import annotations

from typing import Any

from backends.zero.flat_unit import FlatUnit, group_parameters
from backends.zero.grad_arena import GradientArena
from backends.zero.optimizer import ZeroOptimizer
from backends.zero.tied_gradient import install as install_tied_gradient


class ZeroStage0(ZeroOptimizer):
    stage = 0
    keeps_gradient_buffers = True  # stages 1 and 2 free them between steps

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.arena = GradientArena(self.units, self.dtype, self.device)
        self.place = {id(param): (unit, index) for unit in self.units for index, param in enumerate(unit.params)}
        for unit in self.units:
            for param in unit.params:
                param.register_post_accumulate_grad_hook(self._gradient_arrived)
        # A tied embedding and head write their gradients into the arena in place (tied_gradient.py).
        self.tied = install_tied_gradient(self.model) if self.arena.wipes_in_place else None
        self.window_open = False  # a micro-step of this accumulation window has run backward

    def parameter_groups(self, model: Any) -> list:
        return group_parameters(model, self.config.zero_optimization.reduce_bucket_size)

    def _gradient_buffer(self, unit: FlatUnit) -> Any:
        """The unit's flat gradient buffer, a view of the arena (given its memory back if it was released)."""
        self.arena.acquire()
        return unit.grad_full

    def _adopt_gradient(self, unit: FlatUnit, index: int) -> None:
        """Point the parameter's .grad at its view of the buffer, moving a gradient held elsewhere into it."""
        param, offset = unit.params[index], unit.offsets[index]
        self.arena.acquire()  # a backward the engine did not announce (begin_backward) still has a buffer
        view = unit.grad_full[offset : offset + param.numel()].view(param.shape)
        if param.grad is not None and param.grad.data_ptr() != view.data_ptr():
            view.copy_(param.grad)  # its first gradient of the window, or someone replaced .grad
            unit.grad_held[index] = True
        if unit.grad_held[index]:
            param.grad = view

    def _gradient_arrived(self, param: Any) -> None:
        self._adopt_gradient(*self.place[id(param)])

    def begin_backward(self, boundary: bool) -> None:
        super().begin_backward(boundary)
        for unit in self.units:
            self._gradient_buffer(unit)
            for index in range(len(unit.params)):
                self._adopt_gradient(unit, index)
        if self.tied is not None:  # the window's first backward: every .grad is a zero view of the arena
            self.tied.fresh = not self.window_open
        self.window_open = True

    def gradient_flat(self, unit: FlatUnit) -> Any:
        buffer = self._gradient_buffer(unit)
        for index, (param, offset) in enumerate(zip(unit.params, unit.offsets)):
            self._adopt_gradient(unit, index)
            if not unit.grad_held[index]:  # no gradient reached it this window
                buffer[offset : offset + param.numel()].zero_()
                unit.grad_held[index] = True
                param.grad = buffer[offset : offset + param.numel()].view(param.shape)
        return buffer

    def release_gradient_flat(self, unit: FlatUnit, flat: Any) -> None:
        if self.keeps_gradient_buffers:
            flat.zero_()
        else:  # reduced: its pages can go before the rest of the arena (ZeRO-2 reduces during backward)
            self.arena.discard(unit)

    def unowned_gradient_dropper(self, unit: FlatUnit) -> Any | None:
        if self.keeps_gradient_buffers or not unit.partitioned:
            return None
        return lambda: self.arena.discard_unowned(unit)

    def finish_reduces(self) -> None:
        super().finish_reduces()
        self.window_open = False  # the buffers are zero again (wiped, or zeroed by release_gradient_flat)
        if not self.keeps_gradient_buffers:  # every bucket is reduced: the whole arena goes at once
            self.arena.release()

    def zero_grad(self) -> None:
        """Nothing to do: the reduction already zeroed (or released) the gradient buffers."""


class ZeroStage1(ZeroStage0):
    stage = 1
    keeps_gradient_buffers = False

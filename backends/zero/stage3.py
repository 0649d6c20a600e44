"""ZeRO-3: parameters sharded too; each block's are gathered just before use and freed after.

Units are the transformer blocks plus one root unit (embeddings, final norm,
tied head), which stays gathered from the start of forward to the end of
backward. For a block: a forward pre-hook gathers it (or waits on the
prefetch started by the previous block) and prefetches the next; a forward
hook frees it and puts a hook on its output, so that backward gathers it again
(prefetching the block before it) just before its gradients are computed. The
last block, which backward needs first, stays gathered from its forward to its
backward when gradients are on (as FSDP leaves its root unit gathered after forward).
When the last of a block's gradients lands, its reduce-scatter starts (at a
boundary) and its gathered parameters are freed; the previous block's
reduction is then waited on and its flat gradient copy dropped, so backward
holds two blocks' flat gradients at most, not the whole model's (on GPT-2-small
that copy was ~470 MiB at the end of backward).

The root unit's gradients (the embeddings', a vocabulary-sized tied head's among them) are views of a
GradientArena of their own on Linux CPU (grad_arena.py): zero before backward, autograd accumulates into
them in place, the reduction reads them without a flat copy, and a tied embedding and head write their
gradients there directly (tied_gradient.py). On GPT-2-small that took the ~150 MiB flat copy and the
embedding's 147 MiB gradient off the end of backward. Blocks keep the flat copy (a block's is small).

The parameters keep being views of one flat buffer whose storage is resized to
zero when freed, so tensors autograd saved during forward (views of the
weights) see the re-gathered values in backward.

A gather writes the rank's shard into its slice of that buffer and fills the
rest in place (comm.all_gather_in_place: on gloo one broadcast per owner, where
all_gather_into_tensor gathers into a temporary as large as the buffer and
copies it out: ~800 MiB allocated and copied per rank per step on
GPT-2-small). With fp32 compute on the master's device the shard it writes is
the master itself (no separate compute copy of the shard: 1/world of the
model's fp32 bytes per rank, and no copy after the step).
"""

from __future__ import annotations

from typing import Any

from backends.zero.flat_unit import FlatUnit, group_by_block
from backends.zero.grad_arena import GradientArena
from backends.zero.optimizer import ZeroOptimizer
from backends.zero.tied_gradient import install as install_tied_gradient


def _inside_backward() -> bool:
    import torch

    return torch._C._current_graph_task_id() != -1


class ZeroStage3(ZeroOptimizer):
    stage = 3

    def __init__(self, *args: Any, **kwargs: Any):
        self.modules: list[Any | None] = []
        super().__init__(*args, **kwargs)
        self.gathering: dict[int, Any] = {}
        self.blocks = [unit for unit, module in zip(self.units, self.modules) if module is not None]
        self.root = [unit for unit, module in zip(self.units, self.modules) if module is None]
        for position, unit in enumerate(self.blocks):
            module = self.modules[unit.index]
            module.register_forward_pre_hook(self._pre_forward_hook(position), with_kwargs=True)
            module.register_forward_hook(self._post_forward_hook(position), with_kwargs=True)
        for unit in self.units:
            for param in unit.params:
                param.register_post_accumulate_grad_hook(self._gradient_arrived)
        self.root_arena: GradientArena | None = GradientArena(self.root, self.dtype, self.device)
        if not self.root_arena.wipes_in_place:  # elsewhere the root's gradients are flattened like a block's
            for unit in self.root:
                unit.grad_full, unit.grad_held = None, []
            self.root_arena = None
        self.tied = install_tied_gradient(self.model) if self.root_arena is not None else None
        self.window_open = False  # a micro-step of this accumulation window has run backward

    def parameter_groups(self, model: Any) -> list:
        pairs = group_by_block(model)
        self.modules = [module for module, _ in pairs]
        return [group for _, group in pairs]

    def place_parameters(self, unit: FlatUnit, full: Any) -> None:
        start, end = unit.owned_range
        if unit.master.dtype == full.dtype and unit.master.device == full.device:
            unit.local = unit.master  # fp32 compute beside its master: the master shard is the gather's source
        else:
            unit.local = full[start:end].clone()
        unit.attach(full)
        unit.free_full()

    # --- gather / free --------------------------------------------------------------------
    def _start_gather(self, unit: FlatUnit) -> None:
        if unit.index in self.gathering or unit.is_materialized():
            return
        unit.allocate_full()
        start, end = unit.owned_range
        unit.full[start:end].copy_(unit.local)
        self.gathering[unit.index] = self.comm.all_gather_in_place(unit.full)

    def _ensure_gathered(self, unit: FlatUnit) -> None:
        self._start_gather(unit)
        handle = self.gathering.pop(unit.index, None)
        if handle is not None:
            self._wait([handle])

    def _free(self, unit: FlatUnit) -> None:
        handle = self.gathering.pop(unit.index, None)
        if handle is not None:
            handle.wait()
        if unit.is_materialized():
            unit.free_full()

    def _prefetch(self, position: int) -> None:
        if 0 <= position < len(self.blocks) and self.config.zero_optimization.stage3_prefetch_bucket_size > 0:
            self._start_gather(self.blocks[position])

    # --- hooks ------------------------------------------------------------------------------
    def _pre_forward_hook(self, position: int) -> Any:
        def hook(module: Any, args: Any, kwargs: Any) -> None:
            self._ensure_gathered(self.blocks[position])
            if not _inside_backward():
                self._prefetch(position + 1)

        return hook

    def _post_forward_hook(self, position: int) -> Any:
        def hook(module: Any, args: Any, kwargs: Any, output: Any) -> None:
            if _inside_backward():  # activation-checkpoint recomputation: backward still needs them
                return
            import torch

            if torch.is_grad_enabled():
                outputs = output if isinstance(output, (tuple, list)) else (output,)
                for tensor in outputs:
                    if isinstance(tensor, torch.Tensor) and tensor.requires_grad:
                        tensor.register_hook(self._pre_backward_hook(position))
                if position == len(self.blocks) - 1:  # backward starts with it: kept across the turn, not re-gathered
                    return
            self._free(self.blocks[position])

        return hook

    def _pre_backward_hook(self, position: int) -> Any:
        def hook(grad: Any) -> Any:
            self._ensure_gathered(self.blocks[position])
            self._prefetch(position - 1)
            return grad

        return hook

    def _gradient_arrived(self, param: Any) -> None:
        unit = self.owner[id(param)]
        unit.ready += 1
        if unit.ready < len(unit.params):
            return
        if self.boundary and not unit.launched:
            self.launch_reduce(unit)
            self.settle_reduces(keep=1)  # at most two blocks' flat gradients alive at once
        if self.modules[unit.index] is not None:
            self._free(unit)

    # --- engine entry points ------------------------------------------------------------------
    def begin_forward(self) -> None:
        for unit in self.root:
            self._ensure_gathered(unit)

    def begin_backward(self, boundary: bool) -> None:
        super().begin_backward(boundary)
        for unit in self.units:
            unit.ready = 0
        if self.root_arena is not None:
            self.root_arena.acquire()
            for unit in self.root:
                for index in range(len(unit.params)):
                    self._adopt_root_gradient(unit, index)
            if self.tied is not None:  # the window's first backward: the root's .grad are zero views
                self.tied.fresh = not self.window_open
        self.window_open = True

    # --- the root unit's gradient arena (Linux CPU) ------------------------------------------
    def _adopt_root_gradient(self, unit: FlatUnit, index: int) -> None:
        """Point a root parameter's .grad at its arena view, moving a gradient held elsewhere into it."""
        param, offset = unit.params[index], unit.offsets[index]
        view = unit.grad_full[offset : offset + param.numel()].view(param.shape)
        if param.grad is not None and param.grad.data_ptr() != view.data_ptr():
            view.copy_(param.grad)  # a backward the engine did not announce made its own
            unit.grad_held[index] = True
        if unit.grad_held[index]:
            param.grad = view

    def gradient_flat(self, unit: FlatUnit) -> Any:
        if self.root_arena is None or unit.grad_full is None:
            return super().gradient_flat(unit)
        self.root_arena.acquire()
        for index, (param, offset) in enumerate(zip(unit.params, unit.offsets)):
            self._adopt_root_gradient(unit, index)
            if not unit.grad_held[index]:  # no gradient reached it this window
                unit.grad_full[offset : offset + param.numel()].zero_()
                unit.grad_held[index] = True
            param.grad = None  # as for a block: the parameters hold no gradient after the reduction starts
        return unit.grad_full

    def release_gradient_flat(self, unit: FlatUnit, flat: Any) -> None:
        if self.root_arena is not None and unit.grad_full is not None:
            self.root_arena.discard(unit)

    def unowned_gradient_dropper(self, unit: FlatUnit) -> Any | None:
        if self.root_arena is None or unit.grad_full is None:
            return None
        arena = self.root_arena
        return lambda: arena.discard_unowned(unit)

    def finish_reduces(self) -> None:
        super().finish_reduces()
        if self.root_arena is not None:
            self.root_arena.release()  # wiped: zero views for the next window
        self.window_open = False

    def end_backward(self, boundary: bool) -> None:
        super().end_backward(boundary)
        for unit in self.units:
            self._free(unit)

    def publish_parameters(self) -> None:
        for unit in self.units:
            self._free(unit)
            if unit.local is not unit.master:
                unit.local.copy_(unit.master)

    def gathered_parameters(self) -> None:
        """Gather every unit (for export or evaluation); call release_parameters() after."""
        for unit in self.units:
            self._ensure_gathered(unit)

    def release_parameters(self) -> None:
        for unit in self.units:
            self._free(unit)

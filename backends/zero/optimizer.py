"""The part of ZeRO every stage shares: flat fp32 master shard, reduced-gradient shard, the step.

Each rank keeps one contiguous fp32 tensor holding its slice of every unit
(the master weights) and one of the same shape for the reduced gradients; the
torch optimizer sees that single tensor, so its states are flat shards too.
The reduced-gradient shard holds memory only from the boundary's reduction
to the end of the step: released between steps, it is not resident during
forward and backward, where the peak of ZeRO-1/2 lies (activations beside
the full gradient buckets).
A stage decides when gradients are reduced and how parameters are published
back to the model after the step (see stage1.py, stage2.py, stage3.py).
"""

from __future__ import annotations

from typing import Any

from backends.parts.compression import BucketCodec
from backends.parts.mixed_precision import LossScaler
from backends.parts.optimizers import build_flat_shard_optimizer
from backends.zero.comm import DONE, DataParallelComm
from backends.zero.flat_unit import FlatUnit
from backends.zero.grad_norm import GlobalGradientNorm
from backends.zero.model_tensors import cast_everything_else, replace_meta_parameters
from planner.contract.engine_config import EngineConfig


class ZeroOptimizer:
    stage = 0
    in_flight = 4  # reductions left running while more are launched: about this many buckets of memory

    def __init__(
        self,
        model: Any,
        config: EngineConfig,
        comm: DataParallelComm,
        dtype: Any,
        scaler: LossScaler,
        *,
        model_parallel: Any | None = None,
        device: Any | None = None,
        weights: Any | None = None,
    ):
        """model_parallel: the backends.parallelize ParallelModel when tp or pp > 1 (for the global norm).
        weights: a WeightSource when the model is on the meta device (ZeRO-3 only): each rank then reads its
        own partition of every unit from the checkpoint and nothing else."""
        import torch

        self.model, self.config, self.comm, self.dtype, self.scaler = model, config, comm, dtype, scaler
        self.weights = weights
        if weights is not None:
            if self.stage != 3:
                raise ValueError("meta-device models are filled partition by partition under ZeRO-3 only")
            replace_meta_parameters(model, device, dtype)
        self.device = device if device is not None else next(model.parameters()).device
        offload = config.zero_optimization.offload_optimizer.device == "cpu"
        self.master_device = torch.device("cpu") if offload else self.device
        self.units = [
            FlatUnit(
                index,
                [name for name, _ in group],
                [param for _, param in group],
                comm.world,
                comm.rank,
                partitioned=self.stage > 0,
            )
            for index, group in enumerate(self.parameter_groups(model))
        ]
        self.owner = {id(param): unit for unit in self.units for param in unit.params}
        total = sum(unit.shard for unit in self.units)
        self.master = torch.nn.Parameter(torch.zeros(total, dtype=torch.float32, device=self.master_device))
        self.master.grad = torch.empty_like(self.master)  # views are taken below, then its memory is released
        cast_everything_else(model, dtype)
        position = 0
        for unit in self.units:  # one unit at a time, so initialisation holds one extra flat copy at most
            unit.shard_start = position
            unit.master = self.master.data[position : position + unit.shard]
            unit.grad = self.master.grad[position : position + unit.shard]
            full = self._initial_full(unit)
            start, end = unit.owned_range
            unit.master.copy_(full[start:end])
            self.place_parameters(unit, full.to(device=self.device, dtype=dtype))
            del full
            position += unit.shard
        # The torch optimizer steps the flat master partition; a standalone ZeroOptimizer brings its own class.
        factory = getattr(self, "optimizer_factory", None)
        # onebit is 1-bit Adam (backends/parts/onebit_adam.py): the optimizer compresses the momentum, and the
        # gradients are summed exactly in its warm-up and not at all after it. Other modes compress gradients.
        self.onebit_adam: Any | None = None
        self.compressed_sum: Any | None = None  # the CompressedSum in use, whichever tensor it carries
        if config.gradient_compression == "onebit" and factory is None:
            from backends.parts.onebit_adam import onebit_adam_for_zero

            segments = [(unit.index, unit.shard_start, unit.shard_start + unit.shard) for unit in self.units]
            self.onebit_adam, self.compressed_sum = onebit_adam_for_zero(
                self.master, segments, comm, self.stage, config
            )
            self.optimizer = self.onebit_adam
            self.codec = BucketCodec("none", comm.world, comm.group)  # the warm-up's exact gradient sums
        else:
            self.optimizer = (
                factory([self.master]) if factory else build_flat_shard_optimizer(self.master, config.optimizer)
            )
            self.codec = BucketCodec(
                config.gradient_compression, comm.world, comm.group, config.hardware_selector.compression_warmup_steps
            )
            self.compressed_sum = self.codec.summer
        self.global_norm = GlobalGradientNorm(
            self.units,
            self.master.grad,
            sharded=self.stage > 0,
            dp_reduce=self._global_reduce,
            model_parallel=model_parallel,
        )
        self._release_gradient_shard()  # re-allocated when the first reduction needs it
        self.pending: list[tuple[FlatUnit, Any, Any, Any]] = []
        # (unit, its flat local gradient) -> None, run before the unit is reduced over the ZeRO group (expert
        # parallelism's own reductions, backends/expert_parallel/apply.py); during backward under ZeRO-2/3.
        self.before_reduce: Any | None = None
        self.boundary = True
        self.last_grad_norm = 0.0
        self.skipped_steps = 0
        self.comm_seconds = 0.0

    @property
    def local_gradients(self) -> bool:
        """1-bit Adam past its warm-up: each rank keeps its own gradient; the optimizer averages the momenta."""
        return self.onebit_adam is not None and self.onebit_adam.frozen

    def _initial_full(self, unit: FlatUnit) -> Any:
        """The unit's fp32 values: its parameters, or (meta model) this rank's partition read from the checkpoint
        with zeros elsewhere, which ZeRO-3 drops right away (it keeps only the partition)."""
        import torch

        if self.weights is None:
            return unit.flatten([param.detach() for param in unit.params], torch.float32)
        full = torch.zeros(unit.padded, dtype=torch.float32, device=self.device)
        start, end = unit.owned_range
        for name, param, offset in zip(unit.names, unit.params, unit.offsets):
            self.weights.check_shape(name, tuple(param.shape))
            low, high = max(start, offset), min(end, offset + param.numel())
            if low < high:
                full[low:high] = self.weights.read_flat(name, low - offset, high - offset).to(
                    full.device, torch.float32
                )
        return full

    # --- what a stage specialises -------------------------------------------------------------
    def parameter_groups(self, model: Any) -> list[list[tuple[str, Any]]]:
        raise NotImplementedError

    def place_parameters(self, unit: FlatUnit, full: Any) -> None:
        unit.attach(full)

    def begin_forward(self) -> None:
        pass

    def begin_backward(self, boundary: bool) -> None:
        self.boundary = boundary

    def end_backward(self, boundary: bool) -> None:
        if boundary:
            for unit in self.units:
                if not unit.launched:
                    self.launch_reduce(unit)
                    self.settle_reduces(keep=self.in_flight)  # reduced buckets go while the rest are launched
            self.finish_reduces()

    def publish_parameters(self) -> None:
        """After the step: every rank's model parameters take the new master values."""
        handles = []
        for unit in self.units:
            start, end = unit.owned_range
            unit.full[start:end].copy_(unit.master)
            if unit.partitioned:  # in place: no copy of the shard, and on gloo no full-size temporary
                handles.append(self.comm.all_gather_in_place(unit.full))
        self._wait(handles)

    # --- gradient reduction ---------------------------------------------------------------
    @property
    def param_groups(self) -> list[dict]:
        return self.optimizer.param_groups

    @property
    def state(self) -> Any:
        """The torch optimizer's state over this rank's master partition (what frameworks walk to move it)."""
        return self.optimizer.state

    def gradient_flat(self, unit: FlatUnit) -> Any:
        """The unit's gradients as one padded flat tensor; by default a copy, and the originals are dropped."""
        grad_dtype = next((param.grad.dtype for param in unit.params if param.grad is not None), self.dtype)
        flat = unit.flatten([param.grad for param in unit.params], grad_dtype)
        for param in unit.params:
            param.grad = None
        return flat

    def release_gradient_flat(self, unit: FlatUnit, flat: Any) -> None:
        """Called once the unit's reduction finished (the default copy just goes away)."""

    def unowned_gradient_dropper(self, unit: FlatUnit) -> Any | None:
        """A callable that frees the unit's flat local gradient outside this rank's slice, run when the sum is in
        and before the slice is copied into the gradient shard (a gloo reduce-scatter is an all-reduce and a
        slice); None: nothing to free early (the default copy goes away whole after the reduction)."""
        return None

    def _gradient_shard(self, zeroed: bool = True) -> Any:
        """The flat fp32 reduced-gradient shard, re-allocated (and zeroed unless told not to) if the last step
        released it.

        Its storage is resized in place, so the views into it (unit.grad, the norm's segments) stay valid.
        """
        grads = self.master.grad
        storage = grads.untyped_storage()
        if storage.nbytes() < grads.numel() * grads.element_size():
            storage.resize_(grads.numel() * grads.element_size())
            if zeroed:
                grads.zero_()
        return grads

    def _release_gradient_shard(self) -> None:
        self.master.grad.untyped_storage().resize_(0)

    def launch_reduce(self, unit: FlatUnit) -> None:
        """Start summing this unit's gradients over ranks into its fp32 shard (async)."""
        import time

        began = time.perf_counter()
        # Not zeroed: every unit's reduction writes its whole slice before the step reads the shard, and
        # untouched pages become resident slice by slice as reductions land, not all at the first one.
        self._gradient_shard(zeroed=False)
        flat = self.gradient_flat(unit)
        if self.before_reduce is not None:
            self.before_reduce(unit, flat)
        wire = self.codec.encode(unit.index, flat)
        if self.local_gradients:  # 1-bit Adam's compressed phase: no gradient crosses the wire
            out, handle = flat, DONE
        elif self.codec.compressing:  # int8 / onebit: a compressed sum, its collectives done by now
            summer = self.codec.summer
            assert summer is not None
            out = summer.reduce_scatter(unit.index, flat) if unit.partitioned else summer.all_reduce(unit.index, flat)
            handle = DONE
        elif not unit.partitioned:
            out, handle = wire, self.comm.all_reduce(wire)
        else:
            direct = wire.dtype == unit.grad.dtype and wire.device == unit.grad.device
            out = unit.grad if direct else wire.new_empty(unit.shard)
            unowned = self.unowned_gradient_dropper(unit) if wire is flat else None
            handle = self.comm.reduce_scatter(out, wire, unowned)
        self.pending.append((unit, handle, out, flat))
        unit.launched = True
        self.comm_seconds += time.perf_counter() - began

    def settle_reduces(self, keep: int = 0) -> None:
        """Wait on every launched reduction but the newest `keep`, and drop their flat local gradients.

        ZeRO-3 calls it with keep=1 as each block's reduction starts: the previous block's has had a block of
        backward to finish in, and without it every block's flat copy stays alive until backward ends (a full
        copy of the gradients beside the shards).
        """
        import time

        began = time.perf_counter()
        settled = len(self.pending) - keep
        for unit, handle, out, flat in self.pending[: max(0, settled)]:
            handle.wait()
            if out is not unit.grad:
                unit.grad.copy_(self.codec.decode(unit.index, out))
            self.release_gradient_flat(unit, flat)
        del self.pending[: max(0, settled)]
        self.comm_seconds += time.perf_counter() - began

    def finish_reduces(self) -> None:
        self.settle_reduces()
        for unit in self.units:
            unit.launched = False
            unit.ready = 0

    def _wait(self, handles: list[Any]) -> None:
        import time

        began = time.perf_counter()
        for handle in handles:
            handle.wait()
        self.comm_seconds += time.perf_counter() - began

    # --- the step -------------------------------------------------------------------------
    def _global_reduce(self, value: Any, op: str = "sum") -> None:
        self._wait([self.comm.all_reduce(value, op)])

    def step(self, guard: Any | None = None) -> bool:
        """Average, unscale, clip and apply the reduced gradients; False when fp16 overflow skipped it,
        or when guard(grad_norm) (the runner's anomaly check, before any update) returned False."""
        grads = self._gradient_shard()
        self.codec.count_step()
        if self.scaler.checks_overflow and self.global_norm.any_overflow(self.device):
            self._release_gradient_shard()
            self.scaler.update(True)
            self.skipped_steps += 1
            self.last_grad_norm = float("inf")
            return False
        local = self.local_gradients  # each rank's own gradient: nothing to average, and a norm per rank
        grads.div_((1 if local else self.comm.world) * self.scaler.scale)
        norm = self.global_norm.norm(self.device, local_ranks=self.comm.world if local else 0)
        self.last_grad_norm = norm
        if guard is not None and not guard(norm):
            self._release_gradient_shard()
            self.scaler.update(False)
            self.skipped_steps += 1
            return False
        max_norm = self.config.gradient_clipping
        if max_norm > 0:
            coefficient = max_norm / (norm + 1e-6)
            if coefficient < 1.0:
                grads.mul_(coefficient)
        self.optimizer.step()
        self._release_gradient_shard()
        self.scaler.update(False)
        self.publish_parameters()
        return True

    def zero_grad(self) -> None:
        for unit in self.units:
            for param in unit.params:
                param.grad = None

    # --- checkpoint state -----------------------------------------------------------------
    def flat_states(self) -> dict[str, Any]:
        """Name -> flat per-rank tensor shaped like the master (master weights and optimizer states)."""
        states = {"master": self.master.data}
        for key, value in self.optimizer.state.get(self.master, {}).items():
            if hasattr(value, "shape") and tuple(value.shape) == tuple(self.master.shape):
                states[key] = value
        return states

    def scalar_states(self) -> dict[str, Any]:
        return {
            key: value
            for key, value in self.optimizer.state.get(self.master, {}).items()
            if not (hasattr(value, "shape") and tuple(value.shape) == tuple(self.master.shape))
        }

    def ensure_optimizer_state(self) -> None:
        """Create the optimizer's states (a zero-gradient step with lr 0 would change them, so build directly)."""
        import torch

        if self.optimizer.state.get(self.master):
            return
        kind = type(self.optimizer).__name__
        state: dict[str, Any] = {}
        if kind in ("Adam", "AdamW", "ChunkedAdam", "OneBitAdam"):
            state = {
                "step": torch.tensor(0.0),
                "exp_avg": torch.zeros_like(self.master.data),
                "exp_avg_sq": torch.zeros_like(self.master.data),
            }
        elif self.optimizer.param_groups[0].get("momentum", 0):
            state = {"momentum_buffer": torch.zeros_like(self.master.data)}
        self.optimizer.state[self.master] = state

    def tracked_bytes(self) -> int:
        """Bytes of the tensors the engine holds: gathered parameters, shards, gradients, optimizer states."""
        total = self.master.numel() * 4 + self.master.grad.untyped_storage().nbytes()  # master + gradient shard
        for value in self.optimizer.state.get(self.master, {}).values():
            total += value.numel() * value.element_size() if hasattr(value, "numel") else 0
        for unit in self.units:
            if unit.full is not None:
                total += unit.full.untyped_storage().nbytes()
            if unit.local is not None and unit.local is not unit.master:  # ZeRO-3's fp32 local is the master
                total += unit.local.numel() * unit.local.element_size()
            total += sum(p.grad.numel() * p.grad.element_size() for p in unit.params if p.grad is not None)
        return total

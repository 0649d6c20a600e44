"""The peak of one training step: the largest of five moments, on the most loaded GPU.

- forward-end: activations, the logits and what the loss made of them, and
  autocast's cache of 16-bit weight copies (freed when forward ends);
- backward-start: activations, and what the loss holds while its backward runs
  (the eager loss: the fp32 log-softmax output beside its gradient and its
  input's gradient; loss_kernels.py) (usually the peak);
- backward-recompute (full or op-level checkpointing): one block rebuilt beside
  what the blocks kept;
- backward-end: every gradient, plus two more copies of a tied embedding's
  gradient (autograd sums the head's and the embedding's contributions);
- optimizer-step: every gradient, the optimizer states and the step's
  temporaries, once activations are gone.

This is the raw, allocation-light computation the strategy search calls many
times; estimate.py wraps it in the typed MemoryEstimate with sources.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from planner.config_key import config_key_without_batch
from planner.memory.activation_batch import ActivationTerms, activation_terms, activations_at
from planner.memory.activations import Widths, activation_widths
from planner.memory.buffers import Buffers, estimate_buffers
from planner.memory.model_states import (
    ModelStates,
    megatron_gradient_buffer,
    model_state_bytes,
    shard_degrees,
    uses_native_mixed_precision,
)
from planner.memory.rank_params import RankParams, rank_params
from planner.memory.runtime import Runtime
from planner.memory.spec_cache import MAX_SPECS
from planner.memory.stack_memory import OURS, StackMemory, unsharded_stage_bytes, unsharded_stage_note
from planner.models.spec import ModelSpec
from planner.training_config import Precision, Strategy, TrainingConfig

T = TypeVar("T")
TENSOR_CATEGORIES = ("parameters", "gradients", "optimizer_states", "activations", "temporaries", "buffers")
PHASES = ("forward-end", "backward-start", "backward-recompute", "backward-end", "optimizer-step")


@dataclass
class StepPeak:
    per_gpu: dict[str, float]  # TENSOR_CATEGORIES at the peak moment
    phase: str
    by_phase: dict[str, float]  # total tensor bytes at each moment
    cpu_per_rank: float
    nvme_per_rank: float
    notes: list[str]
    # The activations kept for backward at their own peak (end of forward), even when the
    # step peaks at a moment without them (the optimizer step of a sharded large model).
    activations_peak: float = 0.0
    # What a pipelined stage holds unsharded until the step's last backward (stack_memory.py), inside "buffers".
    unsharded_stage: float = 0.0
    # per_gpu's categories in whole bytes, summed (estimate.py adds the runtime overhead to it): the search
    # reads it for every candidate it estimates, so it is summed once.
    tensor_bytes: int = field(init=False)

    def __post_init__(self) -> None:
        self.tensor_bytes = sum(int(value) for value in self.per_gpu.values())


class BatchPeaks(dict[tuple[int, int], StepPeak]):
    """The step peaks of one config at any batch, by (micro-batch, accumulation), and what they share."""

    __slots__ = ("line", "stack")

    def __init__(self, stack: StackMemory = OURS) -> None:
        super().__init__()
        self.line: _Line | None = None  # made at the first peak
        self.stack = stack  # what the training stack decides of the memory (stack_memory.py)


def batch_peaks(
    spec: ModelSpec,
    config: TrainingConfig,
    world_size: int,
    gpus_per_node: int,
    runtime: Runtime = Runtime.CUDA,
    stack: StackMemory = OURS,
) -> BatchPeaks:
    """The step peaks computed so far for `config` at any micro-batch and accumulation, by (micro-batch,
    accumulation): step_peak's memo, which a caller asking about many batches of one config (the search, per
    layout and checkpointing level) looks up once.

    Keyed by the config's plain values (planner/config_key.py), not the config: pydantic's __hash__ and
    __eq__ cost more than the rest of a cache hit. The values decide the peak alone."""
    global _peaks_held
    key = (id(spec), config_key_without_batch(config), world_size, gpus_per_node, runtime, stack)
    entry = _PEAKS.get(key)
    if entry is not None and entry[0] is spec:
        return entry[1]
    if len(_PEAKS) >= _MAX_PEAKS or _peaks_held >= _MAX_PEAKS:
        _PEAKS.clear()  # (a caller's dict stays valid: it is only no longer shared)
        _peaks_held = 0
    peaks = BatchPeaks(stack)
    _PEAKS[key] = (spec, peaks)  # holding the spec keeps its id from being reused while the entry lives
    return peaks


def step_peak(
    spec: ModelSpec,
    config: TrainingConfig,
    *,
    world_size: int,
    gpus_per_node: int,
    runtime: Runtime = Runtime.CUDA,
    peaks: BatchPeaks | None = None,
    stack: StackMemory = OURS,
) -> StepPeak:
    """The step's peak; memoised, since the search asks again for other GPUs of the same size.
    `peaks`: batch_peaks of this config, when the caller has it (its stack then decides, not `stack`)."""
    if peaks is None:
        peaks = batch_peaks(spec, config, world_size, gpus_per_node, runtime, stack)
    return peak_at(spec, config, config.micro_batch, config.grad_accum, world_size, gpus_per_node, peaks, runtime)


def peak_at(
    spec: ModelSpec,
    config: TrainingConfig,
    micro_batch: int,
    grad_accum: int,
    world_size: int,
    gpus_per_node: int,
    peaks: BatchPeaks,
    runtime: Runtime = Runtime.CUDA,
) -> StepPeak:
    """step_peak of `config` at this micro-batch and accumulation, whatever its own batch (`peaks`: its
    batch_peaks): the search asks about many batches of one config and builds no config for each."""
    global _peaks_held
    batch = (micro_batch, grad_accum)
    peak = peaks.get(batch)
    if peak is None:
        line = peaks.line
        if line is None:
            line = peaks.line = _Line(spec, config, world_size, gpus_per_node, runtime, grad_accum, peaks.stack)
        peak = peaks[batch] = line.peak(micro_batch, grad_accum)
        _peaks_held += 1
    return peak


@dataclass(frozen=True)
class _BatchIndependent:
    """What the step's peak needs that the batch does not change (cached)."""

    states: ModelStates
    buffers: Buffers
    widths: Widths
    head_grad: float  # a tied embedding's gradient held during backward
    notes: list[str]


def _batch_independent(
    spec: ModelSpec, config: TrainingConfig, dp: int, gpus_per_node: int, runtime: Runtime, stack: StackMemory
):
    # The key covers every field model_state_bytes, estimate_buffers and the widths read;
    # buffers read the batch only under pipelining (send/receive buffers).
    batch = (config.micro_batch, config.seq_len) if config.pipeline_parallel > 1 else ()
    layout = (
        config.strategy,
        config.zero_stage,
        config.fsdp_sharding,
        config.offload_optimizer,
        config.offload_params,
        config.precision,
        config.optimizer,
        config.lora_rank,
        config.qlora,
        config.tensor_parallel,
        config.pipeline_parallel,
        config.expert_parallel,
        config.context_parallel,
        config.fp8,
        config.compression,
        config.zeropp,
        dp,
        gpus_per_node,
        runtime,
        stack,
    )
    key = (*layout, config.activation_checkpointing, *batch)
    return _cached(spec, key, lambda: _build_batch_independent(spec, config, dp, gpus_per_node, runtime, layout, stack))


def _build_batch_independent(
    spec: ModelSpec,
    config: TrainingConfig,
    dp: int,
    gpus_per_node: int,
    runtime: Runtime,
    layout: tuple,
    stack: StackMemory,
) -> _BatchIndependent:
    params, states = _cached(
        spec, ("states", *layout), lambda: _model_states(spec, config, dp, gpus_per_node, runtime, stack)
    )
    buffers = estimate_buffers(
        spec, config, params, dp, runtime, gpus_per_node=gpus_per_node, fp8_weights=stack.fp8_weights
    )
    widths = activation_widths(config, uses_native_mixed_precision(config), runtime)
    notes = [*states.notes, *([buffers.note] if buffers.note else [])]
    return _BatchIndependent(states, buffers, widths, _tied_head_gradient(spec, config), notes)


def _model_states(
    spec: ModelSpec, config: TrainingConfig, dp: int, gpus_per_node: int, runtime: Runtime, stack: StackMemory
) -> tuple[RankParams, ModelStates]:
    """The rank's parameters and model states, shared by a layout's checkpointing levels and micro-batches:
    neither reads them (a first search builds them once per layout and precision, not once per level)."""
    params = rank_params(spec, config)
    return params, model_state_bytes(params, config, dp, gpus_per_node, spec.hidden_size, runtime, stack=stack)


_PEAKS: dict[tuple, tuple[ModelSpec, BatchPeaks]] = {}
# Bounded by the peaks it holds (as when it held one per entry), counted as step_peak adds them.
_MAX_PEAKS = MAX_SPECS * 64
_peaks_held = 0


class _Line:
    """What the peaks of one config at every batch share, found once: the layout's checks, its model states and
    buffers (per micro-batch under pipelining: the send/receive buffers), its activations' terms and notes.
    A peak then costs its batch's arithmetic (peak), the same for every caller."""

    def __init__(
        self,
        spec: ModelSpec,
        config: TrainingConfig,
        world_size: int,
        gpus_per_node: int,
        runtime: Runtime,
        accum: int,
        stack: StackMemory = OURS,
    ) -> None:
        config.check_against(spec, world_size, gpus_per_node, traced=runtime is Runtime.CPU_TRACE, grad_accum=accum)
        self.spec, self.config, self.gpus_per_node, self.runtime = spec, config, gpus_per_node, runtime
        self.dp = config.data_parallel_size(world_size)
        self.pipelined = config.pipeline_parallel > 1
        self.stack = stack
        # Megatron's gradient buffer is allocated once, at wrapping, and held from the first forward (stack_memory.py).
        self.gradients_from_start = megatron_gradient_buffer(config, stack)
        # Under pipelining the buffers read the micro-batch: the parts are found per micro-batch (_fixed_parts).
        self.fixed: _BatchIndependent | None = None
        if not self.pipelined:
            self.fixed = _batch_independent(spec, config, self.dp, gpus_per_node, runtime, self.stack)
        self.by_micro: dict[int, _BatchIndependent] = {}
        widths = activation_widths(config, uses_native_mixed_precision(config), runtime)
        self.terms: ActivationTerms = activation_terms(spec, config, widths, stack)
        # FSDP under torch's pipelining as torchtitan runs it: the stage gathered and its gradients unreduced (fp32)
        # from the first forward to the last backward (stack_memory.py), beside the shards.
        sharded = shard_degrees(config, self.dp, gpus_per_node).parameters > 1
        self.unsharded_stage = unsharded_stage_bytes(spec, config, stack, sharded, widths.compute)
        self.routing_note = None
        if spec.is_moe and (config.expert_parallel > 1 or not config.routing.is_default):
            self.routing_note = config.routing.note(config.expert_parallel)

    def _fixed_parts(self, micro_batch: int, accum: int) -> _BatchIndependent:
        fixed = self.fixed
        if fixed is None:
            self.config.check_accumulation(accum)
            fixed = self.by_micro.get(micro_batch)
            if fixed is None:
                config = self.config.model_copy(update={"micro_batch": micro_batch})
                fixed = _batch_independent(self.spec, config, self.dp, self.gpus_per_node, self.runtime, self.stack)
                self.by_micro[micro_batch] = fixed
        return fixed

    def peak(self, micro_batch: int, accum: int) -> StepPeak:
        fixed_parts = self._fixed_parts(micro_batch, accum)
        states, buffers, head_grad = fixed_parts.states, fixed_parts.buffers, fixed_parts.head_grad
        acts = activations_at(self.terms, micro_batch, accum)
        fixed = states.parameters + states.optimizer_states
        # Between micro-batches the gradients accumulate sharded, or whole in the unsharded stage (stack_memory.py).
        held_from_start = accum > 1 or self.gradients_from_start
        accumulated = states.backward_gradients if held_from_start and not self.unsharded_stage else 0.0
        recompute = acts.recompute + head_grad if acts.recompute else 0.0
        held = fixed + accumulated + acts.activations + self.unsharded_stage
        # Totals at each moment; backward-start first, so that it wins ties.
        by_phase = {
            "backward-start": held + acts.loss_backward + buffers.during_backward,
            "forward-end": held + acts.loss_forward + buffers.during_forward,
            "backward-recompute": held + recompute + buffers.during_backward,
            "backward-end": fixed
            + self.unsharded_stage
            + states.backward_gradients
            + 2 * head_grad
            + buffers.during_step
            + buffers.at_reduction,
            "optimizer-step": fixed + states.gradients + buffers.during_step + states.step_temporary,
        }
        best_phase = max(by_phase, key=by_phase.__getitem__)
        # (gradients, activations, temporaries, buffers, step temporary) at the peak.
        if best_phase == "optimizer-step":
            parts = (states.gradients, 0.0, 0.0, buffers.during_step, states.step_temporary)
        elif best_phase == "backward-end":
            parts = (states.backward_gradients, 0.0, 2 * head_grad, buffers.during_step + buffers.at_reduction, 0.0)
        elif best_phase == "forward-end":
            parts = (accumulated, acts.activations, acts.loss_forward, buffers.during_forward, 0.0)
        elif best_phase == "backward-recompute":
            parts = (accumulated, acts.activations, recompute, buffers.during_backward, 0.0)
        else:
            parts = (accumulated, acts.activations, acts.loss_backward, buffers.during_backward, 0.0)
        grads, activations, temporaries, buffer, step_temp = parts
        if best_phase != "optimizer-step":
            buffer += self.unsharded_stage  # counted with the gathered units
        notes = fixed_parts.notes
        if acts.last_pipeline_stage:
            notes = [*notes, "pipeline: the last stage (output head and loss) is the most loaded"]
        if self.routing_note is not None:
            notes = [*notes, self.routing_note]
        if self.unsharded_stage:
            notes = [*notes, unsharded_stage_note(self.unsharded_stage)]
        per_gpu = {
            "parameters": states.parameters,
            "gradients": grads,
            "optimizer_states": states.optimizer_states + step_temp,
            "activations": activations,
            "temporaries": temporaries,
            "buffers": buffer,
        }
        # By position, in StepPeak's field order: keywords cost a name match each, for every candidate.
        cpu = states.cpu + acts.on_cpu
        return StepPeak(per_gpu, best_phase, by_phase, cpu, states.nvme, notes, acts.activations, self.unsharded_stage)


_PARTS: dict[tuple, tuple[ModelSpec, object]] = {}


def _cached(spec: ModelSpec, key: tuple, compute: Callable[[], T]) -> T:
    """compute() once per (spec, key); the key must cover everything compute reads.
    The entry holds the spec, so its id is not reused while the entry lives."""
    full_key = (id(spec), *key)
    entry = _PARTS.get(full_key)
    if entry is not None and entry[0] is spec:
        return entry[1]  # type: ignore[return-value]
    if len(_PARTS) > 100_000:
        _PARTS.clear()
    value = compute()
    _PARTS[full_key] = (spec, value)
    return value


def _tied_head_gradient(spec: ModelSpec, config: TrainingConfig) -> float:
    """One gradient of a tied input/output embedding, held by autograd from the head's
    backward until the embedding's backward adds the second contribution."""
    if not spec.tied_embeddings or config.pipeline_parallel > 1 or config.lora_rank:
        return 0.0
    fp32_grads = config.precision is Precision.FP32 or (config.precision.is_mixed and config.strategy is Strategy.DDP)
    return spec.vocab_size * spec.hidden_size / config.tensor_parallel * (4 if fp32_grads else 2)

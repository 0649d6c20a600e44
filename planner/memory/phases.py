"""The peak of one training step: the largest of five moments, on the most loaded GPU.

- forward-end: activations, the logits and log-softmax of the loss, and
  autocast's cache of 16-bit weight copies (freed when forward ends);
- backward-start: activations, and the fp32 log-softmax output beside its
  gradient and its input's gradient (usually the peak);
- backward-recompute (full checkpointing): one block rebuilt beside the kept
  block inputs;
- backward-end: every gradient, plus two more copies of a tied embedding's
  gradient (autograd sums the head's and the embedding's contributions);
- optimizer-step: every gradient, the optimizer states and the step's
  temporaries, once activations are gone.

This is the raw, allocation-light computation the strategy search calls many
times; estimate.py wraps it in the typed MemoryEstimate with sources.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, TypeVar

from ..model_spec import ModelSpec
from ..training_config import Precision, Strategy, TrainingConfig
from .activations import activation_widths, estimate_activations
from .buffers import estimate_buffers
from .model_states import model_state_bytes, uses_native_mixed_precision
from .rank_params import rank_params
from .runtime import Runtime
from .spec_cache import per_spec_and_key

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


def step_peak(
    spec: ModelSpec, config: TrainingConfig, *, world_size: int, gpus_per_node: int, runtime: Runtime = Runtime.CUDA
) -> StepPeak:
    """The step's peak; memoised, since the search asks again for other GPUs of the same size."""
    key = (config, world_size, gpus_per_node, runtime)
    return _memoised_peak(spec, key)


@per_spec_and_key
def _memoised_peak(spec: ModelSpec, key: tuple) -> StepPeak:
    config, world_size, gpus_per_node, runtime = key
    config.check_against(spec, world_size, gpus_per_node)
    dp = config.data_parallel_size(world_size)
    params = rank_params(spec, config)
    # Model states and buffers do not depend on the batch (buffers only under pipelining):
    # the search varies the batch most, so both are cached on the fields they read.
    states_key = (
        config.strategy, config.zero_stage, config.fsdp_sharding, config.offload_optimizer, config.offload_params,
        config.precision, config.optimizer, config.lora_rank, config.qlora, config.tensor_parallel,
        config.pipeline_parallel, config.expert_parallel, dp, gpus_per_node,
    )
    states = _cached(spec, ("states", *states_key), lambda: model_state_bytes(params, config, dp, gpus_per_node, spec.hidden_size))
    batch = (config.micro_batch, config.seq_len) if config.pipeline_parallel > 1 else ()
    buffers_key = ("buffers", *states_key, config.activation_checkpointing, runtime, *batch)
    buffers = _cached(spec, buffers_key, lambda: estimate_buffers(spec, config, params, dp, runtime))
    widths = activation_widths(config, uses_native_mixed_precision(config), runtime)
    acts = estimate_activations(spec, config, widths)

    fixed = states.parameters + states.optimizer_states
    accumulated = states.backward_gradients if config.grad_accum > 1 else 0.0
    head_grad = _tied_head_gradient(spec, config)
    recompute = acts.recompute + head_grad if acts.recompute else 0.0
    # (gradients, activations, temporaries, buffers, step temporary) at each moment;
    # backward-start first, so that it wins ties.
    moments = {
        "backward-start": (accumulated, acts.activations, acts.loss_backward, buffers.during_backward, 0.0),
        "forward-end": (accumulated, acts.activations, acts.loss_forward, buffers.during_forward, 0.0),
        "backward-recompute": (accumulated, acts.activations, recompute, buffers.during_backward, 0.0),
        "backward-end": (states.backward_gradients, 0.0, 2 * head_grad, buffers.during_step, 0.0),
        "optimizer-step": (states.gradients, 0.0, 0.0, buffers.during_step, states.step_temporary),
    }
    by_phase = {phase: fixed + sum(parts) for phase, parts in moments.items()}
    best_phase = max(by_phase, key=by_phase.__getitem__)
    grads, activations, temporaries, buffer, step_temp = moments[best_phase]
    notes = [*states.notes, *([buffers.note] if buffers.note else [])]
    if acts.last_pipeline_stage:
        notes.append("pipeline: the last stage (output head and loss) is the most loaded")
    return StepPeak(
        per_gpu={
            "parameters": states.parameters,
            "gradients": grads,
            "optimizer_states": states.optimizer_states + step_temp,
            "activations": activations,
            "temporaries": temporaries,
            "buffers": buffer,
        },
        phase=best_phase,
        by_phase=by_phase,
        cpu_per_rank=states.cpu,
        nvme_per_rank=states.nvme,
        notes=notes,
    )


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
    fp32_grads = config.precision is Precision.FP32 or (
        config.precision.is_mixed and config.strategy is Strategy.DDP
    )
    return spec.vocab_size * spec.hidden_size / config.tensor_parallel * (4 if fp32_grads else 2)

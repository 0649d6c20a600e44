"""The selector's training request, answered by the strategy search (docs/selector.md).

`batch_size` is the per-GPU batch the user asks for, so the effective batch
is `batch_size x gpu_count`. The search first looks for plans that run
exactly that (micro-batch = batch_size, no accumulation). When none fits, the
micro-batch shrinks and gradient accumulation grows so that the effective
batch stays the same, and the answer says so. DDP, FSDP and DeepSpeed are
searched; our engine (TP/PP) only when the caller allows it, or when nothing
else fits, and then the answer says why.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from planner.errors import UserInputError
from planner.hardware.cluster import ClusterSpec
from planner.limits import MAX_BATCH
from planner.models.spec import ModelSpec
from planner.search import PlanRequest, SearchResult, search_plans
from planner.search.candidates import ThroughputAdjust
from planner.search.request import STRATEGY_FAMILIES, default_seq_len
from planner.search.suggest import SuggestionFlags
from planner.selector.gpu_choice import cluster_for
from planner.training_config import Strategy

LEGACY_STRATEGIES = ("ddp", "fsdp", "deepspeed")
Calibrated = tuple[ThroughputAdjust | None, str | None]  # calibration.calibration_for's answer
LEGACY_NAMES = {kind: Strategy(kind).display_name for kind in STRATEGY_FAMILIES}

# What would fit, in the seed CLI's flags (hardware_selector_cli/seed_cli.py): a GPU count, and no global batch,
# LoRA or strategy list, which it cannot set.
SEED_FLAGS = SuggestionFlags(
    cluster=lambda cluster: f"--distributed --gpu-count {cluster.world_size}", global_batch=None, lora=None,
    strategies=None, cluster_of=cluster_for,
)  # fmt: skip


# The same in the Python API's keyword arguments: gpu_count and gpus_per_node (both: the call may have given its
# own gpus_per_node), seq_len; it has no global batch or LoRA either.
API_FLAGS = SuggestionFlags(
    cluster=lambda cluster: f"gpu_count={cluster.world_size}, gpus_per_node={cluster.gpus_per_node}",
    global_batch=None, lora=None, strategies="strategies", seq_len="seq_len", nvme="nvme_gb", cluster_of=cluster_for,
)  # fmt: skip


@dataclass
class TrainingAnswer:
    result: SearchResult  # the search that gave the answer (the last one tried when nothing fits)
    effective_batch: int | None
    notes: dict[str, str] = field(default_factory=dict)  # legacy keys: batch_note, engine_reason


def _named(kinds: tuple[str, ...]) -> str:
    names = [LEGACY_NAMES[kind] for kind in kinds]
    return (
        "any"
        if len(names) == len(STRATEGY_FAMILIES)
        else ", ".join(names[:-1]) + (" or " if len(names) > 1 else "") + names[-1]
    )


def strategy_kinds(names: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """ "DDP", "FSDP", "DeepSpeed", "engine" (any case) to the search's kinds; a wrong name is one line."""
    by_name = {name.lower(): kind for kind, name in LEGACY_NAMES.items()}
    kinds = []
    for name in names:
        if name.strip().lower() not in by_name:
            raise UserInputError(f"strategies: '{name}' is not one of {', '.join(LEGACY_NAMES.values())}")
        kinds.append(by_name[name.strip().lower()])
    if not kinds:
        raise UserInputError(f"strategies is empty; name one or more of {', '.join(LEGACY_NAMES.values())}")
    return tuple(dict.fromkeys(kinds))


def _search(
    spec: ModelSpec,
    cluster: ClusterSpec,
    strategies: tuple,
    calibrated: Calibrated,
    flags: SuggestionFlags,
    **request: Any,
) -> SearchResult:
    adjust, calibration = calibrated
    planned = PlanRequest(strategies=strategies, **request)
    return search_plans(spec, cluster, planned, adjust, calibration=calibration, flags=flags)


def plan_training(
    spec: ModelSpec,
    cluster: ClusterSpec,
    per_gpu_batch: int | None,
    *,
    allow_engine: bool = False,
    strategies: tuple[str, ...] | None = None,
    flags: SuggestionFlags = SEED_FLAGS,
    calibrated: Calibrated = (None, None),
    **request: Any,
) -> TrainingAnswer:
    """The best plan for `per_gpu_batch` sequences per GPU on `cluster` (see the module docstring).

    `strategies` restricts the search to the stacks the caller runs; then nothing else is tried. `flags`: how
    the asking path (the seed CLI, or API_FLAGS for the Python API) spells what its suggestions change.
    `calibrated`: the search's throughput hook and the line saying how it calibrates (calibration.py).
    """
    if per_gpu_batch is not None and per_gpu_batch < 1:
        raise UserInputError(f"batch_size (sequences per GPU) must be at least 1, not {per_gpu_batch}")
    request.setdefault("seq_len", default_seq_len(spec))
    effective = per_gpu_batch * cluster.world_size if per_gpu_batch else None
    if effective is not None and effective > MAX_BATCH:  # said in the caller's words, not the search's field
        raise UserInputError(
            f"batch_size {per_gpu_batch:,} per GPU x {cluster.world_size} GPUs is {effective:,} sequences a step, "
            f"more than the {MAX_BATCH:,} a plan takes; give a smaller batch_size"
        )
    asked = strategies  # the loop below walks the strategy sets it tries
    preferred = strategies or (STRATEGY_FAMILIES if allow_engine else LEGACY_STRATEGIES)
    attempts: list[tuple[tuple, int | None]] = [(preferred, per_gpu_batch)] if per_gpu_batch else []
    attempts.append((preferred, None))
    if not allow_engine and strategies is None:
        attempts.append((STRATEGY_FAMILIES, None))  # the engine, when nothing else fits
    result: SearchResult | None = None
    for strategies, micro in attempts:
        result = _search(
            spec, cluster, strategies, calibrated, flags, global_batch=effective, micro_batch=micro, **request
        )
        if result.best is not None:
            break
    assert result is not None
    if result.best is None and per_gpu_batch:
        # What would fit holds the batch per GPU, as the selector states it: a larger count runs a larger total.
        per_gpu = _search(spec, cluster, attempts[-1][0], calibrated, flags, micro_batch=per_gpu_batch, **request)
        result = result.model_copy(update={"suggestions": per_gpu.suggestions})
    answer = TrainingAnswer(result, effective)
    best = result.best
    if best is None:
        return answer
    data_parallel = best.config.data_parallel_size(cluster.world_size)
    if per_gpu_batch and data_parallel != cluster.world_size:
        # Tensor or pipeline parallelism: the GPUs of a model replica share its sequences, so the batch is per
        # data-parallel replica and per_gpu x gpu_count x accumulation is not the effective batch (a user's audit).
        answer.notes["batch_note"] = (
            f"tp {best.config.tensor_parallel} x pp {best.config.pipeline_parallel} x cp {best.config.context_parallel}: "
            f"the {cluster.world_size} GPUs hold {data_parallel} "
            f"model replicas, so per_gpu_batch_size is per replica: {best.config.micro_batch} per replica x "
            f"{data_parallel} replicas x {best.config.grad_accum} accumulation steps = the effective batch of "
            f"{effective}"
        )
    elif per_gpu_batch and best.config.micro_batch != per_gpu_batch:
        answer.notes["batch_note"] = (
            f"{per_gpu_batch} sequences per GPU do not fit in {cluster.gpu.memory_gib:g} GiB with any "
            f"{_named(preferred)} plan; {best.config.micro_batch} per GPU x "
            f"{best.config.grad_accum} accumulation steps keeps the effective batch of {effective}"
        )
    if not per_gpu_batch:  # the search's default batch, as `plan` chooses it when no batch is given
        tokens = best.global_batch * best.config.seq_len
        answer.notes["batch_note"] = (
            f"no batch_size given: the search chose {best.global_batch} sequences a step ({tokens:,} tokens, about "
            f"the million tokens `plan` defaults to), {best.config.micro_batch} per GPU x {best.config.grad_accum} "
            "accumulation steps; pass batch_size (sequences per GPU) to set it"
        )
    if best.config.strategy is Strategy.ENGINE and not allow_engine and asked is None:
        answer.notes["engine_reason"] = (
            f"nothing on DDP, FSDP or DeepSpeed fits {spec.name} on {cluster.world_size} x {cluster.gpu.name}; "
            "our engine's tensor/pipeline parallelism does (run it with `hardware-selector train`, docs/running.md)"
        )
    return answer

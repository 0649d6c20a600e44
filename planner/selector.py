"""The Python API of the tool this project replaces, answered by the strategy search.

    from hardware_selector import HardwareSelector, get_distributed_training_config
    config = get_distributed_training_config("text_generation", "llama-7b", gpu_count=8, batch_size=16, max_memory_gb=24)
    config["distributed_strategy"], config["plan"]  # "DeepSpeed", the typed Plan

Conventions:
- batch_size is the global batch: sequences per optimizer step over all GPUs.
- max_memory_gb (GiB, the unit "24GB" cards are sized in) means "a GPU of that
  memory": with `gpu=` given, that GPU capped at this memory; otherwise the
  catalog GPU of that size with the most peak TFLOP/s per dollar (datacenter
  parts first); if the catalog has none of that size, the smallest larger one,
  capped. Without either, an A100-80GB.
- Memory figures are GiB (2**30 bytes).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from planner.errors import UserInputError
from planner.hardware.cluster import GIB, ClusterSpec, make_cluster
from planner.hardware.gpus import GpuSpec, load_gpu_catalog, resolve_gpu
from planner.models.legacy_names import catalog_name, check_model_family
from planner.models.resolve import resolve_model
from planner.plan import Plan
from planner.search import Objective, PlanRequest, SearchResult, search_plans
from planner.search.layouts import FSDP_LABELS, family_label
from planner.training_config import ActivationCheckpointing, FsdpSharding, Offload, Precision, Strategy

if TYPE_CHECKING:  # annotations only: the selector never imports transformers until asked for arguments
    from transformers import TrainingArguments

DEFAULT_GPU = "A100-80GB"
DEFAULT_GPUS_PER_NODE = 8
STRATEGY_NAMES = {
    Strategy.DDP: "DDP",
    Strategy.FSDP: "FSDP",
    Strategy.DEEPSPEED: "DeepSpeed",
    Strategy.ENGINE: "engine",
}
TORCH_FSDP_SHARDING = {
    FsdpSharding.FULL: "FULL_SHARD",
    FsdpSharding.GRAD_OP: "SHARD_GRAD_OP",
    FsdpSharding.HYBRID: "HYBRID_SHARD",
    FsdpSharding.NONE: "NO_SHARD",
}


def _best_value_key(gpu: GpuSpec) -> tuple:
    dtype = "bf16" if gpu.supports("bf16") else "fp16" if gpu.supports("fp16") else "fp32"
    peak = gpu.peak_tflops(dtype) if gpu.supports(dtype) else 0.0
    per_dollar = peak / gpu.price_usd_per_hour if gpu.price_usd_per_hour else peak
    return (gpu.segment != "datacenter", -per_dollar)


def _capped(gpu: GpuSpec, memory_gib: float) -> GpuSpec:
    if gpu.memory_bytes <= memory_gib * GIB:
        return gpu
    note = f"memory capped at {memory_gib:g} GiB (max_memory_gb)"
    return gpu.model_copy(update={"memory_bytes": int(memory_gib * GIB), "notes": f"{gpu.notes} {note}".strip()})


def gpu_with_memory(max_memory_gb: float | None, gpu: str | None = None) -> GpuSpec:
    """The GPU a request means (see the module docstring)."""
    if max_memory_gb is not None and max_memory_gb <= 0:
        raise UserInputError(f"max_memory_gb must be positive, not {max_memory_gb}")
    if gpu is not None:
        chosen = resolve_gpu(gpu)
        return _capped(chosen, max_memory_gb) if max_memory_gb else chosen
    if max_memory_gb is None:
        return resolve_gpu(DEFAULT_GPU)
    gpus = [entry for entry in load_gpu_catalog() if entry.kind == "gpu"]
    same_size = [entry for entry in gpus if abs(entry.memory_gib - max_memory_gb) <= 0.05 * max_memory_gb]
    if same_size:
        return min(same_size, key=_best_value_key)
    larger = [entry for entry in gpus if entry.memory_gib > max_memory_gb]
    if not larger:
        largest = max(gpus, key=lambda entry: entry.memory_bytes)
        raise UserInputError(f"max_memory_gb {max_memory_gb:g} exceeds every catalog GPU (largest: {largest.name})")
    return _capped(min(larger, key=lambda entry: (entry.memory_bytes, _best_value_key(entry))), max_memory_gb)


def cluster_for(gpu: GpuSpec, gpu_count: int, gpus_per_node: int | None = None) -> ClusterSpec:
    if gpu_count < 1:
        raise UserInputError(f"gpu_count must be at least 1, not {gpu_count}")
    per_node = gpus_per_node or min(gpu_count, DEFAULT_GPUS_PER_NODE)
    if gpu_count % per_node:
        raise UserInputError(f"gpu_count {gpu_count} is not a whole number of nodes of {per_node}; pass gpus_per_node")
    return make_cluster(gpu, gpus_per_node=per_node, nodes=gpu_count // per_node)


def _mixed_precision(precision: Precision) -> str:
    """accelerate's names: "bf16", "fp16" or "no"."""
    return "no" if precision is Precision.FP32 else precision.compute_dtype


def plan_summary(plan: Plan) -> dict[str, Any]:
    """The legacy dict for one plan: strategy, batch, precision, memory, and the strategy's own block."""
    config, layout, memory = plan.config, plan.layout, plan.memory.per_gpu_bytes
    gb = lambda key: round(memory[key] / GIB, 3)  # noqa: E731
    summary: dict[str, Any] = {
        "fits": True,
        "distributed_strategy": STRATEGY_NAMES[config.strategy],
        "strategy_family": family_label(config),
        "gpu": plan.cluster.gpu.name,
        "gpu_memory_gb": round(plan.cluster.gpu.memory_bytes / GIB, 3),
        "gpu_count": plan.cluster.world_size,
        "gpus_per_node": plan.cluster.gpus_per_node,
        "per_gpu_batch_size": config.micro_batch,
        "global_batch_size": plan.global_batch,
        "gradient_accumulation_steps": config.grad_accum,
        "sequence_length": config.seq_len,
        "mixed_precision": _mixed_precision(config.precision),
        "precision": config.precision.value,
        "gradient_checkpointing": config.activation_checkpointing is not ActivationCheckpointing.NONE,
        "activation_checkpointing": config.activation_checkpointing.value,
        "estimated_memory": {
            "parameters_gb": gb("parameters"),
            "gradients_gb": gb("gradients"),
            "optimizer_gb": gb("optimizer_states"),
            "activations_gb": round((memory["activations"] + memory["temporaries"]) / GIB, 3),
            "buffers_gb": gb("buffers"),
            "overhead_gb": gb("overhead"),
            "per_gpu_gb": gb("total"),
            "cpu_per_node_gb": round(plan.memory.cpu_per_node_bytes / GIB, 3),
            # The breakdown is at the step's peak; activations are 0 when it is the optimizer step.
            "peak_phase": plan.memory.peak_phase,
            "sources": dict(plan.memory.sources),
        },
        "reasons": list(plan.reasons),
        "plan": plan,
    }
    if plan.throughput is not None:
        speed = plan.throughput
        summary["estimated_throughput"] = {
            "tokens_per_s": speed.tokens_per_s,
            "samples_per_s": speed.samples_per_s,
            "step_time_s": speed.step_time_s,
            "mfu": speed.mfu,
            "tflops_per_gpu": speed.tflops_per_gpu,
            "sources": dict(speed.sources),
        }
    if config.strategy is Strategy.DEEPSPEED:
        summary["deepspeed_config"] = {
            "zero_stage": config.zero_stage,
            "offload_optimizer": config.offload_optimizer.value,
            "offload_param": config.offload_params.value,
        }
    elif config.strategy is Strategy.FSDP:
        summary["fsdp_config"] = {
            "sharding_strategy": TORCH_FSDP_SHARDING[config.fsdp_sharding],
            "sharding": FSDP_LABELS[config.fsdp_sharding],
            "cpu_offload": Offload.CPU in (config.offload_params, config.offload_optimizer),
            "activation_checkpointing": config.activation_checkpointing is not ActivationCheckpointing.NONE,
        }
    elif config.strategy is Strategy.ENGINE:
        summary["engine_config"] = {
            "data_parallel": layout.dp,
            "tensor_parallel": layout.tp,
            "pipeline_parallel": layout.pp,
            "sequence_parallel": config.sequence_parallel,
            "pipeline_schedule": config.pipeline_schedule.value,
            "virtual_stages": config.virtual_stages,
            "zero_stage": config.zero_stage,
        }
    return summary


def _no_fit_summary(result: SearchResult, cluster: ClusterSpec) -> dict[str, Any]:
    return {
        "fits": False,
        "distributed_strategy": None,
        "gpu": cluster.gpu.name,
        "gpu_count": cluster.world_size,
        "rejected": dict(result.rejected),
        "suggestions": list(result.suggestions),
        "plan": None,
    }


def _check_training(task_type: str) -> None:
    if task_type.strip().lower() != "training":
        raise UserInputError(
            f"task type '{task_type}' is not planned here; this tool plans training (task_type='training')"
        )


class HardwareSelector:
    """Plans training for a model: which strategy, batch split, precision, and which GPU."""

    def __init__(self, seq_len: int = 2048, headroom_fraction: float = 0.1) -> None:
        self.seq_len = seq_len
        self.headroom_fraction = headroom_fraction

    def training_arguments(self, plan: Plan, output_dir: str, **overrides: Any) -> TrainingArguments:
        """A transformers.TrainingArguments that runs `plan` (planner/emit/training_args.py)."""
        from planner.emit.training_args import training_arguments

        return training_arguments(plan, output_dir, **overrides)

    def _search(
        self, model_family: str, model_name: str, cluster: ClusterSpec, batch_size: int | None, **request: Any
    ) -> SearchResult:
        families = check_model_family(model_family)
        spec = resolve_model(catalog_name(model_name))
        if spec.family not in families:
            raise UserInputError(
                f"{spec.name} is {spec.family.value}, not a '{model_family}' model; check --model-family"
            )
        if batch_size is not None and batch_size < 1:
            raise UserInputError(f"batch_size (the global batch) must be at least 1, not {batch_size}")
        request.setdefault("seq_len", self.seq_len)
        request.setdefault("headroom_fraction", self.headroom_fraction)
        return search_plans(spec, cluster, PlanRequest(global_batch=batch_size, **request))

    def get_distributed_training_config(
        self,
        model_family: str,
        model_name: str,
        gpu_count: int,
        batch_size: int | None = None,
        max_memory_gb: float | None = None,
        *,
        gpu: str | None = None,
        gpus_per_node: int | None = None,
        seq_len: int | None = None,
        objective: str = "throughput",
        precision: str | None = None,
    ) -> dict[str, Any]:
        """The best plan for this model on gpu_count GPUs, as the legacy dict plus the typed plan ("plan")."""
        cluster = cluster_for(gpu_with_memory(max_memory_gb, gpu), gpu_count, gpus_per_node)
        result = self._search(
            model_family,
            model_name,
            cluster,
            batch_size,
            seq_len=seq_len or self.seq_len,
            objective=Objective(objective),
            precision=Precision(precision) if precision else None,
        )
        if result.best is None:
            return _no_fit_summary(result, cluster)
        summary = plan_summary(result.best)
        summary["alternatives"] = {
            family_label(plan.config): plan_summary(plan)["estimated_memory"]["per_gpu_gb"]
            for plan in result.candidates[1:]
        }
        summary["rejected"] = dict(result.rejected)
        return summary

    def select_hardware_for_task(
        self,
        model_family: str,
        model_name: str,
        task_type: str = "training",
        batch_size: int = 8,
        distributed: bool = True,
        gpu_count: int = 4,
        *,
        max_memory_gb: float | None = None,
        seq_len: int | None = None,
        rank_by: str = "cost",
        include_detected: bool = True,
        candidates: list[str] | None = None,
    ) -> dict[str, Any]:
        """Compare catalog GPUs (and this machine's) for the task; rank by cost per token or throughput."""
        _check_training(task_type)
        if rank_by not in ("cost", "throughput"):
            raise UserInputError(f"rank_by must be 'cost' or 'throughput', not '{rank_by}'")
        count = gpu_count if distributed else 1
        gpus = (
            [resolve_gpu(name) for name in candidates]
            if candidates
            else [g for g in load_gpu_catalog() if g.kind == "gpu"]
        )
        if max_memory_gb is not None:
            gpus = [g for g in gpus if g.memory_gib <= max_memory_gb * 1.05]
        detected = _detected_gpu_names() if include_detected else []
        gpus += [resolve_gpu(name) for name in detected if all(g.name != name for g in gpus)]
        estimates: dict[str, Any] = {}
        ranked = []
        for entry in gpus:
            cluster = cluster_for(entry, count)
            result = self._search(
                model_family, model_name, cluster, batch_size, seq_len=seq_len or self.seq_len, top_k=1
            )
            if result.best is None:
                estimates[entry.name] = _no_fit_summary(result, cluster)
                continue
            summary = plan_summary(result.best)
            speed = result.best.throughput
            summary["usd_per_million_tokens"] = (
                entry.price_usd_per_hour * count / 3600 / speed.tokens_per_s * 1e6 if speed else None
            )
            summary["detected_on_this_machine"] = entry.name in detected
            estimates[entry.name] = summary
            ranked.append(summary)
        if not ranked:
            raise UserInputError(f"no catalog GPU fits {model_name} at {count} GPUs; raise gpu_count")
        if rank_by == "cost":
            ranked.sort(
                key=lambda s: s["usd_per_million_tokens"] if s["usd_per_million_tokens"] is not None else float("inf")
            )
        else:
            ranked.sort(key=lambda s: -s.get("estimated_throughput", {}).get("tokens_per_s", 0.0))
        primary = ranked[0]
        return {
            "primary_recommendation": primary,
            "distributed_strategy": primary["distributed_strategy"],
            "gpu_count": count,
            "fallback_options": ranked[1:4],
            "estimates": estimates,
            "ranked_by": "USD per million tokens (catalog prices)" if rank_by == "cost" else "tokens/s",
            "detected_gpus": detected,
        }


def _detected_gpu_names() -> list[str]:
    from planner.hardware.detect import detect_hardware

    report = detect_hardware()
    return sorted({gpu.catalog_name for gpu in report.gpus if gpu.catalog_name})


def get_distributed_training_config(
    model_family: str,
    model_name: str,
    gpu_count: int,
    batch_size: int | None = None,
    max_memory_gb: float | None = None,
    **options: Any,
) -> dict[str, Any]:
    return HardwareSelector().get_distributed_training_config(
        model_family, model_name, gpu_count, batch_size, max_memory_gb, **options
    )


def select_hardware_for_task(model_family: str, model_name: str, **options: Any) -> dict[str, Any]:
    return HardwareSelector().select_hardware_for_task(model_family, model_name, **options)

"""Every DeepSpeed training key, and what our engine does with it (docs/engine.md, "DeepSpeed keys").

A ds_config.json written for DeepSpeed (ours included) must drive our engine
unchanged, or be refused by name (ZeRO++'s keys, which `plan --zeropp` writes for
DeepSpeed itself, are refused: the engine has no ZeRO++), so each key of
DeepSpeed's config reference has one of four fates:

- ACTS: a feature we implement; EngineConfig holds the key and the engine
  does what DeepSpeed does with it.
- ACCEPTED: a DeepSpeed implementation detail (bucket and partition flags,
  logging cadence, its own checkpoint format switches) that has no effect on
  what is trained. It is checked for type by nobody but DeepSpeed, and
  dropped here; the note says why it is safe to.
- TRANSLATED: a DeepSpeed block whose intent we carry out our own way:
  `activation_checkpointing` becomes hardware_selector.activation_checkpointing full.
- REFUSED: a feature we lack. When it is switched on (`enabled`, a device, a
  non-default value), the key is one line naming it and the nearest thing we
  have; switched off, it is accepted like the rest.

`without_deepspeed_only_keys` applies the table before EngineConfig sees the
document, so a key that is in no table still fails EngineConfig's strict
validation: a typo is never silently dropped. tests/test_deepspeed_keys.py
checks the table against DeepSpeed's own config classes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from planner.errors import UserInputError


@dataclass(frozen=True)
class Rule:
    note: str
    refused_when: Callable[[Any], bool] | None = None  # None: always accepted (dropped)


def _on(value: Any) -> bool:
    """A block or flag that turns a feature on: `true`, or a block whose `enabled` is true."""
    if isinstance(value, dict):
        return bool(value.get("enabled", False))
    return bool(value)


def _device_on(value: Any) -> bool:
    return isinstance(value, dict) and value.get("device", "none") not in ("none", None)


def _not(default: Any) -> Callable[[Any], bool]:
    return lambda value: value != default


def accepted(note: str) -> Rule:
    return Rule(note)


def refused(note: str, when: Callable[[Any], bool] = _on) -> Rule:
    return Rule(note, when)


# Keys EngineConfig holds (planner/contract/engine_config.py): they act.
ACTS = {
    "": {
        "train_batch_size",
        "train_micro_batch_size_per_gpu",
        "gradient_accumulation_steps",
        "optimizer",
        "scheduler",
        "zero_optimization",
        "fp16",
        "bf16",
        "gradient_clipping",
        "communication_data_type",
        "steps_per_print",
        "hardware_selector",
    },
    "zero_optimization": {
        "stage",
        "offload_optimizer",
        "overlap_comm",
        "reduce_bucket_size",
        "allgather_bucket_size",
        "stage3_prefetch_bucket_size",
        "contiguous_gradients",
        "reduce_scatter",
    },
    "zero_optimization.offload_optimizer": {"device", "pin_memory"},
    "fp16": {
        "enabled",
        "loss_scale",
        "initial_scale_power",
        "loss_scale_window",
        "hysteresis",
        "consecutive_hysteresis",
        "min_loss_scale",
    },
    "bf16": {"enabled"},
}

_TIMING = "the engine times forward, backward, communication and the step of every step in metrics.jsonl"
_ZERO_DETAIL = "how DeepSpeed's ZeRO moves partitions; ours partitions the same states its own way"
_OFFLOAD = "offload_optimizer {device: cpu} (optimizer states in host memory) is what we offload"
_MONITOR = "the runner writes metrics.jsonl and TensorBoard events (RUN_DIR/tensorboard)"

RULES: dict[str, dict[str, Rule]] = {
    "": {
        "wall_clock_breakdown": accepted(_TIMING),
        "memory_breakdown": accepted("peak memory per step is in metrics.jsonl"),
        "dump_state": accepted("a DeepSpeed debugging print"),
        "prescale_gradients": accepted("where the 1/world division happens; the mean gradient is the same"),
        "gradient_predivide_factor": accepted("a DeepSpeed fp16 overflow guard; the mean gradient is the same"),
        "gradient_allreduce_op": refused("gradients are averaged over data-parallel ranks", _not("mean")),
        "zero_allow_untested_optimizer": accepted("our ZeRO runs every optimizer it accepts"),
        "zero_force_ds_cpu_optimizer": accepted("offloaded states are stepped by torch's optimizer on the CPU"),
        "disable_allgather": accepted(_ZERO_DETAIL),
        "dataloader_drop_last": accepted("the runner's batches are always whole"),
        "disable_python_gc": accepted("a DeepSpeed host-overhead tweak"),
        "log_level": accepted("DeepSpeed's logger level"),
        "managed_gradient_accumulation": accepted("accumulation boundaries are the engine's (engine.step)"),
        "use_data_before_expert_parallelism": accepted("tokens are exchanged as routed; nothing to order"),
        "seq_parallel_communication_data_type": accepted("sequence parallel reductions run in the compute dtype"),
        "vocabulary_size": accepted("the model's config gives the vocabulary"),
        "legacy_fusion": accepted("a DeepSpeed fused-optimizer switch"),
        "sparse_gradients": accepted("embedding gradients are reduced dense; the mean is the same"),
        # activation_checkpointing is translated before these rules (translate_activation_checkpointing).
        "pipeline": refused(
            "DeepSpeed's PipelineModule settings; our engine pipelines with hardware_selector.layout.pp and "
            "hardware_selector.pipeline_schedule",
            lambda value: _on(value) or (isinstance(value, dict) and any(key != "enabled" for key in value)),
        ),
        "checkpoint": accepted("DeepSpeed's checkpoint format switches; our checkpoints reshard on load"),
        "aio": accepted("NVMe I/O tuning, used only by NVMe offload"),
        "data_types": refused(
            "gradients accumulate in fp32",
            lambda v: isinstance(v, dict) and v.get("grad_accum_dtype") not in (None, "fp32"),
        ),
        "amp": refused("NVIDIA apex AMP: use the bf16 or fp16 block"),
        "torch_autocast": refused("use the bf16 or fp16 block (the engine autocasts with it)"),
        "tensorboard": refused(_MONITOR),
        "wandb": refused(_MONITOR),
        "csv_monitor": refused(_MONITOR),
        "comet": refused(_MONITOR),
        "comms_logger": refused("communication time per step is in metrics.jsonl (phase comm)"),
        "flops_profiler": refused("the run summary gives measured MFU; `profiling` gives a torch profiler trace"),
        "autotuning": refused("`hardware-selector plan` searches the layout, batch and ZeRO stage"),
        "elasticity": refused("`hardware-selector train --nproc N` resumes on N processes, same global batch"),
        "compression_training": refused(
            "no quantization-aware training; hardware_selector.compression compresses gradient traffic"
        ),
        "data_efficiency": refused("the runner streams the data in order; no curriculum or sampling"),
        "curriculum_learning": refused("the runner streams the data in order; no curriculum"),
        "sparse_attention": refused("attention is the model's own (hardware_selector.attention in plans)"),
        "hybrid_engine": refused("no RLHF generation engine; plan serving with `plan --mode inference`"),
        "nebula": refused("checkpoints are written by the engine (async with checkpoint.async_save)"),
        "expert_parallel": refused("expert parallelism is hardware_selector.layout.ep (backends/expert_parallel)"),
        "tensor_parallel": refused(
            "tensor parallelism is hardware_selector.layout.tp",
            lambda v: isinstance(v, dict) and int(v.get("autotp_size", 0) or 0) > 1,
        ),
        "sequence_parallel_size": refused("sequence parallelism is hardware_selector.sequence_parallel", _not(1)),
        "eigenvalue": refused("no eigenvalue-based MoQ schedule"),
        "progressive_layer_drop": refused("no progressive layer drop"),
        "quantize_training": refused("no quantization-aware training"),
    },
    "zero_optimization": {
        "allgather_partitions": accepted(_ZERO_DETAIL),
        "use_multi_rank_bucket_allreduce": accepted(_ZERO_DETAIL),
        "load_from_fp32_weights": accepted("our checkpoints always hold the fp32 master weights"),
        "elastic_checkpoint": accepted("our checkpoints reshard to any world size"),
        "sub_group_size": accepted(_ZERO_DETAIL),
        "compute_grad_norm": accepted("the gradient norm is computed when clipping or anomaly rules need it"),
        "stage3_param_persistence_threshold": accepted(_ZERO_DETAIL),
        "stage3_model_persistence_threshold": accepted(_ZERO_DETAIL),
        "stage3_max_live_parameters": accepted(_ZERO_DETAIL),
        "stage3_max_reuse_distance": accepted(_ZERO_DETAIL),
        "stage3_module_granularity_threshold": accepted(_ZERO_DETAIL),
        "stage3_use_all_reduce_for_fetch_params": accepted(_ZERO_DETAIL),
        "stage3_allgather_sequential": accepted(_ZERO_DETAIL),
        "stage3_gather_16bit_weights_on_model_save": accepted("the engine always exports a consolidated model"),
        "stage3_gather_fp16_weights_on_model_save": accepted("the engine always exports a consolidated model"),
        "ignore_unused_parameters": accepted("unused parameters get zero gradients"),
        "legacy_stage1": accepted(_ZERO_DETAIL),
        "round_robin_gradients": accepted(_ZERO_DETAIL),
        "parameter_alignment": accepted(_ZERO_DETAIL),
        "memory_efficient_linear": accepted(_ZERO_DETAIL),
        "pipeline_loading_checkpoint": accepted(_ZERO_DETAIL),
        "override_module_apply": accepted(_ZERO_DETAIL),
        "log_trace_cache_warnings": accepted("a DeepSpeed log switch"),
        "enable_sanity_checks": accepted("a DeepSpeed debugging switch"),
        "leaf_module": accepted(_ZERO_DETAIL),
        "save_muon_momentum_buffer_in_memory": accepted("no Muon optimizer here"),
        "cpu_offload_use_pin_memory": accepted("use offload_optimizer.pin_memory"),
        "offload_param": refused(
            "parameters stay on the device; " + _OFFLOAD + " (or plan FSDP with offload_params)", _device_on
        ),
        "cpu_offload": refused("write it as offload_optimizer {device: cpu}"),
        "cpu_offload_param": refused("parameters stay on the device; " + _OFFLOAD),
        "zero_hpz_partition_size": refused("no hierarchical partitioning; plan FSDP hybrid sharding", _not(1)),
        "zero_quantized_weights": refused("no ZeRO++ weight quantization; hardware_selector.compression"),
        "zero_quantized_nontrainable_weights": refused("no ZeRO++ weight quantization"),
        "zero_quantized_gradients": refused("gradient traffic is compressed with hardware_selector.compression"),
        "zenflow": refused("no ZenFlow; " + _OFFLOAD),
    },
    "zero_optimization.offload_optimizer": {
        "nvme_path": accepted("used only with device nvme, which is refused"),
        "buffer_count": accepted("NVMe buffer tuning"),
        "pipeline_read": accepted("NVMe pipelining"),
        "pipeline_write": accepted("NVMe pipelining"),
        "fast_init": accepted("NVMe initialisation tuning"),
        "ratio": refused("the whole optimizer state is offloaded", _not(1.0)),
        "super_offload": refused("no SuperOffload; " + _OFFLOAD),
        "cpuadam_cores_perc": accepted("the CPU step uses torch's threads"),
    },
    "fp16": {
        "auto_cast": refused("inputs are cast by the engine's autocast; leave auto_cast false"),
        "fp16_master_weights_and_grads": refused("master weights and gradients are kept in fp32"),
    },
    "bf16": {
        "immediate_grad_update": accepted("gradients are reduced at the accumulation boundary"),
        "check_grad_overflow": accepted("bf16 runs have no loss scale; anomaly rules watch for non-finite"),
        "check_overflow": accepted("bf16 runs have no loss scale; anomaly rules watch for non-finite"),
        "bf16_master_weights_and_grads": refused("master weights and gradients are kept in fp32"),
        "bf16_optimizer_states": refused("optimizer states are kept in fp32"),
    },
}
RULES["bfloat16"] = RULES["bf16"]


# DeepSpeed's config classes take a field's name as well as its documented alias.
SPELLINGS = {
    "": {"bfloat16": "bf16"},
    "zero_optimization": {
        name: f"stage3_{name}"
        for name in (
            "prefetch_bucket_size",
            "param_persistence_threshold",
            "model_persistence_threshold",
            "max_live_parameters",
            "max_reuse_distance",
            "gather_16bit_weights_on_model_save",
            "module_granularity_threshold",
            "use_all_reduce_for_fetch_params",
            "allgather_sequential",
        )
    },
}


def without_deepspeed_only_keys(document: dict, origin: str, fates: list[tuple[str, str]] | None = None) -> dict:
    """`document` with accepted DeepSpeed-only keys dropped; a refused key that is on is one UserInputError.
    `fates` collects what became of each key that does not act as it is: translated or dropped."""
    fates = [] if fates is None else fates
    cleaned = _spelled(dict(document), "")
    translate_activation_checkpointing(cleaned, origin, fates)
    _apply(cleaned, "", origin, fates)
    for block in ("zero_optimization", "fp16", "bf16"):
        if isinstance(cleaned.get(block), dict):
            cleaned[block] = _spelled(dict(cleaned[block]), block)
            _apply(cleaned[block], block, origin, fates)
    zero = cleaned.get("zero_optimization")
    if isinstance(zero, dict) and isinstance(zero.get("offload_optimizer"), dict):
        zero["offload_optimizer"] = dict(zero["offload_optimizer"])
        _apply(zero["offload_optimizer"], "zero_optimization.offload_optimizer", origin, fates)
    return cleaned


def translate_activation_checkpointing(document: dict, origin: str, fates: list[tuple[str, str]]) -> None:
    """DeepSpeed's activation_checkpointing block means "recompute the blocks": it becomes
    hardware_selector.activation_checkpointing full (unless that is set), never a silent no-op. Offloading the
    kept activations to the CPU is a feature we lack: one line."""
    block = document.pop("activation_checkpointing", None)
    if block is None:
        return
    if isinstance(block, dict) and block.get("cpu_checkpointing"):
        raise UserInputError(
            f"{origin}: activation_checkpointing.cpu_checkpointing = true is a DeepSpeed feature our engine lacks "
            "(it recomputes blocks and keeps nothing on the CPU); drop it, or run the plan with --strategy deepspeed"
        )
    ours = dict(document.get("hardware_selector") or {})
    if "activation_checkpointing" in ours:
        fates.append(("activation_checkpointing", f"left to hardware_selector's {ours['activation_checkpointing']}"))
        return
    document["hardware_selector"] = {**ours, "activation_checkpointing": "full"}
    fates.append(("activation_checkpointing", "became hardware_selector.activation_checkpointing full"))


def _spelled(block: dict, path: str) -> dict:
    for name, alias in SPELLINGS.get(path, {}).items():
        if name in block and alias not in block:
            block[alias] = block.pop(name)
    return block


def _apply(block: dict, path: str, origin: str, fates: list[tuple[str, str]]) -> None:
    rules = RULES.get(path, {})
    for key in list(block):
        rule = rules.get(key)
        if rule is None:
            continue  # ours (ACTS), or unknown: EngineConfig validates it
        name = f"{path}.{key}" if path else key
        if rule.refused_when is not None and rule.refused_when(block[key]):
            raise UserInputError(
                f"{origin}: {name} = {block[key]!r} is a DeepSpeed feature our engine lacks; {rule.note} "
                f"(or run the plan with --strategy deepspeed)"
            )
        fates.append((name, "dropped"))
        del block[key]


TRANSLATED = {"activation_checkpointing"}  # top-level keys rewritten into ours (translate_activation_checkpointing)


def disposition(path: str) -> str | None:
    """'acts', 'translated', 'accepted', 'refused-when-on' or None for a dotted DeepSpeed key
    ('zero_optimization.stage')."""
    parent, _, key = path.rpartition(".")
    key = SPELLINGS.get(parent, {}).get(key, key)
    if key in ACTS.get(parent, set()):
        return "acts"
    if not parent and key in TRANSLATED:
        return "translated"
    rule = RULES.get(parent, {}).get(key)
    if rule is None:
        return None
    return "accepted" if rule.refused_when is None else "refused-when-on"

"""Options describing the cluster and the training configuration (see option_groups.py)."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import typer

from planner.contract.choices import (
    ActivationCheckpointing,
    AttentionKernel,
    FsdpSharding,
    KernelChoice,
    Offload,
    OptimizerKind,
    PipelineSchedule,
    Precision,
    Strategy,
    strategy_named,
)
from planner.errors import UserInputError
from planner.limits import MAX_BATCH, MAX_LAYERS, MAX_SEQ_LEN, check_count, check_number

if TYPE_CHECKING:  # pydantic models, imported when the options are read: `--help` builds none of them
    from planner.expert_routing import ExpertRouting
    from planner.models.spec import ModelSpec
    from planner.training_config import TrainingConfig

EXPERT_CAPACITY_HELP = (
    "MoE on our engine: assignments a rank may send each expert, as a multiple of an even share; "
    "later ones are dropped (0 = drop none)."
)
EXPERT_IMBALANCE_HELP = (
    "MoE: the busiest expert-parallel rank's routed tokens over the mean, from your router's statistics "
    "(1 = an even router)."
)
ZEROPP_HELP = (
    "DeepSpeed's ZeRO++ on ZeRO-3: int8 forward gathers, backward gathers inside the node, int4 gradients "
    "(docs/search.md, ZeRO++)."
)


COMPRESSION_HELP = (
    "none|int8|onebit|auto: our engine's data-parallel gradient reductions compressed with error feedback (int8: "
    "1 byte per element and a scale per 128; onebit: 1 bit, with a warning of its measured loss gap); auto tries "
    "int8 on the engine's candidates and keeps it where it is faster (docs/search.md, Gradient compression)."
)


# What --strategy accepts (planner/contract/choices.py spells every strategy name): a DeepSpeed run names its stage.
STRATEGY_CHOICES = ("ddp", "fsdp", "zero0", "zero1", "zero2", "zero3", "engine")


def _choice(value: str, enum_type, flag: str):
    try:
        return enum_type(value.lower())
    except ValueError:
        allowed = "|".join(member.value for member in enum_type)
        raise UserInputError(f"{flag} must be one of {allowed}, not '{value}'") from None


def strategy_from_name(name: str) -> tuple[Strategy, int | None]:
    """The strategy and its ZeRO stage (0 for DDP and FSDP; None for the engine: --zero-stage says)."""
    try:
        fields = strategy_named(name, STRATEGY_CHOICES)
    except ValueError:
        raise UserInputError(f"--strategy must be one of {'|'.join(STRATEGY_CHOICES)}, not '{name}'") from None
    strategy = fields["strategy"]
    assert isinstance(strategy, Strategy)
    stage = fields.get("zero_stage", None if strategy is Strategy.ENGINE else 0)
    return strategy, stage if stage is None else int(str(stage))


@dataclass
class ClusterOptions:
    gpu: str | None
    gpus_per_node: int
    nodes: int
    interconnect: str | None
    cpu_ram_gb: float | None
    price_per_hour: float | None
    nvme_gb: float | None = None
    nvme_gbps: float | None = None
    given: tuple[str, ...] = ()  # the flags above the user gave, whatever their values (given_flags.py)

    def target(self):
        """The named cluster, or without --gpu the GPUs of this machine (NVML), if any, with the --gpus-per-node,
        --nodes and --cpu-ram-gb the user gave (whatever their values: `given`) in place of what was detected
        (docs/hardware.md, "Detection"); `plan` and `estimate` alike."""
        if self.gpu:
            return self.resolve()
        from planner.hardware.detect import detect_hardware

        detected = detect_hardware().to_cluster_spec(
            interconnect=self.interconnect,
            price_per_hour=self.price_per_hour,
            nvme_gb=self.nvme_gb,
            nvme_gbps=self.nvme_gbps,
            gpus_per_node=self.gpus_per_node if "--gpus-per-node" in self.given else None,
            nodes=self.nodes if "--nodes" in self.given else None,
            cpu_ram_gb=self.cpu_ram_gb,
        )
        if detected is None:
            raise UserInputError("no GPU detected here; name the target GPU with --gpu (e.g. --gpu H100-80GB)")
        return detected

    def resolve(self):
        from planner.hardware.cluster import make_cluster

        if not self.gpu:
            raise UserInputError(
                "name the target GPU with --gpu (e.g. --gpu A100-80GB); 'hardware-selector gpus' lists them"
            )
        return make_cluster(
            self.gpu,
            gpus_per_node=self.gpus_per_node,
            nodes=self.nodes,
            interconnect=self.interconnect,
            cpu_ram_gb=self.cpu_ram_gb,
            nvme_gb=self.nvme_gb,
            nvme_gbps=self.nvme_gbps,
            price_per_hour=self.price_per_hour,
        )


def cluster_options(
    gpu: str | None = typer.Option(
        None, "--gpu", "-g", help="Target GPU, e.g. A100-80GB, H100-80GB (see 'gpus'); none: the GPUs detected here."
    ),
    gpus_per_node: int = typer.Option(8, "--gpus-per-node", help="GPUs in each node."),
    nodes: int = typer.Option(1, "--nodes", help="Number of nodes."),
    interconnect: str | None = typer.Option(
        None, "--interconnect", help="Inter-node network preset, e.g. ib-ndr, roce-1600g."
    ),
    cpu_ram_gb: float | None = typer.Option(None, "--cpu-ram-gb", help="CPU RAM per node (for offload)."),
    price_per_hour: float | None = typer.Option(None, "--price", help="USD per GPU-hour, overriding the catalog."),
    nvme_gb: float | None = typer.Option(
        None, "--nvme-gb", help="NVMe per node (GiB) for ZeRO-Infinity offload; without it none is assumed."
    ),
    nvme_gbps: float | None = typer.Option(
        None,
        "--nvme-gbps",
        help="NVMe read/write GB/s per node (with --nvme-gb), for ZeRO-Infinity's offload time; "
        "default 6, an assumption (docs/search.md).",
    ),
) -> ClusterOptions:
    return ClusterOptions(gpu, gpus_per_node, nodes, interconnect, cpu_ram_gb, price_per_hour, nvme_gb, nvme_gbps)


def training_options(
    strategy: str = typer.Option("ddp", "--strategy", help="ddp|fsdp|zero0|zero1|zero2|zero3|engine"),
    zero_stage: int | None = typer.Option(
        None, "--zero-stage", help="ZeRO stage on the data-parallel group, for --strategy engine (default 1)."
    ),
    fsdp_sharding: str | None = typer.Option(
        None, "--fsdp-sharding", help="full|grad-op|hybrid|none (or no-shard), for --strategy fsdp (default full)."
    ),
    offload_optimizer: str = typer.Option("none", "--offload-optimizer", help="none|cpu|nvme"),
    offload_params: str = typer.Option("none", "--offload-params", help="none|cpu|nvme"),
    tp: int = typer.Option(1, "--tp", help="Tensor-parallel degree (engine)."),
    pp: int = typer.Option(1, "--pp", help="Pipeline-parallel degree (engine)."),
    sp: bool = typer.Option(False, "--sp", help="Sequence parallelism inside the TP group."),
    pp_schedule: str | None = typer.Option(
        None, "--pp-schedule", help="gpipe|1f1b|interleaved-1f1b, with --pp 2 or more (default 1f1b)."
    ),
    virtual_stages: int = typer.Option(1, "--virtual-stages", help="Model chunks per pipeline rank (interleaved)."),
    ep: int = typer.Option(1, "--ep", help="Expert-parallel degree (MoE)."),
    cp: int = typer.Option(1, "--cp", help="Context-parallel degree (engine): each sequence split over cp ranks."),
    pp_layers: str | None = typer.Option(
        None,
        "--pp-layers",
        help="Layers per pipeline chunk, e.g. 7,8,8,7 or 7,8x14,7 (default: even, or the end stages one "
        "lighter when --pp does not divide the layers); the first and last may be 0 (the embedding or the head "
        "alone).",
    ),
    micro_batch: int = typer.Option(1, "--micro-batch", help="Sequences per GPU per micro-step."),
    seq_len: int = typer.Option(
        2048, "--seq-len", help="Tokens per sequence (default: the smaller of 2048 and the model's context)."
    ),
    grad_accum: int = typer.Option(1, "--grad-accum", help="Micro-batches per optimizer step."),
    precision: str | None = typer.Option(
        None,
        "--precision",
        help="fp32|fp16-mixed|bf16-mixed|bf16 (default: the best the GPU has; fp16-mixed with --zeropp).",
    ),
    optimizer: str = typer.Option("adamw", "--optimizer", help="adamw|adamw-8bit|adafactor|sgd|lion"),
    ac: str = typer.Option("none", "--ac", help="Activation checkpointing: none|selective|op|full"),
    attention: str = typer.Option("sdpa", "--attention", help="sdpa (flash/memory-efficient) or eager"),
    lora_rank: int = typer.Option(
        0,
        "--lora-rank",
        help="Train LoRA adapters of this rank (0 = full fine-tuning); planned only: plan --emit refuses it.",
    ),
    qlora: bool = typer.Option(False, "--qlora", help="LoRA on a 4-bit NF4 base."),
    fp8: bool = typer.Option(False, "--fp8", help="FP8 block matmuls (planned only; needs an FP8 GPU)."),
    kernels: str = typer.Option("eager", "--kernels", help="eager|compile|liger: the blocks' element-wise kernels."),
    expert_capacity: float = typer.Option(0.0, "--expert-capacity", help=EXPERT_CAPACITY_HELP),
    expert_imbalance: float = typer.Option(1.0, "--expert-imbalance", help=EXPERT_IMBALANCE_HELP),
    zeropp: bool = typer.Option(False, "--zeropp", help=ZEROPP_HELP),
) -> TrainingConfig:
    chosen, stage = strategy_from_name(strategy)
    for flag, value in (
        ("--tp", tp),
        ("--pp", pp),
        ("--ep", ep),
        ("--cp", cp),
        ("--micro-batch", micro_batch),
        ("--seq-len", seq_len),
        ("--grad-accum", grad_accum),
    ):
        check_count(flag, value, high=MAX_SEQ_LEN if flag == "--seq-len" else MAX_BATCH)
    if zero_stage is not None and not 0 <= zero_stage <= 3:
        raise UserInputError(f"--zero-stage must be 0-3, not {zero_stage}")
    if zero_stage is not None and stage is not None and zero_stage != stage:  # a flag never silently loses
        named = f"stage {stage}" if chosen is Strategy.DEEPSPEED else "no ZeRO stage"
        raise UserInputError(
            f"--zero-stage {zero_stage} conflicts with --strategy {strategy} ({named}); --zero-stage is for "
            "--strategy engine, and zero0-zero3 name DeepSpeed's stage"
        )
    if fsdp_sharding is not None and chosen is not Strategy.FSDP:
        raise UserInputError(
            f"--fsdp-sharding {fsdp_sharding} shards FSDP, not --strategy {strategy}; use --strategy fsdp, or drop "
            "--fsdp-sharding"
        )
    pipeline_only = [(flag, value) for flag, value in (("--pp-schedule", pp_schedule), ("--pp-layers", pp_layers),
                     ("--virtual-stages", virtual_stages if virtual_stages != 1 else None)) if value is not None]  # fmt: skip
    if pipeline_only and pp == 1:  # said in these flags, not the layout's field names (virtual_stages, pp)
        flag, value = pipeline_only[0]
        raise UserInputError(
            f"{flag} {value} shapes pipeline stages; it needs --pp 2 or more (--strategy engine), or drop it"
        )
    from pydantic import ValidationError

    from planner.contract.layout import ParallelDims
    from planner.contract.schema import describe_validation_error
    from planner.training_config import TrainingConfig

    stage_layers = _stage_layers(pp_layers)
    try:
        layout = ParallelDims(tp=tp, pp=pp, cp=cp, virtual_stages=virtual_stages, ep=ep, stage_layers=stage_layers)
    except ValidationError as error:
        raise UserInputError(f"layout: {describe_validation_error(error, 'docs/parallelism.md')}") from None
    return TrainingConfig(
        strategy=chosen,
        zero_stage=(1 if zero_stage is None else zero_stage) if stage is None else stage,
        fsdp_sharding=_choice(fsdp_sharding or "full", FsdpSharding, "--fsdp-sharding"),
        offload_optimizer=_choice(offload_optimizer, Offload, "--offload-optimizer"),
        offload_params=_choice(offload_params, Offload, "--offload-params"),
        layout=layout,
        sequence_parallel=sp,
        pipeline_schedule=_choice(pp_schedule or "1f1b", PipelineSchedule, "--pp-schedule"),
        micro_batch=micro_batch,
        seq_len=seq_len,
        grad_accum=grad_accum,
        precision=_choice(precision or ("fp16-mixed" if zeropp else "bf16-mixed"), Precision, "--precision"),
        optimizer=_choice(optimizer, OptimizerKind, "--optimizer"),
        activation_checkpointing=_choice(ac, ActivationCheckpointing, "--ac"),
        attention=_choice(attention, AttentionKernel, "--attention"),
        lora_rank=lora_rank,
        qlora=qlora,
        fp8=fp8,
        kernels=_choice(kernels, KernelChoice, "--kernels"),
        routing=routing_options(expert_capacity, expert_imbalance),
        zeropp=zeropp,
    )


@functools.wraps(training_options)  # the same options (option_group reads the signature); built later
def training_options_for_model(**options: Any) -> Callable[[ModelSpec], TrainingConfig]:
    """training_options, built once the command has resolved its model: TrainingConfig refuses --ep outside our
    engine before it knows the model, and its "add --strategy engine" led a dense model only to "has no
    experts"; that is said first, with its own fix (drop --ep)."""

    def build(spec: ModelSpec) -> TrainingConfig:
        if options["ep"] > 1 and not spec.is_moe:
            raise UserInputError(f"--ep {options['ep']}: {spec.name} has no experts; drop --ep")
        return training_options(**options)

    return build


def routing_options(
    expert_capacity: float = typer.Option(0.0, "--expert-capacity", help=EXPERT_CAPACITY_HELP),
    expert_imbalance: float = typer.Option(1.0, "--expert-imbalance", help=EXPERT_IMBALANCE_HELP),
) -> ExpertRouting:
    """The router's side of an MoE plan (planner/expert_routing.py)."""
    from planner.expert_routing import ExpertRouting

    return ExpertRouting(
        capacity_factor=check_number("--expert-capacity", expert_capacity, high=64.0),
        load_imbalance=check_number("--expert-imbalance", expert_imbalance, low=1.0, high=64.0),
    )


def _stage_layers(text: str | None) -> tuple[int, ...] | None:
    """--pp-layers 7,8,8,7 or 7,8x14,7 (NxM: M chunks of N layers), one entry per pipeline chunk; the first
    and last may be 0 (the embedding or the head alone: 0,1x126,0), which the layout checks."""
    if text is None:
        return None
    counts: list[int] = []
    for part in text.replace(" ", "").lower().split(","):
        match = re.fullmatch(r"([0-9]{1,9})(?:x([0-9]{1,9}))?", part)
        if match is None:
            raise UserInputError(
                f"--pp-layers lists layers per pipeline chunk as whole numbers, e.g. 7,8,8,7 or 7,8x14,7, not {text!r}"
            )
        layers = check_count("--pp-layers", int(match[1]), high=MAX_LAYERS, low=0)
        counts += [layers] * check_count("--pp-layers repeat", int(match[2] or 1), high=MAX_LAYERS)
        if len(counts) > MAX_LAYERS:
            raise UserInputError(f"--pp-layers lists more than {MAX_LAYERS:,} pipeline chunks")
    return tuple(counts)

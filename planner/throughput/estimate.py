"""Throughput of one training configuration: step time, tokens/s, MFU/HFU, cost.

step = micro-batches x (forward + backward + recompute on the busiest stage)
       + exposed communication + pipeline bubble + offload + optimizer step.

Compute comes from the shape-aware kernel model (compute.py), communication
from α–β collectives on the links each group crosses (communication.py), the
bubble from (p-1)/(m·v) (Narayanan et al. 2021). Pure Python and cached per
spec and cluster (derived.py): the search calls this thousands of times, so an
estimate is split in two: throughput_plan derives what a layout's candidates
share once, candidate_step does one candidate's arithmetic, and estimate_of
types it as a ThroughputEstimate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from planner.config_key import config_key_without_batch
from planner.errors import UserInputError
from planner.hardware.cluster import ClusterSpec
from planner.models.flops import ModelShape, SequenceFlops, sequence_flops
from planner.models.spec import ModelSpec
from planner.throughput.collectives import Links
from planner.throughput.communication import (
    CommunicationPlan,
    StepComm,
    communication_plan,
    micro_batch_communication,
)
from planner.throughput.compute import StageCompute, stage_compute
from planner.throughput.constants import CONSTANTS, ThroughputConstants
from planner.throughput.derived import (
    attention_scaled_device,
    build_hardware,
    hardware_of,
    shape_of,
    stage_key,
    stages_of,
)
from planner.throughput.implementation import OUR_STRATEGIES, Implementation
from planner.throughput.kernel_stack import KernelStack
from planner.throughput.kernels import Device
from planner.throughput.library_efficiency import library_efficiency_source
from planner.throughput.measured_shortfall import MeasuredShortfall
from planner.throughput.result import StepTimeBreakdown, ThroughputEstimate
from planner.throughput.step_sources import (
    bottleneck_notes,
    compression_source,
    fixed_sources,
    offload_source,
    shortfall_sources,
    zeropp_source,
)
from planner.training_config import (
    ActivationCheckpointing,
    KernelChoice,
    TrainingConfig,
)


def check_fp8_gpu(config: TrainingConfig, cluster: ClusterSpec) -> None:
    """FP8 matmuls need a GPU that has them: one line, before any estimate."""
    if config.fp8 and not cluster.gpu.dense_tflops.fp8:
        raise UserInputError(
            f"{cluster.gpu.name} has no FP8 matmuls (no fp8 peak in the GPU catalog); drop --fp8, or plan a GPU "
            "that has them (H100, H200, B200, MI300X: the fp8 column of `hardware-selector gpus`)"
        )


def _construct(model: type, values: dict):
    """A validated-by-construction pydantic instance without re-validation: the search
    builds thousands of these, and model_construct alone costs more than the model."""
    instance: Any = object.__new__(model)
    object.__setattr__(instance, "__dict__", values)
    object.__setattr__(instance, "__pydantic_fields_set__", set(values))
    object.__setattr__(instance, "__pydantic_extra__", None)
    object.__setattr__(instance, "__pydantic_private__", None)
    return instance


@dataclass(frozen=True, slots=True)
class ThroughputPlan:
    """What an estimate needs that the micro-batch, the accumulation and the activation checkpointing do not
    change: one layout at one precision on one cluster, under one implementation and set of constants.

    The search estimates several micro-batches and checkpointing levels of each layout; everything here is
    derived once per layout (hardware, links, the data-parallel collectives, the sources), and
    candidate_step does the arithmetic of one candidate."""

    shape: ModelShape
    constants: ThroughputConstants
    stack: KernelStack
    fused_attention: bool
    device: Device
    communication: CommunicationPlan
    # (micro-batch, activation checkpointing) -> stage compute and a sequence's FLOPs; shared with other plans
    # of the same stage key under the committed constants, this plan's own otherwise.
    stages: dict[tuple[int, ActivationCheckpointing], tuple[StageCompute, SequenceFlops]]
    world: int
    dp: int
    seq_len: int
    pipelined: bool
    bubble_per_stage: float  # pipeline bubble in units of one micro-batch's stage compute
    price_usd_per_gpu_hour: float | None
    sources: dict[str, str]
    # The implementation's measured shortfall (measured_shortfall.py) and the model's layers it is counted over.
    shortfall: MeasuredShortfall | None = None
    num_layers: int = 0


# (spec, config without its batch, the hardware's values, implementation) -> (spec, plan), under CONSTANTS.
_plans: dict[tuple, tuple[ModelSpec, ThroughputPlan]] = {}


def throughput_plan(
    spec: ModelSpec,
    config: TrainingConfig,
    cluster: ClusterSpec,
    *,
    constants: ThroughputConstants = CONSTANTS,
    implementation: Implementation = OUR_STRATEGIES,
) -> ThroughputPlan:
    """The plan of `config`'s layout; its micro-batch, accumulation and activation checkpointing are not read
    (candidate_step takes them from the candidate). Memoised by value under the committed constants, as the
    stages and the memory peaks are: searches of the same model on the same hardware share their plans."""
    check_fp8_gpu(config, cluster)
    if constants is not CONSTANTS:  # calibration: other constants, nothing cached
        device, links, pcie_Bps = build_hardware(cluster, config, constants)
        return _build_plan(spec, config, cluster, device, links, pcie_Bps, constants, implementation)
    device, links, pcie_Bps = hardware_of(cluster, config)
    # Everything the plan reads of the cluster: the device (interned: its identity is its value), the links,
    # the GPU count, the NVMe bandwidth and its source, the price.
    hardware = (
        id(device),
        links,
        pcie_Bps,
        cluster.gpus_per_node * cluster.num_nodes,
        cluster.nvme_bandwidth(),
        cluster.gpu.memory_is_host,
    )
    key = (id(spec), config_key_without_batch(config), *hardware, cluster.gpu.price_usd_per_hour, implementation)
    entry = _plans.get(key)
    if entry is not None and entry[0] is spec:
        return entry[1]
    if len(_plans) >= 4096:
        _plans.clear()
    plan = _build_plan(spec, config, cluster, device, links, pcie_Bps, constants, implementation)
    _plans[key] = (spec, plan)  # the plan holds the device, so its id is not reused while the entry lives
    return plan


def _build_plan(
    spec: ModelSpec,
    config: TrainingConfig,
    cluster: ClusterSpec,
    device: Device,
    links: Links,
    pcie_Bps: float,
    k: ThroughputConstants,
    implementation: Implementation,
) -> ThroughputPlan:
    stack = implementation.kernels
    if config.kernels is not KernelChoice.EAGER:
        stack = KernelStack.FUSED  # torch.compile and Liger fuse the norms', rotary's and activations' chains
    shape, fused_attention = shape_of(spec)
    fused_attention = fused_attention or not implementation.transformers_attention  # their own fused kernels
    # The attention kernel the stack runs against the one its GPU's factor is read at; the source prints both.
    attention_speedup, attention_why = (
        implementation.attention_kernel(cluster.gpu, config) if fused_attention else (1.0, "")
    )
    if attention_speedup != 1.0:
        device = attention_scaled_device(device, attention_speedup)
    # The stages of other plans of the same stage key under the committed constants; this plan's own otherwise.
    stages = stages_of(stage_key(shape, config, device, fused_attention, stack)) if k is CONSTANTS else {}
    world = cluster.gpus_per_node * cluster.num_nodes
    communication = communication_plan(
        shape,
        config,
        links,
        world_size=world,
        pcie_Bps=pcie_Bps,
        memory_Bps=device.memory_Bps,
        k=k,
        nvme_Bps=cluster.nvme_bandwidth()[0] * 1e9,
        implementation=implementation,
        host_memory=cluster.gpu.memory_is_host,
    )
    pp, virtual = config.pipeline_parallel, config.virtual_stages
    # (p-1)/(m.v) of the pipelined compute; DualPipe feeds both ends: (p/2 - 1) stage-steps (implementation.py)
    steps = max(pp / 2 - 1, 0.0) if implementation.bidirectional_pipeline else pp - 1
    shortfall = implementation.measured_shortfall
    return ThroughputPlan(
        shape=shape,
        constants=k,
        stack=stack,
        fused_attention=fused_attention,
        device=device,
        communication=communication,
        stages=stages,
        world=world,
        dp=max(world // config.model_parallel_size, 1),
        seq_len=config.seq_len,
        pipelined=pp > 1,
        bubble_per_stage=steps / virtual,
        price_usd_per_gpu_hour=cluster.gpu.price_usd_per_hour,
        sources={
            **fixed_sources(stack, implementation, config.fp8, config.kernels),
            **offload_source(config, cluster),
            **compression_source(config, world),
            **zeropp_source(config),
            **library_efficiency_source(cluster.gpu, attention_speedup, attention_why),
            **(shortfall_sources(shortfall.source) if shortfall else {}),
            # The price this cluster is costed at, as its GPU says where it came from (a multi-node cluster's
            # whole-server offer, not the catalog's cheapest single GPU; a new user's audit).
            "price_usd_per_gpu_hour": cluster.gpu.price_note(),
        },
        shortfall=shortfall,
        num_layers=spec.num_layers,
    )


@dataclass(slots=True)
class CandidateStep:
    """One candidate's step time and what its ThroughputEstimate reports, as plain values: the search scores
    thousands of candidates by tokens_per_s and builds the (pydantic) estimates of the few it reports.
    Not frozen: a frozen dataclass sets each field through object.__setattr__, a call per field."""

    step_s: float
    compute_s: float
    recompute_s: float
    bubble_s: float
    comm: StepComm
    global_batch: int
    tokens_per_s: float
    flops: SequenceFlops  # of one sequence
    launch_bound: bool
    measured_shortfall_s: float = 0.0


def candidate_step(plan: ThroughputPlan, config: TrainingConfig, micro_batch: int, accum: int) -> CandidateStep:
    """The step of `config` at `micro_batch` and `accum`, a candidate of the plan's layout (the config the plan
    was made from, at any activation checkpointing). The config's own batch is not read: the search passes
    its AC level's config and builds a candidate's own only for the candidates it reports."""
    checkpointing = config.activation_checkpointing
    cached = plan.stages.get((micro_batch, checkpointing))
    if cached is None:
        if len(plan.stages) > 4096:
            plan.stages.clear()
        if (config.micro_batch, config.grad_accum) != (micro_batch, accum):
            config = config.model_copy(update={"micro_batch": micro_batch, "grad_accum": accum})
        shape, device, k = plan.shape, plan.device, plan.constants
        stage = stage_compute(shape, config, device, k, fused_attention=plan.fused_attention, stack=plan.stack)
        cached = plan.stages[micro_batch, checkpointing] = (stage, sequence_flops(shape, config))
    stage, flops = cached
    comm = micro_batch_communication(plan.communication, micro_batch, accum, checkpointing, stage)

    bubble = plan.bubble_per_stage * stage.total_s if plan.pipelined else 0.0
    compute = accum * (stage.forward_s + stage.backward_s)
    recompute = accum * stage.recompute_s
    step = compute + recompute + comm.exposed_s + bubble + comm.offload_s + comm.optimizer_step_s
    shortfall = 0.0
    if plan.shortfall is not None:  # the implementation's measured shortfall
        shortfall = plan.shortfall.seconds(step, accum, config.pipeline_parallel, plan.num_layers)
        step += shortfall

    global_batch = micro_batch * accum * plan.dp
    # By position, in CandidateStep's field order: keywords cost a name match each, for every candidate.
    return CandidateStep(
        step,  # step_s
        compute,  # compute_s
        recompute,  # recompute_s
        bubble,  # bubble_s
        comm,
        global_batch,
        global_batch * plan.seq_len / step,  # tokens_per_s
        flops,
        stage.launch_bound,
        shortfall,  # measured_shortfall_s
    )


def estimate_of(plan: ThroughputPlan, candidate: CandidateStep) -> ThroughputEstimate:
    """The typed estimate of a candidate_step of the plan."""
    comm, step, bubble = candidate.comm, candidate.step_s, candidate.bubble_s
    peak, global_batch, world = plan.device.peak_flops, candidate.global_batch, plan.world
    per_gpu_model = candidate.flops.model * global_batch / world / step
    per_gpu_hardware = candidate.flops.hardware * global_batch / world / step
    breakdown = _construct(
        StepTimeBreakdown,
        dict(
            compute_s=candidate.compute_s,
            recompute_s=candidate.recompute_s,
            data_parallel_comm_s=comm.data_parallel_s,
            tensor_parallel_comm_s=comm.tensor_parallel_s + comm.expert_parallel_s + comm.context_parallel_s,
            pipeline_p2p_s=comm.pipeline_p2p_s,
            exposed_comm_s=comm.exposed_s,
            pipeline_bubble_s=bubble,
            offload_s=comm.offload_s,
            optimizer_step_s=comm.optimizer_step_s,
            measured_shortfall_s=candidate.measured_shortfall_s,
        ),
    )
    return _construct(
        ThroughputEstimate,
        dict(
            step_time_s=step,
            tokens_per_s=candidate.tokens_per_s,
            samples_per_s=global_batch / step,
            tflops_per_gpu=per_gpu_model / 1e12,
            mfu=per_gpu_model / peak,
            hfu=per_gpu_hardware / peak,
            global_batch=global_batch,
            breakdown=breakdown,
            price_usd_per_gpu_hour=plan.price_usd_per_gpu_hour,
            sources=dict(plan.sources),  # each estimate owns its dict
            notes=bottleneck_notes(step, comm.exposed_s, bubble, comm.offload_s, candidate.launch_bound),
            world_size=world,
            formula_step_time_s=None,  # the formula's own: step_time_s is it (calibration sets it when it moves)
        ),
    )


def estimate_throughput(
    spec: ModelSpec,
    config: TrainingConfig,
    cluster: ClusterSpec,
    *,
    constants: ThroughputConstants = CONSTANTS,
    implementation: Implementation = OUR_STRATEGIES,
) -> ThroughputEstimate:
    """`implementation`: the codebase whose behaviour to assume (implementation.py);
    by default what this project's strategies run. Published runs of other
    codebases (Megatron-LM, llm-foundry, ...) pass their preset."""
    plan = throughput_plan(spec, config, cluster, constants=constants, implementation=implementation)
    return estimate_of(plan, candidate_step(plan, config, config.micro_batch, config.grad_accum))

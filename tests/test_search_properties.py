"""Monotonic properties the planner must keep, checked over many generated cases (hypothesis)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.evaluate import memory_on
from planner.hardware.cluster import make_cluster
from planner.models.resolve import resolve_model
from planner.search import PlanRequest, search_plans
from planner.search.layouts import enumerate_layouts
from planner.throughput.estimate import estimate_throughput
from planner.training_config import ActivationCheckpointing, Precision, TrainingConfig

MODELS = [
    "gpt2-xl",
    "opt-1.3b",
    "llama-2-7b",
    "mistral-7b",
    "qwen2.5-14b",
    "mixtral-8x7b",
    "t5-large",
    "bert-large-uncased",
]
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _model_states(memory) -> int:
    per_gpu = memory.per_gpu_bytes
    return per_gpu["parameters"] + per_gpu["gradients"] + per_gpu["optimizer_states"]


@SETTINGS
@given(
    model=st.sampled_from(MODELS),
    nodes=st.sampled_from([1, 2, 4, 16]),
    factor=st.sampled_from([2, 4]),
    offload=st.booleans(),
    micro=st.integers(1, 4),
)
def test_more_gpus_never_raise_zero3_model_states(model, nodes, factor, offload, micro):
    spec = resolve_model(model)
    fields = {"offload_optimizer": "cpu"} if offload else {}
    config = TrainingConfig(strategy="deepspeed", zero_stage=3, micro_batch=micro, seq_len=512, **fields)
    fewer = memory_on(spec, config, make_cluster("A100-80GB", 8, nodes))
    more = memory_on(spec, config, make_cluster("A100-80GB", 8, nodes * factor))
    assert _model_states(more) <= _model_states(fewer)


@SETTINGS
@given(
    model=st.sampled_from(MODELS),
    layout_index=st.integers(0, 200),
    ac=st.sampled_from(list(ActivationCheckpointing)),
    micro=st.integers(1, 8),
    accum=st.integers(1, 8),
    precision=st.sampled_from([Precision.BF16_MIXED, Precision.FP32, Precision.BF16]),
    attention=st.sampled_from(["sdpa", "eager"]),
)
def test_activation_checkpointing_never_raises_memory(model, layout_index, ac, micro, accum, precision, attention):
    """Full checkpointing never raises memory. Selective does not either where the attention keeps its scores
    (eager); over a fused kernel it has no scores to drop, and under autocast the recomputed core keeps q and k
    in fp32 (rotary's fp32 cos/sin, traced: llama3-1b-*-selective), which can outweigh what it frees."""
    spec = resolve_model(model)
    cluster = make_cluster("H100-80GB", 8, 2)
    layouts = enumerate_layouts(spec, cluster, PlanRequest())
    layout = layouts[layout_index % len(layouts)]
    totals = []
    for mode in (ActivationCheckpointing.NONE, ActivationCheckpointing.SELECTIVE, ActivationCheckpointing.FULL):
        config = TrainingConfig(
            **layout.fields,
            activation_checkpointing=mode,
            micro_batch=micro,
            grad_accum=accum * layout.pipeline_parallel,
            seq_len=512,
            precision=precision,
            attention=attention,
        )
        totals.append(memory_on(spec, config, cluster).total)
    assert totals[0] >= totals[2] and totals[1] >= totals[2]
    if attention == "eager":
        assert totals[0] >= totals[1]


@SETTINGS
@given(
    model=st.sampled_from(MODELS),
    layout_index=st.integers(0, 200),
    micro=st.integers(1, 8),
    accum=st.integers(1, 16),
    nodes=st.sampled_from([2, 4, 32]),
    slow=st.sampled_from(["ethernet-25g", "ethernet-100g", "efa"]),
    fast=st.sampled_from(["ib-hdr", "ib-ndr", "roce-3200g"]),
)
def test_faster_interconnect_never_slows_a_configuration(model, layout_index, micro, accum, nodes, slow, fast):
    spec = resolve_model(model)
    slow_cluster = make_cluster("A100-80GB", 8, nodes, interconnect=slow)
    fast_cluster = make_cluster("A100-80GB", 8, nodes, interconnect=fast)
    layouts = enumerate_layouts(spec, slow_cluster, PlanRequest())
    layout = layouts[layout_index % len(layouts)]
    config = TrainingConfig(
        **layout.fields, micro_batch=micro, grad_accum=accum * layout.pipeline_parallel, seq_len=512
    )
    assert (
        estimate_throughput(spec, config, fast_cluster).step_time_s
        <= estimate_throughput(spec, config, slow_cluster).step_time_s
    )


def test_faster_interconnect_never_slows_the_chosen_plan():
    for model, nodes in (("llama-2-7b", 4), ("opt-1.3b", 8), ("llama-2-70b", 8)):
        spec = resolve_model(model)
        request = PlanRequest(global_batch=512, seq_len=2048)
        speeds = []
        for preset in ("ethernet-25g", "ethernet-100g", "ib-hdr", "ib-ndr"):
            best = search_plans(spec, make_cluster("A100-80GB", 8, nodes, interconnect=preset), request).best
            speeds.append(best.throughput.tokens_per_s)
        assert speeds == sorted(speeds), (model, speeds)

"""Megatron-Core's memory as its code keeps it (planner/memory/te_blocks.py, planner/memory/stack_memory.py).

References: the tensors Transformer Engine's modules and Megatron-Core's fused SwiGLU, router and permutation save for
backward, read in their code (TE d0067d0d, Megatron-LM d98e8a64) and summed per token in closed form below, one
term per saved tensor; the sizes from the models' config.json (Llama 3 70B: hidden 8192, 64 query and 8 key-value
heads of 128, ffn 28672; Qwen3-30B-A3B: hidden 2048, 32 and 4 heads of 128, 128 experts of ffn 768, 8 per token,
q/k norms); Megatron-Core's distributed optimizer building one optimizer over the data-parallel group for the dense
parameters and one over the expert-data-parallel group for the experts (megatron/core/optimizer/__init__.py). This
machine cannot run Transformer Engine: the published runs that fit with these counts are in
tests/test_published_runs_fit.py.
"""

from __future__ import annotations

import pytest

from planner.evaluate import memory_on
from planner.hardware.cluster import make_cluster
from planner.memory.activations import ActivationShape, activation_widths, block_bytes
from planner.memory.model_states import model_state_bytes
from planner.memory.rank_params import linear_params, rank_params
from planner.memory.stack_memory import StackMemory
from planner.models.resolve import resolve_model
from planner.throughput.implementation import MEGATRON_CORE
from planner.training_config import ActivationCheckpointing, TrainingConfig

LLAMA_70B = resolve_model("llama-3-70b")
QWEN3_30B = resolve_model("qwen3-30b-a3b")


def _block(spec, config: TrainingConfig, te: bool) -> float:
    shape = ActivationShape.of(config)._replace(te_blocks=te)
    return block_bytes(spec, shape, activation_widths(config, False), kv_seq_len=config.seq_len)


def _engine(**fields) -> TrainingConfig:
    return TrainingConfig(strategy="engine", zero_stage=1, precision="bf16-mixed", seq_len=8192, **fields)


@pytest.mark.parametrize("t", [4, 16])
@pytest.mark.parametrize("fp8", [False, True])
def test_a_dense_block_keeps_what_transformer_engine_saves(fp8: bool, t: int):
    """Llama 3 70B at TP 4 with sequence parallelism. Per token, per rank: each fused norm's input, output (an FP8
    copy under FP8) and fp32 rsigma over the sequence shard; q, k, v at their own heads, the attention output and
    fp32 statistics per query head; the output projection's FP8 copy of its input; fc1's output kept by the fused
    SwiGLU; the SwiGLU output or fc2's FP8 copy of it. 33.5 units of hidden / tp bytes in BF16, 29.0 in FP8, where
    transformers' blocks keep 47.5 in FP8. At TP 16, past its 8 key-value heads, each rank keeps a whole one
    (Megatron-Core replicates them)."""
    h, kv, ffn, heads = 8192, 8 * 128, 28672, 64
    assert (LLAMA_70B.hidden_size, LLAMA_70B.kv_size, LLAMA_70B.ffn_size, LLAMA_70B.num_heads) == (h, kv, ffn, heads)
    config = _engine(tensor_parallel=t, sequence_parallel=True, fp8=fp8)
    norm_output, copy = (1, 1) if fp8 else (2, 0)
    norms = 2 * ((2 + norm_output) * h + 4) / t
    attention = (2 * h * 2 + 4 * heads + copy * h) / t + 2 * kv * 2 / min(t, 8)
    mlp = (2 * ffn * 2 + ffn * (1 if fp8 else 2)) / t
    assert _block(LLAMA_70B, config, te=True) == pytest.approx(norms + attention + mlp, rel=1e-12)
    if t == 16:
        return
    units = _block(LLAMA_70B, config, te=True) / (h / t)
    assert units == pytest.approx(29.03 if fp8 else 33.53, abs=0.01)
    if fp8:
        assert _block(LLAMA_70B, config, te=False) / (h / t) == pytest.approx(47.53, abs=0.01)


@pytest.mark.parametrize("tp", [1, 2])
@pytest.mark.parametrize("fp8", [False, True])
def test_an_moe_block_keeps_what_megatron_cores_experts_save(fp8: bool, tp: int):
    """Qwen3-30B-A3B, one rank of the sequence. The attention half: the fused norm before attention, q, k, v, the
    output and statistics, the q/k norms' inputs and rsigma (and the projection's FP8 copy). The MoE half, per
    token: the separate norm's input and rsigma, the gating linear's input; 9E bytes of router state (a boolean map
    and two fp32 score copies), the permutation's int32 map of 2E + 1, the chunk sorts' 8 bytes and the probabilities'
    2 bytes a routed copy; per routed copy fc1's input (an FP8 copy under FP8), fc1's 2 x ffn output and fc2's input.
    (4 + 2k) h + 6k ffn + 17E + 10k + 8 bytes in BF16, (4 + k) h + 5k ffn + 17E + 10k + 8 in FP8. At TP 2 with
    sequence parallelism the experts' tensor parallelism is the model's (Megatron-Core's default), whose dispatcher
    all-gathers the routed copies over the tp ranks: what is kept per copy of hidden width (fc1's input, the indices
    and probabilities) is whole on each rank, the ffn-wide tensors and the sequence shard's split."""
    h, q, kv, heads, kv_heads, experts, ffn, k = 2048, 32 * 128, 4 * 128, 32, 4, 128, 768, 8
    spec = QWEN3_30B
    assert (spec.hidden_size, spec.num_experts, spec.expert_ffn_size, spec.experts_per_token) == (h, experts, ffn, k)
    assert (spec.num_heads * spec.head_dim, spec.kv_size) == (q, kv)
    config = _engine(expert_parallel=8, fp8=fp8, tensor_parallel=tp, sequence_parallel=tp > 1)
    fused_norm = (2 + (1 if fp8 else 2)) * h + 4
    attention = (2 * q + 2 * kv) * 2 + 4 * heads + (q + kv) * 2 + 4 * (heads + kv_heads) + (q if fp8 else 0)
    sequence_shard = 4 * h + 8 + 17 * experts
    per_copy = (1 if fp8 else 2) * h + 10
    ffn_wide = 2 * ffn * 2 + ffn * (1 if fp8 else 2)  # fc1's output, fc2's input
    expected = (fused_norm + sequence_shard) / tp + attention / tp + k * per_copy + k * ffn_wide / tp
    if tp == 1:  # the closed form above
        moe = (4 + (1 if fp8 else 2) * k) * h + (5 if fp8 else 6) * k * ffn + 17 * experts + 10 * k + 8
        assert expected == pytest.approx(fused_norm + attention + moe, rel=1e-12)
    assert _block(spec, config, te=True) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    "fields",
    [
        {"layout": {"tp": 4, "cp": 2}},
        {"activation_checkpointing": ActivationCheckpointing.SELECTIVE},
        {"activation_checkpointing": ActivationCheckpointing.OP},
    ],
)
def test_what_was_not_read_keeps_the_transformers_count(fields: dict):
    """Context parallelism's attention path and selective or op-level recomputation were not read in Megatron-Core's
    code: their blocks stay counted as transformers' keep them."""
    config = _engine(**{"tensor_parallel": 4, "sequence_parallel": True, **fields})
    assert config.tensor_parallel == 4 and (config.context_parallel == 2) == ("layout" in fields)
    assert _block(LLAMA_70B, config, te=True) == _block(LLAMA_70B, config, te=False)


def test_megatron_cores_distributed_optimizer_shards_the_dense_states_over_every_data_parallel_rank():
    """Qwen3-30B-A3B at EP 16 on 16 H100s (Megatron-Bridge's layout): the expert-data-parallel group is one rank,
    so each rank keeps the Adam states and fp32 master of its 8 experts a block whole (12 bytes a parameter), and
    of the dense parameters (attention, norms, router, embeddings) a sixteenth. Our engine runs its ZeRO on the
    expert-data-parallel group for all of them: every state whole."""
    config = _engine(expert_parallel=16, fp8=True).model_copy(update={"seq_len": 4096, "micro_batch": 1})
    cluster = make_cluster("H100-80GB", 8, 2)
    local_experts = 48 * 8 * 3 * 2048 * 768  # 48 blocks of 8 local experts, three 2048 x 768 matrices each
    params = rank_params(QWEN3_30B, config)
    assert params.experts == local_experts
    dense = params.total - local_experts
    core = memory_on(QWEN3_30B, config, cluster, stack=MEGATRON_CORE.stack_memory()).per_gpu_bytes
    ours = memory_on(QWEN3_30B, config, cluster).per_gpu_bytes
    assert core["optimizer_states"] == pytest.approx(12 * (dense / 16 + local_experts), rel=1e-9)
    assert ours["optimizer_states"] == pytest.approx(12 * params.total, rel=1e-9)
    # The distributed optimizer is ZeRO-1's: under our ZeRO-3 the parameters stay as ours shards them (the
    # gradients are Megatron's buffer: test_megatrons_model_states_are_its_own_tables), and LoRA's adapters, not told
    # apart by kind, as ours.
    for update in ({"zero_stage": 3}, {"lora_rank": 16}):
        other = config.model_copy(update=update)
        core = memory_on(QWEN3_30B, other, cluster, stack=MEGATRON_CORE.stack_memory()).per_gpu_bytes
        ours = memory_on(QWEN3_30B, other, cluster).per_gpu_bytes
        assert core["parameters"] == ours["parameters"]
        if "lora_rank" in update:
            assert core["optimizer_states"] == ours["optimizer_states"]


def test_the_estimate_says_which_blocks_and_sharding_it_counted():
    """Every number says where it came from: Megatron-Core's preset names its blocks and its optimizer's sharding
    where they were counted, and the transformers count where they were not read (context parallelism)."""
    cluster = make_cluster("H100-80GB", 8, 2)
    moe = _engine(expert_parallel=16).model_copy(update={"seq_len": 4096})
    stack = MEGATRON_CORE.stack_memory()
    sources = memory_on(QWEN3_30B, moe, cluster, stack=stack).sources
    assert sources["activations"].startswith("formula: the tensors Megatron-Core's Transformer Engine blocks keep")
    assert "Megatron-Core's distributed optimizer shards them" in sources["optimizer_states"]
    ours = memory_on(QWEN3_30B, moe, cluster).sources
    assert ours["activations"].startswith("formula: Korthikanti")
    assert "Megatron-Core" not in ours["optimizer_states"]
    under_cp = _engine(layout={"tp": 4, "cp": 2}, sequence_parallel=True)
    assert memory_on(LLAMA_70B, under_cp, cluster, stack=stack).sources["activations"].startswith("formula: Korth")


def test_the_note_names_the_blocks_counted():
    """`estimate --implementation megatron-core` names Transformer Engine's blocks where they were counted, and says
    transformers' modules (which its blocks may keep fewer of) where the reading does not reach: the 405B at CP 2."""
    from benchmarks.accuracy.validate_published_runs import plan_inputs, published_rows
    from planner.evaluate import evaluate

    rows = {row["id"]: row for row in published_rows()}
    for run, counted in (
        ("megatron-bridge-llama3-70b-64-h100-fp8", True),
        ("megatron-bridge-llama3.1-405b-1024-h100-fp8-cp2", False),
    ):
        spec, config, cluster = plan_inputs(rows[run])
        notes = " ".join(evaluate(spec, config, cluster, implementation="megatron-core").memory.notes)
        assert ("memory counted for Megatron-Core's Transformer Engine blocks" in notes) is counted
        assert ("its blocks may keep less" in notes) is not counted


def test_an_moe_model_under_tensor_parallelism_without_sequence_parallelism_keeps_the_transformers_count():
    """Megatron-Core trains MoE under tensor parallelism only with sequence parallelism (moe_layer.py refuses it):
    without, nothing was read, and the transformers count stands."""
    config = _engine(expert_parallel=8, tensor_parallel=2, sequence_parallel=False)
    assert _block(QWEN3_30B, config, te=True) == _block(QWEN3_30B, config, te=False)
    with_sp = config.model_copy(update={"sequence_parallel": True})
    assert _block(QWEN3_30B, with_sp, te=True) < _block(QWEN3_30B, with_sp, te=False)


def test_megatrons_gradients_accumulate_in_an_fp32_buffer_and_its_fp8_weights_replace_the_16_bit_ones():
    """Megatron-LM's command line (bf16) and Megatron-Bridge's mixed-precision configs reduce gradients in fp32: one
    4-byte buffer a parameter as ZeRO-1 keeps it, from the model's wrapping, which the optimizer steps from (no fp32
    copy beside it), where our engine keeps 16-bit gradients and an fp32 copy of its partition. Megatron-Bridge's
    FP8 configs keep the block weights in FP8 with their transposes (fp8_param_gather) instead of casting 16-bit
    ones: the buffers hold no FP8 copies beside the parameters. Llama 3 70B at TP 4, PP 8, DP 2 (the Bridge row)."""
    from benchmarks.accuracy.validate_published_runs import plan_inputs, published_rows

    row = next(row for row in published_rows() if row["id"] == "megatron-bridge-llama3-70b-64-h100-fp8")
    spec, config, cluster = plan_inputs(row)
    params, dp = rank_params(spec, config), config.data_parallel_size(cluster.world_size)
    assert dp == 2
    core = memory_on(spec, config, cluster, stack=MEGATRON_CORE.stack_memory()).per_gpu_bytes
    ours = memory_on(spec, config, cluster).per_gpu_bytes
    # At the peak (backward's start) the gradients accumulated so far: fp32 in the buffer, 16-bit in ours.
    assert (core["gradients"], ours["gradients"]) == pytest.approx((4 * params.total, 2 * params.total), rel=1e-9)
    # At the step: the buffer alone, against ours' 16-bit gradients and fp32 copy of the partition.
    at_step = [
        model_state_bytes(params, config, dp, 8, spec.hidden_size, stack=StackMemory(gradient_buffer=flag))
        for flag in (True, False)
    ]
    assert at_step[0].gradients == pytest.approx(4 * params.total, rel=1e-9)
    assert at_step[1].gradients == pytest.approx(2 * params.total + 4 * params.total / dp, rel=1e-9)
    block_linears, _ = linear_params(spec, config, params, include_experts=True)
    assert ours["buffers"] - core["buffers"] == pytest.approx(2 * block_linears, rel=1e-9)
    sources = memory_on(spec, config, cluster, stack=MEGATRON_CORE.stack_memory()).sources
    assert "one fp32 buffer the optimizer steps from" in sources["gradients"]
    assert "kept in FP8 with their transposes" in sources["buffers"]
    assert "fp32 buffer" not in memory_on(spec, config, cluster).sources["gradients"]


@pytest.mark.parametrize(
    "precision, stage_0, stage_1",
    [("bf16-mixed", 18, lambda d: 6 + 12 / d), ("fp16-mixed", 20, lambda d: 4 + 16 / d)],
)
def test_megatrons_model_states_are_its_own_tables(precision: str, stage_0: float, stage_1):
    """Megatron-LM's distributed-optimizer guide (docs/user-guide/features/dist_optimizer.md at d98e8a64) gives the
    bytes a parameter: bf16 parameters with fp32 gradients 18, 6 + 12/d distributed; fp16 with fp16 gradients 20,
    4 + 16/d. The megatron preset's model states (parameters, gradients, optimizer) are those, its fused Adam making
    no step temporary; our engine's differ (16-bit gradients beside an fp32 copy of the partition)."""
    spec, d = resolve_model("llama-3.1-8b"), 8
    for stage, expected in ((0, stage_0), (1, stage_1(d))):
        config = TrainingConfig(strategy="engine", zero_stage=stage, precision=precision)
        params = rank_params(spec, config)
        states = model_state_bytes(params, config, d, 8, spec.hidden_size, stack=StackMemory(gradient_buffer=True))
        total = states.parameters + states.gradients + states.optimizer_states
        assert total / params.total == pytest.approx(expected, rel=1e-9)
        assert states.step_temporary == 0


def test_megatrons_gradient_buffer_is_held_from_the_first_forward():
    """Allocated when the model is wrapped and zeroed each step (param_and_grad_buffer.py): at one micro-batch a step
    the buffer is there at backward's start, where ours holds no gradients yet."""
    spec = resolve_model("llama-3.1-8b")
    config = _engine(micro_batch=1, grad_accum=1)
    cluster = make_cluster("H100-80GB", 8, 1)
    params = rank_params(spec, config)
    core = memory_on(spec, config, cluster, stack=MEGATRON_CORE.stack_memory()).per_gpu_bytes
    ours = memory_on(spec, config, cluster).per_gpu_bytes
    assert (core["gradients"], ours["gradients"]) == pytest.approx((4 * params.total, 0.0), abs=1)

"""Op-level activation checkpointing (`--ac op`): our backends' policy against no checkpointing, and the
planner's count of it against the policy.

References: the same model without checkpointing (the policy changes no gradient); the matmuls backward runs
again, counted by a dispatch mode, against planner/memory/op_checkpointing.py's list of the skipped ones; what a
block keeps is held against traces in tests/test_memory_per_layer.py (the `/op` entries, exact to the byte for
fp32 and bf16) and against torchtitan's printed memory in tests/test_published_runs_fit.py. The multi-rank
paths (ZeRO-3 and TP with SP) run in the shared launches of tests/test_engine_zero.py and tests/test_tp_pp.py.
"""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from backends.parts import activation_checkpointing
from planner.errors import UserInputError
from planner.hardware.cluster import make_cluster
from planner.memory.op_checkpointing import block_matmuls, recomputed_matmuls
from planner.models.hf_config import spec_from_hf_config
from planner.models.resolve import resolve_model
from planner.training_config import ActivationCheckpointing, TrainingConfig

SEQ, VOCAB, LAYERS = 32, 96, 2


def _config(family: str):
    from transformers import GPT2Config, LlamaConfig

    if family == "llama":
        return LlamaConfig(
            hidden_size=32, intermediate_size=64, num_hidden_layers=LAYERS, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=VOCAB, max_position_embeddings=SEQ,
        )  # fmt: skip
    return GPT2Config(n_embd=32, n_layer=LAYERS, n_head=4, vocab_size=VOCAB, n_positions=SEQ, attn_pdrop=0.0,
                      resid_pdrop=0.0, embd_pdrop=0.0)  # fmt: skip


def _model(family: str):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(_config(family), attn_implementation="sdpa").float().train()


class _Matmuls(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in (torch.ops.aten.mm.default, torch.ops.aten.addmm.default):
            self.calls += 1
        return func(*args, **(kwargs or {}))


def _backward_matmuls(family: str, mode: str) -> tuple[int, list[torch.Tensor]]:
    model = _model(family)
    if mode != "none":
        activation_checkpointing.apply(model, mode)
    ids = torch.randint(0, VOCAB, (2, SEQ), generator=torch.Generator().manual_seed(1))
    loss = model(input_ids=ids, labels=ids).loss
    with _Matmuls() as counter:
        loss.backward()
    return counter.calls, [p.grad for p in model.parameters()]


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_op_checkpointing_recomputes_every_second_matmul_and_changes_no_gradient(family):
    plain, reference = _backward_matmuls(family, "none")
    op, grads = _backward_matmuls(family, "op")
    full, _ = _backward_matmuls(family, "full")
    for ours, theirs in zip(grads, reference, strict=True):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
    spec = spec_from_hf_config(_config(family).to_dict(), name=family)
    matmuls = block_matmuls(spec)
    assert op - plain == LAYERS * len(recomputed_matmuls(spec))  # the skipped ones, in each block's backward
    assert len(recomputed_matmuls(spec)) == {"llama": 3, "gpt2": 1}[family]  # k, o, up; attention's c_proj
    # Full checkpointing runs the block again up to the last tensor backward needs (torch stops the
    # recomputation there): every matmul but the last, whose output no backward reads.
    assert full - plain == LAYERS * (len(matmuls) - 1)


def test_op_keeps_less_than_selective_and_more_than_full_and_is_faster_than_full():
    from planner.evaluate import memory_on
    from planner.throughput.estimate import estimate_throughput

    spec, cluster = resolve_model("llama-3.1-8b"), make_cluster("H100-80GB", gpus_per_node=8)
    base = TrainingConfig(strategy="fsdp", micro_batch=2, grad_accum=1, seq_len=8192, precision="bf16-mixed")
    memory, speed = {}, {}
    for mode in (ActivationCheckpointing.SELECTIVE, ActivationCheckpointing.OP, ActivationCheckpointing.FULL):
        config = base.model_copy(update={"activation_checkpointing": mode})
        memory[mode] = memory_on(spec, config, cluster).total
        speed[mode] = estimate_throughput(spec, config, cluster).tokens_per_s
    assert (
        memory[ActivationCheckpointing.FULL]
        < memory[ActivationCheckpointing.OP]
        < memory[ActivationCheckpointing.SELECTIVE]
    )
    assert speed[ActivationCheckpointing.FULL] < speed[ActivationCheckpointing.OP]  # op or selective: either (below)


def test_op_on_routed_experts_is_one_line():
    from planner.evaluate import memory_on

    spec = resolve_model("mixtral-8x7b")
    config = TrainingConfig(strategy="fsdp", micro_batch=1, grad_accum=1, seq_len=4096, activation_checkpointing="op")
    with pytest.raises(UserInputError, match="op-level checkpointing is counted for dense blocks.*routed experts"):
        memory_on(spec, config, make_cluster("H100-80GB", gpus_per_node=8))


def test_the_search_picks_op_where_it_beats_selective():
    """Asked for both, the search ranks op and selective on their estimates: neither prunes the other
    (planner/search/checkpointing_modes.py DOMINATED_BY). On MI300Xs at 16k tokens op's smaller footprint lets FSDP
    skip sharding and its estimate beats selective's, and the plan says op. (On B200s, where it did until cuDNN's
    attention was read by length, selective's recomputed attention is now the cheaper: attention_curves.py.)"""
    from planner.search.request import PlanRequest
    from planner.search.search import search_plans

    spec, cluster = resolve_model("llama-3.1-8b"), make_cluster("MI300X", gpus_per_node=8)
    common = dict(global_batch=8, seq_len=16384, strategies=("fsdp",))
    both = search_plans(spec, cluster, PlanRequest(**common, activation_checkpointing=("selective", "op")))
    alone = {
        mode: search_plans(spec, cluster, PlanRequest(**common, activation_checkpointing=(mode,))).best
        for mode in ("selective", "op")
    }
    assert alone["op"].throughput.tokens_per_s > alone["selective"].throughput.tokens_per_s
    best = both.best
    assert best.config.activation_checkpointing is ActivationCheckpointing.OP
    assert best.throughput.tokens_per_s == alone["op"].throughput.tokens_per_s


def test_a_kept_last_matmul_output_stays_beside_the_rebuilt_block():
    """One Llama layer, traced whole (FakeTensorMode + MemTracker): op's peak is full checkpointing's plus the kept
    down projection's output (hidden x width per token), which backward's recomputation stops before and never
    consumes; the estimate's difference is the same to the byte (activation_batch._recomputed_block)."""
    from benchmarks.memory.memory_trace import TraceConfig, run_trace
    from benchmarks.memory.per_layer_models import BATCH, model_config, seq_for
    from planner.memory.estimate import estimate_memory
    from planner.memory.runtime import Runtime

    config, seq = model_config("llama", 1), seq_for("llama")
    spec = spec_from_hf_config(config, name="llama")
    traced, estimated = {}, {}
    for mode in ("full", "op"):
        trace = TraceConfig(label=mode, model=config, micro_batch=BATCH, seq_len=seq, precision="bf16",
                            attention="sdpa", activation_checkpointing=mode)  # fmt: skip
        traced[mode] = run_trace(trace).peak_bytes
        training = TrainingConfig(precision="bf16", activation_checkpointing=mode, micro_batch=BATCH, seq_len=seq)
        estimated[mode] = estimate_memory(
            spec, training, world_size=1, gpus_per_node=1, gpu_capacity_bytes=2**40, runtime=Runtime.CPU_TRACE
        ).total
    held = spec.hidden_size * 2 * BATCH * seq
    assert traced["op"] - traced["full"] == estimated["op"] - estimated["full"] == held

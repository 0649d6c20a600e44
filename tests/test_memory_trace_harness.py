"""Checks of the memory-trace harness (benchmarks/memory/memory_trace.py) against references
computed independently of it: parameter counts of a real (non-fake) model, byte sizes
per dtype, FSDP's 1/world_size sharding, and activations linear in the batch size."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from benchmarks.memory import memory_trace  # noqa: E402
from benchmarks.memory.memory_trace import TraceConfig, run_trace  # noqa: E402
from benchmarks.memory.trace_configs import TINY_GPT2, by_label  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def real_gpt2_counts() -> tuple[int, int]:
    """(unique parameter elements, parameter tensors) of the tiny GPT-2, counted on a
    real model built outside FakeTensorMode."""
    from transformers import AutoConfig, AutoModelForCausalLM

    raw = dict(TINY_GPT2)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(raw.pop("model_type"), **raw))
    model.tie_weights()
    params = list(model.parameters())
    return sum(p.numel() for p in params), len(params)


def _trace(**overrides) -> memory_trace.TraceResult:
    fields = {"label": "test", "model": TINY_GPT2, "micro_batch": 2, "seq_len": 64, "precision": "fp32"}
    return run_trace(TraceConfig(**{**fields, **overrides}))


def test_fp32_adamw_single_process_matches_param_count(real_gpt2_counts):
    n, tensors = real_gpt2_counts
    result = _trace()
    assert result.tracker == "MemTracker"
    assert result.param_count == n
    assert result.max_per_category["Parameter"] == 4 * n
    assert result.max_per_category["Gradient"] == 4 * n
    # exp_avg + exp_avg_sq (fp32) plus one fp32 scalar `step` per parameter tensor.
    assert result.at_end["Optstate"] == 8 * n + 4 * tensors
    # foreach AdamW's step holds one more parameter-sized fp32 temporary (sqrt of exp_avg_sq).
    assert result.max_per_category["Optstate"] == 8 * n + 4 * tensors + 4 * n
    assert result.at_end["Gradient"] == 0  # zero_grad(set_to_none=True)
    assert result.peak_bytes == sum(result.at_peak.values())
    assert result.peak_phase in ("forward", "backward", "optimizer")


def test_fsdp_world_size_4_shards_params_grads_and_states(real_gpt2_counts):
    n, tensors = real_gpt2_counts
    result = _trace(world_size=4)
    assert result.tracker == "FSDPMemTracker"
    assert result.param_count == n
    # Each parameter's dim 0 is padded to a multiple of 4, so shards may be a bit larger.
    assert n <= result.at_end["Sharded Param"] <= 1.02 * n
    assert n <= result.max_per_category["Sharded Grad"] <= 1.02 * n
    states = result.at_end["OptState"] - 4 * tensors
    assert 2 * n <= states <= 1.02 * 2 * n
    # Unsharded parameters exist only while a unit runs: less than the whole model.
    assert 0 < result.max_per_category["Unsharded Param"] < 4 * n


def test_precision_modes_allocate_documented_dtypes(real_gpt2_counts):
    n, tensors = real_gpt2_counts
    mixed = _trace(precision="bf16-mixed")
    assert mixed.max_per_category["Parameter"] == 4 * n  # fp32 master weights
    assert mixed.max_per_category["Gradient"] == 4 * n
    assert mixed.at_end["Optstate"] == 8 * n + 4 * tensors
    pure = _trace(precision="bf16")
    assert pure.max_per_category["Parameter"] == 2 * n
    assert pure.max_per_category["Gradient"] == 2 * n
    assert pure.at_end["Optstate"] == 4 * n + 4 * tensors  # bf16 moments, fp32 step scalars


def test_activations_scale_with_batch_and_kernel_is_detected():
    one = _trace(micro_batch=1, seq_len=128)
    two = _trace(micro_batch=2, seq_len=128)
    ratio = two.normalized_max_per_category["Activation"] / one.normalized_max_per_category["Activation"]
    assert 1.9 < ratio < 2.1
    assert one.attention_kernel == "sdpa-flash-equivalent" and one.attention_softmax_calls == 0
    eager = _trace(micro_batch=1, seq_len=128, attention="eager")
    assert eager.attention_kernel == "eager/math" and eager.fused_sdpa_calls == 0
    # Eager stores s x s scores (and GPT-2's 0.1 attention-dropout mask): more activation memory.
    assert eager.normalized_max_per_category["Activation"] > one.normalized_max_per_category["Activation"]


def test_catalog_model_name_resolves_to_config(tmp_path, monkeypatch):
    (tmp_path / "tiny.json").write_text(json.dumps({"name": "tiny", "config": TINY_GPT2}), encoding="utf-8")
    monkeypatch.setattr(memory_trace, "CATALOG_MODELS_DIR", tmp_path)
    assert memory_trace.resolve_model_config("tiny") == TINY_GPT2
    with pytest.raises(FileNotFoundError):
        memory_trace.resolve_model_config("missing")


def test_trace_configs_cover_the_grid():
    configs = list(by_label().values())
    assert len(configs) >= 30
    assert len([c for c in configs if c.fast]) >= 5
    assert {c.world_size for c in configs} >= {1, 2, 8, 64}
    assert {c.precision for c in configs} >= {"fp32", "bf16-mixed", "bf16"}
    assert {c.activation_checkpointing for c in configs} == {"none", "selective", "op", "full"}

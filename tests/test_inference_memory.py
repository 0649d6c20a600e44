"""Serving memory formulas against the tensors transformers really allocates (planner/inference/memory.py).

References:
- weights: the bytes of the real model's parameters (tied weights once), built
  from the catalog's stored config under FakeTensorMode at full size;
- KV cache: the bytes of the cache tensors a real forward with use_cache
  leaves behind, for multi-head (GPT-2, OPT), grouped-query (Llama 3, Mistral)
  and mixture-of-experts (Mixtral) attention, at full size under FakeTensorMode.
"""

from __future__ import annotations

import pytest

from planner.emit.hf_model import hf_config_for
from planner.inference import InferenceRequest
from planner.inference.memory import (
    activation_bytes,
    kv_bytes_per_request,
    kv_bytes_per_token,
    lookup_table_bytes,
    weight_bytes,
)
from planner.models.hf_config import spec_from_hf_config
from planner.models.resolve import resolve_model

MODELS = ["gpt2", "opt-1.3b", "llama-3-8b", "mistral-7b", "qwen2.5-7b", "mixtral-8x7b"]


def _fake_model(name: str):
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from transformers import AutoConfig, AutoModelForCausalLM

    config_dict = dict(hf_config_for(resolve_model(name)))
    config = AutoConfig.for_model(config_dict.pop("model_type"), **config_dict)
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    with mode:
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16, attn_implementation="sdpa")
    return model, mode


@pytest.fixture(scope="module", params=MODELS)
def fake(request):
    return request.param, *_fake_model(request.param)


def test_bf16_weight_bytes_are_the_real_models_parameter_bytes(fake):
    name, model, _ = fake
    real = sum(p.numel() * p.element_size() for p in model.parameters())  # tied weights are one Parameter
    spec = resolve_model(name)
    assert weight_bytes(spec, InferenceRequest(weights="bf16"), tp=1, pp=1) == pytest.approx(real, rel=1e-6)


def test_a_forward_reads_every_weight_but_the_input_tables_it_only_looks_rows_up_in(fake):
    """A decode step reads the blocks and the head whole, and one row per token of the input token table: the
    bytes it reads whole are the real model's parameters but its input embedding (a tied table is the head)."""
    name, model, _ = fake
    spec = resolve_model(name)
    embedding = model.get_input_embeddings().weight
    tied = embedding is model.get_output_embeddings().weight
    lookup = 0 if tied else embedding.numel() * embedding.element_size()
    real = sum(p.numel() * p.element_size() for p in model.parameters()) - lookup
    held = weight_bytes(spec, InferenceRequest(weights="bf16"), tp=1, pp=1)
    assert held - lookup_table_bytes(spec, tp=1, pp=1) == pytest.approx(real, rel=1e-6)
    assert tied == spec.tied_embeddings


def _cache_bytes(cache) -> int:
    """The bytes of every key and value tensor a transformers cache holds after a forward."""
    return sum(
        tensor.numel() * tensor.element_size()
        for layer in cache.layers
        for tensor in (layer.keys, layer.values)
        if tensor is not None
    )


def test_kv_cache_bytes_are_the_cache_tensors_a_real_forward_keeps(fake):
    import torch

    name, model, mode = fake
    spec = resolve_model(name)
    batch, tokens = 3, 40
    with mode, torch.no_grad():
        ids = torch.zeros(batch, tokens, dtype=torch.long)
        out = model(input_ids=ids, use_cache=True, logits_to_keep=1)
    cache = out.past_key_values
    real = _cache_bytes(cache)
    request = InferenceRequest(context=tokens - 1, output=1, batch=batch, block_tokens=1)
    assert kv_bytes_per_token(spec, request, tp=1, pp=1) * tokens * batch == real
    assert kv_bytes_per_request(spec, request, tp=1, pp=1) * batch == real


def test_paged_blocks_round_each_request_up_and_fp8_halves_the_cache():
    spec = resolve_model("llama-3-8b")
    per_token = kv_bytes_per_token(spec, InferenceRequest(), 1, 1)
    assert per_token == 2 * 32 * 8 * 128 * 2  # 128 KiB per token: K and V, 32 layers, 8 KV heads of 128, 2 bytes
    paged = InferenceRequest(context=1000, output=1, block_tokens=16)  # 1001 tokens: 63 blocks of 16
    assert kv_bytes_per_request(spec, paged, 1, 1) == 63 * 16 * per_token
    assert kv_bytes_per_token(spec, InferenceRequest(kv_cache="fp8"), 1, 1) == per_token // 2


def test_tensor_parallel_splits_kv_heads_until_each_gpu_keeps_one():
    spec = resolve_model("llama-3-8b")  # 8 KV heads
    one = kv_bytes_per_token(spec, InferenceRequest(), 1, 1)
    assert [kv_bytes_per_token(spec, InferenceRequest(), tp, 1) for tp in (2, 4, 8)] == [one // 2, one // 4, one // 8]
    assert kv_bytes_per_token(spec, InferenceRequest(), 8, 1) == kv_bytes_per_token(spec, InferenceRequest(), 16, 1)
    assert kv_bytes_per_token(spec, InferenceRequest(), 1, 4) == one // 4  # each stage keeps its 8 layers


@pytest.mark.parametrize("weights, bits", [("int8", 8), ("fp8", 8), ("int4", 4 + 20 / 128)])
def test_quantized_weights_keep_embeddings_in_16_bits(weights, bits):
    spec = resolve_model("llama-2-7b")
    embedding = spec.params.embedding
    blocks = spec.params.total - embedding
    expected = blocks * bits / 8 + embedding * 2
    assert weight_bytes(spec, InferenceRequest(weights=weights), 1, 1) == pytest.approx(expected, rel=1e-9)
    assert weight_bytes(spec, InferenceRequest(weights=weights), 4, 1) == pytest.approx(expected / 4, rel=1e-9)


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, tokens, batch", [("llama-3-8b", 512, 1), ("llama-3-8b", 2048, 2), ("opt-1.3b", 1024, 2)]
)
def test_prefill_activations_against_a_memtracker_trace_of_the_real_forward(name, tokens, batch):
    """MemTracker's activations at the peak of a real bf16 prefill (KV cache subtracted) against the formula.

    The formula models a serving engine's fused q/k/v projection and in-place rotary
    (vLLM, TensorRT-LLM); transformers' forward runs them unfused and keeps ~15% more,
    so the trace must lie between the formula and 25% above it."""
    import torch
    from torch.distributed._tools.mem_tracker import MemTracker

    spec = resolve_model(name)
    model, mode = _fake_model(name)
    with mode:
        ids = torch.zeros(batch, tokens, dtype=torch.long)
        tracker = MemTracker()
        tracker.track_external(model)
        with tracker, torch.no_grad():
            model(input_ids=ids, use_cache=True, logits_to_keep=1)
        peak = tracker.get_tracker_snapshot("peak")
    traced = sum(value for device, books in peak.items() for kind, value in books.items() if "ACT" in str(kind))
    request = InferenceRequest(context=tokens, output=1, batch=batch, block_tokens=1, prefill_chunk=10**9)
    cache = kv_bytes_per_request(spec, request, 1, 1) * batch
    formula = activation_bytes(spec, request, 1)
    assert formula <= traced - cache <= 1.25 * formula


@pytest.mark.parametrize("name", ["opt-350m", "gpt2", "llama-3-8b"])
def test_the_table_looked_up_is_the_one_weight_bytes_holds(name):
    """Under pipelining a tied model holds its table on the first stage and the last (weight_bytes, a stage's table
    whole): the first stage's copy is only looked up, the last's is the head. opt-350m's table (512 wide, projected
    to 1024) is its embedding count, not vocab x hidden. Untied: the input table, the head's size; none at pp 1
    for a tied model."""
    spec = resolve_model(name)
    request = InferenceRequest(weights="bf16")
    for pp in (1, 2, 4):
        held = weight_bytes(spec, request, tp=1, pp=pp) * pp
        lookup = lookup_table_bytes(spec, tp=1, pp=pp)
        if spec.tied_embeddings:
            assert lookup == (spec.params.embedding * 2 if pp > 1 else 0)
        else:
            assert lookup == spec.params.embedding  # two tables of equal size, one looked up: half of 2 bytes each
        assert 0 < held - lookup < held or lookup == 0


WINDOWED_CONFIGS = {
    # Tiny configs of each windowed family, built here: window 8, so 40 tokens leave it behind.
    "gemma3_text": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=6, num_attention_heads=4,
                        num_key_value_heads=2, head_dim=16, vocab_size=128, sliding_window=8,
                        sliding_window_pattern=3, architectures=["Gemma3ForCausalLM"]),
    "mistral": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
                    num_key_value_heads=2, vocab_size=128, sliding_window=8, architectures=["MistralForCausalLM"]),
    "gpt_oss": dict(hidden_size=64, intermediate_size=32, num_hidden_layers=4, num_attention_heads=4,
                    num_key_value_heads=2, head_dim=16, vocab_size=128, sliding_window=8, num_local_experts=4,
                    num_experts_per_tok=2, architectures=["GptOssForCausalLM"]),
    "llama4_text": dict(hidden_size=64, intermediate_size=128, intermediate_size_mlp=128, num_hidden_layers=8,
                        num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=128,
                        attention_chunk_size=8, num_local_experts=2, num_experts_per_tok=1,
                        architectures=["Llama4ForCausalLM"]),
}  # fmt: skip


@pytest.mark.parametrize("model_type", sorted(WINDOWED_CONFIGS))
@pytest.mark.parametrize("tokens", [6, 40])
def test_a_windowed_layer_keeps_what_transformers_cache_keeps(model_type, tokens):
    """Sliding-window and chunked layers (Gemma 3 every third full here, Mistral every layer, gpt-oss alternating,
    Llama 4 every fourth full) keep window - 1 tokens once the sequence passes the window: the serving KV cache is
    the bytes of the real model's cache after a forward (transformers' cache layers, on this CPU), which a full-layer
    count missed 5x on Gemma 3 at 32k tokens (a new user's audit, 2026-11-30)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    fields = {**WINDOWED_CONFIGS[model_type], "max_position_embeddings": 256}
    spec = spec_from_hf_config({"model_type": model_type, **fields}, name=model_type)
    assert spec.attention_window == 8 and 0 < spec.windowed_layers <= spec.num_layers
    config = AutoConfig.for_model(model_type, **{k: v for k, v in fields.items() if k != "architectures"})
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    with torch.no_grad():
        out = model(input_ids=torch.zeros(1, tokens, dtype=torch.long), use_cache=True, logits_to_keep=1)
    cache = out.past_key_values
    real = _cache_bytes(cache)
    request = InferenceRequest(context=tokens - 1, output=1, batch=1, block_tokens=1)
    assert kv_bytes_per_request(spec, request, tp=1, pp=1) == real


def test_gemma_3_at_32k_tokens_holds_about_five_times_the_requests_a_full_count_did():
    spec = resolve_model("gemma-3-27b")
    assert (spec.attention_window, spec.windowed_layers, spec.num_layers) == (1024, 52, 62)
    request = InferenceRequest(context=32000, output=512, batch=8)
    windowed = kv_bytes_per_request(spec, request, tp=1, pp=1)
    full = kv_bytes_per_request(spec.model_copy(update={"windowed_layers": 0}), request, tp=1, pp=1)
    assert 4.5 < full / windowed < 5.5


def test_a_chunked_layer_reads_half_its_chunk_and_a_stage_keeps_its_full_layers():
    """Llama 4 (chunked attention every layer but each fourth): past the chunk, a decode step reads the part of the
    current chunk before it, half a chunk on average, not a sliding window of a whole chunk; and a pipeline stage of
    Gemma 3 27B's 62 layers keeps at least its share of the full-attention ones (one every sixth layer), not fewer."""
    from planner.inference.memory import kv_bytes_per_layer_token, kv_read_bytes_per_request, stage_layers

    spec, request = resolve_model("llama-4-scout"), InferenceRequest()
    assert spec.chunked_attention and (spec.attention_window, spec.windowed_layers) == (8192, 36)
    length = 32768
    read = kv_read_bytes_per_request(spec, request, 1, length) / kv_bytes_per_layer_token(spec, request, 1)
    assert read == 12 * length + 36 * 8192 / 2
    gemma = resolve_model("gemma-3-27b")
    for pp in (2, 4, 10):
        full, windowed = stage_layers(gemma, pp)
        layers = -(-62 // pp)
        busiest = max(sum(1 for i in range(start, min(start + layers, 62)) if (i + 1) % 6 == 0)
                      for start in range(0, 62, layers))  # fmt: skip
        assert full >= busiest and full + windowed == layers

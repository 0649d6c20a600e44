"""The 2025 catalog models: gpt-oss, Llama 4 (text), Gemma 3 27B, Mistral Small 24B and Phi-4.

References:
- the sizes their authors published (model cards and reports, quoted beside each figure);
- transformers' own classes, built on the meta device (tests/test_catalog_counts.py checks the formula against
  them for every catalog model; here the new layouts' details: biased experts, attention sinks, interleaved
  dense blocks);
- torch's FlopCounterMode over a training step of the real modules;
- per-block MemTracker traces (benchmarks/results/memory_per_layer.json, held by tests/test_memory_per_layer.py).
"""

from __future__ import annotations

import json

import pytest

from hardware_selector import main
from planner.memory.rank_params import rank_params
from planner.models.catalog import find_model
from planner.models.hf_config import spec_from_hf_config
from planner.training_config import TrainingConfig


def get_model(name: str):
    spec = find_model(name)
    assert spec is not None, name
    return spec


def _unembedding(name: str) -> int:
    spec = get_model(name)
    return spec.vocab_size * spec.hidden_size


# (total, active per token) as published; None where no figure is published for the text model alone.
PUBLISHED = {
    # OpenAI's gpt-oss model card, Table 1: 116.83B / 5.13B and 20.91B / 3.61B active. Its active count leaves
    # the unembedding out, which our active_per_token (every weight a token reads) counts.
    "gpt-oss-120b": (116.83e9, 5.13e9),
    "gpt-oss-20b": (20.91e9, 3.61e9),
    # Meta's Llama 4 cards: 17B active of 400B (Maverick) and of 109B (Scout, whose 109B includes the vision
    # encoder this text model leaves out).
    "llama-4-maverick": (400e9, 17e9),
    "llama-4-scout": (None, 17e9),
    # The Hub's safetensors counts of microsoft/phi-4 (14.7B) and Mistral-Small-24B-Base-2501 (23.6B).
    "phi-4": (14.7e9, None),
    "mistral-small-24b": (23.6e9, None),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_counts_match_the_published_sizes(name):
    total, active = PUBLISHED[name]
    params = get_model(name).params
    assert params.source == "meta-device"
    rounding = 0.005 if name.startswith(("gpt-oss", "phi", "mistral")) else 0.02
    if total is not None:
        assert params.total == pytest.approx(total, rel=rounding)
    if active is not None:
        ours = params.active_per_token - (_unembedding(name) if name.startswith("gpt-oss") else 0)
        assert ours == pytest.approx(active, rel=rounding)


def test_gemma_3_27b_blocks_match_the_report():
    """Gemma 3 technical report, Table 1: 25,600M non-embedding parameters for the 27B model."""
    params = get_model("gemma-3-27b").params
    assert params.total - params.embedding == pytest.approx(25_600e6, rel=0.0005)


def test_gpt_oss_layout_details_are_counted():
    """Every block of gpt-oss-20b: 64 sink logits, biased q/k/v/o, a biased router over 32 experts whose fused
    gate/up and down projections carry biases too (2880 wide, SwiGLU of 2 x 2880)."""
    spec = get_model("gpt-oss-20b")
    h, f, experts = 2880, 2880, 32
    attention = h * (4096 + 2 * 512) + 4096 * h + (4096 + 2 * 512 + h) + 64
    moe = experts * (h + 1) + experts * (h * 2 * f + 2 * f + f * h + h)
    embeddings = 2 * 201088 * h
    assert spec.params.total == 24 * (attention + moe + 2 * h) + h + embeddings


def test_maverick_interleaves_dense_blocks():
    spec = get_model("llama-4-maverick")
    assert (spec.num_experts, spec.experts_per_token, spec.dense_layers) == (128, 1, 24)
    assert (spec.ffn_size, spec.expert_ffn_size, spec.shared_expert_ffn_size) == (16384, 8192, 8192)
    assert not spec.qk_l2_norm and get_model("llama-4-scout").qk_l2_norm


@pytest.mark.parametrize("ep", [2, 8])
def test_expert_parallel_rank_params_leave_dense_blocks_whole(ep):
    """Maverick under ep: a rank keeps every non-expert weight and 1/ep of the experts of its 24 routed blocks
    (the dense blocks have none to split), as transformers' tensors add up."""
    spec = get_model("llama-4-maverick")
    experts = 24 * 128 * 3 * 5120 * 8192  # fused gate/up and down of every routed block
    expected = spec.params.total - experts * (1 - 1 / ep)
    ours = rank_params(spec, TrainingConfig(strategy="engine", layout={"ep": ep})).total
    assert ours == pytest.approx(expected, rel=0.001)


def _tiny(model_type: str) -> dict:
    sizes = dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                 vocab_size=2000, intermediate_size=128)  # fmt: skip
    if model_type == "gpt_oss":
        return {**sizes, "num_local_experts": 8, "num_experts_per_tok": 2}
    # transformers' Llama4TextMoe runs every expert on every token: with one expert that is a routed step's work.
    return {**sizes, "num_local_experts": 1, "intermediate_size_mlp": 256, "interleave_moe_layer_step": 2}


@pytest.mark.parametrize("model_type", ["gpt_oss", "llama4_text"])
def test_flops_match_torchs_flop_counter(model_type):
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import AutoConfig, AutoModelForCausalLM

    from planner.models.flops import model_shape, sequence_flops

    sizes = _tiny(model_type)
    extra = {"experts_implementation": "eager"} if model_type == "gpt_oss" else {}
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(
        AutoConfig.for_model(model_type, **sizes), attn_implementation="eager", **extra
    )
    ids = torch.randint(0, 2000, (1, 512))
    with FlopCounterMode(display=False) as counter:
        model(input_ids=ids, labels=ids).loss.backward()
    spec = spec_from_hf_config({"model_type": model_type, **sizes}, name="tiny")
    ours = sequence_flops(model_shape(spec), TrainingConfig(seq_len=512)).model
    assert ours == pytest.approx(counter.get_total_flops(), rel=0.01)


def test_llama_4_plans_but_is_not_emitted(capsys, tmp_path):
    argv = ["plan", "--model", "llama-4-scout", "--gpu", "H100-80GB", "--gpus-per-node", "8", "--nodes", "4",
            "--global-batch", "256", "--seq-len", "4096"]  # fmt: skip
    assert main([*argv, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["best"]["throughput"]["tokens_per_s"] > 0
    assert main([*argv, "--emit", str(tmp_path / "run")]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and "runs every expert on every token" in error
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("name", ["gpt-oss-20b", "phi-4", "mistral-small-24b", "gemma-3-27b"])
def test_new_text_models_plan(name, capsys):
    argv = ["plan", "--model", name, "--gpu", "H100-80GB", "--gpus-per-node", "8", "--global-batch", "128",
            "--seq-len", "4096", "--json"]  # fmt: skip
    assert main(argv) == 0
    best = json.loads(capsys.readouterr().out)["best"]
    assert best["throughput"]["tokens_per_s"] > 0

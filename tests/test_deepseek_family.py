"""DeepSeek-V2/V3: multi-head latent attention and shared + routed experts, planned.

References: transformers' DeepseekV2/V3ForCausalLM on the meta device (the catalog's counts), which the
formula must equal; the published sizes (DeepSeek-V3: 671B total, 37B activated per token; V2-Lite:
15.7B); MemTracker traces of the real blocks (benchmarks/memory/memory_per_layer.py, deepseek-* rows, and
tests/test_memory_vs_trace.py); the latent KV cache as vLLM stores it (kv_lora_rank + qk_rope_head_dim
values per token and layer).
"""

from __future__ import annotations

import json

import pytest

from hardware_selector_cli.app import main
from planner.models.catalog import CATALOG_DIR
from planner.models.hf_config import spec_from_hf_config
from planner.models.resolve import resolve_model


@pytest.mark.parametrize("name, total_b, active_b", [("deepseek-v3", 671.0, 37.6), ("deepseek-v2-lite", 15.7, 2.66)])
def test_counts_are_exact_and_the_published_sizes(name, total_b, active_b):
    spec = resolve_model(name)
    config = json.loads((CATALOG_DIR / "models" / f"{name}.json").read_text())["config"]
    formula = spec_from_hf_config(config, name=name).params
    assert formula.model_dump(exclude={"source", "source_detail"}) == spec.params.model_dump(
        exclude={"source", "source_detail"}
    )
    assert spec.params.total / 1e9 == pytest.approx(total_b, abs=0.05)
    assert spec.params.active_per_token / 1e9 == pytest.approx(active_b, abs=0.05)
    assert spec.is_mla and spec.is_moe and spec.shared_expert_ffn_size > 0


def test_serving_caches_the_latent_not_per_head_keys(capsys):
    """V2-Lite: 27 layers x (512 + 64) values x 2 bytes per token, 1/57 of 16 heads' keys and values."""
    from planner.inference.memory import kv_bytes_per_token
    from planner.inference.request import InferenceRequest

    spec = resolve_model("deepseek-v2-lite")
    request = InferenceRequest(context=4096, batch=8)
    assert kv_bytes_per_token(spec, request, tp=1, pp=1) == 27 * (512 + 64) * 2
    assert kv_bytes_per_token(spec, request, tp=4, pp=1) == 27 * (512 + 64) * 2  # every TP rank keeps the latent


def test_deepseek_v3_plans_on_h800_scale(capsys):
    argv = ["plan", "--model", "deepseek-v3", "--gpu", "H100-80GB", "--gpus-per-node", "8", "--nodes", "256",
            "--global-batch", "4096", "--seq-len", "4096", "--json"]  # fmt: skip
    assert main(argv) == 0
    best = json.loads(capsys.readouterr().out)["best"]
    assert best["memory"]["fits"] and best["config"]["seq_len"] == 4096


@pytest.mark.slow
@pytest.mark.parametrize("model_type", ["deepseek_v2", "deepseek_v3", "mixtral"])
def test_moe_model_flops_match_torchs_flop_counter(model_type):
    """transformers' eager experts (its grouped-mm path runs ops FlopCounterMode does not count): top-k experts,
    shared experts, latent attention's projections and its QK (192-wide) and PV (128-wide) products."""
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import AutoConfig, AutoModelForCausalLM

    from planner.models.flops import model_shape, sequence_flops
    from planner.training_config import TrainingConfig

    sizes = dict(hidden_size=256, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4, vocab_size=2000)
    if model_type == "mixtral":
        extra = dict(intermediate_size=512, num_local_experts=8, num_experts_per_tok=2)
    else:
        extra = dict(
            intermediate_size=512, moe_intermediate_size=128, kv_lora_rank=64, qk_nope_head_dim=32, qk_rope_head_dim=16,
            v_head_dim=32, n_routed_experts=8, n_shared_experts=1, num_experts_per_tok=2, first_k_dense_replace=1,
            n_group=1, topk_group=1, q_lora_rank=96 if model_type == "deepseek_v3" else None,
        )  # fmt: skip
    config = {"model_type": model_type, **sizes, **extra}
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(
        AutoConfig.for_model(model_type, **sizes, **extra), attn_implementation="eager", experts_implementation="eager"
    )
    ids = torch.randint(0, 2000, (1, 512))
    with FlopCounterMode(display=False) as counter:
        model(input_ids=ids, labels=ids).loss.backward()
    ours = sequence_flops(model_shape(spec_from_hf_config(config, name="small")), TrainingConfig(seq_len=512)).model
    assert ours == pytest.approx(counter.get_total_flops(), rel=0.005)

"""DeepSeek-V2/V3: multi-head latent attention and shared + routed experts, planned.

References: transformers' DeepseekV2/V3ForCausalLM on the meta device (the catalog's counts), which the
formula must equal; the published sizes (DeepSeek-V3: 671B total, 37B activated per token; V2-Lite:
15.7B); MemTracker traces of the real blocks (benchmarks/memory_per_layer.py, deepseek-* rows, and
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

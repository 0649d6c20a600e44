"""Qwen3-MoE: Qwen3's attention (QK-norm, grouped key/value heads) with 128 fine-grained routed experts.

References: transformers' Qwen3MoeForCausalLM on the meta device (the catalog's counts), which the formula
must equal, and the published sizes (Qwen3 technical report: 30.5B total / 3.3B activated, 235B / 22B);
the per-block trace of the real model (benchmarks/memory/memory_per_layer.py, qwen3-30b-a3b rows).
"""

from __future__ import annotations

import json

import pytest

from planner.models.catalog import CATALOG_DIR
from planner.models.hf_config import spec_from_hf_config
from planner.models.resolve import resolve_model


@pytest.mark.parametrize("name, total_b, active_b", [("qwen3-30b-a3b", 30.5, 3.3), ("qwen3-235b-a22b", 235.1, 22.2)])
def test_counts_are_exact_and_the_published_sizes(name, total_b, active_b):
    spec = resolve_model(name)
    config = json.loads((CATALOG_DIR / "models" / f"{name}.json").read_text())["config"]
    formula = spec_from_hf_config(config, name=name).params
    assert formula.model_dump(exclude={"source", "source_detail"}) == spec.params.model_dump(
        exclude={"source", "source_detail"}
    )
    assert spec.params.total / 1e9 == pytest.approx(total_b, abs=0.06)
    assert spec.params.active_per_token / 1e9 == pytest.approx(active_b, abs=0.06)
    assert spec.num_experts == 128 and spec.experts_per_token == 8 and spec.shared_expert_ffn_size == 0

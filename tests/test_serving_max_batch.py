"""One "max batch" per plan: the most concurrent requests whose KV cache and activations fit, computed once
(planner/inference/memory.py, max_concurrent) and the same in the table, the regime and the reasons."""

from __future__ import annotations

import json

import pytest

from hardware_selector_cli.app import main
from planner.hardware.cluster import make_cluster
from planner.inference import InferenceRequest, serving_memory
from planner.models.resolve import resolve_model

SERVE_8B = ["plan", "--mode", "inference", "--model", "llama-3.1-8b", "--gpu", "H100-80GB", "--gpus-per-node", "1"]


@pytest.mark.parametrize("extra", [["--batch", "1000", "--weights", "fp8", "--kv-cache", "fp8"], ["--batch", "2000"]])
def test_the_table_the_regime_and_the_reasons_say_the_same_max_batch(capsys, extra):
    """The table said 478 and the reasons "476 requests ... the KV cache holds" (bf16 at 2000: 185 vs 181)."""
    assert main([*SERVE_8B, *extra, "--json"]) == 0
    best = json.loads(capsys.readouterr().out)["best"]
    held = best["max_running_per_replica"]
    assert best["max_batch"] == held * best["replicas"] and best["running_per_replica"] == held
    assert f"of the {held} a replica's KV cache holds" in best["reasons"][2]
    assert f"the replicas' memory holds {held} concurrent requests" in best["reasons"][3]


@pytest.mark.parametrize("weights, kv", [("fp8", "fp8"), ("bf16", "bf16"), ("int4", "bf16")])
def test_max_batch_is_the_largest_batch_whose_own_memory_fits(weights, kv):
    """The reference is the memory formula: n requests fit with their own activations, n + 1 do not."""
    spec, capacity = resolve_model("llama-3.1-8b"), make_cluster("H100-80GB", gpus_per_node=1).gpu.memory_bytes
    request = InferenceRequest.for_model(spec, batch=1000, weights=weights, kv_cache=kv)
    n = serving_memory(spec, request, capacity, 1, 1).max_batch
    at = {
        batch: serving_memory(spec, request.model_copy(update={"batch": batch}), capacity, 1, 1) for batch in (n, n + 1)
    }
    assert at[n].total <= at[n].usable < at[n + 1].total
    assert all(memory.max_batch == n for memory in at.values())  # whatever batch was asked

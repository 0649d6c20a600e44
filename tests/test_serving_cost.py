"""What a serving plan's tokens cost, with the price and its source (planner/inference/cost.py;
docs/inference.md, "Cost"), and the API's per-replica tokens/s defined as the total's share."""

from __future__ import annotations

import json

import pytest

from hardware_selector_cli.app import main
from planner.hardware.cluster import make_cluster

SERVE_8B = ["plan", "--mode", "inference", "--model", "llama-3.1-8b", "--gpu", "H100-80GB", "--gpus-per-node", "1",
            "--batch", "64"]  # fmt: skip


def _per_million(usd_per_gpu_hour: float, plan: dict) -> float:
    """The reference formula: price x GPUs / 3600 / tokens/s x 1e6."""
    gpus = plan["replicas"] * plan["tensor_parallel"] * plan["pipeline_parallel"]
    return usd_per_gpu_hour * gpus / 3600 / plan["cluster_tokens_per_s"] * 1e6


@pytest.mark.parametrize("price", [None, 5.0])
def test_the_cli_prices_the_tokens_at_the_catalog_or_the_given_price_and_names_it(monkeypatch, capsys, price):
    """--price was ignored and no cost printed at all."""
    monkeypatch.setenv("COLUMNS", "400")  # rich would wrap the source's URL inside a word
    extra = [] if price is None else ["--price", f"{price:g}"]
    gpu = make_cluster("H100-80GB", gpus_per_node=1, price_per_hour=price).gpu  # the catalog's, or the override
    assert gpu.price_usd_per_hour is not None
    assert main([*SERVE_8B, *extra, "--json"]) == 0
    best = json.loads(capsys.readouterr().out)["best"]
    assert best["usd_per_gpu_hour"] == gpu.price_usd_per_hour and best["price_source"] == gpu.price_source
    assert best["usd_per_million_tokens"] == pytest.approx(_per_million(gpu.price_usd_per_hour, best))
    assert (price is not None) == (best["price_source"] == "user override")
    assert main([*SERVE_8B, *extra]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"${best['usd_per_million_tokens']:,.3g} per million generated tokens: 1 GPU x {gpu.price_note()}" in out


def test_a_gpu_without_a_price_says_so():
    from planner.hardware.gpus import load_gpu_catalog
    from planner.inference.cost import cost_line, serving_cost

    unpriced = next(gpu for gpu in load_gpu_catalog() if gpu.kind == "gpu" and gpu.price_usd_per_hour is None)
    cost = serving_cost(unpriced, 1, 1000.0)
    assert cost.usd_per_million_tokens is None and cost_line(cost, 1, 1000.0) == f"cost per token unknown: {cost.price}"


def test_the_api_names_its_price_and_per_replica_tokens_add_up_to_the_total():
    """One replica reported 1632.1 tokens/s per replica above 1629.8 in all (a decode rate beside a
    whole-request rate); per replica is now the total's share, the decode rate a field of its own."""
    from hardware_selector import get_inference_config

    config = get_inference_config("text_generation", "llama-3.1-8b", gpu_count=1, batch_size=64, gpu="H100-80GB")
    throughput, plan = config["estimated_throughput"], config["plan"]
    assert config["replicas"] == 1 and throughput["tokens_per_s_per_replica"] == throughput["tokens_per_s"]
    assert throughput["decode_tokens_per_s_per_replica"] == plan.running_per_replica / plan.itl_s
    gpu = make_cluster("H100-80GB", gpus_per_node=1).gpu
    assert (config["usd_per_gpu_hour"], config["price_source"]) == (gpu.price_usd_per_hour, gpu.price_source)
    assert config["usd_per_million_tokens"] == pytest.approx(
        _per_million(gpu.price_usd_per_hour, plan.model_dump() | {"replicas": config["replicas"]})
    )
    four = get_inference_config("text_generation", "llama-3.1-8b", gpu_count=4, batch_size=64, gpu="H100-80GB")
    share = four["estimated_throughput"]
    assert share["tokens_per_s_per_replica"] * four["replicas"] == pytest.approx(share["tokens_per_s"])

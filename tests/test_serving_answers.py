"""`plan --mode inference` says what it planned: training-only flags refused before any other path, and each
losing layout's gap in the objective's own quantity (docs/inference.md, "Layouts")."""

from __future__ import annotations

import json

import pytest

from hardware_selector_cli.app import main
from planner.units import format_seconds

SERVE_8B = ["plan", "--mode", "inference", "--model", "llama-3.1-8b", "--gpu", "H100-80GB", "--gpus-per-node", "1"]
SERVE_70B = ["plan", "--mode", "inference", "--model", "llama-2-70b", "--gpu", "H100-80GB", "--context", "2048",
             "--batch", "32", "--top", "20"]  # fmt: skip


def _json(capsys, argv: list[str]) -> dict:
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(
    "extra, named",
    [
        (["--clouds", "aws", "--batch", "64", "--context", "1000"], "--clouds"),
        (["--objective", "cost", "--clouds", "aws,lambda"], "--clouds"),
        (["--spot", "--clouds", "coreweave"], "--spot, --clouds"),
        (["--deadline", "7d"], "--deadline"),
        (["--tokens", "1e9"], "--tokens"),
    ],
)
def test_cloud_flags_in_inference_mode_are_refused_not_a_training_plan(capsys, extra, named):
    """--clouds used to take its own path first: a training cost table (ZeRO-1 on 32 x H100), exit 0."""
    assert main([*SERVE_8B, *extra]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert captured.out == "" and "\n" not in err
    assert err.startswith(f"error: {named}: training only, and --mode inference plans serving; drop")
    assert "drop --mode inference to plan training" in err and "or --mode inference" not in err


@pytest.mark.parametrize("objective", ["latency", "throughput"])
def test_a_losing_layout_states_its_gap_from_the_plans_own_numbers(capsys, objective):
    """Latency: the ITL ratio (once "54% worse time between tokens" for 2.18x the best's ITL); throughput:
    the share of tokens/s given up. The reference is each plan's ITL and tokens/s in the same answer."""
    document = _json(capsys, [*SERVE_70B, "--objective", objective])
    best, others = document["candidates"][0], document["candidates"][1:]
    assert len(others) >= 4
    for plan in others:
        label = plan_label(plan)
        why = document["rejected"][label]
        if "within 5%" in why:
            continue
        if objective == "latency":
            ratio = plan["itl_s"] / best["itl_s"]
            assert f"{ratio:.2f}x the time between tokens" in why, why
            assert f"({format_seconds(plan['itl_s'])} vs {format_seconds(best['itl_s'])})" in why, why
        else:
            lost = 1 - plan["cluster_tokens_per_s"] / best["cluster_tokens_per_s"]
            assert f"{lost:.0%} fewer tokens/s" in why, why
            assert f"({plan['cluster_tokens_per_s']:,.0f} vs {best['cluster_tokens_per_s']:,.0f})" in why, why
        assert "worse" not in why


def plan_label(plan: dict) -> str:
    from planner.inference import ServingPlan

    return ServingPlan.model_validate(plan).label


@pytest.mark.parametrize("batch, regime", [("1", "single request"), ("16", "batched")])
def test_every_ttft_is_printed_with_its_known_error_in_its_regime(capsys, batch, regime):
    """docs/accuracy.md's NIM rows are 36-39% above the estimate at 5-50 clients; the answer says so beside it."""
    from planner.inference.known_error import ttft_band

    assert main([*SERVE_8B, "--batch", batch, "--json"]) == 0
    best = json.loads(capsys.readouterr().out)["best"]
    assert best["regime"] == regime
    line = next(reason for reason in best["reasons"] if reason.startswith("TTFT "))
    assert f"ms ({best['bounds']['prefill']}-bound prefill" in line and f"; {ttft_band(regime)})" in line


@pytest.mark.parametrize("model", ["gpt-oss-20b", "qwen3-30b-a3b", "mixtral-8x7b"])
def test_more_clients_of_an_moe_model_never_serve_fewer_tokens(capsys, model):
    """An audit: two clients of gpt-oss-20b on one H100 served 133 tokens/s where one got 251: the other client's
    prompt was spread over every decode step as routed tokens, so each step read 74% of the experts. Its chunks
    ride on a share of the steps (planner/inference/roofline.py): continuous batching raises the decode batch, and
    the replica's tokens/s does not fall as clients are added in the batched regime (docs/inference.md)."""
    rates = []
    for batch in (1, 2, 4, 8):
        assert main(["plan", "--mode", "inference", "--model", model, "--gpu", "H100-80GB", "--gpus-per-node", "2",
                     "--batch", str(batch), "--json"]) == 0  # fmt: skip
        rates.append(json.loads(capsys.readouterr().out)["best"]["cluster_tokens_per_s"])
    assert rates == sorted(rates), rates
    assert rates[1] > 1.2 * rates[0]  # a second client's tokens mostly ride the same weight reads

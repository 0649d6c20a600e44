"""Serving times keep their precision and scale, costs their cents, and a count of one GPU reads "1 GPU".

References: hand-computed values for planner/units.py's formatters; the plans' own figures from `--json` (TTFT,
ITL; tokens/s and the price per GPU-hour, from which a cost is price x GPUs x tokens / tokens/s)."""

from __future__ import annotations

import json

import pytest

from hardware_selector_cli.app import main
from planner.units import format_dollars, format_seconds


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(0.000412, "0.412 ms"), (0.0412, "41.2 ms"), (0.9996, "1 s"), (2.8015, "2.8 s"), (59.98, "1 min"),
     (2801.526, "46.7 min"), (7200, "2 h"), (3e5, "3.47 d")],
)  # fmt: skip
def test_a_duration_keeps_three_significant_figures_in_a_readable_unit(seconds: float, shown: str) -> None:
    assert format_seconds(seconds) == shown


@pytest.mark.parametrize(
    ("dollars", "shown"), [(0, "$0"), (0.004, "<$0.01"), (0.0234, "$0.02"), (12.345, "$12.35"), (123.4, "$123"),
                           (12_345, "$12.3k")]
)  # fmt: skip
def test_a_cost_keeps_its_cents(dollars: float, shown: str) -> None:
    assert format_dollars(dollars) == shown


def _serve(capsys, *argv: str) -> tuple[dict, str]:
    assert main(["plan", "--mode", "inference", *argv, "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert main(["plan", "--mode", "inference", *argv]) == 0
    return document["best"], " ".join(capsys.readouterr().out.split())


def test_serving_times_are_neither_zero_nor_thousands_of_milliseconds(capsys) -> None:
    small, out = _serve(capsys, "--model", "gpt2", "--gpu", "H100-80GB", "--context", "1000")
    assert small["ttft_s"] < 1e-3 and f"TTFT {format_seconds(small['ttft_s'])} (" in out  # was "TTFT 0 ms"
    assert "TTFT 0 ms" not in out and format_seconds(small["itl_s"]) in out
    big, out = _serve(capsys, "--model", "llama-2-70b", "--gpu", "A100-80GB", "--gpus-per-node", "2",
                      "--batch", "1000")  # fmt: skip
    assert big["ttft_s"] > 600 and f"TTFT {format_seconds(big['ttft_s'])} (" in out  # was "TTFT 2,801,526 ms"
    assert format_seconds(big["ttft_s"]).endswith(" min")


def test_one_gpu_is_not_one_gpus(capsys) -> None:
    assert main(["plan", "--mode", "inference", "--model", "llama-2-70b", "--gpu", "T4", "--gpus-per-node", "1"]) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert "at 1 GPU, " in out and "1 GPUs" not in out


def test_the_training_tables_cost_shows_cents(capsys) -> None:
    plan = ["plan", "--model", "gpt2", "--gpu", "H100-80GB", "--gpus-per-node", "1", "--strategies", "ddp"]
    for tokens in ("1e6", "1e8"):
        assert main([*plan, "--tokens", tokens, "--json"]) == 0
        speed = json.loads(capsys.readouterr().out)["best"]["throughput"]
        cost = speed["price_usd_per_gpu_hour"] * float(tokens) / speed["tokens_per_s"] / 3600  # one GPU
        assert main([*plan, "--tokens", tokens]) == 0
        row = next(line for line in capsys.readouterr().out.splitlines() if line.strip().startswith("1 DDP"))
        assert row.split()[-1] == format_dollars(cost) and format_dollars(cost) != "$0"


def test_the_cost_objectives_reason_keeps_cents(capsys) -> None:
    plan = ["plan", "--model", "gpt2", "--gpu", "H100-80GB", "--gpus-per-node", "1", "--strategies", "ddp"]
    assert main([*plan, "--objective", "cost", "--tokens", "1e8", "--json"]) == 0
    best = json.loads(capsys.readouterr().out)["best"]
    cost = best["to_train"]["cost_usd"]
    assert 0.01 < cost < 100  # a run costing cents, which the reason said as "$0"
    assert f"by cost: {format_dollars(cost, compact=False)} to train" in " ".join(best["reasons"])
    assert format_dollars(17_215.4, compact=False) == "$17,215"  # a sentence keeps whole dollars above $100

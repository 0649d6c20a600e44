"""`plan`'s cost and time-to-train columns from the command line: the token count each is for and where it comes
from (--tokens, a run's own --steps, the Chinchilla default and when that is not the run's), and the cost
`--json` carries beside the table's ranking. Prices themselves: tests/test_cost.py, tests/test_cost_gpu_price.py.
"""

from __future__ import annotations

import json

import pytest

from hardware_selector_cli.app import main
from tests.test_plan_cli import PLAN_ARGS


def test_the_cost_line_says_where_its_token_count_comes_from(capsys, monkeypatch):
    """Without --tokens the cost was "to train 1.61e+11 tokens ... (--price, --tokens)": a number without its rule."""
    monkeypatch.setenv("COLUMNS", "250")
    assert main(PLAN_ARGS) == 0
    assert "tokens (20 per parameter, Chinchilla; --tokens) at $" in capsys.readouterr().out
    assert main([*PLAN_ARGS, "--tokens", "1e9"]) == 0
    assert "cost: to train 1e+09 tokens (--tokens) at $" in capsys.readouterr().out
    assert main([*PLAN_ARGS, "--objective", "time-to-train"]) == 0
    assert "days: wall time to train" in (out := capsys.readouterr().out) and "Chinchilla; --tokens)" in out


def test_cost_json_carries_the_cost_the_table_ranks_by(capsys):
    """Audit: `plan --objective cost --json` left out the cost it ranked by (only a reasons string had it). Each plan's
    to_train holds it, computed as tokens / tokens/s x GPUs x price, with the price's source."""

    args = ["plan", "--model", "llama-2-7b", "--gpu", "A100-80GB", "--nodes", "4", "--objective", "cost",
            "--tokens", "2e11", "--no-calibration"]  # fmt: skip
    assert main([*args, "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    for plan in document["candidates"]:
        speed, cost = plan["throughput"], plan["to_train"]
        hours = 2e11 / speed["tokens_per_s"] * 32 / 3600
        assert cost["gpu_hours"] == pytest.approx(hours) and cost["time_s"] == pytest.approx(
            2e11 / speed["tokens_per_s"]
        )
        assert cost["cost_usd"] == pytest.approx(hours * cost["price_usd_per_gpu_hour"])
        assert cost["price_source"].startswith("the cheapest on-demand whole-server price (the plan has several nodes)")
    costs = [plan["to_train"]["cost_usd"] for plan in document["candidates"]]
    from planner.search.explain import TIE_TOLERANCE

    # The best is the cheapest, or a simpler plan within the estimate's error of it (docs/search.md).
    assert document["best"]["to_train"] == document["candidates"][0]["to_train"]
    assert min(costs) <= costs[0] <= min(costs) / (1 - TIE_TOLERANCE)
    assert f"${costs[0]:,.0f} to train 2e+11 tokens" in " ".join(document["best"]["reasons"])


def test_the_cost_counts_the_tokens_of_the_runs_own_steps(tmp_path, capsys):
    """An audit: the README's fine-tune (--steps 40 at global batch 16) was costed at 20 tokens per parameter,
    a run nobody asked for. With --steps and --global-batch the columns count steps x batch x seq tokens, and
    say so; --tokens still wins; without either, the default is named."""

    base = ["plan", "--model", "gpt2", "--gpu", "H100-80GB", "--seq-len", "128", "--global-batch", "16",
            "--strategies", "ddp", "--no-calibration", "--json"]  # fmt: skip
    assert main([*base, "--emit", str(tmp_path / "a"), "--steps", "40"]) == 0
    costed = json.loads(capsys.readouterr().out)["best"]["to_train"]
    assert costed["tokens"] == 40 * 16 * 128 and costed["tokens_source"] == "--steps 40 x global batch 16 x seq 128"
    assert main([*base, "--emit", str(tmp_path / "b"), "--steps", "40", "--tokens", "1e9"]) == 0
    assert json.loads(capsys.readouterr().out)["best"]["to_train"]["tokens_source"] == "--tokens"
    assert main(base) == 0
    default = json.loads(capsys.readouterr().out)["best"]["to_train"]
    assert default["tokens_source"].startswith("20 per parameter, Chinchilla")
    assert default["tokens"] == 20 * resolve_model_params("gpt2")
    assert main([*base[:-1], "--emit", str(tmp_path / "c"), "--steps", "40"]) == 0
    assert "cost: to train 8.19e+04 tokens (--steps 40 x global batch 16 x seq 128)" in " ".join(
        capsys.readouterr().out.split()
    )


def test_the_emitted_plan_json_carries_the_runs_own_cost(tmp_path, capsys):
    """An audit: plan.json had no cost block, where `plan --emit --steps --json` printed one. plan.json's
    `to_train` is the same block for the run's own --steps (computed once, planner/throughput/to_train.py);
    a run sized in epochs has null there (its tokens are counted only at `train`)."""

    base = ["plan", "--model", "gpt2", "--gpu", "H100-80GB", "--seq-len", "128", "--global-batch", "16",
            "--strategies", "ddp", "--no-calibration", "--json"]  # fmt: skip
    assert main([*base, "--gpus-per-node", "8", "--emit", str(tmp_path / "a"), "--steps", "40"]) == 0
    printed = json.loads(capsys.readouterr().out)["best"]["to_train"]
    written = json.loads((tmp_path / "a" / "plan.json").read_text())["to_train"]
    assert written == printed and written["tokens"] == 40 * 16 * 128 and written["cost_usd"] > 0
    assert written["gpu_hours"] == pytest.approx(written["time_s"] / 3600 * 8)  # 8 GPUs
    assert main([*base, "--emit", str(tmp_path / "b"), "--epochs", "2"]) == 0
    capsys.readouterr()
    assert json.loads((tmp_path / "b" / "plan.json").read_text())["to_train"] is None


def test_an_emitted_run_sized_in_epochs_is_not_costed_as_the_chinchilla_default(tmp_path, capsys):
    """Audit: `--emit DIR --epochs 3` printed `cost: to train 2.55e+06 tokens (20 per parameter, Chinchilla;
    --tokens)` as if that were the run, which trains 3 passes over its data (counted only when `train` tokenizes
    it). The figure shown is still the default, 20 x parameters, and it says it is not the run's and what gives it."""

    base = ["plan", "--model", "gpt2", "--gpu", "cpu", "--gpus-per-node", "2", "--seq-len", "64", "--global-batch",
            "8", "--price", "2", "--no-calibration"]  # fmt: skip
    assert main([*base, "--emit", str(tmp_path / "a"), "--epochs", "3", "--json"]) == 0
    to_train = json.loads(capsys.readouterr().out)["best"]["to_train"]
    assert to_train["tokens"] == 20 * resolve_model_params("gpt2")  # the default, not the run's
    assert to_train["tokens_source"].startswith("20 per parameter, Chinchilla, the default: NOT this run's, which "
                                                "trains 3 epoch(s) over the run's data")  # fmt: skip
    assert "give --tokens (the data's tokens x epochs) or --steps" in to_train["tokens_source"]
    assert main([*base, "--emit", str(tmp_path / "b")]) == 0  # no --steps: one epoch, the run's default
    out = " ".join(capsys.readouterr().out.split())
    assert "Chinchilla, the default: NOT this run's, which trains 1 epoch(s)" in out
    assert "(20 per parameter, Chinchilla; --tokens)" not in out


def resolve_model_params(name: str) -> int:
    from planner.models.resolve import resolve_model

    return resolve_model(name).params.total

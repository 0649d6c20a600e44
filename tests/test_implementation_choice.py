"""`--implementation`: predict the speed of another codebase's run (planner/throughput/implementation.py).

Reference: the published-runs validator (benchmarks/validate_published_runs.py),
which estimates each published run with its codebase's preset. The path
`estimate --implementation` takes gives the validator's number for a
Megatron-LM row of Narayanan et al. Table 1, within the validator's own
accuracy of the published figure; our stack's prediction is slower on a
Llama (transformers' eager RMSNorm and rotary), and the estimate names the
preset it assumed.
"""

from __future__ import annotations

import json

import pytest

from benchmarks.validate_published_runs import compare, plan_inputs, published_rows
from hardware_selector_cli.app import main
from planner.evaluate import evaluate


def test_the_cli_path_reproduces_the_validators_megatron_row():
    row = next(row for row in published_rows() if row["id"] == "megatron-2021-7.5b")
    spec, config, cluster = plan_inputs(row)
    megatron = evaluate(spec, config, cluster, implementation="megatron").throughput
    ours = evaluate(spec, config, cluster).throughput
    assert megatron is not None and ours is not None
    validated = compare(row)
    peak = megatron.tflops_per_gpu / megatron.mfu
    assert megatron.hfu * peak == pytest.approx(validated.predicted_tflops, rel=1e-9)
    assert validated.predicted_tflops == pytest.approx(
        validated.published_tflops, rel=0.15
    )  # 142 TFLOP/s per GPU published
    assert ours.step_time_s == megatron.step_time_s  # a GPT: LayerNorm, learned positions, no pipeline: no difference
    assert "Megatron-LM" in megatron.sources["implementation"] and "this project" in ours.sources["implementation"]


def test_plan_and_estimate_take_the_flag_and_refuse_what_cannot_apply(capsys, tmp_path):
    base = ["--model", "llama-2-7b", "--gpu", "A100-80GB", "--gpus-per-node", "8", "--seq-len", "4096", "--json"]
    assert main(["plan", *base, "--implementation", "llm-foundry"]) == 0
    best = json.loads(capsys.readouterr().out)["best"]
    assert best["throughput"]["sources"]["implementation"].startswith("assumed: llm-foundry")
    assert main(["plan", *base]) == 0
    ours = json.loads(capsys.readouterr().out)["best"]
    # Llama's RMSNorm and rotary: fused in llm-foundry, eager op chains in transformers' modules.
    assert best["throughput"]["mfu"] > ours["throughput"]["mfu"]
    assert main(["plan", *base, "--implementation", "tpu"]) == 2
    assert "--implementation must be one of ours, llm-foundry" in capsys.readouterr().err
    assert main(["plan", *base, "--implementation", "megatron", "--emit", str(tmp_path / "x")]) == 2
    assert "--emit writes configs for our stacks" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()

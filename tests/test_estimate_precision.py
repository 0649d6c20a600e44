"""`estimate` takes its precision by `plan`'s rule (planner/search/request.training_precision): left out, the
best the GPU has (bf16-mixed, else fp16-mixed, else fp32); given but missing on the GPU, refused in the one line
`plan` refuses it with, exit 2. The reference is `plan`'s own answer for the same model and GPU."""

from __future__ import annotations

import json

import pytest

from hardware_selector_cli.app import main

GPUS = (["V100-32GB"], ["T4", "--gpus-per-node", "1"], ["A100-80GB"], ["cpu", "--gpus-per-node", "1"])


def _json(capsys, *argv: str) -> dict:
    code = main([*argv, "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return json.loads(captured.out)


@pytest.mark.parametrize("gpu", GPUS, ids=lambda gpu: gpu[0])
def test_estimate_defaults_to_plans_precision(capsys, gpu: list[str]) -> None:
    planned = _json(capsys, "plan", "--model", "gpt2", "--gpu", *gpu, "--strategies", "ddp")
    estimated = _json(capsys, "estimate", "--model", "gpt2", "--gpu", *gpu)
    assert estimated["config"]["precision"] == planned["best"]["config"]["precision"]
    assert estimated["throughput"] is not None, estimated.get("throughput_error")  # the speed is estimated too


def test_estimate_refuses_a_precision_the_gpu_lacks_as_plan_does(capsys) -> None:
    refusals = []
    for command in ("plan", "estimate"):
        code = main([command, "--model", "gpt2", "--gpu", "V100-32GB", "--precision", "bf16-mixed"])
        captured = capsys.readouterr()
        assert code == 2 and captured.out == ""
        refusals.append(captured.err)
    assert refusals[0] == refusals[1] == "error: V100-32GB has no bf16 support; use fp16-mixed\n"


def test_the_table_says_the_precision_and_where_it_came_from(capsys) -> None:
    assert main(["estimate", "--model", "gpt2", "--gpu", "V100-32GB"]) == 0
    assert "gpt2 on 8 x V100-32GB, ddp, fp16-mixed (the GPU's best)" in capsys.readouterr().out
    assert main(["estimate", "--model", "gpt2", "--gpu", "V100-32GB", "--precision", "fp32"]) == 0
    assert "gpt2 on 8 x V100-32GB, ddp, fp32 (--precision)" in capsys.readouterr().out

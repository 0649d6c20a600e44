"""The run's anomaly rules: NaN/Inf, loss spikes and gradient-norm spikes, each warn, skip-step or stop.

The guard is unit-tested on value sequences against its definition (a value
above factor x its moving average over `window` healthy steps). Then the
runner, on one process, starts from a checkpoint with a NaN in one weight
(a damaged file, as users meet them): with `stop` it checkpoints the state
before the bad update, says why in one line and exits 3; with `skip-step`
it never applies a non-finite step.
"""

from __future__ import annotations

import json
import math

import pytest

from backends.runner.anomaly import AnomalyGuard, refuse_unsupported
from planner.contract.run_config import AnomalyPolicy, DataConfig, SpikeRule
from planner.rundir.write import RunOptions, emit_run_folder
from scripts.demo_checkpoint import make_local_gpt2
from tests.distributed import REPO_ROOT, cpu_env
from tests.emit_plans import make_plan
from tests.warm_process import run_python


class Outcome:
    def __init__(self, loss, grad_norm=1.0, applied=True):
        self.loss, self.grad_norm, self.applied = loss, grad_norm, applied
        self.overflow, self.norm_checked_before_update = False, True


def feed(guard, values):
    verdicts = []
    for value in values:
        applied = guard(value, 1.0)
        verdicts.append(guard.after_step(Outcome(value, applied=applied)).action)
    return verdicts


def test_a_loss_spike_is_judged_against_the_moving_average_of_healthy_steps():
    policy = AnomalyPolicy(loss_spike=SpikeRule(action="skip-step", factor=2.0, window=3))
    guard = AnomalyGuard(policy)
    # Not judged until the window holds 3 values; 7 > 2 x mean(3, 3, 3); the skipped 7 does not enter the
    # average, 5.9 does: 8 > 2 x mean(3, 3, 5.9) = 7.93.
    assert feed(guard, [3, 3, 3, 7, 3, 5.9, 8]) == ["ok", "ok", "ok", "skip-step", "ok", "ok", "skip-step"]
    assert guard.counts == {"skip-step": 2}
    restored = AnomalyGuard(policy)
    restored.load_state_dict(json.loads(json.dumps(guard.state_dict())))  # through a checkpoint's JSON
    assert feed(restored, [100]) == ["skip-step"]


def test_non_finite_values_take_the_non_finite_action_and_the_worst_verdict_wins():
    guard = AnomalyGuard(AnomalyPolicy(non_finite="stop"))
    assert guard(float("nan"), 1.0) is False and guard.pending.action == "stop"
    assert "the loss is nan" in guard.pending.reason
    assert guard(1.0, float("inf")) is False and "gradient norm is inf" in guard.pending.reason
    warn_only = AnomalyGuard(AnomalyPolicy(non_finite="warn"))
    assert warn_only(math.inf, None) is True and warn_only.pending.action == "warn"


def test_skip_step_is_refused_where_the_norm_comes_after_the_update():
    policy = AnomalyPolicy(grad_norm_spike=SpikeRule(action="skip-step"))
    assert "not available with deepspeed" in refuse_unsupported(policy, "deepspeed", False)
    assert refuse_unsupported(policy, "engine", True) is None
    assert refuse_unsupported(AnomalyPolicy(non_finite="stop"), "deepspeed", False) is None


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    import torch
    from safetensors.torch import load_file, save_file

    root = tmp_path_factory.mktemp("anomaly")
    model_dir, corpus = make_local_gpt2(root / "user")
    weights = load_file(model_dir / "model.safetensors")
    weights["transformer.h.1.mlp.c_fc.weight"][0, 0] = float("nan")
    save_file(weights, model_dir / "model.safetensors", metadata={"format": "pt"})
    assert torch.isnan(load_file(model_dir / "model.safetensors")["transformer.h.1.mlp.c_fc.weight"]).any()
    plan = make_plan(str(model_dir), gpus_per_node=1, strategy="ddp", seq_len=64, micro_batch=4, grad_accum=1)
    emit_run_folder(plan, root / "run", options=RunOptions(data=DataConfig(train=[str(corpus)], eval_fraction=0)))
    return root / "run"


def runner(run_dir, *args):
    return run_python(["-m", "backends.run", "--plan", str(run_dir), *args], cwd=REPO_ROOT, env=cpu_env(), timeout=300)


def train_rows(run_dir):
    return [
        row for row in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines()) if row["kind"] == "train"
    ]


@pytest.mark.slow
def test_stop_checkpoints_before_the_bad_update_and_says_why(folder):
    completed = runner(folder, "--steps", "6", "--no-resume")
    lines = completed.stderr.strip().splitlines()
    assert completed.returncode == 3 and len(lines) == 1, completed.stderr[-2000:]
    assert lines[0].startswith("stopped: training stopped at step 1: the loss is nan")
    (row,) = train_rows(folder)
    assert row["anomaly"]["action"] == "stop" and not row["applied"]
    assert (folder / "checkpoints" / "global_step1").is_dir()
    assert json.loads((folder / "run_status.json").read_text())["state"] == "stopped"


@pytest.mark.slow
def test_skip_step_never_applies_a_non_finite_step(folder):
    completed = runner(folder, "--steps", "3", "--no-resume", "--on-non-finite", "skip-step", "--save-every", "0")
    assert completed.returncode == 0, completed.stderr[-2000:]
    rows = train_rows(folder)
    assert [row["step"] for row in rows] == [1, 2, 3]
    assert all(not math.isfinite(row["loss"]) for row in rows)
    assert all(row["anomaly"]["action"] == "skip-step" and not row["applied"] for row in rows)
    assert completed.stdout.count("warning: step") == 3

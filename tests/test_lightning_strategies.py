"""PyTorch Lightning: PlanStrategy and EngineStrategy fit a LightningModule as Lightning's own DDP does.

Reference: the same module, batches and optimizer under Lightning's plain
DDPStrategy on the same 2 CPU ranks. PlanStrategy (from a DDP and an FSDP run
folder, with plan_trainer_kwargs) and EngineStrategy at ZeRO 1-3 must give its
losses and final weights. The checks before the first step, in one process.
"""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from tests.distributed import run_torchrun


def plan_cli(*args) -> None:
    import hardware_selector

    with contextlib.redirect_stdout(io.StringIO()):
        assert hardware_selector.main([str(arg) for arg in args]) == 0


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    from scripts.demo_checkpoint import make_local_gpt2

    root = tmp_path_factory.mktemp("lightning")
    model_dir, _ = make_local_gpt2(root / "user")
    made = {}
    for kind in ("ddp", "fsdp"):
        plan_cli("plan", "-m", model_dir, "--gpu", "cpu", "--gpus-per-node", "2", "--seq-len", "32",
                 "--global-batch", "16", "--micro-batch", "4", "--strategies", kind, "--emit", root / kind)  # fmt: skip
        made[kind] = root / kind
    return model_dir, made


@pytest.mark.slow
def test_every_door_fits_the_losses_of_lightnings_own_ddp(folders, tmp_path):
    model_dir, made = folders
    out = tmp_path / "results.json"
    run_torchrun(["tests/engine_jobs/lightning_job.py", str(out), str(made["ddp"]), str(made["fsdp"]), str(model_dir)],
                 nproc=2, timeout=600)  # fmt: skip
    results = json.loads(out.read_text())
    reference = results["reference-ddp"]
    assert len(reference) == 6 and reference[0] != reference[-1]  # 3 steps of 2 accumulated micro-batches
    for name in ("plan-ddp", "plan-fsdp", "engine-zero1", "engine-zero2", "engine-zero3"):
        assert results[name] == pytest.approx(reference, rel=1e-4), name
        assert results[name + "/weights"] == pytest.approx(results["reference-ddp/weights"], rel=1e-5), name


def test_a_plan_strategy_checks_the_trainer_before_the_first_step(folders):
    import lightning.pytorch as pl

    from hardware_selector.integrations.lightning import PlanStrategy, plan_trainer_kwargs
    from planner.errors import UserInputError

    _, made = folders
    kwargs = plan_trainer_kwargs(made["ddp"])
    assert kwargs["devices"] == 2 and kwargs["precision"] == "32-true" and kwargs["accelerator"] == "cpu"
    trainer = pl.Trainer(strategy=PlanStrategy(made["ddp"]), accelerator="cpu", devices=1, precision="bf16-mixed",
                         accumulate_grad_batches=5, logger=False)  # fmt: skip
    with pytest.raises(UserInputError) as caught:
        trainer.strategy.setup(trainer)
    message = str(caught.value)
    assert "\n" not in message and "precision bf16-mixed (plan 32-true)" in message and "global batch" in message


def test_lightnings_deepspeed_on_cpu_points_at_the_engine(folders, tmp_path):
    from hardware_selector.integrations.lightning import PlanStrategy
    from planner.errors import UserInputError

    model_dir, _ = folders
    plan_cli("plan", "-m", model_dir, "--gpu", "cpu", "--gpus-per-node", "2", "--seq-len", "32",
             "--strategies", "zero2", "--emit", tmp_path / "ds")  # fmt: skip
    with pytest.raises(UserInputError, match=r"CUDA GPUs only.*EngineStrategy\(\{'zero_optimization': \{'stage': 2"):
        PlanStrategy(tmp_path / "ds")

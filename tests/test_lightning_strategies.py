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
    # plan_trainer_kwargs' PlanMonitor recorded each plan door's fit as `train` records a run: the plan's own step
    # on the CPU processes a `--gpu cpu` plan predicts, so beside the plan's prediction (calibration's pair).
    from benchmarks_db.store import BenchmarkStore
    from planner.rundir.plan_file import read_plan_file

    stored = {record.strategy: record for record in BenchmarkStore(f"{out}.duckdb").runs()}
    assert sorted(stored) == ["ddp", "fsdp"]
    for kind, record in stored.items():
        plan, run = read_plan_file(made[kind])
        assert (record.runner, record.gpu_name, record.gpu_count, record.steps_measured) == ("lightning", "cpu", 2, 2)
        assert (record.micro_batch, record.grad_accum, record.global_batch) == (4, 2, 16)
        assert record.predicted_step_time_s == pytest.approx(run.predicted.step_time_s)
        assert record.tokens_per_s == pytest.approx(16 * 32 / record.step_time_median_s)


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


def test_plan_monitor_times_optimizer_steps_and_records_a_run_of_another_step_without_the_prediction(folders, tmp_path):
    """One CPU process for a 2-rank plan: the global batch differs, so the run is said not to be the plan's step,
    its lines compare nothing, and its record carries no prediction (the runner's rule, as PlanCallback's)."""
    import lightning.pytorch as pl
    import torch

    from benchmarks_db.store import BenchmarkStore
    from hardware_selector.integrations import PlanMonitor

    class Tiny(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            return self.linear(batch).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    _, made = folders
    said: list[str] = []
    monitor = PlanMonitor(made["ddp"], record=True, db=tmp_path / "runs.duckdb", say=said.append)
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_steps=3, accumulate_grad_batches=2, callbacks=[monitor],
                         log_every_n_steps=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False)  # fmt: skip
    trainer.fit(Tiny(), torch.utils.data.DataLoader(torch.randn(24, 4), batch_size=4))
    assert len(monitor.step_times.values) == 3  # 6 micro-batches, 3 optimizer steps
    assert said[0] == (
        "warning: the Lightning Trainer does not run the plan: the plan has 2 ranks, this run 1: pass devices=2, "
        "num_nodes=1 (plan_trainer_kwargs(plan) sets them) (or plan again for 1); "
        "its step times are not compared with the plan's"
    )
    lines = said[1:-1]  # steps 2 and 3 (the first warms up)
    assert [line.split(":")[0] for line in lines] == ["step 2", "step 3"]
    assert all(line.endswith("(CPU processes: the plan's GPU predictions are not compared)") for line in lines)
    (stored,) = BenchmarkStore(tmp_path / "runs.duckdb").runs()
    assert said[-1] == f"recorded run {stored.id[:12]} in the benchmark database"
    assert (stored.runner, stored.gpu_count, stored.micro_batch, stored.grad_accum) == ("lightning", 1, 4, 2)
    assert stored.predicted_step_time_s is None
    assert stored.step_time_median_s == pytest.approx(monitor.step_times.median())


@contextlib.contextmanager
def _lightnings_process_group_left_behind():
    """An in-process Lightning DDP fit sets MASTER_ADDR, RANK and the like and leaves its process group up: both
    undone, so that later tests in this worker see no launcher (tests/test_launch_hostfile.py, ...)."""
    import os

    import torch.distributed as dist

    saved = dict(os.environ)
    try:
        yield
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
        os.environ.clear()
        os.environ.update(saved)


def test_a_ddp_plan_strategy_checkpoints_what_the_plan_checkpoints(folders, tmp_path):
    """Lightning's DDPStrategy recomputes nothing; PlanStrategy puts the plan's activation checkpointing on the
    module's repeated blocks before DDP wraps it (the FSDP one did already), and the fit's losses are those of the
    same module without it (recomputation changes no number). One CPU process."""
    import lightning.pytorch as pl
    import torch

    from backends.parts.activation_checkpointing import applied_mode
    from hardware_selector.integrations.lightning import PlanStrategy, plan_trainer_kwargs
    from tests.engine_jobs.lightning_job import CausalLM

    model_dir, _ = folders
    plan_cli("plan", "-m", model_dir, "--gpu", "cpu", "--gpus-per-node", "1", "--seq-len", "32", "--global-batch",
             "4", "--micro-batch", "2", "--strategies", "ddp", "--ac", "full", "--emit", tmp_path / "full")  # fmt: skip
    blocks = torch.randint(0, 256, (8, 32), generator=torch.Generator().manual_seed(3))
    losses = {}
    runs = {}  # a block attention module calls: twice a micro-batch when the block is recomputed
    for name, strategy in (("plan", PlanStrategy(tmp_path / "full")), ("plain", "ddp")):
        module = CausalLM(str(model_dir))
        calls = runs[name] = []
        module.model.transformer.h[0].attn.register_forward_hook(lambda *_, calls=calls: calls.append(1))
        kwargs = {**plan_trainer_kwargs(tmp_path / "full", record=False), "strategy": strategy}
        if name == "plain":
            kwargs["callbacks"] = []
        with _lightnings_process_group_left_behind():
            trainer = pl.Trainer(**kwargs, max_steps=2, logger=False, enable_checkpointing=False,
                                 enable_progress_bar=False, enable_model_summary=False)  # fmt: skip
            trainer.fit(module, torch.utils.data.DataLoader(blocks, batch_size=2))
        losses[name] = module.losses
        assert applied_mode(module) == ("full" if name == "plan" else "none")
    assert losses["plan"] == pytest.approx(losses["plain"], rel=1e-6)
    assert len(runs["plan"]) == 2 * len(runs["plain"]) == 8  # 4 micro-batches: recomputed under the plan, not without

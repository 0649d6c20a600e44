"""PyTorch Lightning doors: `PlanStrategy(plan)` (Lightning's own strategies, set from a plan) and
`EngineStrategy(config)` (a LightningModule on our engine). Needs `pip install hardware-selector[lightning]`.

    from hardware_selector.integrations.lightning import EngineStrategy, PlanStrategy, plan_trainer_kwargs

    trainer = L.Trainer(**plan_trainer_kwargs("runs/x"), max_steps=100)      # strategy, devices, precision, ...
    trainer = L.Trainer(strategy=EngineStrategy({"zero_optimization": {"stage": 3}}), devices=2)

- plan_trainer_kwargs also puts a PlanMonitor among the callbacks: the run
  measured against the plan and recorded for calibration (lightning_monitor.py).
- PlanStrategy picks Lightning's DDPStrategy, its FSDP2 ModelParallelStrategy
  (sharding each repeated block and the root as the plan says, with CPU
  offload and activation checkpointing) or DeepSpeedStrategy, whose config is
  the plan's own
  ds_config (planner/emit/deepspeed_json.py). At setup it checks the
  Trainer's accumulation, world size and precision against the plan, one line
  naming each difference (backends/integrations/plan_check.py).
  plan_trainer_kwargs gives the Trainer arguments that match.
- EngineStrategy runs the LightningModule under our ZeRO 1-3 as Lightning's
  DeepSpeedStrategy runs DeepSpeed's: the module's one optimizer is read into
  the engine config (backends/engine/initialize_args.py), the engine accumulates
  (Trainer accumulate_grad_batches becomes gradient_accumulation_steps) and
  steps at the boundaries. A scheduler from configure_optimizers is refused
  in one line: give the engine config a scheduler block.
Lightning's DeepSpeedStrategy runs on CUDA only; on CPU processes a DeepSpeed
plan is one line pointing at EngineStrategy (ZeRO on our engine, gloo).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

try:
    import lightning.pytorch as pl
except ImportError:  # an optional extra: say which
    from planner.errors import UserInputError as _Missing

    raise _Missing("the Lightning strategies need Lightning: pip install 'hardware-selector[lightning]'") from None
import torch
from lightning.pytorch.strategies import DDPStrategy, DeepSpeedStrategy, ModelParallelStrategy, Strategy

from backends.integrations.plan_check import LIGHTNING_PRECISION, lightning_differences, mismatch_line
from planner.contract.run_config import RunConfig
from planner.errors import UserInputError
from planner.plan import Plan
from planner.rundir.plan_file import plan_and_run
from planner.training_config import FsdpSharding, Offload
from planner.training_config import Strategy as PlannedStrategy


def plan_trainer_kwargs(
    plan: Plan | str | Path, *, record: bool | None = None, db: str | Path | None = None
) -> dict[str, Any]:
    """Keyword arguments of lightning.Trainer that run the plan: strategy, devices, nodes, precision,
    accumulation and clipping, and a PlanMonitor among the callbacks that measures the run against the plan and
    records it (`record`, `db`: lightning_monitor.py). Add max_steps, ...; add your callbacks to the list."""
    from backends.integrations.lightning_monitor import PlanMonitor

    _, run = plan_and_run(plan)
    return {
        "callbacks": [PlanMonitor(plan, record=record, db=db)],
        "strategy": PlanStrategy(plan),
        "accelerator": "gpu" if run.device == "cuda" else "cpu",
        "devices": run.nproc_per_node,
        "num_nodes": run.num_nodes,
        "precision": LIGHTNING_PRECISION[run.mixed_precision],
        "accumulate_grad_batches": run.grad_accum,
        "gradient_clip_val": run.optim.gradient_clipping or None,
    }


def PlanStrategy(source: Plan | str | Path) -> Strategy:  # noqa: N802 (a factory named like the class it returns)
    """Lightning's own strategy for the plan, configured from it, checking the Trainer at setup."""
    plan, run = plan_and_run(source)
    kind = plan.config.strategy
    if kind is PlannedStrategy.DDP:
        return _checked(DDPStrategy, plan, run)(process_group_backend=run.dist_backend)
    if kind is PlannedStrategy.FSDP:
        return _checked(PlanFSDP2Strategy, plan, run)(plan, run)
    if kind is PlannedStrategy.DEEPSPEED:
        if run.device != "cuda":
            raise UserInputError(
                "Lightning's DeepSpeedStrategy runs on CUDA GPUs only; on CPU processes run the plan's ZeRO stage "
                f"with EngineStrategy({{'zero_optimization': {{'stage': {plan.config.zero_stage}}}}})"
            )
        return _checked(DeepSpeedStrategy, plan, run)(config=_ds_config_of(source))
    raise UserInputError(
        f"this plan splits the model over ranks ({run.layout.describe()}), which only our engine runs; "
        "use `hardware-selector train DIR`, or plan without tp/pp for Lightning"
    )


def _ds_config_of(source: Plan | str | Path) -> dict:
    """The run folder's ds_config.json: the plan's DeepSpeed config as the emitter wrote it."""
    if isinstance(source, Plan):
        raise UserInputError(
            "a DeepSpeed plan runs from its run folder: hardware_selector.emit_run_folder(plan, DIR), then PlanStrategy(DIR)"
        )
    folder = Path(source) if Path(source).is_dir() else Path(source).parent
    from planner.contract.schema import read_json_file

    return read_json_file(folder / "ds_config.json", "re-emit the run folder")


class PlanFSDP2Strategy(ModelParallelStrategy):
    """Lightning's FSDP2 strategy with the plan's sharding applied for you (no configure_model needed):
    activation checkpointing on the repeated blocks, then fully_shard on each block and on the module's
    top-level parts, over the plan's mesh (1-D, or 2-D for hybrid and no sharding), as our FSDP runner
    does (backends/adapters/fsdp.py). FSDP2 runs on CPU processes too; Lightning's FSDPStrategy (FSDP1)
    needs an accelerator."""

    def __init__(self, plan: Plan, run: RunConfig):
        super().__init__(data_parallel_size=1, tensor_parallel_size=1, process_group_backend=run.dist_backend)
        self.plan, self.run = plan, run

    def setup_environment(self) -> None:
        self._data_parallel_size = self.num_nodes * self.num_processes  # every rank holds a data shard
        super().setup_environment()

    def setup(self, trainer: pl.Trainer) -> None:
        from lightning.pytorch.trainer.states import TrainerFn

        assert self.accelerator is not None and self.lightning_module is not None
        self.accelerator.setup(trainer)
        self._shard(self.lightning_module)
        self.model = self.precision_plugin.convert_module(self.lightning_module)
        self.model_to_device()
        self.barrier()
        if trainer.state.fn == TrainerFn.FITTING:
            self.setup_optimizers(trainer)
        self.setup_precision_plugin()

    def _shard(self, module: torch.nn.Module) -> None:
        from torch.distributed.fsdp import CPUOffloadPolicy, OffloadPolicy, fully_shard

        from backends.adapters.fsdp import fsdp_mesh
        from backends.decoder_anatomy import repeated_blocks
        from backends.parallelize import ParallelizeConfig, parallelize
        from planner.contract.layout import ParallelDims

        config = self.plan.config
        # Checkpointing only: Lightning's own precision plugin and loop run the rest.
        parallelize(
            module, ParallelDims(), ParallelizeConfig(activation_checkpointing=config.activation_checkpointing.value)
        )
        offload = Offload.CPU in (config.offload_params, config.offload_optimizer) and self.root_device.type == "cuda"
        options: dict[str, Any] = {
            "mesh": fsdp_mesh(config.fsdp_sharding, self.world_size, self.num_processes, self.root_device.type),
            "reshard_after_forward": config.fsdp_sharding is not FsdpSharding.GRAD_OP,
            "offload_policy": CPUOffloadPolicy() if offload else OffloadPolicy(),
        }
        for block in repeated_blocks(module):
            fully_shard(block, **options)
        for child in module.children():
            if any(True for _ in child.parameters()):
                fully_shard(child, **options)


def _checked(base: type, plan: Plan, run: RunConfig) -> type:
    """`base` whose setup first compares the Lightning Trainer with the plan (one line per run)."""

    def setup(self: Any, trainer: pl.Trainer) -> None:
        found = lightning_differences(trainer, run, micro=run.micro_batch)
        if found:
            subject = f"the Lightning Trainer does not run the plan for {plan.model.name}"
            raise UserInputError(mismatch_line(subject, found, "build it with plan_trainer_kwargs(plan)"))
        mode = plan.config.activation_checkpointing.value
        if base is not PlanFSDP2Strategy and mode != "none":  # (FSDP's _shard checkpoints before it shards)
            # Lightning's DDP and DeepSpeed checkpoint nothing; ours or transformers' own already there is kept
            # when it is the plan's mode, and a nesting is one line (backends/parts/activation_checkpointing.py).
            from backends.parts.activation_checkpointing import apply_activation_checkpointing

            apply_activation_checkpointing(self.lightning_module, mode)
        base.setup(self, trainer)

    return type(f"Plan{base.__name__}", (base,), {"setup": setup})


class EngineStrategy(DDPStrategy):
    """A LightningModule trained by our engine (ZeRO 0-3) on the Trainer's process group."""

    strategy_name = "hardware_selector_engine"

    def __init__(self, config: dict | str | Path | None = None, **kwargs: Any):
        from planner.contract.engine_config import load_engine_config

        kwargs.setdefault("process_group_backend", "gloo" if not torch.cuda.is_available() else None)
        super().__init__(**kwargs)
        self.engine_config = load_engine_config(config if config is not None else {})
        self.engine: Any = None

    @property
    def handles_gradient_accumulation(self) -> bool:
        return True

    def setup(self, trainer: pl.Trainer) -> None:
        from lightning.pytorch.core.optimizer import _init_optimizers_and_lr_schedulers
        from lightning.pytorch.trainer.states import TrainerFn

        from backends.engine.initialize import initialize

        assert self.accelerator is not None and self.lightning_module is not None
        self.accelerator.setup(trainer)
        self.model_to_device()
        if trainer.state.fn != TrainerFn.FITTING:
            return
        optimizers, schedulers = _init_optimizers_and_lr_schedulers(self.lightning_module)
        if len(optimizers) != 1 or schedulers:
            raise UserInputError(
                "EngineStrategy trains one optimizer and takes the schedule from the engine config's scheduler "
                "block; return one optimizer from configure_optimizers"
            )
        config = self.engine_config.model_copy(
            update={"gradient_accumulation_steps": trainer.accumulate_grad_batches, "train_batch_size": None}
        )
        self.engine, optimizer, _, _ = initialize(model=self.lightning_module, optimizer=optimizers[0],
                                                           config=config)  # fmt: skip
        self.model = self.engine
        self.optimizers = [optimizer]
        self.lr_scheduler_configs = []

    def _setup_model(self, model: torch.nn.Module) -> torch.nn.Module:
        return model  # the engine, not DDP, reduces the gradients

    def backward(self, closure_loss: torch.Tensor, optimizer: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
        self.pre_backward(closure_loss)
        # Lightning divides the loss by accumulate_grad_batches and so does the engine: undo one of the two.
        assert self.lightning_module is not None
        self.engine.backward(closure_loss * self.lightning_module.trainer.accumulate_grad_batches)
        self.post_backward(closure_loss)
        return closure_loss

    def optimizer_step(self, optimizer: Any, closure: Any, model: Any = None, **kwargs: Any) -> Any:
        result = closure()  # training_step and backward
        self.engine.step()  # applies the update at accumulation boundaries only
        return result

    def save_checkpoint(self, checkpoint: dict, filepath: Any, storage_options: Any = None) -> None:
        if self.engine is not None and self.engine.config.zero_optimization.stage == 3:
            raise UserInputError(
                "under ZeRO-3 each rank holds a shard: save with engine.save_checkpoint(dir) "
                "(trainer.strategy.engine), or Trainer(enable_checkpointing=False)"
            )
        super().save_checkpoint(checkpoint, filepath, storage_options)

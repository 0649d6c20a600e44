"""The example script's HF Trainer mode: transformers.Trainer with `training_arguments(plan)`."""

from __future__ import annotations

from typing import Any

from planner.emit.training_args import training_arguments

from .cpu_distributed import configure_cpu_accelerate_state
from .distributed_init import shutdown_distributed
from .train import TrainRun, report


class _CausalLmSamples:
    """SyntheticTokens as the Trainer's dataset: {"input_ids", "labels"} per sample."""

    def __init__(self, tokens: Any):
        self.tokens = tokens

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, index: int) -> dict:
        sample = self.tokens[index]
        return {"input_ids": sample, "labels": sample}


def run_trainer(run: TrainRun) -> None:
    from transformers import Trainer

    model = run.build_model()  # before the arguments: a ZeRO-3 config would route it through zero.Init
    overrides: dict[str, Any] = {"max_steps": run.steps, "logging_steps": 1, "disable_tqdm": True}
    strategy = run.target.strategy.value
    if run.target.device == "cpu" and strategy in ("fsdp", "deepspeed"):
        configure_cpu_accelerate_state(strategy)
        overrides["accelerator_config"] = {"use_configured_state": True}
    args = training_arguments(run.plan, run.output_dir, nproc_override=run.target.nproc_per_node, **overrides)
    trainer = Trainer(model=model, args=args, train_dataset=_CausalLmSamples(run.dataset()))
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    report(
        run, "trainer", args.process_index, world_size=args.world_size,
        wrapper=type(trainer.model_wrapped).__name__,
        distributed_type=trainer.accelerator.distributed_type.value,
        optimizer_steps=trainer.state.global_step, losses=losses,
    )
    shutdown_distributed()

"""torchrun job: one small LightningModule (a local GPT-2) fit on 2 CPU ranks under each door.

Lightning's plain DDPStrategy is the reference; PlanStrategy from a DDP and an
FSDP run folder, and EngineStrategy at ZeRO 1, 2 and 3, fit the same batches.
Rank 0 writes {name: [loss per batch], name + "/weights": checksum} to argv[1], and the two plan doors'
PlanMonitors record their fits in argv[1] + ".duckdb".
argv[2] and argv[3] are the DDP and FSDP run folders.
"""

from __future__ import annotations

import json
import sys

import lightning.pytorch as pl
import torch
from lightning.pytorch.strategies import DDPStrategy
from transformers import AutoModelForCausalLM

from hardware_selector.integrations.lightning import EngineStrategy, plan_trainer_kwargs

STEPS = 3


class CausalLM(pl.LightningModule):
    def __init__(self, folder: str):
        super().__init__()
        torch.manual_seed(0)
        self.model = AutoModelForCausalLM.from_pretrained(folder)
        self.losses: list[float] = []

    def training_step(self, batch, batch_idx):
        loss = self.model(input_ids=batch, labels=batch).loss
        self.losses.append(float(loss))
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3, weight_decay=0.01)


def fit(name: str, model_dir: str, strategy, micro: int, accumulate: int, results: dict, **extra) -> None:
    module = CausalLM(model_dir)
    blocks = torch.randint(0, module.model.config.vocab_size, (64, 32), generator=torch.Generator().manual_seed(3))
    loader = torch.utils.data.DataLoader(blocks, batch_size=micro, shuffle=False)
    arguments = {
        "accelerator": "cpu",
        "devices": 2,
        "strategy": strategy,
        "accumulate_grad_batches": accumulate,
        **extra,
        "max_steps": STEPS,
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
    }
    trainer = pl.Trainer(**arguments)
    trainer.fit(module, loader)
    if name.startswith("engine-zero3"):
        trainer.strategy.engine.optimizer.gathered_parameters()
    whole = [p.full_tensor() if hasattr(p, "full_tensor") else p for p in module.model.parameters()]  # FSDP2
    total = sum(float(p.detach().double().sum()) for p in whole)
    if trainer.global_rank == 0:
        results[name] = module.losses
        results[name + "/weights"] = total


def main() -> None:
    out, ddp_folder, fsdp_folder, model_dir = sys.argv[1:5]
    results: dict = {}
    for name, folder in (("plan-ddp", ddp_folder), ("plan-fsdp", fsdp_folder)):
        kwargs = plan_trainer_kwargs(folder, record=True, db=out + ".duckdb")  # its PlanMonitor records the fit
        from planner.rundir.plan_file import read_plan_file

        _, run = read_plan_file(folder)
        micro, accumulate = run.micro_batch, kwargs.pop("accumulate_grad_batches")
        if name == "plan-ddp":  # the reference: Lightning's own DDP on the same batches
            reference = DDPStrategy(process_group_backend="gloo")
            fit(
                "reference-ddp",
                model_dir,
                reference,
                micro,
                accumulate,
                results,
                gradient_clip_val=kwargs["gradient_clip_val"],
            )
        fit(name, model_dir, kwargs.pop("strategy"), micro, accumulate, results, **kwargs)
    for stage in (1, 2, 3):
        config = {"zero_optimization": {"stage": stage}, "train_micro_batch_size_per_gpu": micro,
                  "gradient_clipping": run.optim.gradient_clipping}  # fmt: skip
        fit(f"engine-zero{stage}", model_dir, EngineStrategy(config), micro, accumulate, results)
    if torch.distributed.get_rank() == 0:
        with open(out, "w") as handle:
            json.dump(results, handle)


if __name__ == "__main__":
    from backends.distributed_init import exit_worker

    main()
    exit_worker(0)  # gloo's threads can abort interpreter teardown after a run that succeeded

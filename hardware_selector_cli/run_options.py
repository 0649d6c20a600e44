"""`plan --emit` options for the run itself: data, weights, tokenizer, length, learning rate, checkpoints.

They become the planner.emit RunOptions baked into plan.json's run block
(docs/running.md); `train DIR` takes the same flags to change one run
without re-emitting. Given without --emit they are an error, never ignored.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import typer

from planner.errors import UserInputError

_HELP = "(with --emit)"


@dataclass
class RunOptionValues:
    data: list[str] | None
    eval_data: list[str] | None
    text_field: str | None
    text_unit: str | None
    tokenizer: str | None
    init: str | None
    eval_fraction: float | None
    eval_every: int | None
    steps: int | None
    epochs: float | None
    lr: float | None
    warmup_steps: int | None
    save_every: int | None
    export_every: int | None

    def given(self) -> list[str]:
        return [f"--{field.name.replace('_', '-')}" for field in fields(self) if getattr(self, field.name) is not None]

    def to_run_options(self) -> Any:
        from pydantic import ValidationError

        from planner.contract.run_config import CheckpointPolicy, DataConfig, Hyperparameters
        from planner.contract.schema import describe_validation_error
        from planner.rundir.write import RunOptions

        data = {
            key: value
            for key, value in {
                "train": self.data,
                "eval": self.eval_data,
                "text_field": self.text_field,
                "text_unit": self.text_unit,
                "eval_fraction": self.eval_fraction,
                "eval_every": self.eval_every,
            }.items()
            if value is not None
        }
        optim = {
            key: value
            for key, value in {
                "max_steps": self.steps,
                "epochs": self.epochs,
                "learning_rate": self.lr,
                "warmup_steps": self.warmup_steps,
            }.items()
            if value is not None
        }
        checkpoint = {
            key: value
            for key, value in {"every": self.save_every, "export_every": self.export_every}.items()
            if value is not None
        }
        try:
            return RunOptions(
                data=DataConfig(**data),
                optim=Hyperparameters(**optim),
                checkpoint=CheckpointPolicy(**checkpoint),
                init=self.init,
                tokenizer=self.tokenizer,
            )
        except ValidationError as error:
            raise UserInputError(f"run option {describe_validation_error(error, 'docs/running.md')}") from None


def run_option_values(
    data: list[str] | None = typer.Option(
        None,
        "--data",
        help=f"Training text: .txt/.jsonl/.parquet files, globs "
        f"or a datasets.save_to_disk folder; repeat for more {_HELP}.",
    ),
    eval_data: list[str] | None = typer.Option(None, "--eval-data", help=f"A separate evaluation set {_HELP}."),
    text_field: str | None = typer.Option(
        None, "--text-field", help=f"Field holding the text (default: text) {_HELP}."
    ),
    text_unit: str | None = typer.Option(
        None, "--text-unit", help=f"A .txt document: line|paragraph|document {_HELP}."
    ),
    tokenizer: str | None = typer.Option(None, "--tokenizer", help=f"Tokenizer folder (default: the model's) {_HELP}."),
    init: str | None = typer.Option(
        None, "--init", help=f"pretrained|random (default: pretrained when the model folder holds weights) {_HELP}."
    ),
    eval_fraction: float | None = typer.Option(None, "--eval-fraction", help=f"Blocks held out (0.01) {_HELP}."),
    eval_every: int | None = typer.Option(
        None, "--eval-every", help=f"Evaluate every N steps (0: at the end) {_HELP}."
    ),
    steps: int | None = typer.Option(None, "--steps", help=f"Optimizer steps (default: one epoch) {_HELP}."),
    epochs: float | None = typer.Option(None, "--epochs", help=f"Passes over the data (1) {_HELP}."),
    lr: float | None = typer.Option(None, "--lr", help=f"Peak learning rate (3e-4) {_HELP}."),
    warmup_steps: int | None = typer.Option(None, "--warmup-steps", help=f"Warmup steps (5% of the run) {_HELP}."),
    save_every: int | None = typer.Option(None, "--save-every", help=f"Checkpoint every N steps (1000) {_HELP}."),
    export_every: int | None = typer.Option(None, "--export-every", help=f"Also write final/ every N steps {_HELP}."),
) -> RunOptionValues:
    if text_unit is not None and text_unit not in ("line", "paragraph", "document"):
        raise UserInputError(f"--text-unit must be line, paragraph or document, not '{text_unit}'")
    if init is not None and init not in ("pretrained", "random"):
        raise UserInputError(f"--init must be pretrained or random, not '{init}'")
    return RunOptionValues(
        data=data or None,
        eval_data=eval_data or None,
        text_field=text_field,
        text_unit=text_unit,
        tokenizer=tokenizer,
        init=init,
        eval_fraction=eval_fraction,
        eval_every=eval_every,
        steps=steps,
        epochs=epochs,
        lr=lr,
        warmup_steps=warmup_steps,
        save_every=save_every,
        export_every=export_every,
    )

"""The model-selection options shared by `estimate` and `plan` (see option_groups.py).

A model is named (catalog name, HF id, alias, config path, cached HF model),
or given by a bare parameter count, or by its dimensions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import typer

from planner.errors import UserInputError

if TYPE_CHECKING:
    from planner.models.spec import ModelSpec

MODEL_HELP = "Catalog name, HF id or alias, a config.json path, or a model in the local HF cache."


@dataclass
class ModelOptions:
    model: str | None
    params: float | None
    hidden: int | None
    layers: int | None
    heads: int | None
    ffn: int | None
    vocab: int | None
    kv_heads: int | None
    experts: int | None
    top_k: int | None
    mlp: str | None
    positions: str | None = None
    max_positions: int | None = None

    def resolve(self) -> ModelSpec:
        dimension_flags = {
            "--hidden": self.hidden,
            "--layers": self.layers,
            "--heads": self.heads,
            "--ffn": self.ffn,
            "--vocab": self.vocab,
        }
        given = [flag for flag, value in dimension_flags.items() if value is not None]
        chosen = sum(bool(x) for x in (self.model, self.params is not None, given))
        if chosen == 0:
            raise UserInputError(
                "name a model with --model, or give --params, or the dimension flags (--hidden --layers ...)"
            )
        if chosen > 1:
            raise UserInputError("give only one of --model, --params, or the dimension flags")
        from planner.models.resolve import resolve_model, spec_from_dimensions, spec_from_param_count

        shape_flags = {"--kv-heads": self.kv_heads, "--experts": self.experts, "--top-k": self.top_k, "--mlp": self.mlp,
                       "--positions": self.positions, "--max-positions": self.max_positions}  # fmt: skip
        shaping = [flag for flag, value in shape_flags.items() if value is not None]
        if shaping and not given:
            # They shape a model built from dimensions; a named model or a parameter count has its own shape.
            raise UserInputError(
                f"{', '.join(shaping)} {'shapes' if len(shaping) == 1 else 'shape'} a model given by its "
                f"dimensions (--hidden --layers ...); with "
                f"{'--model' if self.model else '--params'} they would be ignored: drop them"
            )
        if self.model:
            return resolve_model(self.model, other_ways=", or --params / the dimension flags")
        if self.params is not None:
            return spec_from_param_count(self.params)
        missing = [flag for flag, value in dimension_flags.items() if value is None]
        if missing:
            raise UserInputError(f"dimension flags need {' '.join(missing)} as well")
        return spec_from_dimensions(
            hidden=self.hidden,
            layers=self.layers,
            heads=self.heads,
            ffn=self.ffn,
            vocab=self.vocab,
            kv_heads=self.kv_heads,
            experts=self.experts or 0,
            top_k=self.top_k,
            mlp=self.mlp or "gated",
            positions=self.positions,
            max_positions=self.max_positions,
        )


def model_options(
    model: str | None = typer.Option(None, "--model", "-m", help=MODEL_HELP),
    params: float | None = typer.Option(
        None, "--params", help="A GPT-shaped model of this many parameters, e.g. 7.5e9."
    ),
    hidden: int | None = typer.Option(None, "--hidden", help="Hidden size (dimension flags)."),
    layers: int | None = typer.Option(None, "--layers", help="Transformer blocks."),
    heads: int | None = typer.Option(None, "--heads", help="Attention heads."),
    ffn: int | None = typer.Option(None, "--ffn", help="FFN (intermediate) size; per expert for MoE."),
    vocab: int | None = typer.Option(None, "--vocab", help="Vocabulary size."),
    kv_heads: int | None = typer.Option(None, "--kv-heads", help="Key/value heads (GQA/MQA); default = --heads."),
    experts: int | None = typer.Option(None, "--experts", help="MoE experts per layer (default: dense)."),
    top_k: int | None = typer.Option(None, "--top-k", help="Experts per token (MoE)."),
    mlp: str | None = typer.Option(
        None, "--mlp", help="gated (SwiGLU, 3 matrices; default) or standard (GELU, 2 matrices)."
    ),
    positions: str | None = typer.Option(
        None,
        "--positions",
        help="learned, rope, alibi or none (default: rope for --mlp gated, learned for standard; "
        "alibi and none need --mlp standard).",
    ),
    max_positions: int | None = typer.Option(
        None, "--max-positions", help="Learned position rows, or a rotary model's context (default 8192)."
    ),
) -> ModelOptions:
    return ModelOptions(
        model, params, hidden, layers, heads, ffn, vocab, kv_heads, experts, top_k, mlp, positions, max_positions
    )

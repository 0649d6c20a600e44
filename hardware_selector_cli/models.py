"""`models`: list and search the model catalog."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import typer

from planner.units import format_count

if TYPE_CHECKING:
    from planner.models.spec import ModelSpec


def model_summary(spec: ModelSpec) -> dict:
    """The stable JSON shape of one catalog entry, as `models --json` prints it."""
    return {
        "name": spec.name,
        "hf_id": spec.hf_id,
        "aliases": spec.aliases,
        "family": spec.family.value,
        "model_type": spec.model_type,
        "transformers_class": spec.transformers_class,
        "params": spec.params.total,
        "active_params": spec.params.active_per_token,
        "embedding_params": spec.params.embedding,
        "largest_layer_params": spec.params.largest_layer,
        "params_source": f"{spec.params.source} ({spec.params.source_detail})",
        "hidden_size": spec.hidden_size,
        "num_layers": spec.num_layers,
        "num_heads": spec.num_heads,
        "num_kv_heads": spec.num_kv_heads,
        "head_dim": spec.head_dim,
        "ffn_size": spec.ffn_size,
        "mlp_kind": spec.mlp_kind.value,
        "vocab_size": spec.vocab_size,
        "max_position_embeddings": spec.max_position_embeddings,
        "tied_embeddings": spec.tied_embeddings,
        "num_experts": spec.num_experts,
        "experts_per_token": spec.experts_per_token,
    }


def _print_table(specs: list[ModelSpec]) -> None:
    from rich import box
    from rich.console import Console
    from rich.table import Table

    console = Console()
    # The HF id is the widest column; on a narrow terminal (or a pipe) it is the one to drop
    # so that the numbers stay readable. `--json` always has it.
    wide = console.width >= 130
    table = Table(
        title=f"Model catalog ({len(specs)} models; counts from the meta-device build)",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
    )
    columns = ["name", "HF id", "family"] if wide else ["name"]
    for column in (*columns, "params", "active", "layers", "hidden", "heads(kv)", "FFN", "vocab"):
        table.add_column(column, justify="left" if column in ("name", "HF id", "family") else "right", no_wrap=True)
    for spec in specs:
        table.add_row(
            spec.name,
            *([spec.hf_id or "", spec.family.value] if wide else []),
            format_count(spec.params.total),
            format_count(spec.params.active_per_token) if spec.is_moe else "",
            str(spec.num_layers),
            str(spec.hidden_size),
            f"{spec.num_heads}({spec.num_kv_heads})",
            str(spec.expert_ffn_size or spec.ffn_size) + (f"x{spec.num_experts}" if spec.is_moe else ""),
            str(spec.vocab_size),
        )
    console.print(table)


def register(app: typer.Typer) -> None:
    @app.command("models")
    def models_command(
        search: str | None = typer.Option(
            None, "--search", "-s", help="Keep models whose name, id or type contains TEXT."
        ),
        as_json: bool = typer.Option(False, "--json", help="Print a JSON list instead of a table."),
    ) -> None:
        """List the built-in model catalog."""
        from planner.models.catalog import search_models

        specs = search_models(search)
        if as_json:
            print(json.dumps([model_summary(spec) for spec in specs], indent=2))
        else:
            _print_table(specs)

"""`models`: list and search the model catalog."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

import typer

from planner.units import format_count

if TYPE_CHECKING:
    from planner.models.spec import ModelSpec


def model_summary(spec: ModelSpec) -> dict:
    """The stable JSON shape of one catalog entry, as `models --json` prints it: every number with its source
    (params_source for the counts, config_source for the dimensions)."""
    from planner.models.catalog import config_source

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
        "config_source": config_source(spec),
        "hidden_size": spec.hidden_size,
        "num_layers": spec.num_layers,
        "num_heads": spec.num_heads,
        "num_kv_heads": spec.num_kv_heads,
        "head_dim": spec.head_dim,
        "ffn_size": spec.ffn_size,  # the dense blocks' (an MoE model's first blocks or its dense layers)
        "expert_ffn_size": spec.expert_ffn_size,  # each routed expert's, as the table's "768x128" prints it
        "shared_expert_ffn_size": spec.shared_expert_ffn_size,
        "mlp_kind": spec.mlp_kind.value,
        "vocab_size": spec.vocab_size,
        "max_position_embeddings": spec.max_position_embeddings,
        "attention_window": spec.attention_window,  # sliding-window or chunked layers' span; 0: none
        "windowed_layers": spec.windowed_layers,
        "tied_embeddings": spec.tied_embeddings,
        "num_experts": spec.num_experts,
        "experts_per_token": spec.experts_per_token,
    }


NO_MATCH_EXIT = 1


def _no_match_line(search: str) -> str:
    from planner.models.catalog import load_catalog, suggest_models

    closest = suggest_models(search)
    if closest:
        return f"no catalog model matches '{search}'; closest: {', '.join(closest)}"
    return (
        f"no catalog model matches '{search}', nor is one close; `hardware-selector models` lists all "
        f"{len(load_catalog())}, and --model takes a local config.json folder too"
    )


# Dropped first to last when the terminal is too narrow for every number whole: the columns a reader of the
# catalog needs least for sizing a plan. `--json` always has them all.
NARROW_DROP_ORDER = ("vocab", "FFN", "heads(kv)", "hidden", "layers", "active")
NAME_MIN_WIDTH = 16  # the name column folds onto more lines below this, which still reads


def _cells(spec: ModelSpec) -> dict[str, str]:
    return {
        "params": format_count(spec.params.total),
        "active": format_count(spec.params.active_per_token) if spec.is_moe else "",
        "layers": str(spec.num_layers),
        "hidden": str(spec.hidden_size),
        "heads(kv)": f"{spec.num_heads}({spec.num_kv_heads})",
        "FFN": str(spec.expert_ffn_size or spec.ffn_size) + (f"x{spec.num_experts}" if spec.is_moe else ""),
        "vocab": str(spec.vocab_size),
    }


def numeric_columns(
    rows: list[dict[str, str]],
    width: int,
    name_width: int = NAME_MIN_WIDTH,
    drop_order: tuple[str, ...] = NARROW_DROP_ORDER,
) -> list[str]:
    """The number columns that fit `width` whole beside a name column of `name_width` (one space of padding
    either side of each column), dropping `drop_order`'s first until they do; the others always stay (`models`:
    params; `gpus`: memory, bf16, fp8 and the source number)."""
    columns = list(rows[0]) if rows else []
    widths = {column: max(len(column), *(len(row[column]) for row in rows)) + 2 for column in columns}
    while sum(widths[column] for column in columns) + name_width + 2 > width:
        dropped = next((column for column in drop_order if column in columns), None)
        if dropped is None:
            break
        columns.remove(dropped)
    return columns


def _print_table(specs: list[ModelSpec]) -> None:
    from rich import box
    from rich.console import Console
    from rich.table import Table

    console = Console()
    # The HF id is the widest column; on a narrow terminal (or a pipe) it is the one to drop
    # so that the numbers stay readable. `--json` always has it.
    wide = console.width >= 130
    rows = [_cells(spec) for spec in specs]
    # Names stay whole on one line (`models | grep bert-large-uncased` finds its row; a new user's audit found
    # them folded at 80 columns): the number columns give way first.
    name_width = max((len(spec.name) for spec in specs), default=NAME_MIN_WIDTH)
    shown = numeric_columns(rows, console.width, name_width)
    dropped = [column for column in (rows[0] if rows else {}) if column not in shown]
    table = Table(
        title=f"Model catalog ({len(specs)} model{'' if len(specs) == 1 else 's'}; counts from the meta-device build)",
        caption=(
            f"{', '.join(dropped)} left out for this terminal's width; --json has every field. " if dropped else ""
        )
        + "Dimensions from each model's config.json on the Hub, active counts per token with the embeddings "
        "(--json names each source)",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
    )
    table.add_column("name", no_wrap=True, min_width=name_width)
    if wide:
        for column in ("HF id", "family"):  # text: folded onto a second line when the terminal is narrow
            table.add_column(column, overflow="fold")
    for column in shown:
        # A number is never cut ("2508…"): its column keeps its widest cell (and header) whole.
        widest = max(len(column), *(len(row[column]) for row in rows))
        table.add_column(column, justify="right", no_wrap=True, min_width=widest)
    for spec, row in zip(specs, rows, strict=True):
        table.add_row(
            spec.name, *([spec.hf_id or "", spec.family.value] if wide else []), *(row[column] for column in shown)
        )
    console.print(table)


def register(app: typer.Typer) -> None:
    @app.command("models")
    def models_command(
        search: str | None = typer.Option(
            None,
            "--search",
            "-s",
            help="Keep models whose name, id, alias, legacy name or type contains TEXT (none: exit 1, the closest named).",
        ),
        as_json: bool = typer.Option(False, "--json", help="Print a JSON list instead of a table."),
    ) -> None:
        """List the built-in model catalog."""
        from planner.models.catalog import search_models

        specs = search_models(search)
        if not specs:  # nothing found is exit 1, as `plan` with nothing that fits; 2 stays for a mistake
            if as_json:
                print("[]")
            print(_no_match_line(search or ""), file=sys.stderr)
            raise typer.Exit(NO_MATCH_EXIT)
        if as_json:
            print(json.dumps([model_summary(spec) for spec in specs], indent=2))
        else:
            _print_table(specs)

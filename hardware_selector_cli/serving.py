"""`plan --mode inference`: serving layouts, memory per GPU and a roofline speed (planner/inference).

    hardware-selector plan --mode inference --model llama-2-70b --gpu H100-80GB --context 2048 --batch 32

The serving options form one option group, so `plan` knows which were given:
training flags in inference mode (and serving flags in training mode) are a
one-line error rather than silently ignored.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import typer

from planner.errors import UserInputError
from planner.units import format_seconds

MODES = ("training", "inference")


@dataclass(frozen=True)
class ServingOptions:
    mode: str
    context: int | None
    batch: int | None
    output_tokens: int | None
    weights: str | None
    kv_cache: str | None
    tp: int | None = None

    @property
    def inference(self) -> bool:
        return self.mode == "inference"

    def given(self) -> list[str]:
        flags = {
            "--context": self.context,
            "--batch": self.batch,
            "--output-tokens": self.output_tokens,
            "--weights": self.weights,
            "--kv-cache": self.kv_cache,
            "--tp": self.tp,
        }
        return [flag for flag, value in flags.items() if value is not None]


def serving_options(
    mode: str = typer.Option("training", "--mode", help="training (default) or inference (serving)."),
    context: int | None = typer.Option(
        None,
        "--context",
        help="Inference: prompt tokens per request (default 2048, or half the model's context when shorter; the answer says so).",
    ),
    batch: int | None = typer.Option(None, "--batch", help="Inference: concurrent requests (default 1)."),
    output_tokens: int | None = typer.Option(
        None,
        "--output-tokens",
        help="Inference: generated tokens per request (default 256, shortened to what the model's context leaves "
        "after the prompt, which the answer says).",
    ),
    weights: str | None = typer.Option(None, "--weights", help="Inference: bf16|fp16|fp8|int8|int4 (default bf16)."),
    kv_cache: str | None = typer.Option(None, "--kv-cache", help="Inference: KV cache dtype bf16|fp16|fp8."),
    tp: int | None = typer.Option(
        None,
        "--tp",
        help="Inference: serve at this tensor-parallel degree only (vLLM's --tensor-parallel-size; default: every "
        "one a node allows, ranked).",
    ),
) -> ServingOptions:
    chosen = mode.strip().lower()
    if chosen not in MODES:
        raise UserInputError(f"--mode must be training or inference, not '{mode}'")
    options = ServingOptions(chosen, context, batch, output_tokens, weights, kv_cache, tp)
    if not options.inference and options.given() == ["--tp"]:
        raise UserInputError(
            "--tp pins a serving plan's tensor-parallel degree (add --mode inference); a training plan searches it "
            "within a node (--gpus-per-node bounds it), and `estimate --tp` times one training layout"
        )
    if not options.inference and options.given():
        given = options.given()
        raise UserInputError(f"{', '.join(given)} plan{'s' * (len(given) == 1)} serving; add --mode inference")
    return options


def serving_request(options: ServingOptions, objective: str, top: int, headroom: float, spec):
    from planner.inference import InferenceRequest, KvFormat, ServingObjective, WeightFormat
    from planner.limits import MAX_BATCH, MAX_GPUS_PER_NODE, MAX_SEQ_LEN, check_count

    from .training_options import _choice

    check_count("--top", top, high=1000)  # the request's top_k would name its field, not the flag
    for flag, value, high in (
        ("--context", options.context, MAX_SEQ_LEN),
        ("--batch", options.batch, MAX_BATCH),
        ("--output-tokens", options.output_tokens, MAX_SEQ_LEN),
        ("--tp", options.tp, MAX_GPUS_PER_NODE),
    ):
        if value is not None:
            check_count(flag, value, high=high)
    return InferenceRequest.for_model(
        spec,
        context=options.context,
        batch=options.batch or 1,
        output=options.output_tokens,
        weights=_choice(options.weights or "bf16", WeightFormat, "--weights"),
        kv_cache=_choice(options.kv_cache or "bf16", KvFormat, "--kv-cache"),
        objective=_choice(objective, ServingObjective, "--objective (inference)"),
        top_k=top,
        headroom_fraction=headroom,
        tensor_parallel=options.tp,
    )


def check_formats_on(options: ServingOptions, gpu) -> None:
    """An explicit bf16 on a GPU without it is refused, as training's --precision bf16-mixed is; left out, bf16
    is the default and becomes fp16 there, which the answer's title and reasons say (planner/inference/precision.py)."""
    if gpu.supports("bf16"):
        return
    for flag, value in (("--weights", options.weights), ("--kv-cache", options.kv_cache)):
        if value is not None and value.strip().lower() == "bf16":
            raise UserInputError(f"{gpu.name} has no bf16; use {flag} fp16 (the same bytes, its own 16-bit type)")


def serving_title(spec, target, request) -> str:
    """The table's title: the weight format actually planned, and why when it is not the one asked for."""
    from planner.inference.precision import sixteen_bit_for

    planned = sixteen_bit_for(target, request)
    why = f" ({target.gpu.name} has no {request.weights.value})" if planned.weights is not request.weights else ""
    return (
        f"serving {spec.name} on {target.world_size} x {target.gpu.name}: {request.batch} x "
        f"{request.context}+{request.output} tokens, {planned.weights.value} weights{why}"
    )


def serving_document(result) -> dict:
    return {
        "mode": "inference",
        "best": result.best.model_dump(mode="json") if result.best else None,
        "candidates": [plan.model_dump(mode="json") for plan in result.candidates],
        "rejected": result.rejected,
        "suggestions": result.suggestions,
        "notes": result.notes,
    }


def print_serving(result, title: str, as_json: bool, explain: bool) -> None:
    if as_json:
        print(json.dumps(serving_document(result), indent=2))
        return
    from rich import box
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if result.best is None:
        console.print(f"[red]nothing fits[/] {title}")
        for line in [*result.notes, *result.suggestions]:
            console.print(f"  - {line}", markup=False, highlight=False)
        return
    table = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 0), collapse_padding=True)
    for column in ("#", "layout"):
        table.add_column(column, no_wrap=column == "#")
    for column in ("GPU mem", "KV", "max batch", "TTFT", "ITL", "tokens/s"):
        table.add_column(column, justify="right", no_wrap=True)
    table.add_column("regime")
    for index, plan in enumerate(result.candidates, 1):
        memory = plan.memory_bytes
        table.add_row(
            str(index),
            plan.label,
            f"{memory['total'] / 2**30:.1f}G {memory['total'] / plan.gpu_capacity_bytes:.0%}",
            f"{memory['kv_cache'] / 2**30:.1f}G",
            f"{plan.max_batch:,}",
            format_seconds(plan.ttft_s),
            format_seconds(plan.itl_s),
            f"{plan.cluster_tokens_per_s:,.0f}",
            plan.regime,
        )
    console.print(table)
    console.print(
        "max batch: concurrent requests the memory holds; TTFT: time to first token; ITL: time between tokens; "
        "tokens/s: generated, all replicas; regime: single request, batched (every request decoded each step), "
        "saturated (queueing: more requests than the KV cache holds, the rest queue) or saturated (prefill: the "
        "prompts alone keep the GPU busy, the wait before the first token grows)",
        markup=False,
        highlight=False,
    )
    shown = result.candidates if explain else result.candidates[:1]
    for index, plan in enumerate(shown, 1):
        console.print(f"[bold]#{index} {plan.label}[/] because:")
        for reason in plan.reasons:
            console.print(f"  - {reason}", markup=False, highlight=False)
        if explain:
            for category, source in plan.memory_sources.items():
                console.print(
                    f"    {category}: {plan.memory_bytes[category] / 2**30:.2f} GiB [{source}]",
                    markup=False,
                    highlight=False,
                )
    if result.rejected:
        console.print("[bold]other layouts:[/]")
        for label, fate in result.rejected.items():
            console.print(f"  - {label}: {fate}", markup=False, highlight=False)

"""Per-layer activation bytes of HF model families: traced, against the estimator.

    python -m benchmarks.memory.memory_per_layer [--only LABEL ...] [--compare] [--markdown]
    python -m benchmarks.memory.memory_per_layer --smoke   # one entry traced into a temporary file, compared

Each entry traces one training step (benchmarks/memory/memory_trace.py) of a tiny model
(hidden 256, 4 heads, batch 2 x 256 tokens) with 2 and with 3 layers; the
difference of the traced activations is what one block keeps (plus, under
autocast, its weight copies). The estimator's figure is the same difference of
its activations and buffers under `Runtime.CPU_TRACE`. This is how the traits
in planner/memory/arch_traits.py were found and are kept honest, for families
beyond the full-size configurations of trace_configs.py. Results are merged
into benchmarks/results/memory_per_layer.json by label, atomically.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks.memory.per_layer_models import (  # noqa: E402
    BATCH,
    FAMILIES,
    PRECISIONS,
    model_config,
    seq_for,
)
from planner.files import write_json_atomic  # noqa: E402
from planner.memory.activation_batch import estimate_activations  # noqa: E402
from planner.memory.activations import activation_widths  # noqa: E402
from planner.memory.buffers import estimate_buffers  # noqa: E402
from planner.memory.rank_params import rank_params  # noqa: E402
from planner.memory.runtime import Runtime  # noqa: E402
from planner.models.hf_config import spec_from_hf_config  # noqa: E402
from planner.training_config import TrainingConfig  # noqa: E402

RESULTS = REPO_ROOT / "benchmarks" / "results" / "memory_per_layer.json"
SMOKE_LABEL = "gpt2/fp32/sdpa/none"


def entries() -> dict[str, tuple[str, str, str, str]]:
    """label -> (family, precision, attention, checkpointing)."""
    table = {}
    for family, attentions, modes in FAMILIES:
        for precision, attention, mode in itertools.product(PRECISIONS, attentions, modes):
            if mode == "op" and precision == "bf16-mixed":
                # Under autocast a checkpointed step peaks either at the forward's end (every layer's weight
                # copies held) or in a block's recomputation, whichever is larger, and the 3-minus-2-layer
                # difference then counts the copies or not: no one per-layer figure. fp32 and bf16 have no copies.
                continue
            table[f"{family}/{precision}/{attention}/{mode}"] = (family, precision, attention, mode)
    return table


def trace_per_layer(label: str) -> dict[str, Any]:
    from benchmarks.memory.memory_trace import TraceConfig, run_trace

    family, precision, attention, mode = entries()[label]
    traced = [
        run_trace(
            TraceConfig(
                label=label,
                model=model_config(family, layers),
                micro_batch=BATCH,
                seq_len=seq_for(family),
                precision=precision,
                attention=attention,
                activation_checkpointing=mode,
            )
        )
        for layers in (2, 3)
    ]
    # Under op-level checkpointing the step's peak moment moves between the 2- and 3-layer models (the forward's
    # end, with autocast's weight copies, or the optimizer step), so its activations are compared at their own
    # maximum over the step, the moment every block's kept tensors are held.
    at = "normalized_max_per_category" if mode == "op" else "normalized_at_peak"
    per_layer = getattr(traced[1], at)["Activation"] - getattr(traced[0], at)["Activation"]
    return {
        "label": label,
        "per_layer_bytes": per_layer,
        "kernel": traced[0].attention_kernel,
        "peak_phase": traced[0].peak_phase,
        "torch_version": traced[0].torch_version,
        "transformers_version": traced[0].transformers_version,
    }


def estimated_per_layer(label: str) -> float:
    family, precision, attention, mode = entries()[label]
    config = TrainingConfig(
        precision=precision,
        attention=attention,
        activation_checkpointing=mode,
        micro_batch=BATCH,
        seq_len=seq_for(family),
    )

    def kept(layers: int) -> float:
        """Activations and autocast's weight copies at backward start, on one rank (DDP)."""
        spec = spec_from_hf_config(model_config(family, layers), name=family)
        widths = activation_widths(config, True, Runtime.CPU_TRACE)
        activations = estimate_activations(spec, config, widths).activations
        buffers = estimate_buffers(spec, config, rank_params(spec, config), 1, Runtime.CPU_TRACE)
        return activations + buffers.during_backward

    return kept(3) - kept(2)


def compare(recorded: list[dict]) -> list[tuple[str, float, float, float]]:
    rows = []
    for entry in recorded:
        ours = estimated_per_layer(entry["label"])
        rows.append((entry["label"], entry["per_layer_bytes"], ours, ours / entry["per_layer_bytes"] - 1))
    return rows


def load(path: Path = RESULTS) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["results"] if path.is_file() else []


def _write(results: list[dict], path: Path) -> None:
    document = {"description": __doc__.strip().splitlines()[0], "results": results}
    write_json_atomic(path, document, indent=1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="+", metavar="LABEL", help="trace only these labels")
    parser.add_argument("--compare", action="store_true", help="compare the recorded results, trace nothing")
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--smoke", action="store_true", help=f"trace {SMOKE_LABEL} into a temporary file, compare it")
    args = parser.parse_args(argv)
    known = entries()
    labels = args.only or list(known)
    unknown = [label for label in labels if label not in known]
    if unknown:
        parser.error(f"unknown labels: {unknown}")
    if args.smoke:  # the tracing, the merge and the comparison, on one entry; the committed results stay
        if args.only or args.compare:
            parser.error("--smoke traces one entry of its own; drop --only and --compare")
        with tempfile.TemporaryDirectory() as scratch:
            return trace_and_compare([SMOKE_LABEL], Path(scratch) / RESULTS.name, args.markdown)
    return trace_and_compare([] if args.compare else labels, RESULTS, args.markdown)


def trace_and_compare(labels: list[str], results: Path, markdown: bool) -> int:
    """Trace `labels` and merge them into `results` (none: trace nothing), then compare every recorded entry."""
    known = entries()
    if labels:
        merged = {entry["label"]: entry for entry in load(results)}
        for label in labels:
            merged[label] = trace_per_layer(label)
            print(f"traced {label}", flush=True)
        _write([merged[label] for label in known if label in merged], results)
    rows = compare(load(results))
    if markdown:
        print("| family / precision / attention / checkpointing | traced KiB per layer | estimate KiB | error |")
        print("|---|---:|---:|---:|")
    for label, traced, ours, error in rows:
        if markdown:
            print(f"| {label} | {traced / 1024:.0f} | {ours / 1024:.0f} | {error:+.1%} |")
        else:
            print(f"{label:40s} traced {traced / 1024:8.0f} KiB  estimate {ours / 1024:8.0f} KiB  {error:+6.1%}")
    worst = max(rows, key=lambda row: abs(row[3]))
    print(f"{len(rows)} entries; largest error {worst[3]:+.1%} ({worst[0]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

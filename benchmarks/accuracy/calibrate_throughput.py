"""Fit the throughput model's efficiency constants on the measured llm-foundry runs and print the per-row table.

    .venv/bin/python -m benchmarks.accuracy.calibrate_throughput            # table with the committed constants
    .venv/bin/python -m benchmarks.accuracy.calibrate_throughput --fit      # fit, then the table with the fitted ones
    .venv/bin/python -m benchmarks.accuracy.calibrate_throughput --markdown # the table for docs/accuracy.md
    .venv/bin/python -m benchmarks.accuracy.calibrate_throughput --cross-validate  # held-out error by size, scale, length
    .venv/bin/python -m benchmarks.accuracy.calibrate_throughput --held-out  # H100-80GB and A100-80GB tables, never fitted
    .venv/bin/python -m benchmarks.accuracy.calibrate_throughput --smoke     # --fit cut to a few iterations: seconds

Data: `calibration_llm_foundry_a100_40gb` of the shared reference: MPT models
(GPT-shaped, GELU MLP, tied embeddings, learned positions, vocabulary 50368)
trained with PyTorch FSDP and flash attention on A100-40GB nodes of 8 joined
by 1600 Gb/s RoCE. The error of MFU equals the error of tokens/s, since both
sides use the same FLOP count for a row; we compare tokens/s.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from pathlib import Path

from planner.hardware.cluster import make_cluster
from planner.models.hf_config import spec_from_hf_config
from planner.models.spec import ModelSpec
from planner.throughput.constants import CONSTANTS, ThroughputConstants
from planner.throughput.estimate import estimate_throughput
from planner.throughput.implementation import OUR_STRATEGIES
from planner.training_config import TrainingConfig
from tests.reference_data import published_reference

# (d_model, n_layers, n_heads) of llm-foundry's MPT benchmark configs (scripts/train/yamls/pretrain/mpt-*.yaml).
MPT_SHAPES = {
    "125m": (768, 12, 12),
    "350m": (1024, 24, 16),
    "760m": (1536, 24, 12),
    "1b": (2048, 24, 16),
    "3b": (2560, 32, 20),
    "7b": (4096, 32, 32),
    "13b": (5120, 40, 40),
    "30b": (7168, 48, 56),
    "70b": (8192, 80, 64),
}
MPT_VOCAB = 50368
FITTED = (
    "matmul_peak_fraction",
    "matmul_traffic_weight",
    "elementwise_passes",
    "attention_peak_fraction",
    "overlap_interference",
)


def mpt_spec(size: str, seq_len: int) -> ModelSpec:
    d_model, layers, heads = MPT_SHAPES[size]
    config = {
        "model_type": "gpt2",
        "n_embd": d_model,
        "n_layer": layers,
        "n_head": heads,
        "n_inner": 4 * d_model,
        "vocab_size": MPT_VOCAB,
        "n_positions": seq_len,
        "activation_function": "gelu",
        "tie_word_embeddings": True,
    }
    return spec_from_hf_config(config, name=f"mpt-{size}", origin="dimensions", source="llm-foundry MPT config")


def calibration_cases() -> list[tuple[dict, ModelSpec, TrainingConfig, object]]:
    rows = published_reference()["calibration_llm_foundry_a100_40gb"]["rows"]
    return [_case(row, "A100-40GB", "roce-1600g") for row in rows]


HELD_OUT_FILE = Path(__file__).resolve().parents[1] / "data" / "llm_foundry_heldout.md"
# Each held-out table of that file (its "## " heading) -> (label, catalog GPU, inter-node network).
# H100 clusters: 8 x 400 Gb/s NDR per node; A100 clusters: 1600 Gb/s RoCE, as the headings say.
HELD_OUT_TABLES = {
    "H100 80GB BF16": ("H100-80GB BF16, 8-64 GPUs (Oct 2023)", "H100-80GB", "ib-ndr"),
    "H100 80GB FP8": ("H100-80GB FP8 (Transformer Engine linears), 8 GPUs (Oct 2023)", "H100-80GB", "ib-ndr"),
    "A100 80GB with 1600 Gbps node-node interconnect (RoCE)": (
        "A100-80GB, 8-64 GPUs (Oct 2023)",
        "A100-80GB",
        "roce-1600g",
    ),
    "H100 80GB BF16 (Large Scale, >= 128 GPUs)": ("H100-80GB BF16, 128-512 GPUs (Jan 2024)", "H100-80GB", "ib-ndr"),
    "A100 80GB with 1600 Gbps node-node interconnect (RoCE), April 2023 campaign": (
        "A100-80GB, 8-64 GPUs (April 2023: the calibration set's campaign)",
        "A100-80GB",
        "roce-1600g",
    ),
}
# The columns read, by their name in the tables' header rows (the April 2023 table has no "Model TFLOP").
_COLUMNS = {
    "model": "Model",
    "seq_len": "SeqLen (T)",
    "n_gpus": "# GPUs",
    "gpu": "GPU",
    "mfu_pct": "MFU",
    "micro_bs": "MicroBatchSize",
    "grad_accum": "GradAccum",
    "tokens_per_s": "Throughput (T/s)",
    "sharding": "Sharding Strategy",
    "act_ckpt": "Activation Checkpointing",
    "precision": "Precision",
}


def held_out_rows() -> list[dict]:
    """The verbatim llm-foundry table rows in benchmarks/data/llm_foundry_heldout.md, as calibration-style dicts
    with the heading of their table ("table")."""
    rows: list[dict] = []
    table, header = "", {}
    for line in HELD_OUT_FILE.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            table, header = line[3:].strip(), {}
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if cells[0] == "Model":
            header = {name: index for index, name in enumerate(cells)}
            continue
        if not header or len(cells) != len(header) or not cells[1].isdigit():
            continue
        value = {key: cells[header[name]] for key, name in _COLUMNS.items()}
        rows.append(
            {
                "table": table,
                "model": value["model"],
                "seq_len": int(value["seq_len"]),
                "n_gpus": int(value["n_gpus"]),
                "gpu": value["gpu"],
                "mfu_pct": float(value["mfu_pct"]),
                "micro_bs": int(value["micro_bs"]),
                "grad_accum": int(value["grad_accum"]),
                "tokens_per_s": float(value["tokens_per_s"]),
                "sharding": value["sharding"],
                "act_ckpt": value["act_ckpt"] == "True",
                "fp8": value["precision"] == "amp_fp8",  # FP8 matmuls inside bf16 autocast (--fp8)
            }
        )
    return rows


def _case(row: dict, gpu: str, network: str):
    spec = mpt_spec(row["model"], row["seq_len"])
    config = TrainingConfig(
        strategy="fsdp",
        fsdp_sharding="full" if row["sharding"] == "FULL_SHARD" else "grad-op",
        micro_batch=row["micro_bs"],
        grad_accum=row["grad_accum"],
        seq_len=row["seq_len"],
        precision="bf16-mixed",
        activation_checkpointing="full" if row["act_ckpt"] else "none",
        fp8=row.get("fp8", False),
    )
    nodes = max(row["n_gpus"] // 8, 1)
    cluster = make_cluster(gpu, gpus_per_node=8, nodes=nodes, interconnect=network if nodes > 1 else None)
    return row, spec, config, cluster


def held_out_cases() -> dict[str, list]:
    """The held-out rows as cases, by their table's label (HELD_OUT_TABLES), in the file's order."""
    cases: dict[str, list] = {}
    for row in held_out_rows():
        label, gpu, network = HELD_OUT_TABLES[row["table"]]
        cases.setdefault(label, []).append(_case(row, gpu, network))
    return cases


# The stack the constants are fitted with and llm-foundry's tables are compared with: ours, but with the
# FlashAttention-class kernels llm-foundry ran on Hopper (its Triton flash attention or flash-attn), not the cuDNN
# attention our backends run there on torch 2.13 (implementation.py, runs_flash_attention_2).
FITTED_STACK = dataclasses.replace(OUR_STRATEGIES, runs_flash_attention_2=True)


def relative_errors(cases, constants: ThroughputConstants) -> list[float]:
    errors = []
    for row, spec, config, cluster in cases:
        predicted = estimate_throughput(
            spec, config, cluster, constants=constants, implementation=FITTED_STACK
        ).tokens_per_s
        errors.append(predicted / row["tokens_per_s"] - 1.0)
    return errors


def median_abs(errors: list[float]) -> float:
    return statistics.median(abs(e) for e in errors)


def _objective(cases, values: list[float]) -> float:
    if any(v <= 0 for v in values) or values[0] > 1 or values[3] > 1 or values[4] > 1:
        return 1e9
    constants = dataclasses.replace(CONSTANTS, **dict(zip(FITTED, values)))
    errors = relative_errors(cases, constants)
    # Median (the goal) plus the mean, so the fit does not ignore the tail.
    return median_abs(errors) + 0.5 * statistics.fmean(abs(e) for e in errors)


def nelder_mead(f, start: list[float], step: float = 0.15, iterations: int = 400) -> list[float]:
    """Plain Nelder-Mead (no scipy in the project); relative initial steps."""
    n = len(start)
    simplex = [list(start)] + [[x * (1 + step) if i == j else x for j, x in enumerate(start)] for i in range(n)]
    scores = [f(p) for p in simplex]
    for _ in range(iterations):
        order = sorted(range(n + 1), key=scores.__getitem__)
        simplex, scores = [simplex[i] for i in order], [scores[i] for i in order]
        centroid = [sum(p[j] for p in simplex[:-1]) / n for j in range(n)]
        worst = simplex[-1]
        reflected = [c + (c - w) for c, w in zip(centroid, worst)]
        score = f(reflected)
        if score < scores[0]:
            expanded = [c + 2 * (c - w) for c, w in zip(centroid, worst)]
            expanded_score = f(expanded)
            simplex[-1], scores[-1] = (expanded, expanded_score) if expanded_score < score else (reflected, score)
        elif score < scores[-2]:
            simplex[-1], scores[-1] = reflected, score
        else:
            contracted = [c + 0.5 * (w - c) for c, w in zip(centroid, worst)]
            contracted_score = f(contracted)
            if contracted_score < scores[-1]:
                simplex[-1], scores[-1] = contracted, contracted_score
            else:
                best = simplex[0]
                simplex = [best] + [[b + 0.5 * (x - b) for b, x in zip(best, p)] for p in simplex[1:]]
                scores = [scores[0]] + [f(p) for p in simplex[1:]]
    return simplex[min(range(n + 1), key=scores.__getitem__)]


FIT_ITERATIONS = 400
SMOKE_ITERATIONS = 5  # --smoke: the fit's code path, not its result


def fit(cases, iterations: int = FIT_ITERATIONS) -> ThroughputConstants:
    start = [getattr(CONSTANTS, name) for name in FITTED]
    best = nelder_mead(lambda values: _objective(cases, values), start, iterations=iterations)
    return dataclasses.replace(CONSTANTS, **dict(zip(FITTED, best)))


HELD_OUT_SPLITS = {
    "fit models <= 1b, predict >= 3b": lambda row: row["model"] in ("125m", "350m", "760m", "1b"),
    "fit 8-GPU runs, predict 16-128 GPUs": lambda row: row["n_gpus"] == 8,
    "fit seq <= 4096, predict seq >= 8192": lambda row: row["seq_len"] <= 4096,
}


def cross_validate(cases, iterations: int = FIT_ITERATIONS) -> None:
    """Fit on one part of the table and report the error on the rest: evidence that
    the constants transfer to sizes, scales and sequence lengths they never saw."""
    for label, in_fit in HELD_OUT_SPLITS.items():
        fit_cases = [case for case in cases if in_fit(case[0])]
        held_out = [case for case in cases if not in_fit(case[0])]
        errors = relative_errors(held_out, fit(fit_cases, iterations))
        print(
            f"{label}: {len(held_out)} held-out rows, median |error| {100 * median_abs(errors):.2f}%, "
            f"mean {100 * statistics.fmean(abs(e) for e in errors):.2f}%"
        )


def print_table(cases, constants: ThroughputConstants, markdown: bool) -> None:
    errors = relative_errors(cases, constants)
    if markdown:
        print("| model | seq | GPUs | micro-batch | accum | ckpt | measured MFU % | predicted MFU % | error |")
        print("|---|---|---|---|---|---|---|---|---|")
    for (row, *_), error in zip(cases, errors):
        predicted_mfu = row["mfu_pct"] * (1 + error)
        cells = (
            row["model"],
            row["seq_len"],
            row["n_gpus"],
            row["micro_bs"],
            row["grad_accum"],
            "yes" if row["act_ckpt"] else "no",
            f"{row['mfu_pct']:.2f}",
            f"{predicted_mfu:.2f}",
            f"{100 * error:+.1f}%",
        )
        print("| " + " | ".join(map(str, cells)) + " |" if markdown else "  ".join(f"{c:>7}" for c in cells))
    print(
        f"\nrows: {len(errors)}  median |error|: {100 * median_abs(errors):.2f}%  "
        f"mean |error|: {100 * statistics.fmean(abs(e) for e in errors):.2f}%  "
        f"max |error|: {100 * max(abs(e) for e in errors):.2f}%"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fit", action="store_true", help="fit the constants first and print them")
    parser.add_argument("--markdown", action="store_true", help="print the table as markdown")
    parser.add_argument("--cross-validate", action="store_true", help="fit on part of the rows, report the rest")
    parser.add_argument("--held-out", action="store_true", help="the H100-80GB and A100-80GB tables, never fitted")
    parser.add_argument("--smoke", action="store_true", help=f"fits of {SMOKE_ITERATIONS} iterations (alone: --fit)")
    args = parser.parse_args(argv)
    iterations = SMOKE_ITERATIONS if args.smoke else FIT_ITERATIONS
    cases = calibration_cases()
    if args.cross_validate:
        cross_validate(cases, iterations)
        return 0
    if args.held_out:
        for label, table_cases in held_out_cases().items():
            print(f"## {label} (held out: never fitted)")
            print_table(table_cases, CONSTANTS, args.markdown)
            print()
        return 0
    constants = CONSTANTS
    if args.fit or args.smoke:
        constants = fit(cases, iterations)
        if args.smoke:
            print(f"constants after {SMOKE_ITERATIONS} iterations (smoke: not a fit to keep):")
        else:
            print("fitted constants (paste into planner/throughput/constants.py):")
        for name in FITTED:
            print(f"    {name}: float = {getattr(constants, name):.4g}")
        print()
    print_table(cases, constants, args.markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())

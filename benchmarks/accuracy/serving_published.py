"""`plan --mode inference` against published GPU serving measurements (docs/accuracy.md, "Serving").

    .venv/bin/python -m benchmarks.accuracy.serving_published              # table + medians
    .venv/bin/python -m benchmarks.accuracy.serving_published --fit        # what the calibration rows give
    .venv/bin/python -m benchmarks.accuracy.serving_published --write-docs # the table into docs/accuracy.md
    .venv/bin/python -m benchmarks.accuracy.serving_published --smoke      # the table, printed only

Rows come from benchmarks/data/published_serving.yaml, each with its source
(NVIDIA NIM, TensorRT-LLM, lmdeploy, Baseten). Each is planned at the setup its source
states: engine batching, weight and KV formats, tensor parallelism, input and
output lengths and concurrency (closed-loop clients; "max" = more clients
than the KV cache holds). Two global constants of planner/inference/roofline.py
are calibrated on subsets of these rows (`--fit`): the HBM efficiency on the
single-request ITLs and the prefill share of the peak on the single-request
TTFTs; `leave_one_out` refits both without each row in turn and predicts it.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from planner.hardware.cluster import make_cluster
from planner.inference import InferenceRequest
from planner.inference.request import Batching
from planner.inference.roofline import EFFICIENCY, ServingEfficiency
from planner.inference.speed import ServingSpeed, max_running, serving_speed
from planner.models.resolve import resolve_model

DATA_FILE = Path(__file__).resolve().parents[1] / "data" / "published_serving.yaml"
DOCS_FILE = Path(__file__).resolve().parents[2] / "docs" / "accuracy.md"
BEGIN, END = "<!-- serving_published:begin -->", "<!-- serving_published:end -->"
METRICS = ("ttft_ms", "itl_ms", "tokens_per_s")
# "max" concurrency: this many times the clients the KV cache holds (the regime, not the number, matters).
MAX_LOAD_FACTOR = 4


@dataclass(frozen=True)
class Row:
    source: str
    model: str
    gpu: str
    tp: int
    weights: str
    kv_cache: str
    input: int
    output: int
    concurrency: int | None  # None: the source's maximum load
    batching: str
    measured: dict[str, float]
    name: str

    @property
    def setup(self) -> str:
        clients = "max load" if self.concurrency is None else f"c={self.concurrency}"
        return f"TP{self.tp} {self.weights}/{self.kv_cache} KV, {self.input}/{self.output}, {clients}, {self.batching}"


def load_rows(path: Path = DATA_FILE) -> tuple[list[Row], dict[str, dict]]:
    document = yaml.safe_load(path.read_text())
    rows = []
    for raw in document["rows"]:
        concurrency = raw["concurrency"]
        rows.append(
            Row(
                source=raw["source"],
                model=raw["model"],
                gpu=raw["gpu"],
                tp=raw["tp"],
                weights=raw["weights"],
                kv_cache=raw["kv_cache"],
                input=raw["input"],
                output=raw["output"],
                concurrency=None if concurrency == "max" else int(concurrency),
                batching=raw["batching"],
                measured={metric: float(raw[metric]) for metric in METRICS if raw.get(metric) is not None},
                name=raw.get("as", raw["model"]),
            )
        )
    return rows, document["sources"]


def predict(row: Row, efficiency: ServingEfficiency = EFFICIENCY) -> ServingSpeed:
    spec = resolve_model(row.model)
    cluster = make_cluster(row.gpu, gpus_per_node=8)
    request = InferenceRequest(
        context=row.input,
        output=row.output,
        batch=1,
        weights=row.weights,
        kv_cache=row.kv_cache,
        batching=Batching(row.batching),
    )
    clients = row.concurrency
    if clients is None:
        clients = MAX_LOAD_FACTOR * max_running(spec, request, cluster, row.tp, 1)
    return serving_speed(spec, request.model_copy(update={"batch": clients}), cluster, row.tp, 1, efficiency)


def predicted_metrics(speed: ServingSpeed) -> dict[str, float]:
    return {"ttft_ms": speed.ttft_s * 1e3, "itl_ms": speed.itl_s * 1e3, "tokens_per_s": speed.request_tokens_per_s}


def errors(row: Row, efficiency: ServingEfficiency = EFFICIENCY) -> dict[str, float]:
    predicted = predicted_metrics(predict(row, efficiency))
    return {metric: predicted[metric] / value - 1 for metric, value in row.measured.items()}


# --- calibration: each constant on its own subset of rows -------------------------------------------------


def hbm_rows(rows: list[Row]) -> list[Row]:
    """Single-request decode steps: bytes over bandwidth, nothing else of size."""
    return [r for r in rows if r.concurrency == 1 and "itl_ms" in r.measured]


def prefill_rows(rows: list[Row]) -> list[Row]:
    """Single-request prefills of at least 2048 tokens: compute-bound."""
    return [r for r in rows if r.concurrency == 1 and r.input >= 2048 and "ttft_ms" in r.measured]


def _solve(rows: list[Row], metric: str, field: str, base: ServingEfficiency) -> float:
    """The value of `field` at which the median predicted/measured of `metric` over `rows` is 1 (bisection)."""
    low, high = 0.05, 1.0
    for _ in range(30):
        middle = (low + high) / 2
        efficiency = dataclasses.replace(base, **{field: middle})
        ratio = statistics.median(1 + errors(r, efficiency)[metric] for r in rows)
        # a higher efficiency predicts shorter times: too long a prediction needs a higher value
        low, high = (middle, high) if ratio > 1 else (low, middle)
    return round((low + high) / 2, 3)


def fit(rows: list[Row], base: ServingEfficiency = EFFICIENCY) -> ServingEfficiency:
    hbm = _solve(hbm_rows(rows), "itl_ms", "hbm", base)
    with_hbm = dataclasses.replace(base, hbm=hbm)
    return dataclasses.replace(with_hbm, prefill_peak=_solve(prefill_rows(rows), "ttft_ms", "prefill_peak", with_hbm))


def leave_one_out(rows: list[Row]) -> list[dict[str, float]]:
    """Each row's errors with the constants refitted without it (rows outside both subsets: the full fit's)."""
    full = fit(rows)
    calibration = {id(r) for r in hbm_rows(rows) + prefill_rows(rows)}
    out = []
    for index, row in enumerate(rows):
        efficiency = fit(rows[:index] + rows[index + 1 :]) if id(row) in calibration else full
        out.append(errors(row, efficiency))
    return out


def median_abs(per_row: list[dict[str, float]], metric: str) -> tuple[float, int]:
    values = [abs(e[metric]) for e in per_row if metric in e]
    return statistics.median(values), len(values)


# --- output -------------------------------------------------------------------------------------------------


def _cell(measured: dict[str, float], predicted: dict[str, float], metric: str, fmt: str) -> str:
    if metric not in measured:
        return "–"
    error = predicted[metric] / measured[metric] - 1
    return f"{measured[metric]:{fmt}} / {predicted[metric]:{fmt}} ({error:+.0%})"


def markdown(rows: list[Row], sources: dict[str, dict]) -> str:
    lines = [
        "| model (source's name) | GPU | setup | TTFT ms: measured / estimated | ITL ms | output tokens/s | regime "
        "(running / KV holds) | source |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        speed = predict(row)
        predicted = predicted_metrics(speed)
        source = sources[row.source]
        lines.append(
            f"| {row.model} ({row.name}) | {row.gpu} | {row.setup} | "
            f"{_cell(row.measured, predicted, 'ttft_ms', ',.0f')} | {_cell(row.measured, predicted, 'itl_ms', '.1f')} | "
            f"{_cell(row.measured, predicted, 'tokens_per_s', ',.0f')} | {speed.regime} ({speed.running} / "
            f"{speed.max_running}) | [{row.source}]({source['url']}) |"
        )
    in_sample = [errors(row) for row in rows]
    held_out = leave_one_out(rows)
    lines.append("")
    lines.append("| metric | rows | median abs error | leave-one-out median abs error |")
    lines.append("|---|---|---|---|")
    for metric, label in (("tokens_per_s", "output tokens/s"), ("itl_ms", "ITL"), ("ttft_ms", "TTFT")):
        value, count = median_abs(in_sample, metric)
        loo, _ = median_abs(held_out, metric)
        lines.append(f"| {label} | {count} | {value:.1%} | {loo:.1%} |")
    return "\n".join(lines)


def write_docs(text: str, path: Path = DOCS_FILE) -> None:
    document = path.read_text()
    start, stop = document.index(BEGIN) + len(BEGIN), document.index(END)
    path.write_text(document[:start] + "\n" + text + "\n" + document[stop:])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fit", action="store_true", help="print the constants the calibration rows give")
    parser.add_argument("--write-docs", action="store_true", help="replace the table in docs/accuracy.md")
    parser.add_argument("--smoke", action="store_true", help="the table, printed only (it takes a second anyway)")
    args = parser.parse_args(argv)
    rows, sources = load_rows()
    if args.fit:
        fitted = fit(rows)
        print(
            f"hbm {fitted.hbm} (on {len(hbm_rows(rows))} rows), prefill_peak {fitted.prefill_peak} "
            f"(on {len(prefill_rows(rows))} rows); planner uses {EFFICIENCY}"
        )
        return 0
    text = markdown(rows, sources)
    if args.write_docs and not args.smoke:
        write_docs(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

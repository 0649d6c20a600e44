"""Megatron-DeepSpeed of 2021-2022: its measured cost, fitted on BigScience's sweeps, checked on its other runs.

    .venv/bin/python -m benchmarks.accuracy.megatron_deepspeed_microbatch_cost           # the fit and every row
    .venv/bin/python -m benchmarks.accuracy.megatron_deepspeed_microbatch_cost --smoke   # the same (it is quick)

The fit behind planner/throughput/measured_shortfall.py (docs/accuracy.md, "Megatron-DeepSpeed of 2021-2022: a
measured cost"). BigScience's 2022-02-21 benchmarks sweep the micro-batch at a fixed global batch (181B and 196B at
TP 8, PP 6 and 12; benchmarks/data/published_stack_runs.yaml, informational rows): the measured step falls far more
with larger micro-batches than the estimate's does. A step of
    estimate x (1 + a) + c x (micro-batch slots of a stage: m + pp - 1) x (layers on the stage)
is fitted on those twelve rows by least squares against the estimate without the shortfall. Each Megatron-DeepSpeed
row is then shown without it, with the fitted cost, and under its own preset: megatron-deepspeed-2022 carries the
cost (MT-NLG, BLOOM, GPT-NeoX-20B and BigScience's other benchmarks, which it was not fitted on), megatron-deepspeed
does not (DeepSpeed's 2023 V100 runs, which the cost would put 20 points under).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

import numpy as np

from benchmarks.accuracy.validate_published_runs import compare, implementation_of, plan_inputs, published_rows
from planner.throughput.estimate import estimate_throughput
from planner.throughput.measured_shortfall import MeasuredShortfall

SWEEP_PREFIXES = ("bigscience-bench-181b-", "bigscience-bench-196b-", "bigscience-bench-187b-")
_UNIT_SLOT = MeasuredShortfall(0.0, 1.0, "the slot term alone")  # seconds() = slots x layers per stage


def _terms(row: dict) -> tuple[float, float, float]:
    """(estimated step seconds, the slot term: micro-batch slots of a stage x its layers, the row's error), all
    without the measured shortfall. The slot term is MeasuredShortfall.seconds at share 0 and 1 s per slot-layer."""
    spec, config, cluster = plan_inputs(row)
    without = dataclasses.replace(implementation_of(row), measured_shortfall=None)
    step = estimate_throughput(spec, config, cluster, implementation=without).step_time_s
    slot_layers = _UNIT_SLOT.seconds(step, config.grad_accum, config.pipeline_parallel, spec.num_layers)
    return step, slot_layers, compare(row, without).error


def fit() -> tuple[float, float]:
    """(a, c): the proportional shortfall and the seconds per micro-batch slot per layer, from the sweeps."""
    rows = [row for row in published_rows() if row["id"].startswith(SWEEP_PREFIXES)]
    terms = [_terms(row) for row in rows]
    measured = np.array([step * (1 + error) for step, _, error in terms])  # error = estimate's speed / measured - 1
    design = np.array([[step, slot_layers] for step, slot_layers, _ in terms])
    a, c = np.linalg.lstsq(design, measured - design[:, 0], rcond=None)[0]
    return float(a), float(c)


def with_cost(row: dict, a: float, c: float) -> tuple[float, float]:
    """The row's error estimated without the shortfall, and once its estimated step carries the fitted costs."""
    step, slot_layers, error = _terms(row)
    return error, (1 + error) * step / (step * (1 + a) + c * slot_layers) - 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="the same run (it is quick): for the smoke tests")
    parser.parse_args(argv)
    a, c = fit()
    print(f"fitted on {len([r for r in published_rows() if r['id'].startswith(SWEEP_PREFIXES)])} sweep rows: "
          f"a = {a:.3f} (share of the estimated step), c = {c * 1e3:.1f} ms per micro-batch slot per layer")  # fmt: skip
    for row in published_rows():
        if row.get("implementation") not in ("megatron-deepspeed", "megatron-deepspeed-2022"):
            continue
        fitted_on = row["id"].startswith(SWEEP_PREFIXES)
        label = "fitted on" if fitted_on else ("counted" if row["statistics"] else "informational")
        before, after = with_cost(row, a, c)
        preset = compare(row).error  # the row's own preset (megatron-deepspeed-2022 carries the cost)
        print(f"  {row['id']:<58} {label:<13} {before:+7.1%}  fitted cost: {after:+7.1%}  preset: {preset:+7.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Megatron-DeepSpeed of 2021-2022: the measured cost (planner/throughput/measured_shortfall.py, fitted by
benchmarks/accuracy/megatron_deepspeed_microbatch_cost.py; docs/accuracy.md "Megatron-DeepSpeed of 2021-2022: a
measured cost"). Fitted on BigScience's twelve 2022-02-21 sweep rows, it is the megatron-deepspeed-2022 preset's;
every row of that code it was not fitted on comes within 10%, and DeepSpeed's 2023 V100 runs, whose later code takes
the megatron-deepspeed preset, would fall 20 points under with it."""

from __future__ import annotations

import dataclasses

import pytest

from benchmarks.accuracy.megatron_deepspeed_microbatch_cost import SWEEP_PREFIXES, fit, with_cost
from benchmarks.accuracy.per_stack_accuracy import stack_results
from benchmarks.accuracy.validate_published_runs import (
    compare,
    comparisons,
    implementation_of,
    plan_inputs,
    published_rows,
)
from planner.throughput.estimate import estimate_throughput
from planner.throughput.implementation import IMPLEMENTATIONS, MEGATRON_DEEPSPEED
from planner.throughput.measured_shortfall import MEGATRON_DEEPSPEED_2022_SHORTFALL


@pytest.fixture(scope="module")
def fitted() -> tuple[float, float]:
    return fit()


def _rows(preset: str) -> list[dict]:
    return [row for row in published_rows() if row.get("implementation") == preset]


def test_the_fit_on_bigscience_sweeps_is_the_presets_constant(fitted):
    a, c = fitted
    assert a == pytest.approx(MEGATRON_DEEPSPEED_2022_SHORTFALL.share, abs=5e-4)  # 0.113
    assert c == pytest.approx(MEGATRON_DEEPSPEED_2022_SHORTFALL.per_slot_layer_s, abs=5e-5)  # 10.8 ms
    sweeps = [row for row in published_rows() if row["id"].startswith(SWEEP_PREFIXES)]
    assert len(sweeps) == 12 and not any(row["statistics"] for row in sweeps)
    assert all(abs(with_cost(row, a, c)[1]) < 0.06 for row in sweeps)


def test_every_run_of_that_code_not_fitted_on_comes_within_ten_percent():
    """The counted rows (MT-NLG 2021, BLOOM, GPT-NeoX-20B) and BigScience's other benchmarks (TP 4 and 8, one node
    and 48, 02-21 and 02-28 with the BF16Optimizer): +10.1% to +39.6% without the cost."""
    held_out = [row for row in _rows("megatron-deepspeed-2022") if not row["id"].startswith(SWEEP_PREFIXES)]
    counted = {row["id"] for row in held_out if row["statistics"]}
    assert counted == {
        "mt-nlg-530b-280-nodes", "mt-nlg-530b-350-nodes", "mt-nlg-530b-420-nodes", "bloom-176b", "gpt-neox-20b"
    }  # fmt: skip
    assert len(held_out) == 14
    errors = {row["id"]: compare(row).error for row in held_out}
    assert all(abs(error) < 0.10 for error in errors.values()), errors
    without = [compare(row, dataclasses.replace(implementation_of(row), measured_shortfall=None)) for row in held_out]
    assert all(comparison.error > 0.10 for comparison in without)


def test_the_later_code_does_not_carry_it(fitted):
    """DeepSpeed's July 2023 runs of its synced Megatron-DeepSpeed (V100, TP 4): -8.8% and -18.0% under their preset,
    some 20 points lower with the cost."""
    a, c = fitted
    v100 = [row for row in published_rows() if row["id"].startswith("megatron-deepspeed-rebase-")]
    assert len(v100) == 2 and all(row["implementation"] == "megatron-deepspeed" for row in v100)
    assert MEGATRON_DEEPSPEED.measured_shortfall is None
    assert all(compare(row).error > -0.20 and with_cost(row, a, c)[1] < -0.25 for row in v100)


def test_the_estimate_names_the_shortfall_and_its_step_carries_it():
    """The preset's cost is its own breakdown part, named as measured; the step is the estimate's plus it."""
    row = next(row for row in published_rows() if row["id"] == "mt-nlg-530b-280-nodes")
    spec, config, cluster = plan_inputs(row)
    preset = IMPLEMENTATIONS["megatron-deepspeed-2022"]
    with_it = estimate_throughput(spec, config, cluster, implementation=preset)
    without = estimate_throughput(
        spec, config, cluster, implementation=dataclasses.replace(preset, measured_shortfall=None)
    )
    shortfall = MEGATRON_DEEPSPEED_2022_SHORTFALL
    slots = config.grad_accum + config.pipeline_parallel - 1
    expected = without.step_time_s * shortfall.share + shortfall.per_slot_layer_s * slots * 105 / 35
    assert with_it.breakdown.measured_shortfall_s == pytest.approx(expected, rel=1e-9)
    assert with_it.step_time_s == pytest.approx(without.step_time_s + expected, rel=1e-9)
    assert with_it.sources["measured_shortfall_s"].startswith("measured: ")
    assert "measured_shortfall_s" not in without.sources
    assert "measured_shortfall_s" not in without.breakdown.model_dump()  # absent where none applies


def _without_shortfall(row: dict) -> float:
    """The row's error with its preset's measured shortfall (planner/throughput/measured_shortfall.py) taken out:
    the miss the shortfall was fitted on and is checked against."""
    return compare(row, dataclasses.replace(implementation_of(row), measured_shortfall=None)).error


def test_megatron_deepspeed_misses_without_pipeline_or_network():
    """BigScience's one-node 18B benchmark (TP 8, no pipeline, no inter-node traffic; chronicles-prequel.md) is
    over-predicted without the measured shortfall as much as BLOOM itself, so the Megatron-DeepSpeed gap lies in
    that stack's per-GPU compute, not in its pipeline engine or network (docs/accuracy.md). With it, the benchmarks
    are held at today's figures (informational rows)."""
    every = {c.row["id"]: c for c in comparisons()}
    bench = [c for c in every.values() if c.row.get("stack") == "megatron-deepspeed-bigscience-bench"]
    assert len(bench) == 21 and not any(c.row["statistics"] for c in bench)
    one_node = every["bigscience-bench-18b-1-node-tp8-mbs2"]
    assert one_node.row["pp"] == 1 and one_node.row["gpus"] == one_node.row["gpus_per_node"]
    assert _without_shortfall(one_node.row) > _without_shortfall(every["bloom-176b"].row)  # +26.0% against +13.9%
    result = {r.stack: r for r in stack_results()}["Megatron-DeepSpeed as BigScience benchmarked it (Feb 2022)"]
    assert result.informational
    assert result.median <= 0.035 and abs(result.worst) <= 0.065  # 2.6%, -6.2% (184B, micro-batch 4) today


def test_megatron_deepspeeds_miss_shrinks_as_its_micro_batches_grow():
    """BigScience's 2022-02-21 sweeps (181B and 196B at PP 12 and PP 6, micro-batch 1-8, the global batch fixed):
    without the measured shortfall the measured step gains far more from larger micro-batches than the estimate
    does, so the miss falls with the micro-batch (181B at PP 12: +39.8%, +30.8%, +17.5%, +15.3% at 1, 2, 4, 8): the
    cost per micro-batch slot the shortfall was fitted on (docs/accuracy.md). With it, no trend is left."""
    rows = {c.row["id"]: c for c in comparisons()}
    for sweep in ("181b-48-nodes-tp8-pp12", "181b-48-nodes-tp8-pp6", "196b-48-nodes-tp8-pp12", "196b-48-nodes-tp8-pp6"):
        keys = [key for mbs in (1, 2, 4) if (key := f"bigscience-bench-{sweep}-mbs{mbs}") in rows]
        errors = [_without_shortfall(rows[key].row) for key in keys]
        assert len(errors) >= 2 and errors == sorted(errors, reverse=True), sweep
        assert all(abs(rows[key].error) < 0.06 for key in keys), sweep
    mbs1, mbs8 = (rows[f"bigscience-bench-181b-48-nodes-tp8-pp12-mbs{m}"].row for m in (1, 8))
    assert _without_shortfall(mbs1) - _without_shortfall(mbs8) > 0.2

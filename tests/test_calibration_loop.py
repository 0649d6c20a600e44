"""The measure -> record -> calibrate loop, proven on this machine's CPU.

A small matrix (2 gloo ranks, tiny GPT-2, three strategies x two
micro-batches, 1 and 4: six entries of one world size, so one launch whose
ranks start once and run the six in turn) is measured and recorded; corrections fitted from the records
must make the planner rank the configs as the measurements do: its top choice
is the measured best or within 10% of it. The rank correlations before and
after calibration are printed (pytest -s) for the record.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.harness.matrix import generate_matrix
from benchmarks.harness.runner import run_matrix
from benchmarks_db.environment import current_environment
from benchmarks_db.store import BenchmarkStore
from planner.calibration import Calibration
from planner.hardware.gpus import resolve_gpu
from run_training_benchmark import model_spec

PROFILE = Path(__file__).resolve().parent.parent / "benchmarks" / "results" / "cpu_profile.json"


def ranks(values: list[float]) -> list[float]:
    order = sorted(range(len(values)), key=values.__getitem__)
    result = [0.0] * len(values)
    for rank, index in enumerate(order):
        result[index] = float(rank)
    return result


def spearman(a: list[float], b: list[float]) -> float:
    ra, rb = ranks(a), ranks(b)
    n = len(a)
    return 1 - 6 * sum((x - y) ** 2 for x, y in zip(ra, rb)) / (n * (n**2 - 1))


def test_cpu_entry_quotes_the_recorded_measurement():
    profile = json.loads(PROFILE.read_text())
    cpu = resolve_gpu("cpu")
    assert cpu.dense_tflops.fp32 == pytest.approx(profile["fp32_matmul_tflops"]["1_thread"], rel=1e-2)
    assert cpu.memory_bandwidth_GBps == pytest.approx(profile["copy_bandwidth_GBps"]["1_thread"], rel=1e-2)
    assert cpu.interconnect.bandwidth_GBps_per_direction == pytest.approx(
        profile["gloo_2_ranks"]["allreduce_bus_bandwidth_GBps"], rel=1e-2
    )
    assert profile["measured_at"][:10] in cpu.source and "benchmarks/accuracy/measure_cpu.py" in cpu.source


@pytest.mark.slow
def test_calibrated_planner_ranks_configs_like_the_measurements(tmp_path):
    spec = model_spec("gpt2", tiny=True)
    matrix = generate_matrix(
        spec,
        hardware="cpu",
        gpu="cpu",
        gpu_note="this machine",
        gpu_counts=[2],
        gpus_per_node=2,
        strategies=["ddp", "fsdp", "fsdp-grad-op"],
        micro_batches=[1, 4],
        checkpointing=["none"],
        seq_len=32,
        precision="fp32",
        tiny=True,
    )
    assert len(matrix.entries) == 6
    store = BenchmarkStore(tmp_path / "loop.duckdb")
    summary = run_matrix(matrix, store, current_environment(), steps=4, warmup=1, timeout_s=120)
    assert summary.recorded == {"ok": 6}, [run.error for run in store.runs() if run.error]
    assert summary.launches == 1  # one world size: its ranks' imports and process group paid once

    records = {record.matrix_key: record for record in store.runs()}
    calibration = Calibration.fit([record.measured_run() for record in records.values()])
    assert sorted(c.family for c in calibration.corrections) == ["ddp", "fsdp-full", "fsdp-grad-op"]
    measured, raw, calibrated = [], [], []
    for entry in matrix.entries:
        measured.append(records[entry.key].tokens_per_s)
        raw.append(entry.predicted.tokens_per_s)
        # corrections only: the exact measured replacement would make this trivially true
        calibrated.append(calibration.corrected(entry.predicted, "cpu", entry.config).tokens_per_s)

    # Out of sample: each config predicted by corrections fitted on the other five (reported, not asserted).
    runs = {key: record.measured_run() for key, record in records.items()}
    held_out = [
        Calibration.fit([run for key, run in runs.items() if key != entry.key])
        .corrected(entry.predicted, "cpu", entry.config)
        .tokens_per_s
        for entry in matrix.entries
    ]
    best_measured = max(measured)
    top_choice = max(range(len(calibrated)), key=calibrated.__getitem__)
    before, after = spearman(raw, measured), spearman(calibrated, measured)
    error_before = sum(abs(p / m - 1) for p, m in zip(raw, measured)) / len(measured)
    error_after = sum(abs(p / m - 1) for p, m in zip(calibrated, measured)) / len(measured)
    print(
        f"\nrank correlation (Spearman) with measured tokens/s: {before:.2f} before, {after:.2f} after calibration; "
        f"mean |error| {error_before:.0%} -> {error_after:.0%}; top choice {matrix.entries[top_choice].label} at "
        f"{measured[top_choice] / best_measured:.0%} of the measured best; leave-one-out correlation "
        f"{spearman(held_out, measured):.2f}"
    )
    assert measured[top_choice] >= 0.9 * best_measured
    assert error_after < error_before
    assert after > 0.5

    # A measured config is replaced by its measurement, with the record's id and date.
    adjust = calibration.adjuster("cpu", world_size=2, nodes=1, spec_hash=matrix.model_spec_hash)
    entry = matrix.entries[0]
    replaced = adjust(entry.config, entry.predicted)
    record = records[entry.key]
    assert replaced.step_time_s == record.step_time_median_s
    # (a loaded machine may add the far-from-formula words: tests/test_calibration_siblings.py holds them)
    assert replaced.sources["step_time_s"].startswith(
        f"measured: benchmark record {record.id[:8]} ({record.created_at:%Y-%m-%d})"
    )

"""Benchmark records for the DB tests: valid by default, any field overridable."""

from __future__ import annotations

from pathlib import Path

from benchmarks_db.record import RunRecord, new_run_id
from benchmarks_db.store import BenchmarkStore
from planner.training_config import TrainingConfig


def sample_record(**overrides) -> RunRecord:
    config = TrainingConfig(micro_batch=overrides.get("micro_batch", 2), seq_len=128, precision="fp32")
    fields = dict(
        id=new_run_id(),
        host="test-host",
        gpu_name="cpu",
        gpu_count=2,
        model_name="gpt2",
        model_spec_hash="0123abcd",
        tiny=True,
        strategy="ddp",
        config_json=config.model_dump_json(),
        micro_batch=2,
        grad_accum=1,
        global_batch=4,
        seq_len=128,
        precision="fp32",
        step_time_median_s=0.05,
        step_time_spread_s=0.002,
        steps_measured=5,
        tokens_per_s=10240.0,
        peak_memory_per_rank_bytes=[300_000_000, 310_000_000],
        predicted_step_time_s=0.01,
        status="ok",
        runner="test",
    )
    fields.update(overrides)
    return RunRecord(**fields)


def calibrating_store(path: Path, predicted_s: float = 2000.0, scale: float = 4.0) -> BenchmarkStore:
    """Three DDP records of gpt2 on cpu whose measured step is exactly 10 ms + 4 x predicted: predicted 2,000-8,000 s
    by default, within a decade of a 2-GPU fp32 cpu plan of gpt2 at seq 128 (~6,800 s), so the correction carries
    to it (planner/calibration.py, EXTRAPOLATION_LIMIT); `predicted_s` (the smallest) moves the range, e.g. 5 for
    5-20 s, around the ~15 s step of the same plan in the default precision; `scale` replaces the 4."""
    store = BenchmarkStore(path)
    store.add_many(
        [
            sample_record(
                micro_batch=mb,
                predicted_step_time_s=predicted_s * mb,
                step_time_median_s=0.01 + scale * predicted_s * mb,
                tokens_per_s=2 * mb * 128 / (0.01 + scale * predicted_s * mb),
            )
            for mb in (1, 2, 4)
        ]
    )
    return store

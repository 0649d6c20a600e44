"""Offloading variants are strategy families of their own (planner/strategy_family.py).

Found by a new-user audit: after a tune, `plan` said a plain ZeRO-2's step was "calibrated (zero2 on cpu: x2.87
(1 record: e01f59ea))", where e01f59ea was the ZeRO-2 + offload trial, and `db list` named the FSDP full-shard +
CPU offload trial `fsdp-full`. An offloaded step pays host transfers and a CPU optimizer step the plain one never
does, so neither's measured-over-predicted ratio stands for the other's (docs/benchmarks.md, "Calibration").
"""

from __future__ import annotations

from datetime import datetime

import pytest

from benchmarks_db.store import BenchmarkStore
from hardware_selector_cli.app import main
from planner.calibration import Calibration, MeasuredRun
from planner.strategy_family import is_strategy_family, strategy_family
from planner.training_config import TrainingConfig
from tests.db_samples import sample_record
from tests.test_db_calibration import estimate

ZERO2 = TrainingConfig(strategy="deepspeed", zero_stage=2, seq_len=128, precision="fp32")
ZERO2_OFFLOAD = TrainingConfig(
    strategy="deepspeed", zero_stage=2, offload_optimizer="cpu", seq_len=128, precision="fp32"
)
FSDP_OFFLOAD = TrainingConfig(
    strategy="fsdp", offload_optimizer="cpu", offload_params="cpu", seq_len=128, precision="fp32"
)
DDP = TrainingConfig(seq_len=128, precision="fp32")


def _run(config: TrainingConfig, ratio: float, index: int) -> MeasuredRun:
    return MeasuredRun(id=f"rec{index:05d}", measured_at=datetime(2026, 11, 1 + index), gpu_name="cpu", world_size=2,
                       model_name="gpt2", model_spec_hash="h", config=config, ok=True, step_time_s=ratio * 0.1,
                       predicted_step_time_s=0.1)  # fmt: skip


def test_offloading_variants_are_families_of_their_own_and_named_so():
    assert strategy_family(ZERO2) == "zero2"
    assert strategy_family(ZERO2_OFFLOAD) == "zero2+offload"
    assert strategy_family(FSDP_OFFLOAD) == "fsdp-full+offload"
    nvme = TrainingConfig(strategy="deepspeed", zero_stage=3, offload_optimizer="cpu", offload_params="nvme")
    assert strategy_family(nvme) == "zero3+nvme"
    assert all(is_strategy_family(name) for name in ("zero2+offload", "fsdp-full+offload", "zero3+nvme", "FSDP"))
    assert not is_strategy_family("ddp+gpu")


def test_a_plain_strategy_is_not_corrected_by_an_offload_record():
    calibration = Calibration.fit([_run(ZERO2_OFFLOAD, 2.87, 1), _run(DDP, 1.5, 2)])
    assert sorted(c.family for c in calibration.corrections) == ["ddp", "zero2+offload"]
    # Plain ZeRO-2 has no record of its own: the plain families' pool (DDP's 1.5), not the offload trial's 2.87.
    plain = calibration.corrected(estimate(0.1), "cpu", ZERO2)
    assert plain.step_time_s == pytest.approx(0.15)
    assert (
        plain.sources["step_time_s"]
        == "calibration: families without records (pooled from ddp) on cpu: x1.5 (1 record: rec00002)"
    )
    own = calibration.corrected(estimate(0.1), "cpu", ZERO2_OFFLOAD)
    assert own.step_time_s == pytest.approx(0.287)
    assert own.sources["step_time_s"] == "calibration: zero2+offload on cpu: x2.87 (1 record: rec00001)"
    # An offloading family without records takes the offloading families' pool.
    fsdp = calibration.corrected(estimate(0.1), "cpu", FSDP_OFFLOAD)
    assert fsdp.step_time_s == pytest.approx(0.287)
    assert "offload families without records (pooled from zero2+offload)" in fsdp.sources["step_time_s"]


def test_a_kind_without_records_takes_the_other_kinds_pool():
    """Only offload trials measured: a plain family still does not win on the formula's word alone."""
    calibration = Calibration.fit([_run(ZERO2_OFFLOAD, 2.0, 1), _run(FSDP_OFFLOAD, 8.0, 2)])
    plain = calibration.corrected(estimate(0.1), "cpu", ZERO2)
    assert plain.step_time_s == pytest.approx(0.1 * (2.0 * 8.0) ** 0.5)  # the pool's geometric mean
    assert (
        "offload families without records (pooled from fsdp-full+offload, zero2+offload)"
        in plain.sources["step_time_s"]
    )


def test_db_list_names_an_offloading_run_by_its_family_and_filters_by_that_name(tmp_path, capsys):
    store = BenchmarkStore(tmp_path / "runs.duckdb")
    # As tune stored the FSDP + CPU offload trial before offloading variants were families: "fsdp-full".
    store.add(sample_record(strategy="fsdp-full", config_json=FSDP_OFFLOAD.model_dump_json()))
    plain = TrainingConfig(strategy="fsdp", seq_len=128, precision="fp32")
    store.add(sample_record(strategy="fsdp-full", config_json=plain.model_dump_json()))
    db = ["--db", str(store.path)]
    assert main(["db", "list", *db, "--strategy", "fsdp-full+offload"]) == 0
    out = capsys.readouterr().out
    assert "1 run in" in out and "fsdp-full+offload" in out
    assert main(["db", "list", *db, "--strategy", "FSDP-full"]) == 0
    out = capsys.readouterr().out
    assert "1 run in" in out and "+offload" not in out

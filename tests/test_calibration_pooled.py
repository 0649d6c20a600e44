"""Families without records of their own take the GPU's pooled correction (planner/calibration.py).

Found by a new user's audit: with records of FSDP grad-op, ZeRO-2 and engine TP2 on H100s all 25% slower than
predicted, `plan` ranked first families never measured, on the formula's word alone, and explained the measured
family's loss as "less efficient matmuls". The reference: when every measured family runs the same factor slower
than predicted, calibration must change no ranking, only the figures (each by that factor)."""

from __future__ import annotations

from datetime import datetime

import pytest

from planner.calibration import Calibration, MeasuredRun
from planner.hardware.cluster import make_cluster
from planner.models.resolve import resolve_model
from planner.search import PlanRequest, search_plans
from planner.search.strategy_layout import family_label
from planner.training_config import TrainingConfig
from tests.test_db_calibration import estimate

SLOWER = 1.25


def _run(config: TrainingConfig, predicted: float, index: int, gpu: str = "H100-80GB") -> MeasuredRun:
    return MeasuredRun(id=f"rec{index:05d}", measured_at=datetime(2026, 11, 1 + index), gpu_name=gpu, world_size=8,
                       model_name="other-model", model_spec_hash="not-this-model", config=config, ok=True,
                       step_time_s=SLOWER * predicted, predicted_step_time_s=predicted)  # fmt: skip


MEASURED = [
    TrainingConfig(strategy="fsdp", fsdp_sharding="grad-op", micro_batch=1, seq_len=4096),
    TrainingConfig(strategy="deepspeed", zero_stage=2, micro_batch=1, seq_len=4096),
]


def test_a_family_without_records_takes_the_pooled_correction_and_says_so():
    runs = [_run(config, predicted, 3 * i + j) for i, config in enumerate(MEASURED) for j, predicted in
            enumerate((1.0, 2.0, 4.0))]  # fmt: skip
    calibration = Calibration.fit(runs)
    zero3 = TrainingConfig(strategy="deepspeed", zero_stage=3, micro_batch=1, seq_len=4096)
    corrected = calibration.corrected(estimate(2.0), "H100-80GB", zero3)
    assert corrected.step_time_s == pytest.approx(SLOWER * 2.0)
    assert corrected.sources["step_time_s"].startswith(
        "calibration: families without records (pooled from fsdp-grad-op, zero2) on H100-80GB: "
    )
    own = calibration.corrected(estimate(2.0), "H100-80GB", MEASURED[1])
    assert own.sources["step_time_s"].startswith("calibration: zero2 on H100-80GB: ")
    assert calibration.corrected(estimate(2.0), "A100-80GB", zero3).step_time_s == 2.0  # another GPU: none


def test_a_uniform_slowdown_of_the_measured_families_changes_no_ranking():
    spec = resolve_model("llama-3-8b")
    cluster = make_cluster("H100-80GB", gpus_per_node=8, nodes=1)
    request = PlanRequest(global_batch=512, seq_len=4096, top_k=8)
    plain = search_plans(spec, cluster, request)
    step = plain.best.throughput.step_time_s
    runs = [_run(config, step * factor, 3 * i + j) for i, config in enumerate(MEASURED)
            for j, factor in enumerate((0.5, 1.0, 2.0))]  # fmt: skip
    adjust = Calibration.fit(runs).adjuster("H100-80GB", world_size=8, nodes=1, spec_hash="this-model")
    calibrated = search_plans(spec, cluster, request, adjust, calibration="test")
    assert [family_label(p.config) for p in calibrated.candidates] == [family_label(p.config) for p in plain.candidates]
    for before, after in zip(plain.candidates, calibrated.candidates):
        assert after.throughput.tokens_per_s == pytest.approx(before.throughput.tokens_per_s / SLOWER, rel=1e-6)


def test_the_table_marks_which_figures_rest_on_the_database(tmp_path, capsys):
    """`plan`'s table marks a measured figure * and a calibrated one ~, with a legend; without records, none."""
    import json
    import re

    from benchmarks_db.record import spec_hash
    from hardware_selector_cli.app import main
    from tests.db_samples import calibrating_store, sample_record

    plan = ["plan", "--model", "gpt2", "--gpu", "cpu", "--gpus-per-node", "2", "--seq-len", "128",
            "--strategies", "ddp,fsdp,zero2", "--precision", "fp32", "--db"]  # fmt: skip
    legend = "tokens/s: * measured on this cluster (benchmark record), ~ calibrated by measured runs; unmarked: formula"

    def rows(out: str) -> list[str]:
        return [line for line in out.splitlines() if re.match(r"^ \d ", line)]

    assert main([*plan, str(tmp_path / "none.duckdb")]) == 0
    out = capsys.readouterr().out
    assert legend not in " ".join(out.split()) and not any(re.search(r"\d[kMG]?[*~] ", row) for row in rows(out))

    store = calibrating_store(tmp_path / "runs.duckdb")  # ddp records only: the others take the pooled correction
    assert main([*plan, str(store.path)]) == 0
    out = capsys.readouterr().out
    assert legend in " ".join(out.split())
    # DDP, ZeRO-2, FSDP grad-op and full-shard: no offload on the cpu device (docs/search.md)
    assert len(rows(out)) == 4 and all(re.search(r"\d[kMG]?~ ", row) for row in rows(out))

    assert main([*plan, str(store.path), "--json"]) == 0
    best = json.loads(capsys.readouterr().out)["best"]
    store.add(sample_record(model_name="gpt2", model_spec_hash=spec_hash(resolve_model("gpt2")), tiny=False,
                            config_json=json.dumps(best["config"]), micro_batch=best["config"]["micro_batch"],
                            grad_accum=best["config"]["grad_accum"], seq_len=128, step_time_median_s=best["throughput"]["step_time_s"] / 2,
                            predicted_step_time_s=None))  # fmt: skip
    assert main([*plan, str(store.path)]) == 0
    first = rows(capsys.readouterr().out)[0]
    assert re.search(r"\d[kMG]?\* ", first), first


def test_a_plan_slower_on_other_evidence_is_said_to_be_so_not_blamed_on_a_breakdown_part():
    """Audit: a measured family that lost to a formula-only one was said to lose to "less efficient matmuls"."""
    from planner.search.explain import _slowdown_cause

    formula = estimate(1.0)
    measured = formula.model_copy(
        update={"sources": {"step_time_s": "measured: benchmark record ab12cd34 (2026-11-28)"}}
    )
    calibrated = formula.model_copy(update={"sources": {"step_time_s": "calibration: zero2 on cpu: x1.25 (3 records)"}})
    assert _slowdown_cause(measured, formula) == (
        "its step time is measured (benchmark record ab12cd34 (2026-11-28)); the faster plan's is the formula's"
    )
    assert _slowdown_cause(formula, calibrated) == (
        "its step time is the formula's; the faster plan's is calibrated (zero2 on cpu: x1.25 (3 records))"
    )
    slower = estimate(2.0)  # the same evidence: the breakdown part that grew names the cause, as before
    assert _slowdown_cause(slower, formula) == "less efficient matmuls (smaller micro-batch or TP shard)"

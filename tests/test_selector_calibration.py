"""The Python API and the seed command calibrate on the benchmark database as `plan` does (docs/selector.md).

Found by an audit: `plan` rescaled its throughput by the stored records while get_distributed_training_config,
answering through the same search, ignored them, so the two disagreed on one cluster. The reference is `plan`'s
own answer for the same request, and the records' exact fit (step = 10 ms + 4 x predicted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import hardware_selector
from benchmarks_db.record import spec_hash
from benchmarks_db.store import BenchmarkStore
from hardware_selector import get_distributed_training_config, select_hardware_for_task
from hardware_selector_cli.app import main
from planner.models.resolve import resolve_model
from planner.selector import calibration as selector_calibration
from planner.units import format_seconds
from tests.db_samples import calibrating_store, sample_record

REPO_ROOT = Path(__file__).resolve().parent.parent
API = dict(model_family="text_generation", model_name="gpt2", gpu_count=2, gpu="cpu", gpus_per_node=2, seq_len=128,
           strategies=["DDP"], precision="fp32")  # fmt: skip
PLAN = ["plan", "--model", "gpt2", "--gpu", "cpu", "--gpus-per-node", "2", "--seq-len", "128",
        "--strategies", "ddp", "--precision", "fp32", "--json"]  # fmt: skip


def _filled(tmp_path) -> BenchmarkStore:
    return calibrating_store(tmp_path / "runs.duckdb")


def _plan_best(db: Path, capsys) -> dict:
    assert main([*PLAN, "--db", str(db)]) == 0
    return json.loads(capsys.readouterr().out)["best"]


def test_the_api_calibrates_as_plan_does_and_says_how(tmp_path, capsys):
    store = _filled(tmp_path)
    plain = get_distributed_training_config(**API, calibrate=False)
    calibrated = get_distributed_training_config(**API, db=store.path)
    planned = _plan_best(store.path, capsys)

    assert plain["calibration"] == "not calibrated (calibrate=False)"
    assert plain["estimated_throughput"]["sources"]["step_time_s"].startswith("formula")
    assert calibrated["calibration"] == planned["calibration"]
    assert calibrated["calibration"].startswith("calibrated on 3 measured runs for cpu")
    assert calibrated["plan"].config == planned_config(planned)
    speed = calibrated["estimated_throughput"]
    assert speed["step_time_s"] == pytest.approx(planned["throughput"]["step_time_s"], rel=1e-9)
    assert speed["sources"]["step_time_s"].startswith("calibration: ddp on cpu: 10 ms + x4")
    assert calibrated["plan"].config == plain["plan"].config  # DDP alone: the same plan, at the records' exact fit
    assert speed["step_time_s"] == pytest.approx(0.01 + 4 * plain["estimated_throughput"]["step_time_s"])

    # A record of the answer's own config: the answer quotes it, as `plan` does.
    measured = sample_record(
        model_name="gpt2",
        model_spec_hash=spec_hash(resolve_model("gpt2")),
        tiny=False,
        config_json=calibrated["plan"].config.model_dump_json(),
        micro_batch=calibrated["plan"].config.micro_batch,
        grad_accum=calibrated["plan"].config.grad_accum,  # the columns say what ran (RunRecord.config)
        seq_len=128,
        step_time_median_s=speed["step_time_s"] / 2,
        predicted_step_time_s=None,
    )
    store.add(measured)
    again = get_distributed_training_config(**API, db=store.path)
    assert again["estimated_throughput"]["sources"]["step_time_s"] == (
        f"measured: benchmark record {measured.id[:8]} ({measured.created_at:%Y-%m-%d})"
    )
    assert again["estimated_throughput"]["sources"] == _plan_best(store.path, capsys)["throughput"]["sources"]

    # No database at the path: said, and the analytical figures.
    absent = get_distributed_training_config(**API, db=tmp_path / "absent.duckdb")
    assert absent["calibration"].startswith("not calibrated: no benchmark database at")
    assert absent["estimated_throughput"]["step_time_s"] == plain["estimated_throughput"]["step_time_s"]


def planned_config(best: dict):
    from planner.training_config import TrainingConfig

    return TrainingConfig.model_validate(best["config"])


def test_select_hardware_calibrates_each_gpu_it_ranks(tmp_path):
    # Around its ~15 s step (default precision), and faster than predicted: DDP stays the best plan, corrected.
    store = calibrating_store(tmp_path / "runs.duckdb", predicted_s=5.0, scale=0.5)
    result = select_hardware_for_task(
        "text_generation", "gpt2", gpu_count=2, seq_len=128, candidates=["cpu", "A100-80GB"],
        rank_by="throughput", db=str(store.path), include_detected=False,
    )  # fmt: skip
    assert result["estimates"]["cpu"]["calibration"].startswith("calibrated on 3 measured runs for cpu")
    assert result["estimates"]["A100-80GB"]["calibration"].startswith("not calibrated: no benchmark records for A100")


def test_without_a_reader_the_planner_alone_says_it_is_not_calibrated(monkeypatch, tmp_path):
    """planner.selector on its own (no hardware_selector import) cannot read the database: it says so."""
    from planner.selector import get_distributed_training_config as bare

    monkeypatch.setattr(selector_calibration, "_installed", [])
    answer = bare(**API, db=_filled(tmp_path).path)
    assert (
        answer["calibration"] == "not calibrated: no benchmark database reader (import the API from hardware_selector)"
    )
    assert answer["estimated_throughput"]["sources"]["step_time_s"].startswith("formula")


@pytest.mark.parametrize(
    "db, error, message",
    [(3, TypeError, "db must be a path (str or os.PathLike), not int 3"), ("  ", ValueError, "db is empty")],
)
def test_a_bad_db_argument_is_one_sentence(db, error, message):
    with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")):
        get_distributed_training_config(**API, db=db)
    with pytest.raises(TypeError, match="calibrate must be True or False, not str 'no'"):
        get_distributed_training_config(**API, calibrate="no")


def test_the_seed_command_prints_how_it_calibrated_and_can_turn_it_off(tmp_path):
    # Around its ~15 s step (default precision), and faster than predicted: DDP stays the best plan, corrected.
    store = calibrating_store(tmp_path / "runs.duckdb", predicted_s=5.0, scale=0.5)
    seed = ["--model-family", "text_generation", "--model-name", "gpt2", "--distributed", "--gpu-count", "2",
            "--gpu", "cpu", "--seq-len", "128"]  # fmt: skip

    def run(*extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "hardware_selector.py", *seed, *extra], cwd=REPO_ROOT,
                              capture_output=True, text=True, timeout=60)  # fmt: skip

    calibrated = run("--db", str(store.path))
    assert calibrated.returncode == 0, calibrated.stderr
    assert "  throughput calibrated on 3 measured runs for cpu" in calibrated.stdout
    off = run("--db", str(store.path), "--no-calibration")
    assert "  throughput not calibrated (--no-calibration)" in off.stdout
    serving = run("--mode", "inference", "--no-calibration")
    assert serving.returncode == 2 and serving.stdout == ""
    assert serving.stderr.strip().splitlines() == [
        "error: --db and --no-calibration calibrate training's throughput; drop them or use --mode training"
    ]


def test_a_database_that_cannot_be_read_is_one_line_in_the_doors_words(tmp_path, capsys, monkeypatch):
    """The reader's errors name the path as each door spells it: the API db=, the seed command --db. (They were
    `plan`'s words with "--db" replaced afterwards, which rewrote a path holding "--db" too, and named a path from
    $HARDWARE_SELECTOR_DB as if --db had given it.)"""
    named = tmp_path / "old--db-runs.duckdb"
    named.write_text("not a database")
    with pytest.raises(ValueError) as caught:
        get_distributed_training_config(**API, db=named)
    assert str(caught.value) == f"db= {named} is not a DuckDB database; pass db= a .duckdb file (or a new path)"
    monkeypatch.setenv("HARDWARE_SELECTOR_DB", str(named))
    with pytest.raises(ValueError) as caught:
        get_distributed_training_config(**API)
    assert str(caught.value) == (
        f"$HARDWARE_SELECTOR_DB {named} is not a DuckDB database; pass db= a .duckdb file (or a new path)"
    )
    monkeypatch.delenv("HARDWARE_SELECTOR_DB")
    junk = tmp_path / "junk.duckdb"
    junk.write_text("not a database")
    with pytest.raises(ValueError) as caught:
        get_distributed_training_config(**API, db=junk)
    assert str(caught.value) == f"db= {junk} is not a DuckDB database; pass db= a .duckdb file (or a new path)"
    seed = ["--model-family", "text_generation", "--model-name", "gpt2", "--gpu", "cpu", "--db", str(junk)]
    assert hardware_selector.main(seed) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: --db {junk} is not a DuckDB database; pass --db a .duckdb file (or a new path)"
    )


def test_an_answer_the_records_changed_nothing_of_says_why_as_plan_does(tmp_path, capsys):
    """Audit: the line said "calibrated on 3 measured runs" when the only correction was out of range for the
    answer (fitted on predicted steps of 5-20 s, the fp32 plan's is ~7,000 s), or was for a strategy the answer
    does not use. The references: `plan`'s own line for the same request, and the answer's formula step."""
    store = calibrating_store(tmp_path / "runs.duckdb", predicted_s=5.0)
    far = get_distributed_training_config(**API, db=store.path)
    step = far["estimated_throughput"]["step_time_s"]
    assert far["estimated_throughput"]["sources"]["step_time_s"].startswith("formula")
    assert far["calibration"] == _plan_best(store.path, capsys)["calibration"]
    assert far["calibration"].startswith("not calibrated: the correction ddp on cpu: 10 ms + x4 (3 records, newest ")
    assert far["calibration"].endswith(
        f"was fitted on predicted steps of 5 s-20 s; this plan's {format_seconds(step)} is more than 10x outside that range"
    )
    # Per-GPU batch 8 in the default precision: DDP's ~15 s step is in range and corrected x4; the other
    # strategies, with no record of their own, take the pooled correction (tests/test_calibration_pooled.py), so
    # FSDP grad-op no longer wins uncorrected, and DDP (simplest, within the estimate's error) is the answer.
    unlisted = get_distributed_training_config(
        model_family="text_generation", model_name="gpt2", gpu_count=2, gpu="cpu", seq_len=128, batch_size=8,
        db=store.path,
    )  # fmt: skip
    assert unlisted["distributed_strategy"] == "DDP"
    assert unlisted["estimated_throughput"]["sources"]["step_time_s"].startswith("calibration: ddp on cpu: ")
    assert unlisted["calibration"].startswith("calibrated on 3 measured runs for cpu")

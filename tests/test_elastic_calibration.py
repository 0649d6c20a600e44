"""`plan --elastic`'s fallbacks are calibrated for their own cluster (hardware_selector_cli/calibration_hook.py,
cluster_calibration; docs/running.md, "Elastic").

The table's node counts were searched with the hook of the plan's own cluster: a record of a fallback's config on
its own node count (a run that restarted there, say) was never found, since that hook matches measured runs of the
plan's world size and node count only. The reference: the record's measured step, which the 2-node fallback now
takes, as `plan --nodes 2` would."""

from __future__ import annotations

import json

from benchmarks_db.record import spec_hash
from benchmarks_db.store import BenchmarkStore
from planner.elastic_plan import ElasticPlan
from planner.models.resolve import resolve_model
from tests.db_samples import sample_record
from tests.distributed import cli_in_process

PLAN = ["plan", "-m", "gpt2", "--gpu", "cpu", "--gpus-per-node", "2", "--seq-len", "128", "--global-batch", "64",
        "--strategies", "ddp", "--elastic", "1:2", "--force"]  # fmt: skip


def _table(run_dir) -> ElasticPlan:
    return ElasticPlan.model_validate(json.loads((run_dir / "plan.json").read_text())["elastic"])


def test_a_fallback_measured_on_its_own_node_count_takes_its_measured_step(tmp_path):
    db = tmp_path / "db.duckdb"
    plain = cli_in_process(*PLAN, "--emit", tmp_path / "plain", "--db", db)
    assert plain.returncode == 0, plain.stderr
    two = _table(tmp_path / "plain").fallbacks[1]
    assert two.num_nodes == 2 and two.throughput.sources["step_time_s"].startswith("formula")
    measured = 1.2 * two.throughput.step_time_s
    record = sample_record(gpu_count=4, nodes=2, model_spec_hash=spec_hash(resolve_model("gpt2")), tiny=False,
                           config_json=two.config.model_dump_json(), micro_batch=two.config.micro_batch,
                           global_batch=64, predicted_step_time_s=two.throughput.step_time_s,
                           step_time_median_s=measured)  # fmt: skip
    BenchmarkStore(db).add_many([record])
    calibrated = cli_in_process(*PLAN, "--emit", tmp_path / "calibrated", "--db", db)
    assert calibrated.returncode == 0, calibrated.stderr
    one, two = _table(tmp_path / "calibrated").fallbacks
    assert two.throughput.step_time_s == measured
    assert two.throughput.sources["step_time_s"] == f"measured: benchmark record {record.id[:8]} (" + (
        f"{record.created_at:%Y-%m-%d})"
    )
    # The plan's own count (1 node) was never measured: the record's family correction, x1.2, carried to it
    # within a decade of the 2-node step it was fitted on.
    assert one.throughput.sources["step_time_s"].startswith("calibration: ddp on cpu: x1.2 (1 record: ")

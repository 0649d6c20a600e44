"""CPU offload's time against what was measured, and what each plan says its offload is made of
(docs/accuracy.md, "DeepSpeed's own 2025 timing of ZeRO-Offload"; planner/throughput/step_sources.py)."""

from __future__ import annotations

from benchmarks.accuracy.per_stack_accuracy import stack_results
from benchmarks.accuracy.validate_published_runs import comparisons, implementation_of, plan_inputs
from benchmarks.memory.published_runs_fit import memory_ratio
from planner.throughput.estimate import estimate_throughput


def test_deepspeed_offload_as_its_maintainers_timed_it_in_2025_is_shown_and_held():
    """DeepSpeed's ZenFlow core-binding blog (2b68bbc59, 2025-10-06): ZeRO-2 with the optimizer on the CPU, Qwen2.5-3B
    and 1.5B on 2 A100-40GB (bf16, 4 x 512 tokens a GPU), and the 1.5B without the offload. Informational (warm-up in
    the 3B's means, the 1.5B's window not stated; version not printed). What the offload adds to the 1.5B's step,
    measured 1,365 - 240 ms, is 2.4x what we plan, and the 3B without offload is estimated at the edge of its 40 GB,
    as the blog could not run it (docs/accuracy.md, "DeepSpeed's own 2025 timing of ZeRO-Offload"). Each row is held
    where it stands so none can get worse; a DeepSpeed CPU-offload plan's offload source says it may be optimistic."""
    held = {  # the predicted error of each row today
        "deepspeed-blog-qwen2.5-3b-2-a100-zero2-offload-core-binding": 1.021,
        "deepspeed-blog-qwen2.5-3b-2-a100-zero2-offload": 1.337,
        "deepspeed-blog-qwen2.5-1.5b-2-a100-zero2-offload-core-binding": 1.165,
        "deepspeed-blog-qwen2.5-1.5b-2-a100-zero2": 0.517,
    }
    rows = {c.row["id"]: c for c in comparisons() if c.row.get("stack") == "deepspeed-offload-2025-a100"}
    assert set(rows) == set(held) and not any(c.row["statistics"] for c in rows.values())
    for row_id, error in held.items():
        assert rows[row_id].error <= error + 0.02, row_id
    offloaded = rows["deepspeed-blog-qwen2.5-1.5b-2-a100-zero2-offload-core-binding"].row
    alone = rows["deepspeed-blog-qwen2.5-1.5b-2-a100-zero2"].row

    def planned(row: dict):
        return estimate_throughput(*plan_inputs(row), implementation=implementation_of(row))

    measured_offload = offloaded["published"]["seconds_per_step"] - alone["published"]["seconds_per_step"]
    planned_offload = planned(offloaded).step_time_s - planned(alone).step_time_s
    assert 2.2 < measured_offload / planned_offload < 2.6  # 1,125 ms measured, 472 ms planned
    too_big = {**offloaded, "model": "qwen2.5-3b", "offload_optimizer": "none"}
    assert memory_ratio(too_big) > 0.95  # "we couldn't run Qwen2.5-3B with ZeRO2 using the same config"
    result = {r.stack: r for r in stack_results()}[
        "DeepSpeed ZeRO-2 with and without CPU optimizer offload (ZeRO-Offload), A100, 2025"
    ]
    assert result.informational and len(result.errors) == 4


def test_an_offload_source_says_what_the_offload_is_made_of():
    """Only a plan that offloads names the CPU optimizer, torch's under FSDP and our engine (ChunkedAdam) and DeepSpeed's
    otherwise; only DeepSpeed's
    CPU offload says the 2025 measurement found it optimistic (an NVMe plan, whose counted ZeRO-Infinity rows run
    faster than estimated, does not)."""
    row = next(c.row for c in comparisons() if c.row["id"] == "deepspeed-blog-qwen2.5-3b-2-a100-zero2-offload")
    sources = {
        name: estimate_throughput(*plan_inputs({**row, **change})).sources["offload_s"]
        for name, change in {
            "deepspeed": {},
            "none": {"offload_optimizer": "none"},
            "fsdp": {"strategy": "fsdp", "zero_stage": 0, "offload_optimizer": "none", "offload_params": "cpu"},
            "engine": {"strategy": "engine", "zero_stage": 1},
            "nvme": {"zero_stage": 3, "offload_optimizer": "nvme", "nvme_gb": 4000, "nvme_gbps": 25},
        }.items()
    }
    assert sources["none"] == "none: nothing offloaded"
    assert "DeepSpeed's CPU Adam" in sources["deepspeed"] and "may be optimistic" in sources["deepspeed"]
    assert "torch's Adam" in sources["fsdp"] and "may be optimistic" not in sources["fsdp"]
    assert "ChunkedAdam" in sources["engine"] and "may be optimistic" not in sources["engine"]
    # ...and is charged at that optimizer's rate: torch's Adam steps slower than DeepSpeed's (ZeRO-Offload Table 4).
    offload = {
        strategy: estimate_throughput(*plan_inputs({**row, "strategy": strategy, "zero_stage": 1})).breakdown.offload_s
        for strategy in ("engine", "deepspeed")
    }
    assert offload["engine"] > 2 * offload["deepspeed"]
    assert "NVMe reads and writes" in sources["nvme"] and "may be optimistic" not in sources["nvme"]

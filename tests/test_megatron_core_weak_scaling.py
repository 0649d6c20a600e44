"""Megatron-Core r0.8.0's H100 weak-scaling table (Megatron-LM README, benchmarks/data/published_stack_runs.yaml,
docs/accuracy.md "Per stack"): the estimate against NVIDIA's own runs, and how far the setups the README leaves open
could move it."""

from __future__ import annotations

import statistics

import pytest

from benchmarks.accuracy.per_stack_accuracy import TARGET
from benchmarks.accuracy.validate_published_runs import compare, implementation_of, published_rows

ROW_BOUND = 0.25


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return [row for row in published_rows() if row.get("stack") == "megatron-core-2024"]


def test_the_table_is_entered_whole(rows):
    assert len(rows) == 9
    assert [row["pp"] for row in rows] == [1, 1, 1, 1, 2, 4, 6, 8, 16]
    assert [row["statistics"] for row in rows] == [row["pp"] == 1 for row in rows]
    # The printed per-GPU rate against the printed MFU: BF16's peak (989.4), not FP8's (1979), to the percent
    # printed (the 462B's 459.9 is 46.5% of it, printed 47; the 32B's 459.6 is printed 46).
    for row, mfu in zip(rows, (41, 47, 49, 46, 42, 43, 44, 48, 47)):
        assert abs(100 * row["published"]["tflops_per_gpu"] / 989.4 - mfu) < 0.6, row["id"]


def test_megatron_flop_count_matches_the_printed_aggregate(rows):
    """The 1.7B's 408.8 TFLOP/s x 48 GPUs is the printed 19.6 PFLOP/s, and the formula's parameter count (12 L h^2
    plus an untied 131,072-word embedding and head) is the printed 1.7B."""
    first = rows[0]
    assert first["published"]["tflops_per_gpu"] * first["gpus"] / 1000 == pytest.approx(19.6, abs=0.05)
    params = 12 * first["layers"] * first["hidden"] ** 2 + 2 * first["vocab"] * first["hidden"]
    assert params / 1e9 == pytest.approx(1.7, abs=0.05)


def _errors(rows, **change) -> list[float]:
    return [compare({**row, **change}).error for row in rows if row["statistics"]]


def test_counted_rows_reach_the_target_under_every_open_setup(rows):
    """Micro-batch and recomputation are not printed: at micro-batch 1 or 2, with no or selective recomputation, the
    four unpipelined rows keep the median within 15% and every row within 25%."""
    for change in ({}, {"micro_batch": 2}, {"activation_checkpointing": "selective"}):
        errors = _errors(rows, **change)
        assert len(errors) == 4
        assert statistics.median(abs(e) for e in errors) <= TARGET, change
        assert max(abs(e) for e in errors) < ROW_BOUND, change


def test_pipelined_rows_are_shown_not_counted(rows):
    """Non-interleaved (as entered) the five pipelined rows are within 10%; interleaving, which the README does not
    state, only raises the estimate (a smaller bubble), by up to 14 points at four chunks per GPU: why they are not
    counted. (119B and 462B cannot split their layers evenly into 2 or 4 chunks per stage.)"""
    pipelined = [row for row in rows if row["pp"] > 1]
    checked = 0
    for row in pipelined:
        plain = compare(row).error
        assert abs(plain) < 0.10, row["id"]
        for chunks in (2, 4):
            if row["layers"] % (row["pp"] * chunks) == 0:
                interleaved = compare({**row, "virtual_stages": chunks, "pipeline_schedule": "interleaved-1f1b"}).error
                assert plain < interleaved < plain + 0.15, (row["id"], chunks)
                checked += 1
    assert checked == 5  # 70B at 2; 177B and 314B at 2 and 4


def test_the_flop_convention_is_megatrons_model_flops(rows):
    """`megatron-num-flops` turns the estimate into Megatron-LM's count: per token 72 L h^2 (1 + s / 6h), the layers'
    forward and backward with the full s x s attention (Narayanan et al. 2021, Eq. 3 without its recomputed forward),
    plus 6 V h for the untied head's three passes."""
    from benchmarks.accuracy.validate_published_runs import plan_inputs
    from planner.throughput.estimate import estimate_throughput

    for row in rows:
        spec, config, cluster = plan_inputs(row)
        estimate = estimate_throughput(spec, config, cluster, implementation=implementation_of(row))
        tokens_per_gpu = estimate.tokens_per_s / estimate.world_size
        layers, hidden, seq = row["layers"], row["hidden"], row["seq_len"]
        per_token = 72 * layers * hidden**2 * (1 + seq / (6 * hidden)) + 6 * row["vocab"] * hidden
        assert compare(row).predicted_tflops == pytest.approx(per_token * tokens_per_gpu / 1e12, rel=1e-9), row["id"]

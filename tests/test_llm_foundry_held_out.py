"""The throughput estimate against llm-foundry's held-out tables (benchmarks/data/llm_foundry_heldout.md): MPT on
torch FSDP, measured by its maintainers and never used by the fit (docs/accuracy.md, "Held-out GPUs")."""

from __future__ import annotations

import statistics

import pytest

from benchmarks.accuracy.calibrate_throughput import held_out_cases, relative_errors
from planner.throughput.constants import CONSTANTS

OCT_H100 = "H100-80GB BF16, 8-64 GPUs (Oct 2023)"
OCT_H100_FP8 = "H100-80GB FP8 (Transformer Engine linears), 8 GPUs (Oct 2023)"
OCT_A100 = "A100-80GB, 8-64 GPUs (Oct 2023)"
LARGE_H100 = "H100-80GB BF16, 128-512 GPUs (Jan 2024)"
APR_A100 = "A100-80GB, 8-64 GPUs (April 2023: the calibration set's campaign)"
ROW_BOUND = 0.25  # issue 34's bound for a published row estimated with its own stack


@pytest.fixture(scope="module")
def errors_by_table() -> dict[str, list[tuple[dict, float]]]:
    return {
        label: list(zip((case[0] for case in cases), relative_errors(cases, CONSTANTS)))
        for label, cases in held_out_cases().items()
    }


def _median(pairs) -> float:
    return statistics.median(abs(error) for _, error in pairs)


def _config(row: dict) -> tuple:
    return row["model"], row["seq_len"], row["n_gpus"], row["micro_bs"], row["grad_accum"]


def test_every_table_is_read_whole():
    """The five tables as copied: a header change or a dropped row fails here, not silently in a median."""
    assert {label: len(cases) for label, cases in held_out_cases().items()} == {
        OCT_H100: 52,
        OCT_H100_FP8: 10,
        OCT_A100: 61,
        LARGE_H100: 18,
        APR_A100: 84,
    }


def test_the_8_to_64_gpu_tables_stay_within_10_percent(errors_by_table):
    for label in (OCT_H100, OCT_A100, APR_A100):
        assert _median(errors_by_table[label]) < 0.10, label


def test_fp8_rows_and_their_speedup_over_bf16(errors_by_table):
    """FP8 (Transformer Engine linears inside bf16 autocast, planned with --fp8): every row within 10%, and where the
    BF16 table holds the same model, length and GPU count, the estimate's FP8-over-BF16 speedup meets the measured
    one within 8% (measured 1.00x at 32k tokens, where attention dominates, to 1.35x at 512), each table's run at its
    own micro-batch (they differ: the 1b at 8192 ran micro-batch 3 in BF16, 2 in FP8)."""
    fp8 = errors_by_table[OCT_H100_FP8]
    assert all(row["fp8"] for row, _ in fp8)
    assert max(abs(error) for _, error in fp8) < 0.10
    bf16 = {_config(row)[:3]: (row, error) for row, error in errors_by_table[OCT_H100]}
    pairs = [(row, error, *bf16[_config(row)[:3]]) for row, error in fp8 if _config(row)[:3] in bf16]
    assert len(pairs) == 6
    for row, error, bf16_row, bf16_error in pairs:
        measured = row["tokens_per_s"] / bf16_row["tokens_per_s"]
        estimated = measured * (1 + error) / (1 + bf16_error)
        assert estimated == pytest.approx(measured, rel=0.08), _config(row)


def test_the_calibration_campaigns_80gb_table_has_no_row_over_the_bound(errors_by_table):
    """The April 2023 A100-80GB table ran the calibration set's software (bf16, FSDP PURE) on other GPUs: every row
    within 25%. The worst is the 30b at 8192 tokens (+24.7%), the configuration every campaign measured slow."""
    errors = [error for _, error in errors_by_table[APR_A100]]
    assert max(abs(error) for error in errors) < ROW_BOUND
    assert statistics.median(abs(error) for error in errors) < 0.05


def test_128_to_512_h100s_within_the_stack_target_and_the_gap_grows_with_scale(errors_by_table):
    """16-64 nodes: median within the per-stack target (15%), every row within 25%. The estimate keeps each GPU's
    step nearly flat from 128 to 512 GPUs while the measured one lengthens (70b +5%, 7b +8%, 1b +11%): the
    over-prediction grows with the GPU count for every model, not modelled and not explained
    (docs/accuracy.md, "Held-out GPUs")."""
    pairs = errors_by_table[LARGE_H100]
    assert _median(pairs) < 0.15
    assert max(abs(error) for _, error in pairs) < ROW_BOUND
    by_model: dict[str, dict[int, float]] = {}
    for row, error in pairs:
        by_model.setdefault(row["model"], {})[row["n_gpus"]] = error
    assert len(by_model) == 6
    for model, errors in by_model.items():
        assert 0 < errors[128] < errors[256] < errors[512], model


def test_the_a100_configs_measured_twice(errors_by_table):
    """The maintainers measured most A100-80GB configurations twice, in April (torch 1.13, bf16 PURE) and October 2023
    (torch 2.1, amp_bf16 DEFAULT). The two agree to a median 1.5%, but single configurations moved from -20% to +16%
    between them: the October 760m at micro-batch 48 and 96, the estimate's worst A100 rows but for the 30b at 8192
    tokens (+19%, +26%), are 15-20% slower than the April measurement of the same configuration, which the estimate
    meets within 2%."""
    may = {_config(row): (row, error) for row, error in errors_by_table[APR_A100]}
    october = {_config(row): (row, error) for row, error in errors_by_table[OCT_A100]}
    both = sorted(may.keys() & october.keys())
    assert len(both) == 55
    spread = {key: october[key][0]["tokens_per_s"] / may[key][0]["tokens_per_s"] - 1 for key in both}
    assert statistics.median(abs(s) for s in spread.values()) < 0.02
    assert min(spread.values()) < -0.19 and max(spread.values()) > 0.15  # the repeat's own range
    assert sum(abs(s) > 0.10 for s in spread.values()) == 6
    for key in (("760m", 1024, 8, 48, 2), ("760m", 512, 8, 96, 2)):
        assert spread[key] < -0.14, key
        assert october[key][1] > 0.18, key
        assert abs(may[key][1]) < 0.02, key


def test_the_30b_at_8192_tokens_is_slow_in_every_campaign(errors_by_table):
    """Not explained (docs/accuracy.md): the 30b at 8192 tokens, micro-batch 1 on 8 GPUs, runs 13-23% below the same
    model at 4096 tokens in all three tables that hold it, where every other model keeps at least 91% of its MFU
    from 4096 to 8192 tokens; the estimate, which sees nothing special there, is 25-35% over it and within 10% at 4096 tokens. This test keeps the docs' statement
    true: it fails when a change moves these rows."""
    for label in (OCT_H100, OCT_A100, APR_A100):
        rows = {(_config(row)[:3]): (row, error) for row, error in errors_by_table[label]}
        (long_row, long_error), (short_row, short_error) = rows[("30b", 8192, 8)], rows[("30b", 4096, 8)]
        assert long_row["mfu_pct"] / short_row["mfu_pct"] < 0.87, label
        assert 0.24 < long_error < 0.36, label
        assert abs(short_error) < 0.10, label
        by_model: dict[str, dict[int, float]] = {}
        for row, _ in errors_by_table[label]:
            if row["n_gpus"] == 8 and row["seq_len"] in (4096, 8192):
                by_model.setdefault(row["model"], {})[row["seq_len"]] = row["mfu_pct"]
        others = [mfu[8192] / mfu[4096] for model, mfu in by_model.items() if model != "30b" and len(mfu) == 2]
        assert len(others) >= 4 and min(others) > 0.91, label

"""NVIDIA's cudnn-frontend training benchmark (benchmark/Llama-3.2-1B-Training at 0b1577c8): transformers' Llama 3.2
1B on one H200 and one B200 through torch's SDPA, pinned to cuDNN's or FlashAttention-2's backend, at six lengths
(benchmarks/data/published_stack_runs.yaml, stack cudnn-frontend-llama-1b; docs/accuracy.md, "Our modules on one
GPU"). Informational (the clocks were locked at base), so held where they stand: a change that moves them is seen."""

from __future__ import annotations

import pytest

from benchmarks.accuracy.validate_published_runs import comparisons

# (GPU, batch, length): (cuDNN, FlashAttention-2) seconds per iteration as the README prints them.
PRINTED = {
    ("H200", 1, 16384): (0.424, 0.500), ("H200", 2, 8192): (0.357, 0.397), ("H200", 3, 4096): (0.243, 0.260),
    ("H200", 6, 2048): (0.229, 0.240), ("H200", 12, 1024): (0.222, 0.228), ("H200", 24, 768): (0.329, 0.336),
    ("B200", 1, 16384): (0.285, 0.374), ("B200", 2, 8192): (0.231, 0.276), ("B200", 3, 4096): (0.155, 0.172),
    ("B200", 6, 2048): (0.144, 0.154), ("B200", 12, 1024): (0.139, 0.145), ("B200", 24, 768): (0.200, 0.208),
}  # fmt: skip


@pytest.fixture(scope="module")
def rows():
    found = {c.row["id"]: c for c in comparisons() if c.row.get("stack") == "cudnn-frontend-llama-1b"}
    return {
        (c.row["gpu"], c.row["micro_batch"], c.row["seq_len"], "fa2" if c.row.get("attention_kernel") else "cudnn"): c
        for c in found.values()
    }


def test_the_rows_are_the_printed_table_planned_as_run(rows):
    """One GPU, our modules (`ours`, DDP of one), pure bf16, SGD, no checkpointing; every printed time entered."""
    assert len(rows) == 24
    for (gpu, batch, length), times in PRINTED.items():
        for kernel, seconds in zip(("cudnn", "fa2"), times):
            row = rows[(gpu, batch, length, kernel)].row
            assert row["published"] == {"seconds_per_step": seconds}
            assert (row["gpus"], row["precision"], row["optimizer"], row["statistics"]) == (1, "bf16", "sgd", False)
            assert (row["implementation"], row["strategy"], row["model"]) == ("ours", "ddp", "llama-3.2-1b")
            assert row["activation_checkpointing"] == "none" and row["global_batch"] == row["micro_batch"] == batch


def test_the_h200s_cudnn_rows_are_met_and_the_b200s_run_slower_than_estimated(rows):
    """cuDNN (our runner's kernel on both): the H200 within 10% at every length, the B200 estimated 15-30% faster
    than its base-clock-locked run at every length (the H200 was locked too; which share of the gap the lock is was
    not isolated)."""
    for (gpu, _, _, kernel), c in rows.items():
        if kernel != "cudnn":
            continue
        assert (abs(c.error) < 0.10) if gpu == "H200" else (0.15 < c.error < 0.30), (gpu, c.row["id"], c.error)


# Per iteration, cuDNN's rate over FlashAttention-2's, as the estimate gives it today (a ratio assumed to depend
# little on the clock lock): (GPU, length) -> estimated.
ESTIMATED_GAIN = {
    ("H200", 16384): 1.347, ("H200", 8192): 1.200, ("H200", 4096): 1.093, ("H200", 2048): 1.051,
    ("H200", 1024): 1.027, ("H200", 768): 1.021,
    ("B200", 16384): 2.038, ("B200", 8192): 1.663, ("B200", 4096): 1.393, ("B200", 2048): 1.222,
    ("B200", 1024): 1.119, ("B200", 768): 1.092,
}  # fmt: skip


def test_the_estimate_overstates_cudnns_gain_over_flash_attention_2_at_head_dim_64(rows):
    """Measured per iteration, cuDNN over FlashAttention-2 is 1.02-1.18x on the H200 and 1.04-1.31x on the B200;
    the estimate, whose curves are read at head dim 128 (Llama 3.2 1B's is 64) and at later kernels (cuDNN 9.13-9.19
    against this run's 9.9), gives as much at 2k tokens and below on the H200 and more everywhere else, up to 1.35x
    and 2.04x at 16k. Held where it stands."""
    for (gpu, batch, length), (cudnn_s, fa2_s) in PRINTED.items():
        cudnn, fa2 = rows[(gpu, batch, length, "cudnn")], rows[(gpu, batch, length, "fa2")]
        measured = cudnn.published_tflops / fa2.published_tflops
        estimated = cudnn.predicted_tflops / fa2.predicted_tflops
        assert measured == pytest.approx(fa2_s / cudnn_s, rel=1e-9)
        assert estimated == pytest.approx(ESTIMATED_GAIN[(gpu, length)], abs=0.01)
        if gpu == "H200" and length <= 2048:
            assert abs(estimated - measured) < 0.01
        else:
            assert estimated > measured + 0.02

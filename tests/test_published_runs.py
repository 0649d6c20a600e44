"""Throughput model against published large-scale runs it was never fitted on
(benchmarks/data/published_runs.yaml: Megatron-LM 2021 Table 1 and 2022 MFU table, MT-NLG, BLOOM,
GPT-NeoX-20B, Megatron-LM 2019 on V100s), and the kernel-stack assumption."""

import statistics

import pytest

from benchmarks.accuracy.validate_published_runs import comparisons, published_rows, summary
from planner.hardware.cluster import make_cluster
from planner.models.resolve import resolve_model
from planner.throughput.estimate import estimate_throughput
from planner.throughput.implementation import DEEPSEEK_DUALPIPE, LLM_FOUNDRY, MEGATRON_LM, OUR_STRATEGIES
from planner.training_config import TrainingConfig

# Bounds chosen after the model was last changed, for every counted row alike
# (docs/accuracy.md, "Held-out: published large-scale runs"). The worst rows are
# MT-NLG's, which Megatron-LM 2021 (same model and GPUs) beats by 30%: a
# software difference the model does not represent.
MEDIAN_BOUND = 0.10
MAX_BOUND = 0.20  # every counted row but the known misses below (the worst of the rest: -15.9%, 2026-11-29)
# Counted rows over the bound, each pinned by a test of its own that holds where the gap lies (docs/accuracy.md).
# None since 2026-11-29: Qwen3-235B on B200s with the plain all-to-all dispatcher was one (+52.6%) until its host wait
# was measured (planner/throughput/token_dispatch.py; +6.9%).
KNOWN_MISSES: dict[str, str] = {}


@pytest.fixture(scope="module")
def results():
    return comparisons()


def test_every_row_cites_its_source_and_confidence():
    for row in published_rows():
        assert row["source"] and row["confidence"] and "assumed" in row, row["id"]
        assert isinstance(row["statistics"], bool)


def test_eq3_figures_agree_with_the_step_times_printed_beside_them():
    """Where a source prints its step time (MT-NLG's iteration times, BLOOM's log, BigScience's benchmarks), Eq. 3's
    FLOPs of one step over that time and the GPUs is the published TFLOP/s: the figure, batch, shape and GPUs entered
    agree with each other, and the figure counts the recomputed forward (Eq. 3 with 72 instead of 96 would be 25% off)."""
    checked = 0
    for row in published_rows():
        step_s = row["published"].get("step_s")
        if step_s is None:
            continue
        s, h, layers = row["seq_len"], row["hidden"], row["layers"]
        flops = 96 * row["global_batch"] * s * layers * h**2 * (1 + s / (6 * h) + row["vocab"] / (16 * layers * h))
        assert row["published"]["flop_convention"] == "hardware", row["id"]
        assert flops / (step_s * row["gpus"]) / 1e12 == pytest.approx(row["published"]["tflops_per_gpu"], rel=0.01)
        checked += 1
    assert checked == 25  # MT-NLG x 3, BLOOM, BigScience's benchmarks x 21


def test_median_error_of_tflops_per_gpu_on_published_runs(results):
    s = summary(results)
    assert s["rows"] >= 20
    assert s["median_abs_error"] < MEDIAN_BOUND


def test_no_published_run_is_off_by_more_than_the_stated_bound(results):
    counted = [c for c in results if c.row["statistics"]]
    assert KNOWN_MISSES.keys() <= {c.row["id"] for c in counted}
    worst = max((c for c in counted if c.row["id"] not in KNOWN_MISSES), key=lambda c: abs(c.error))
    assert abs(worst.error) < MAX_BOUND, worst.row["id"]


def test_megatron_weak_scaling_rows_stay_within_fifteen_percent(results):
    """Megatron-LM's own Table 1 (1.7B on 32 GPUs to 1T on 3072, t x p x d as published)."""
    errors = [abs(c.error) for c in results if c.row["id"].startswith("megatron-2021") and "table2" not in c.row["id"]]
    assert len(errors) == 10
    assert max(errors) < 0.15
    assert statistics.median(errors) < 0.10


def test_hf_module_stack_predicts_below_llm_foundrys_fused_measurement():
    """llm-foundry measured 64.2% MFU for its fused 7b on 8 x A100-80GB at seq 2048
    (benchmarks/data/llm_foundry_heldout.md); transformers' Llama runs unfused RMSNorm
    and rotary, so a plan for it must not promise more, while the fused stack on the
    same plan predicts more than the HF stack (the rest of the model is unchanged)."""
    llama = resolve_model("llama-2-7b")
    cluster = make_cluster("A100-80GB", 8, 1)
    config = TrainingConfig(strategy="deepspeed", zero_stage=1, micro_batch=2, grad_accum=32, seq_len=2048)
    hf = estimate_throughput(llama, config, cluster)
    fused = estimate_throughput(llama, config, cluster, implementation=LLM_FOUNDRY)
    assert hf.mfu < 0.6423
    assert hf.mfu < fused.mfu
    assert "transformers modules" in hf.sources["compute_s"]


def test_layernorm_models_cost_the_same_under_both_stacks_so_the_fit_stands():
    """The constants were fitted on MPT (LayerNorm, learned positions) runs."""
    from benchmarks.accuracy.calibrate_throughput import calibration_cases

    _, spec, config, cluster = calibration_cases()[0]
    hf = estimate_throughput(spec, config, cluster, implementation=OUR_STRATEGIES)
    fused = estimate_throughput(spec, config, cluster, implementation=LLM_FOUNDRY)
    assert hf.step_time_s == fused.step_time_s


def test_megatron_2022_sequence_parallel_selective_rows_stay_within_ten_percent(results):
    """Korthikanti et al.'s MFU (Table 5, the Megatron-LM README): 22B on 8 GPUs to 1T on 512, SP + selective
    recompute, the 175B and 530B on the interleaved schedule with three chunks as its Section 6 says."""
    rows = {c.row["id"].removeprefix("megatron-2022-"): c for c in results if c.row["id"].startswith("megatron-2022")}
    assert len(rows) == 4
    assert max(abs(c.error) for c in rows.values()) < 0.10
    interleaved = {name for name, c in rows.items() if c.row.get("virtual_stages", 1) == 3}
    assert interleaved == {"175b-sp-selective", "530b-sp-selective"}
    assert all(rows[name].row["pipeline_schedule"] == "interleaved-1f1b" for name in interleaved)


def test_scatter_gather_divides_inter_node_pipeline_transfers_by_tp():
    """Narayanan et al. 4.1: splitting the boundary tensor over the TP ranks cuts each
    rank's inter-node p2p bytes by t; without it (torch pipelining) every rank sends it all."""
    spec = resolve_model("llama-2-7b")
    cluster = make_cluster("A100-80GB", 8, 2, interconnect="ib-hdr")
    config = TrainingConfig(
        strategy="engine", tensor_parallel=8, pipeline_parallel=2, micro_batch=1, grad_accum=8, seq_len=2048
    )
    whole = estimate_throughput(spec, config, cluster).breakdown.pipeline_p2p_s
    split = estimate_throughput(spec, config, cluster, implementation=MEGATRON_LM).breakdown.pipeline_p2p_s
    latency = 2 * 8 * cluster.inter_node_latency_us * 1e-6  # 2 transfers per micro-batch, 8 micro-batches
    assert (whole - latency) == pytest.approx(8 * (split - latency), rel=1e-9)
    sequence_parallel = config.model_copy(update={"sequence_parallel": True})
    assert estimate_throughput(spec, sequence_parallel, cluster).breakdown.pipeline_p2p_s == pytest.approx(
        split, rel=1e-9
    )


def test_zero3_against_3d_parallelism_at_a_fixed_batch(results):
    """Narayanan et al. Table 2: DeepSpeed ZeRO-3 falls from 144 to 44 TFLOP/s per GPU as
    175B goes from 384 to 1536 GPUs at batch 1536, while PTD-P holds 153-141. Both
    trends within 15% per row, with the 2021 ZeRO-3 preset (implementation.py)."""
    table2 = [c for c in results if "table2" in c.row["id"]]
    assert len(table2) == 12
    assert max(abs(c.error) for c in table2) < 0.15


def test_deepseek_v3_published_throughput_with_dualpipe_mechanisms(results):
    """DeepSeek-V3's report: 180K H800 GPU-hours per trillion tokens on 2048 GPUs (pp16, ep64, FP8). Planned with
    the mechanisms the report describes (its own fused attention, all-to-all overlapped with compute, DualPipe's
    two-ended pipeline), the estimate is within 15%; without the overlap and the two-ended pipeline (Megatron's
    preset) the exposed all-to-all alone makes it nearly twice as slow."""
    from benchmarks.accuracy.validate_published_runs import plan_inputs

    (row,) = [c for c in results if c.row["id"] == "deepseek-v3-2048-h800"]
    assert abs(row.error) < 0.15
    spec, config, cluster = plan_inputs(row.row)
    dualpipe = estimate_throughput(spec, config, cluster, implementation=DEEPSEEK_DUALPIPE)
    megatron = estimate_throughput(spec, config, cluster, implementation=MEGATRON_LM)
    assert megatron.step_time_s > 1.8 * dualpipe.step_time_s
    pp = config.pipeline_parallel  # (pp/2 - 1) stage-steps of bubble against 1F1B's (pp - 1)
    ratio = dualpipe.breakdown.pipeline_bubble_s / megatron.breakdown.pipeline_bubble_s
    assert ratio == pytest.approx((pp / 2 - 1) / (pp - 1), rel=1e-9)
    assert dualpipe.breakdown.exposed_comm_s < 0.05 * megatron.breakdown.exposed_comm_s


def test_other_codebases_bring_their_own_fused_attention():
    """DeepSeek's 192-wide q/k and 128-wide v heads keep transformers on SDPA's math path (scores kept), so
    `ours` predicts a slower step than Megatron-LM's preset, whose attention kernel is its own; a Llama, whose
    transformers module reaches the fused kernel, is not slowed the same way."""
    cluster = make_cluster("H100-80GB", 8, 1)
    config = TrainingConfig(strategy="engine", layout={"ep": 8}, micro_batch=1, grad_accum=8, seq_len=4096)
    deepseek = resolve_model("deepseek-v2-lite")
    ours = estimate_throughput(deepseek, config, cluster).breakdown.compute_s
    theirs = estimate_throughput(deepseek, config, cluster, implementation=MEGATRON_LM).breakdown.compute_s
    assert ours > 1.2 * theirs


def test_torchtitan_preset_against_its_published_tables(results):
    """torchtitan's docs/performance.md Tables 1 and 3 (Llama 3.1 8B, FSDP2 on 8 and 128 H100s): eager,
    torch.compile and compile + Float8. The preset's eager op chains, `--kernels compile`'s fused stack and `--fp8`
    keep the published order and each row within 22% (+21.2% the worst, eager on 128: the catalog's 700 W SXM H100
    at its measured matmul share, docs/accuracy.md "GPU library efficiency", where the runs' 500 W HBM2e parts
    reach less)."""
    rows = {
        c.row["id"]: c
        for c in results
        if c.row["id"].startswith("torchtitan-llama3-8b-fsdp-") and c.row["gpu"] == "H100-80GB"
    }
    assert len(rows) == 6  # the 1-D rows; the 2-D ones below, the H200 ones in tests/test_per_stack_accuracy.py
    assert all(abs(c.error) < 0.22 for c in rows.values())
    for gpus in ("", "-128-gpus"):
        eager, compiled, float8 = (
            rows[f"torchtitan-llama3-8b-fsdp-{name}{gpus}"] for name in ("eager", "compile", "compile-float8")
        )
        assert eager.predicted_tflops < compiled.predicted_tflops < float8.predicted_tflops


def test_torchtitan_2d_rows_keep_float8_ahead_and_stay_within_25_percent(results):
    """torchtitan's vanilla-TP baselines (FSDP x TP 8 on 500 W H100s; its async-TP benchmark, June 2025), planned as
    the engine's TP x ZeRO-3: informational like its 1-D rows, each within 25% (+3% to +24%, the same lean as the
    1-D rows on these parts), and float8 faster than bf16 in the estimate as measured."""
    rows = {
        c.row["id"]: c
        for c in results
        if "-tp8-compile" in c.row["id"] and c.row["id"].startswith("torchtitan") and c.row["id"].endswith("-gpus")
    }
    assert len(rows) == 4 and not any(c.row["statistics"] for c in rows.values())
    assert all(abs(c.error) < 0.25 for c in rows.values())
    for size, gpus in (("70b-fsdp32", 256), ("8b-fsdp8", 64)):
        bf16 = rows[f"torchtitan-llama3-{size}-tp8-compile-{gpus}-gpus"]
        float8 = rows[f"torchtitan-llama3-{size}-tp8-compile-float8-{gpus}-gpus"]
        assert bf16.predicted_tflops < float8.predicted_tflops
        assert bf16.published_tflops < float8.published_tflops


def test_llama_3_405b_on_its_interleaved_one_layer_chunks_lands_within_fifteen_percent(results):
    """Llama 3 405B's pipeline (arXiv:2407.21783 Section 3.3.2, read): interleaved, one-layer chunks with the
    embedding and the head in chunks of their own, 8 per rank over pp 16 (deduced: docs/accuracy.md), and 8K
    sequences without activation checkpointing. The 8k-token rows land within the issue's 15% of Table 4's MFU;
    under the 1F1B schedule the rows assumed before they were -24% and -39%, so dropping the interleaving fails
    this test. The 128k-context row is reported, not bounded."""
    by_id = {c.row["id"]: c for c in results}
    for run in ("llama-3-405b-8k-gpus", "llama-3-405b-16k-gpus"):
        assert by_id[run].row["virtual_stages"] == 8
        assert abs(by_id[run].error) < 0.15, run


def test_deepspeed_zero3_across_nodes_is_bounded_by_each_gpus_own_nic_in_2022_too(results):
    """The DeepSpeed team's Azure runs (DeepSpeed 0.6.2, ZeRO-3 with CPU optimizer offload, one 200 Gb/s NIC per
    A100) land within 15% under the `deepspeed` preset, whose sharded gathers each GPU's own NIC bounds (inferred
    from Narayanan et al. Table 2, 2021); the aggregated model llm-foundry's FSDP fits over-predicts the 1T and 2T
    rows by more than 30% (docs/accuracy.md, "ZeRO-3 at scale")."""
    from benchmarks.accuracy.validate_published_runs import compare

    azure = [c for c in results if c.row.get("stack") == "deepspeed-zero3-offload"]
    assert len(azure) == 3
    assert all(abs(c.error) < 0.15 for c in azure)
    for c in azure:
        if c.row["gpus"] == 1024:
            assert compare({**c.row, "implementation": "ours"}).error > 0.30, c.row["id"]


def test_no_counted_row_rests_on_a_recalled_figure(results):
    """Every counted row's figures were read at a source (docs/accuracy.md, "Rows entered from memory, now read");
    GPT-NeoX-20B's 117 TFLOP/s, whose paper no stored copy prints, is read in a third-party summary of its
    Section 3 and checked against its training hours."""
    recalled = {c.row["id"] for c in results if c.row["statistics"] and "recalled" in c.row.get("confidence", "")}
    assert recalled == set()

"""Throughput error per training stack (docs/accuracy.md, "Per stack"): measured runs the model was never fitted
on, grouped by the stack that ran them (benchmarks/accuracy/per_stack_accuracy.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.accuracy.per_stack_accuracy import TABLE_END, TABLE_START, TARGET, render, stack_results
from benchmarks.accuracy.validate_published_runs import comparisons, zero_paper_comparisons

ACCURACY_DOC = Path(__file__).resolve().parent.parent / "docs" / "accuracy.md"


def test_the_documented_table_is_the_generated_one():
    text = ACCURACY_DOC.read_text(encoding="utf-8")
    documented = text[text.index(TABLE_START) + len(TABLE_START) : text.index(TABLE_END)].strip()
    assert documented == render(stack_results())


def test_fsdp_deepspeed_zero3_and_megatron_stacks_reach_the_target():
    results = {result.stack: result for result in stack_results()}
    for stack in ("torch FSDP (full / grad-op shard)", "DeepSpeed ZeRO-3", "Megatron-LM 3-D (TP x PP x DP)"):
        assert results[stack].median <= TARGET, stack
        assert len(results[stack].errors) >= 6, stack
    assert len(results["torch FSDP (full / grad-op shard)"].errors) == 225  # llm-foundry's five held-out tables


ROW_BOUND = 0.25  # the bound for any published row estimated with its own stack


def _own_stack_errors(key: str) -> list[float]:
    from benchmarks.accuracy.per_stack_accuracy import stack_key
    from benchmarks.accuracy.validate_published_runs import comparisons

    return [c.error for c in comparisons() if c.row["statistics"] and stack_key(c.row) == key]


def test_stacks_measured_by_their_maintainers_reach_the_target_row_by_row():
    """torch FSDP (Zhao et al. 2023; the PyTorch/IBM blog), DeepSpeed ZeRO-3 with the optimizer offloaded to CPU
    (DeepSpeed on Azure, 2022) and torchtitan on H200s (Trainy, 2025), each planned with the strategy that emits it: median within 15% and every row within
    25% (benchmarks/data/published_stack_runs.yaml, docs/accuracy.md "Per stack")."""
    results = {result.stack: result for result in stack_results()}
    for stack, rows in (
        ("torch FSDP, as its maintainers measured it", 8),
        ("DeepSpeed ZeRO-3 + CPU optimizer offload (ZeRO-Offload/Infinity engine)", 3),
        ("DeepSpeed ZeRO-3", 6),
        ("FSDP via the HF Trainer / accelerate", 2),
        ("DeepSpeed ZeRO-2 as DeepSpeed-Chat ran it (HF OPT, fp16), V100", 1),
        ("torchtitan (FSDP2, compile, float8) on H200s", 2),
        # Since its plain-dispatcher row's host wait was measured (planner/throughput/token_dispatch.py): +52.6% -> +9.7%.
        ("Megatron-Core via Megatron-Bridge on Blackwell (B200, B300, GB200 NVL72; FP8 and MXFP8)", 9),
    ):
        assert not results[stack].informational, stack
        assert len(results[stack].errors) == rows, stack
        assert results[stack].median <= TARGET, stack
        assert abs(results[stack].worst) < ROW_BOUND, stack
    for key in (
        "pytorch-fsdp",
        "deepspeed-zero3-offload",
        "hf-trainer-fsdp",
        "deepspeed-chat-zero2-v100",
        "torchtitan-h200",
        "megatron-bridge-blackwell",
    ):
        assert all(abs(error) < ROW_BOUND for error in _own_stack_errors(key)), key


def test_megatron_deepspeed_reaches_the_target_with_its_measured_shortfall():
    """Megatron-DeepSpeed (MT-NLG, BLOOM, GPT-NeoX-20B, each estimated with the megatron-deepspeed-2022 preset: the
    code of their date, with the cost BigScience's sweeps measure and no mechanism read accounts for,
    planner/throughput/measured_shortfall.py): median within 15% and every row within 25%. Its attention dropout and
    BLOOM's ALiBi bias (attention_chain.py), its pipeline engine's serial transfers and gradient reduction after the
    flush, and BLOOM's BF16Optimizer (implementation.py) are charged as read; without the shortfall the stack stood at
    32.9% and +39.6% (tests/test_megatron_deepspeed_microbatch_cost.py holds that the shortfall was not fitted on
    these rows)."""
    result = {result.stack: result for result in stack_results()}["Megatron-DeepSpeed (TP x PP, ZeRO-1)"]
    assert not result.informational and len(result.errors) == 5
    assert result.median <= TARGET and abs(result.worst) < ROW_BOUND
    assert result.median <= 0.058 and abs(result.worst) <= 0.092  # 5.7%, -9.1% (GPT-NeoX-20B) today
    assert all(abs(error) < ROW_BOUND for error in _own_stack_errors("megatron-deepspeed"))


def test_megatron_bridge_on_h100_reaches_the_target_with_the_mechanisms_its_recipes_name():
    """Megatron-Core through Megatron-Bridge on DGX-H100 (NVIDIA's performance summary, 26.04.01 container, recipes
    read; benchmarks/data/published_stack_runs.yaml): Llama 3 70B (TP 4, PP 8, VP 5), Llama 3.1 405B (CP 2) and
    Qwen3-30B-A3B (EP 16 over two nodes), all FP8. Planned with what the recipes run (the megatron-core preset): the
    TP collectives under the matmuls (`tp_comm_overlap`, userbuffers) and Transformer Engine's Hopper-native attention (1.5x
    FlashAttention-2, the FlashAttention-3 paper's lower end), neither fitted to these rows; without them the three
    came out -26.5%, -16.7% and -20.6% (docs/accuracy.md). GPT-OSS 120B is informational (sliding-window layers the
    catalog shape lacks) and stays out of the stack's figures."""
    result = {result.stack: result for result in stack_results()}[
        "Megatron-Core via Megatron-Bridge (TP, PP, CP, EP, FP8), NVIDIA's DGX-H100 runs"
    ]
    assert not result.informational
    assert len(result.errors) == 3
    assert result.median <= TARGET  # 10.5% today (Llama 3 70B; 10.1% with the recalled Hopper factor)
    assert abs(result.worst) < ROW_BOUND  # Qwen3-30B-A3B, EP 16, -15.1% today (FP8 at its measured share)
    rows = {c.row["id"]: c for c in comparisons() if c.row.get("stack") == "megatron-bridge"}
    assert len(rows) == 4 and not rows["megatron-bridge-gpt-oss-120b-64-h100-bf16-ep8"].row["statistics"]
    assert rows["megatron-bridge-llama3.1-405b-1024-h100-fp8-cp2"].row["cp"] == 2  # the CP row
    assert rows["megatron-bridge-qwen3-30b-a3b-16-h100-fp8-ep16"].row["ep"] == 16  # the EP row
    assert {row.row["implementation"] for row in rows.values()} == {"megatron-core"}


def test_zero_infinity_on_v100_is_held_where_it_stands_until_a_mechanism_explains_it():
    """ZeRO-Infinity's single-DGX-2 runs (its Figure 5(c), printed labels; benchmarks/data/published_zero_papers.yaml)
    miss the target. With its code's attention chain (megatron-v1.1.5, traced), the DGX-2's 3 GB/s per GPU to CPU
    memory and the activation checkpoints the 50B-1T runs had to keep in CPU memory charged (docs/accuracy.md,
    "ZeRO-Infinity on one DGX-2": 32.7% and +69.4% before) and the V100's measured matmul share ("GPU library
    efficiency": 17.0% and +63.5% with the recalled factor), the offloaded rows are +4%, +9%, -15% and -3%: the
    median is within the target; the 10B without offload is still +38%, the ZeRO-3 code's per-GPU pace. Held so they
    cannot get worse; tighten these when the gap closes."""
    from benchmarks.accuracy.validate_published_runs import implementation_of
    from planner.throughput.kernel_stack import KernelStack

    result = {result.stack: result for result in stack_results()}[
        "DeepSpeed ZeRO-Infinity (ZeRO-3, parameters and optimizer on CPU or NVMe), V100"
    ]
    assert len(result.errors) == 5
    assert result.median <= 0.09  # 8.8% today (100B, +8.8%)
    assert abs(result.worst) <= 0.39  # 10B, ZeRO-3 without offload, +38.2% today
    rows = [c for c in zero_paper_comparisons() if c.row["stack"] == "deepspeed-zero-infinity-2021"]
    assert all(implementation_of(c.row).kernels is KernelStack.MEGATRON_V115 for c in rows)
    offloaded = [c.error for c in rows if c.row.get("offload_params")]  # 50B-1T
    assert len(offloaded) == 4 and all(abs(error) < ROW_BOUND for error in offloaded)
    nvme = [c.error for c in zero_paper_comparisons() if c.row.get("offload_params") == "nvme"]  # 0.5T and 1T
    assert len(nvme) == 2 and all(abs(error) < 0.15 for error in nvme)


def test_informational_zero_paper_stacks_are_shown_and_held():
    """DDP, ZeRO-1/2 and ZeRO-Offload as the ZeRO and ZeRO-Offload papers measured them on V100s: read off their
    plots, with FLOP counts the papers do not state, so shown and not counted; held at today's figures, with the
    2019 Megatron-LM code's unfused attention softmax charged (preset megatron-2019; docs/accuracy.md, "The
    mechanism, read in the code": 60.3%, 57.5% and 65.9% medians before) and the V100's measured matmul share
    ("GPU library efficiency": 34.0%, 38.8% and 48.5% with the recalled factor)."""
    results = {result.stack: result for result in stack_results()}
    for stack, rows, median, worst in (
        ("DDP", 2, 0.23, 0.43),  # 22.8%, +42.1% today (1.38B at batch 1)
        ("DeepSpeed ZeRO-1/2 (ZeRO-100B, 2020)", 12, 0.25, 1.48),  # 24.9%, +147.7% (60B C3 at batch 32)
        ("DeepSpeed ZeRO-Offload (ZeRO-2 + CPU optimizer), V100", 15, 0.30, 0.52),  # 29.0%, +51.4%
    ):
        result = results[stack]
        assert result.informational, stack
        assert len(result.errors) == rows, stack
        assert result.median <= median, stack
        assert abs(result.worst) <= worst, stack


def test_the_2019_megatron_code_rows_use_its_preset():
    """Every row that ran Megatron-LM's September 2019 code (the ZeRO paper's DDP and ZeRO-1/2 runs, ZeRO-Offload's,
    Megatron-LM 2019's own) is planned with the megatron-2019 preset, and no other row is: ZeRO-Infinity ran
    Megatron-LM v1.1.5 (its own chain, the megatron-v1.1.5 kernel stack; docs/accuracy.md, "ZeRO-Infinity on one
    DGX-2")."""
    from benchmarks.accuracy.validate_published_runs import published_rows, zero_paper_rows

    by_id = {row["id"]: row["implementation"] for row in published_rows() + zero_paper_rows()}
    the_2019_code = {
        name for name in by_id if name.startswith(("zero-paper-", "zero-offload-paper-", "megatron-2019-"))
    }
    assert len(the_2019_code) == 30  # ZeRO-1/2 12, DDP 2, ZeRO-Offload 14 (not ZeRO-Infinity's baseline), Megatron 2
    assert {name for name, preset in by_id.items() if preset == "megatron-2019"} == the_2019_code


def test_fsdp_and_deepspeed_through_accelerate_side_by_side():
    """The HF blog's Granite 7B on 4 A100s (FSDP 3158.7, DeepSpeed ZeRO-3 3094.5 tokens/s/device; informational,
    its sequence and checkpointing deduced): each within 15% with the strategy that emits it, and the two estimates
    as close as the two measurements (2%): full sharding moves the same bytes under either."""
    rows = {c.row["id"]: c for c in comparisons() if c.row["id"].startswith("hf-blog-granite")}
    assert len(rows) == 2
    assert all(abs(c.error) < TARGET for c in rows.values())
    fsdp, deepspeed = (rows[f"hf-blog-granite-7b-4-a100-accelerate-{name}"] for name in ("fsdp", "deepspeed-zero3"))
    tokens = [
        c.predicted_tflops / c.published_tflops * c.row["published"]["tokens_per_s_per_gpu"] for c in (fsdp, deepspeed)
    ]
    assert tokens[0] == pytest.approx(tokens[1], rel=0.03)


def test_every_zero_paper_row_cites_its_source_and_how_its_figure_was_read():
    from benchmarks.accuracy.validate_published_runs import zero_paper_rows

    rows = zero_paper_rows()
    assert len(rows) == 34  # ZeRO-1/2 12, DDP 2, ZeRO-Offload 15, ZeRO-Infinity 5
    for row in rows:
        assert row["source"] and row["confidence"] and row["assumed"], row["id"]
        assert isinstance(row["statistics"], bool)
        assert row["statistics"] == (row["stack"] == "deepspeed-zero-infinity-2021"), row["id"]  # FLOP count stated
        assert row["published"]["flop_convention"] == "params-8", row["id"]


def test_megatron_deepspeed_rows_charge_the_attention_chain_their_code_ran():
    """The megatron-deepspeed presets charge its attention dropout (p = 0.1 by default; MT-NLG, DeepSpeed's 2023 V100
    runs, the ZeRO++ blog's baselines); BLOOM and BigScience's benchmarks ran ALiBi besides (the bias copied into the
    scores); GPT-NeoX-20B ran its own code with attention dropout 0, the fused stack
    (benchmarks/accuracy/megatron_deepspeed_attention_traffic.py traced them)."""
    from benchmarks.accuracy.validate_published_runs import implementation_of
    from planner.throughput.kernel_stack import KernelStack

    presets = ("megatron-deepspeed", "megatron-deepspeed-2022")  # the later code; MT-NLG's and BigScience's
    stacks = {c.row["id"]: implementation_of(c.row).kernels for c in comparisons()
              if c.row["implementation"] in presets}  # fmt: skip
    assert len(stacks) == 40
    for name, stack in stacks.items():
        if name.startswith(("mt-nlg-", "megatron-deepspeed-rebase-", "zeropp-blog-")):  # the default dropout, no ALiBi
            assert stack is KernelStack.MEGATRON_DEEPSPEED, name
        elif name.startswith(("bloom-", "bigscience-bench-")):
            assert stack is KernelStack.MEGATRON_DEEPSPEED_ALIBI, name
        else:
            assert (name, stack) == ("gpt-neox-20b", KernelStack.FUSED)


def test_megatron_lm_rows_charge_the_attention_dropout_their_code_ran():
    """Megatron-LM's code of 2021-2022 runs the fused softmax then attention dropout, the chain Microsoft's
    Megatron-DeepSpeed copied (NVIDIA/Megatron-LM at e270f68a, megatron/model/transformer.py lines 302-308; p = 0.1
    by default): the `megatron` preset charges it as the megatron-deepspeed one does, 1 s x s write more each way
    (planner/throughput/attention_chain.py). Flash attention runs none of it: Megatron-Core's rows (SDPA) are
    estimated as with the fused stack. Before it was charged: Megatron-LM 3-D 7.8%, 1.7B -5.4%."""
    import dataclasses

    from benchmarks.accuracy.validate_published_runs import implementation_of, plan_inputs
    from planner.throughput.attention_chain import EXTRA_SCORE_WRITES
    from planner.throughput.estimate import estimate_throughput
    from planner.throughput.implementation import MEGATRON_CORE, MEGATRON_LM
    from planner.throughput.kernel_stack import KernelStack

    assert MEGATRON_LM.kernels is MEGATRON_CORE.kernels is KernelStack.MEGATRON_LM
    assert EXTRA_SCORE_WRITES[KernelStack.MEGATRON_LM] == EXTRA_SCORE_WRITES[KernelStack.MEGATRON_DEEPSPEED] == (1, 1)
    every = comparisons()
    eager = [c for c in every if c.row["id"].startswith(("megatron-2021", "megatron-2022"))]
    eager = [c for c in eager if c.row["implementation"] == "megatron"]
    assert len(eager) == 20 and all(c.row["attention"] == "eager" for c in eager)
    assert all(implementation_of(c.row).kernels is KernelStack.MEGATRON_LM for c in eager)
    result = {r.stack: r for r in stack_results()}["Megatron-LM 3-D (TP x PP x DP)"]
    assert result.median <= 0.071  # 7.0% today
    assert abs(result.worst) <= 0.147  # the 2021 1.7B, -14.6% today (the 2019 8.3B on V100s +8.5%, +17.6% recalled)
    small = next(c for c in every if c.row["id"] == "megatron-2021-1.7b")
    assert -0.15 < small.error < -0.14  # -14.6% today: the s x s rate at hidden 2304 (docs/accuracy.md)
    flash = [c for c in every if c.row["implementation"] == "megatron-core"]
    assert flash and all(c.row["attention"] == "sdpa" for c in flash)
    for c in flash:
        preset = implementation_of(c.row)
        fused = dataclasses.replace(preset, kernels=KernelStack.FUSED)
        inputs = plan_inputs(c.row)
        assert estimate_throughput(*inputs, implementation=fused).step_time_s == pytest.approx(
            estimate_throughput(*inputs, implementation=preset).step_time_s, rel=1e-12
        )


def test_our_stack_charges_transformers_eager_attention_chain_where_its_scores_are_materialised():
    """Our stack (`ours`, transformers' modules) runs transformers' eager_attention_forward where attention is not
    fused: under autocast (DDP) 5 s x s writes more each way than the fused reference, 6 with attention dropout; with
    16-bit weights (FSDP's and DeepSpeed's mixed precisions, pure bf16) and in fp32 the mask does not promote and the
    chains are shorter (traced: benchmarks/accuracy/transformers_attention_traffic.py). The FSDP paper's two 175B rows
    (GPT-2-shaped, attn_pdrop 0.1, bf16-mixed, eager, full checkpointing) are charged the 16-bit chain, 3 more
    forward and 2 backward (FSDP casts the weights to bf16: the rule the MLP chain follows, kernel_stack.
    chain_precision), at the element-wise rate: forward, recomputed forward and backward; +4.9% and +8.1% before any
    chain, -11.3% and -10.2% with the autocast chain charged to them until 2026-11-29. Their gelu_new chain (the 16-bit
    chain: 32 and 50 bytes per MLP element beyond one kernel, kernel_stack.py) is charged too, at the HBM rate."""
    import dataclasses

    from benchmarks.accuracy.validate_published_runs import implementation_of, plan_inputs
    from planner.models.flops import model_shape
    from planner.throughput.attention_chain import HF_EAGER_SCORE_WRITES, extra_score_writes
    from planner.throughput.constants import CONSTANTS
    from planner.throughput.estimate import estimate_throughput, hardware_of
    from planner.throughput.kernel_stack import KernelStack, activation_bytes_per_row
    from planner.throughput.kernels import elementwise_seconds
    from planner.training_config import Precision, Strategy

    assert HF_EAGER_SCORE_WRITES["autocast", True, False] == HF_EAGER_SCORE_WRITES["autocast", False, False] == (5, 5)
    rows = [c for c in comparisons() if c.row["id"].startswith("fsdp-paper-gpt-175b")]
    assert len(rows) == 2
    for c in rows:
        preset = implementation_of(c.row)
        assert preset.kernels is KernelStack.HF_EAGER and c.row["attention"] == "eager"
        spec, config, cluster = plan_inputs(c.row)
        shape = model_shape(spec)
        assert shape.attention_dropout and not shape.rmsnorm and not shape.rotary  # no RMSNorm nor rotary chain
        assert shape.activation == "gelu_new"  # the activation's chain (32 and 50 bytes in 16 bits) moves too
        act_forward, act_backward = activation_bytes_per_row(shape, config, KernelStack.HF_EAGER)
        assert (act_forward, act_backward) == (32 * shape.ffn, 50 * shape.ffn)
        forward, backward = extra_score_writes(KernelStack.HF_EAGER, shape, config)
        assert (forward, backward) == (3, 2)
        for precision, writes in ((Precision.BF16, (3, 2)), (Precision.FP32, (3, 2))):  # GPT-2's chain, dropout 0.1
            assert extra_score_writes(
                KernelStack.HF_EAGER, shape, config.model_copy(update={"precision": precision})
            ) == (writes)
        under_autocast = config.model_copy(update={"strategy": Strategy.DDP})  # DDP: fp32 weights, an fp32 mask
        assert extra_score_writes(KernelStack.HF_EAGER, shape, under_autocast) == (6, 6)
        ours = estimate_throughput(spec, config, cluster, implementation=preset)
        fused = estimate_throughput(
            spec, config, cluster, implementation=dataclasses.replace(preset, kernels=KernelStack.FUSED)
        )
        device = hardware_of(cluster, config)[0]
        scores = config.micro_batch * c.row["heads"] * config.seq_len**2
        per_block = elementwise_seconds(device, (2 * forward + backward) * scores, CONSTANTS)
        tokens = config.micro_batch * config.seq_len
        per_block += tokens * (2 * act_forward + act_backward) / device.memory_Bps
        charged = ours.breakdown.compute_s + ours.breakdown.recompute_s
        charged -= fused.breakdown.compute_s + fused.breakdown.recompute_s
        assert charged == pytest.approx(c.row["layers"] * per_block, rel=1e-9)
    errors = {c.row["id"]: c.error for c in rows}
    assert -0.05 < errors["fsdp-paper-gpt-175b-512-gpus-batch-1"] < -0.04  # -4.6% today
    assert -0.03 < errors["fsdp-paper-gpt-175b-512-gpus-batch-2"] < -0.02  # -2.7% today
    result = {r.stack: r for r in stack_results()}["torch FSDP, as its maintainers measured it"]
    assert result.median <= 0.047  # 4.6% today (6.3% with the recalled Hopper factor)


def test_gpt_neox_is_read_in_the_count_it_logged():
    """GPT-NeoX logged 6 x parameters + 60 s h l per token in 2022 (megatron/logging.py at the 20B release): at the
    published 117 TFLOP/s that is a 43.8 s step, which the paper's 1,830 hours over 150,000 steps (43.9 s) confirm;
    Eq. 3's hardware count would have been 47.7 s."""
    neox = next(c for c in comparisons() if c.row["id"] == "gpt-neox-20b")
    row, published = neox.row, neox.row["published"]
    assert published["flop_convention"] == "neox-2022"
    per_token = 6 * published["counted_params"] + 60 * row["seq_len"] * row["hidden"] * row["layers"]
    step_s = row["global_batch"] * row["seq_len"] * per_token / (row["gpus"] * published["tflops_per_gpu"] * 1e12)
    assert step_s == pytest.approx(1830 * 3600 / 150_000, rel=0.01)
    assert abs(neox.error) < TARGET  # +11.8% today (+21.5% read as Eq. 3)


def test_fsdp2_through_accelerate_as_its_maintainers_measured_it():
    """accelerate's FSDP2 example (examples/fsdp2/README.md at d2e6b031, 2025-06-10): Llama 3.1 8B, sequence 8192,
    one sequence per GPU, 8 H100 SXM, full shard, no checkpointing, regional torch.compile, "~8000" tokens/s per
    device in bf16 and "~10000" with torchao float8 (benchmarks/data/published_stack_runs.yaml). Counted: the script at
    that commit states the whole setup. -3.4% and -3.9% today, inside the rounding of "~8000" and "~10000". The HF
    blogs' Llama 2 70B wall time (+1093%) and Granite 7B ballpark rows stay informational, out of the stack's figures."""
    rows = {c.row["id"]: c for c in comparisons() if c.row.get("stack") == "hf-trainer-fsdp"}
    counted = {name: c for name, c in rows.items() if c.row["statistics"]}
    assert set(counted) == {"accelerate-fsdp2-llama3.1-8b-8-h100-bf16", "accelerate-fsdp2-llama3.1-8b-8-h100-float8"}
    assert all(abs(c.error) < 0.10 for c in counted.values())
    assert all(c.row["kernels"] == "compile" and c.row["activation_checkpointing"] == "none" for c in counted.values())
    assert counted["accelerate-fsdp2-llama3.1-8b-8-h100-float8"].row["fp8"]
    assert len(rows) == 4 and not rows["hf-blog-fsdp-llama2-70b-16-a100-trainer"].row["statistics"]
    result = {r.stack: r for r in stack_results()}["FSDP via the HF Trainer / accelerate"]
    assert result.median <= 0.037  # 3.7% today (547.7% over the two informational rows before)


def test_deepspeed_through_the_trainer_with_cpu_offload_misses_on_a_fixed_step_cost():
    """The Ulysses post's one-H100 baseline (Qwen3-4B, TRL's SFTTrainer, ZeRO-3 with the optimizer on CPU, 8 x 8192
    tokens a step): 2,436 tokens/s measured, a 26.9 s step, where we plan 10.6 s (+152.9%; informational: host CPU and
    token count not printed). The post's own SP=4 rows on 4 GPUs take 28.3, 33.3 and 39.1 s for 65,536, 262,144 and
    524,288 tokens a step: most of each step does not grow with the tokens, which no per-token term explains
    (docs/accuracy.md, "Through accelerate"). Held where it stands; the Granite row stays within 15%."""
    row = next(c for c in comparisons() if c.row["id"] == "hf-blog-ulysses-qwen3-4b-1-h100-zero3-offload-baseline")
    assert not row.row["statistics"] and row.row["offload_optimizer"] == "cpu"
    assert 1.4 < row.error < 1.6  # +152.9% today
    steps = [tokens / rate for tokens, rate in ((65_536, 2_315), (262_144, 7_872), (524_288, 13_396))]
    assert steps[2] - steps[0] < 0.5 * steps[0]  # 8x the tokens, +38% the step
    result = {r.stack: r for r in stack_results()}["DeepSpeed ZeRO-3 via accelerate"]
    assert result.informational and len(result.errors) == 2


def test_deepspeed_zero1_through_the_trainer_on_v100_is_shown_and_held():
    """DeepSpeedExamples' autotuning README (transformers 4.12, ZeRO-1, fp16, 16 V100s; GPT-2 124M-1.5B at
    micro-batches 8, 4, 2, 1): informational (sequence from run_clm.py's default, V100 memory not printed, the
    Trainer's samples/s over 200 steps), predicted +12.4% to +58.5% today (+19.4% to +70.2% with the recalled Volta
    matmul factor until 2026-11-29, docs/accuracy.md "GPU library efficiency"), since their eager GPT-2 attention is
    charged the chain DeepSpeed's fp16 engine runs (it halves the module: 16-bit weights, no autocast; 3 s x s writes
    more forward and 2 backward, kernel_stack.chain_precision); -4.3% to +41.5% with the autocast chain (6 each way)
    charged to them until 2026-11-29, +4.3% to +52.1% before transformers' gelu_new chain was charged, +65.6% to
    +120.7% before any attention chain (docs/accuracy.md, "Through accelerate"). Held so they cannot get worse."""
    rows = [c for c in comparisons() if c.row.get("stack") == "hf-trainer-deepspeed-zero1-v100"]
    assert len(rows) == 4 and not any(c.row["statistics"] for c in rows)
    assert all(c.row["zero_stage"] == 1 and c.row["strategy"] == "deepspeed" for c in rows)
    result = {r.stack: r for r in stack_results()}["DeepSpeed ZeRO-1 via the HF Trainer (transformers 4.12), V100"]
    assert result.informational
    assert result.median <= 0.33 and abs(result.worst) <= 0.59  # 32.1%, +58.5% (GPT-2 XL) today


def test_ddp_and_zero3_through_lightning_on_a100_are_shown_and_held():
    """HPC-AI Tech's ColossalAI-Pytorch-lightning benchmark (GPT-2 XL on 4 A100-40GB, Lightning 1.7, fp16, full
    checkpointing): torch DDP (AMP) at 6 sequences per GPU and DeepSpeed ZeRO-3 at 40, the first published A100
    measurement of plain DDP in the stored references. Informational (how samples/s was measured is not stated;
    2 epochs of 4 steps): DDP +12.4%, ZeRO-3 +5.7% today (-17.2% with the autocast attention chain charged to
    DeepSpeed's halved module until 2026-11-29); held so they cannot get worse."""
    rows = {c.row["strategy"]: c for c in comparisons() if c.row.get("stack") == "lightning-a100-gpt2xl"}
    assert set(rows) == {"ddp", "deepspeed"} and not any(c.row["statistics"] for c in rows.values())
    assert rows["deepspeed"].row["zero_stage"] == 3 and rows["ddp"].row["micro_batch"] == 6
    assert abs(rows["ddp"].error) <= 0.13 and abs(rows["deepspeed"].error) <= 0.06
    result = {r.stack: r for r in stack_results()}["torch DDP (AMP) and DeepSpeed ZeRO-3 via PyTorch Lightning, A100"]
    assert result.informational and len(result.errors) == 2

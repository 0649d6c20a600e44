"""The published runs ran, so they fit (benchmarks/memory/published_runs_fit.py, docs/accuracy.md "Every published
run, the same way"): the documented table is the generated one, and the statements beside it hold."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.memory.published_runs_fit import TABLE_END, TABLE_START, render, stack_fits

ACCURACY_DOC = Path(__file__).resolve().parent.parent / "docs" / "accuracy.md"


@pytest.fixture(scope="module")
def fits():
    return {fit.stack: fit for fit in stack_fits()}


def test_the_documented_table_is_the_generated_one(fits):
    text = ACCURACY_DOC.read_text(encoding="utf-8")
    documented = text[text.index(TABLE_START) + len(TABLE_START) : text.index(TABLE_END)].strip()
    assert documented == render(list(fits.values()))


def test_stacks_that_train_hf_modules_fit_but_one_run(fits):
    """The Trainer, accelerate, DeepSpeed-Chat and Lightning runs train the modules the estimate traces."""
    hf_stacks = [
        "FSDP via the HF Trainer / accelerate",
        "DeepSpeed ZeRO-3 via accelerate",
        "DeepSpeed ZeRO-1 via the HF Trainer (transformers 4.12), V100",
        "DeepSpeed ZeRO-2 as DeepSpeed-Chat ran it (HF OPT, fp16), V100",
        "torch DDP (AMP) and DeepSpeed ZeRO-3 via PyTorch Lightning, A100",
    ]
    ratios = [ratio for stack in hf_stacks for ratio in fits[stack].ratios.values()]
    assert len(ratios) == 13
    over = [ratio for ratio in ratios if ratio > 1.0]
    assert len(over) == 1 and over[0] < 1.10


def test_megatron_bridge_runs_fit_with_megatron_cores_blocks_but_the_one_under_context_parallelism(fits):
    """Every Megatron-Core run through Megatron-Bridge fits with its Transformer Engine blocks, its distributed
    optimizer's dense/expert sharding and its experts' FP8 copies counted (tests/test_te_blocks.py) but the 405B at
    CP 2, whose blocks are counted as transformers' keep them under context parallelism (1.16x); they were 1.1x to
    2.0x over before (docs/accuracy.md). Megatron-Core r0.8.0's BF16 weak-scaling runs (GPT with dropout: their
    blocks counted as transformers' keep them, with Megatron's fused bias-GELU) and Megatron-LM's own runs of
    2019-2022 fit, every one (the 462B at PP 16 and the 1T at PP 64 were 1.01x and 1.03x with transformers' tanh
    GELU; tests/test_memory_korthikanti.py meets Korthikanti et al.'s Table 2 with the fused one)."""
    for stack in (
        "Megatron-Core r0.8.0 as NVIDIA benchmarked it (TP with sequence parallelism, BF16), H100",
        "Megatron-LM 3-D (TP x PP x DP)",
    ):
        ratios = list(fits[stack].ratios.values())
        assert all(ratio <= 1.0 for ratio in ratios) and max(ratios) > 0.6, stack
    # The rows Megatron's GELU moved: 1.03x, 0.93x and 1.01x with transformers' tanh GELU (0.83x, 0.76x and 0.79x
    # with it and the gradient buffer).
    megatron = fits["Megatron-LM 3-D (TP x PP x DP)"].ratios
    weak = fits["Megatron-Core r0.8.0 as NVIDIA benchmarked it (TP with sequence parallelism, BF16), H100"].ratios
    moved = (megatron["megatron-2022-1t-sp-selective"], megatron["megatron-2022-530b-sp-selective"])
    assert all(0.6 < ratio < 0.85 for ratio in (*moved, weak["megatron-core-r0.8-462b-6144-h100"]))
    for stack in (
        "Megatron-Core via Megatron-Bridge (TP, PP, CP, EP, FP8), NVIDIA's DGX-H100 runs",
        "Megatron-Core via Megatron-Bridge on Blackwell (B200, B300, GB200 NVL72; FP8 and MXFP8)",
    ):
        over = {run: ratio for run, ratio in fits[stack].ratios.items() if ratio > 1.0}
        assert all(ratio > 0.55 for ratio in fits[stack].ratios.values()), stack
        if "DGX-H100" in stack:
            assert list(over) == ["megatron-bridge-llama3.1-405b-1024-h100-fp8-cp2"] and over[next(iter(over))] < 1.2
        else:
            assert not over, over


def _printed_memory_rows() -> list[dict]:
    from benchmarks.accuracy.validate_published_runs import published_rows

    return [row for row in published_rows() if "memory_gib" in row["published"]]


def test_torchtitans_printed_memory_under_op_level_checkpointing():
    """torchtitan prints its runs' memory (Memory(GiB): the maximum across GPUs, reserved by the allocator). Its
    "selective" runs keep every second matmul's output and SDPA's (selective_ac_option 'op'), which `--ac op`
    counts (planner/memory/op_checkpointing.py, traced to the byte in tests/test_memory_per_layer.py). Table 1 and 3
    (torchtitan 9dec370, the loss eager): the estimate is 0.88x to 1.0x of the printed figure, under it by at most
    12% (eager blocks 0.88x and 0.92x, compiled ones 0.95x to 1.0x). The H200 runs (e7c0cae) compile the loss,
    which keeps the bf16 logits instead of their fp32 log-softmax (planner/memory/loss_kernels.py FUSED, traced in
    tests/test_loss_kernels.py): 0.98x and 0.99x, and 1.33x counted with the eager loss. As our "selective"
    (Korthikanti's) the estimate was 1.7x to 2.5x."""
    from benchmarks.accuracy.validate_published_runs import implementation_of, plan_inputs
    from benchmarks.memory.published_runs_fit import row_memory
    from planner.evaluate import memory_on
    from planner.memory.stack_memory import StackMemory
    from planner.training_config import ActivationCheckpointing

    eager = StackMemory()  # the eager loss, never compiled
    rows = [row for row in _printed_memory_rows() if row["activation_checkpointing"] == "op"]
    assert len(rows) == 8
    for row in rows:
        spec, config, cluster = plan_inputs(row)
        measured = row["published"]["memory_gib"] * 2**30
        ratio = row_memory(row).total / measured
        eager_loss = memory_on(spec, config, cluster, stack=eager).total / measured
        if row["gpu"] == "H200":
            assert 0.97 < ratio < 1.0 and 1.30 < eager_loss < 1.36, (row["id"], ratio, eager_loss)
        else:
            assert 0.87 < ratio < 1.01 and ratio == eager_loss, (row["id"], ratio)
        korthikanti = config.model_copy(update={"activation_checkpointing": ActivationCheckpointing.SELECTIVE})
        as_korthikanti = memory_on(spec, korthikanti, cluster, stack=implementation_of(row).stack_memory())
        assert 1.6 < as_korthikanti.total / measured < 2.6, row["id"]


def test_torchtitans_printed_memory_under_full_checkpointing():
    """Full recomputation, which the estimate and torchtitan mean alike: the 8B under context parallelism at 32k-256k
    tokens and the 70B at FSDP x TP 8 within 6% of the printed memory. The 405B at FSDP x TP x PP (with CP to 256k
    tokens too): under PP torchtitan's FSDP keeps each stage gathered and its gradients unreduced in fp32 until the
    step's last backward (planner/memory/stack_memory.py, read in torchtitan's and torch's code), 0.82x to 1.09x of
    the printed figure (the interleaved row the one over: it printed 10 GiB under the 1F1B row, not explained);
    counted as ZeRO-3 resharding after each use, the estimate was under it, 0.55x to 0.77x."""
    from benchmarks.accuracy.validate_published_runs import plan_inputs
    from benchmarks.memory.published_runs_fit import row_memory
    from planner.evaluate import memory_on

    rows = [row for row in _printed_memory_rows() if row["activation_checkpointing"] == "full"]
    assert len(rows) == 11
    for row in rows:
        printed = row["published"]["memory_gib"] * 2**30
        ratio = row_memory(row).total / printed
        if row["pp"] > 1:
            assert 0.8 < ratio < 1.1, (row["id"], ratio)
            assert 0.5 < memory_on(*plan_inputs(row)).total / printed < 0.8, row["id"]
        else:
            assert abs(ratio - 1) < 0.07, row["id"]

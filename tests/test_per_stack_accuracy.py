"""Throughput error per training stack (docs/accuracy.md, "Per stack"): measured runs the model was never fitted
on, grouped by the stack that ran them (benchmarks/accuracy/per_stack_accuracy.py)."""

from __future__ import annotations

from pathlib import Path

from benchmarks.accuracy.per_stack_accuracy import TABLE_END, TABLE_START, TARGET, render, stack_results

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
    assert len(results["torch FSDP (full / grad-op shard)"].errors) == 113  # llm-foundry's two held-out tables


ROW_BOUND = 0.25  # the bound for any published row estimated with its own stack


def _own_stack_errors(key: str) -> list[float]:
    from benchmarks.accuracy.per_stack_accuracy import stack_key
    from benchmarks.accuracy.validate_published_runs import comparisons

    return [c.error for c in comparisons() if c.row["statistics"] and stack_key(c.row) == key]


def test_stacks_measured_by_their_maintainers_reach_the_target_row_by_row():
    """torch FSDP (Zhao et al. 2023; the PyTorch/IBM blog) and DeepSpeed ZeRO-3 with the optimizer offloaded to CPU
    (DeepSpeed on Azure, 2022), each planned with the strategy that emits it: median within 15% and every row within
    25% (benchmarks/data/published_stack_runs.yaml, docs/accuracy.md "Per stack")."""
    results = {result.stack: result for result in stack_results()}
    for stack, rows in (
        ("torch FSDP, as its maintainers measured it", 8),
        ("DeepSpeed ZeRO-3 + CPU optimizer offload (ZeRO-Offload/Infinity engine)", 3),
        ("DeepSpeed ZeRO-3", 6),
    ):
        assert len(results[stack].errors) == rows, stack
        assert results[stack].median <= TARGET, stack
        assert abs(results[stack].worst) < ROW_BOUND, stack
    for key in ("pytorch-fsdp", "deepspeed-zero3-offload"):
        assert all(abs(error) < ROW_BOUND for error in _own_stack_errors(key)), key


def test_megatron_deepspeed_is_held_where_it_stands_until_a_mechanism_explains_it():
    """Megatron-DeepSpeed misses the 15% target (MT-NLG +36% to +43%, BLOOM +23%; docs/accuracy.md explains what was
    read and ruled out). The current figures are held so they cannot get worse; tighten these when the gap closes."""
    result = {result.stack: result for result in stack_results()}["Megatron-DeepSpeed (TP x PP, ZeRO-1)"]
    assert len(result.errors) == 5
    assert result.median <= 0.36  # 35.7% today
    assert abs(result.worst) <= 0.43  # MT-NLG 420 nodes, +42.6% today

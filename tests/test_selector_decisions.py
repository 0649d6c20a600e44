"""Decisions users trust: within the estimate's error the simpler strategy wins (docs/search.md).

The reference is the order the selector's users were promised, written here
independently of the search's own SIMPLICITY table:
DDP; FSDP grad-op / ZeRO-1; ZeRO-2; FSDP full-shard / ZeRO-3; ZeRO++ (asked for with --zeropp); engine TP/PP;
offload.
"""

from __future__ import annotations

import pytest

from hardware_selector import get_distributed_training_config
from hardware_selector_cli.app import main
from planner.hardware.cluster import make_cluster
from planner.models.resolve import resolve_model
from planner.search import PlanRequest, search_plans
from planner.search.explain import SIMPLICITY_RULE, TIE_TOLERANCE
from planner.search.strategy_layout import family_label

DOCUMENTED_ORDER = [
    ("DDP",),
    ("FSDP no-shard",),
    ("FSDP grad-op", "ZeRO-1"),
    ("ZeRO-2",),
    ("FSDP full-shard", "FSDP hybrid", "ZeRO-3"),
    ("ZeRO++",),
    ("engine TP", "engine PP", "engine TP×PP"),
]


def documented_rank(label: str) -> int:
    if "offload" in label or "Infinity" in label:
        return len(DOCUMENTED_ORDER)
    return next(rank for rank, labels in enumerate(DOCUMENTED_ORDER) if label in labels)


def test_a_125m_model_on_4_gpus_gets_ddp_and_explain_says_why(capsys):
    argv = ["plan", "--model", "opt-125m", "--gpu", "A100-80GB", "--gpus-per-node", "4", "--global-batch", "64"]
    assert main([*argv, "--explain"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "#1 DDP because:" in out
    assert " ".join(SIMPLICITY_RULE.split()) in out  # the rule, stated beside the plan it decided
    config = get_distributed_training_config("text_generation", "facebook/opt-125m", gpu_count=4, batch_size=16)
    assert config["distributed_strategy"] == "DDP"


@pytest.mark.parametrize(
    "model, gpu, gpus_per_node, nodes, global_batch",
    [
        ("opt-125m", "A100-80GB", 4, 1, 64),
        ("gpt2", "A100-40GB", 8, 1, 256),
        ("opt-1.3b", "A10", 8, 1, 32),
        ("llama-2-7b", "A100-80GB", 8, 1, 256),
        ("llama-2-7b", "H100-80GB", 8, 4, 1024),
        ("llama-2-13b", "A100-40GB", 8, 2, 256),
        ("opt-30b", "A100-80GB", 8, 1, 64),
        ("mistral-7b", "L40S", 4, 1, 64),
    ],
)
def test_no_simpler_strategy_is_left_within_the_estimates_error(model, gpu, gpus_per_node, nodes, global_batch):
    result = search_plans(
        resolve_model(model),
        make_cluster(gpu, gpus_per_node=gpus_per_node, nodes=nodes),
        PlanRequest(seq_len=1024, global_batch=global_batch, top_k=30),
    )
    best = result.best
    assert best is not None
    same_size = [plan for plan in result.candidates if plan.cluster.world_size == best.cluster.world_size]
    fastest = max(plan.throughput.tokens_per_s for plan in same_size)
    tied = [plan for plan in same_size if plan.throughput.tokens_per_s >= fastest * (1 - TIE_TOLERANCE)]
    assert best in tied
    best_rank = documented_rank(family_label(best.config))
    for plan in tied:
        assert best_rank <= documented_rank(family_label(plan.config)), (
            f"{family_label(plan.config)} is simpler than {family_label(best.config)} and within "
            f"{TIE_TOLERANCE:.0%} ({plan.throughput.tokens_per_s:,.0f} vs {best.throughput.tokens_per_s:,.0f} tokens/s)"
        )

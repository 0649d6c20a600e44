"""`--precision bf16` on DeepSpeed and our engine is bf16-mixed, and the plan says so.

DeepSpeed has no pure bf16: `bf16: {enabled: true}` keeps fp32 master weights, gradient
partitions and Adam states (measured per rank in tests/test_deepspeed_master_copies.py), and our
engine steps an fp32 master too. So a bf16 plan on either must count, emit and describe exactly
what a bf16-mixed plan does, while FSDP's pure bf16 (no master) stays lighter and says nothing.
"""

from __future__ import annotations

import pytest

from planner.emit.deepspeed_json import precision_blocks
from planner.hardware.cluster import make_cluster
from planner.memory.model_states import BF16_RUNS_MIXED, model_state_bytes
from planner.memory.rank_params import RankParams
from planner.models.resolve import resolve_model
from planner.search import PlanRequest, search_plans
from planner.training_config import Precision, Strategy, TrainingConfig

MODEL = "llama-2-7b"


def _best(strategy: str, precision: Precision):
    result = search_plans(
        resolve_model(MODEL),
        make_cluster("A100-80GB", gpus_per_node=8, nodes=1),
        PlanRequest(seq_len=2048, global_batch=256, precision=precision, strategies=(strategy,)),
    )
    assert result.best is not None
    return result.best


@pytest.mark.parametrize("strategy", ["zero2", "engine"])
def test_bf16_is_counted_and_described_as_bf16_mixed(strategy: str) -> None:
    pure, mixed = _best(strategy, Precision.BF16), _best(strategy, Precision.BF16_MIXED)
    assert pure.config.model_copy(update={"precision": Precision.BF16_MIXED}) == mixed.config  # the same plan
    for category in ("parameters", "gradients", "optimizer_states"):
        assert pure.memory.per_gpu_bytes[category] == mixed.memory.per_gpu_bytes[category], category
    assert BF16_RUNS_MIXED in pure.reasons
    assert BF16_RUNS_MIXED in pure.memory.sources["parameters"]
    assert BF16_RUNS_MIXED not in mixed.reasons  # nothing to explain when the user asked for mixed


def _states(strategy: Strategy, precision: Precision) -> float:
    params = RankParams(
        total=10**6, trainable=10**6, quantized=0, block=10**5, blocks_on_rank=8, embedding=0, largest_module=10**5
    )
    states = model_state_bytes(params, TrainingConfig(strategy=strategy, precision=precision), 1, 1, 256)
    return states.parameters + states.gradients + states.optimizer_states


def test_fsdp_pure_bf16_holds_no_master_and_says_nothing() -> None:
    # 2 + 2 + 2 x 2 bytes a parameter against FSDP mixed's 4 + 4 + 2 x 4; DeepSpeed's bf16 as its mixed.
    assert _states(Strategy.FSDP, Precision.BF16) == 8 * 10**6
    assert _states(Strategy.FSDP, Precision.BF16_MIXED) == 16 * 10**6
    assert _states(Strategy.DEEPSPEED, Precision.BF16) == _states(Strategy.DEEPSPEED, Precision.BF16_MIXED)
    pure = _best("fsdp", Precision.BF16)
    assert BF16_RUNS_MIXED not in pure.reasons
    assert BF16_RUNS_MIXED not in pure.memory.sources["parameters"]


def test_deepspeed_gets_the_same_precision_blocks_for_bf16_and_bf16_mixed() -> None:
    assert precision_blocks(Precision.BF16) == precision_blocks(Precision.BF16_MIXED)

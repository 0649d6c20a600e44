"""DeepSpeed ZeRO's and our engine's per-rank model-state bytes, measured, against model_state_bytes().

DeepSpeed has no pure bf16 and ZeRO 1-2 keep an fp32 master copy even at fp32
(stage_1_and_2.py:560-577; master_weights_and_grads_dtype defaults to fp32,
base_optimizer.py:484). One torchrun launch (2 CPU ranks, gloo) measures every case
(tests/engine_jobs/deepspeed_master_copies.py). After the step DeepSpeed has freed
the fp32 gradient partition; ZeRO-3 keeps its 16-bit gradient partition buffer.

Our engine (backends/zero/) always builds an fp32 flat master partition and steps it (fp32 Adam
states), at fp32 and bf16 alike, at stage 0 too; only its ZeRO-3 at fp32 uses the master as the sharded weights.
The same launch measures it: after the step it holds no gradient (ZeRO-1/2 release their
gradient arena, ZeRO-3 drops each block's flat copy and the reduced-gradient shard).
"""

from __future__ import annotations

import json

import pytest

from planner.memory.model_states import model_state_bytes
from planner.memory.rank_params import RankParams
from planner.training_config import Precision, Strategy, TrainingConfig
from tests.distributed import run_torchrun

pytestmark = pytest.mark.slow  # one torchrun launch of fourteen cases: started first (conftest.py)

# DeepSpeed keeps a bucket of about one layer beyond the states (0.5 B/param at fp32 here): 7%.
TOLERANCE = 0.07
# Our engine holds exactly its states after the step (plus Adam's 4-byte step counter).
ENGINE_TOLERANCE = 0.01
PRECISIONS = {"fp32": Precision.FP32, "bf16": Precision.BF16}


@pytest.fixture(scope="module")
def measured() -> dict[tuple[int, str], dict]:
    ran = run_torchrun(["tests/engine_jobs/deepspeed_master_copies.py"], nproc=2, timeout=400)
    rows = [json.loads(line.split(" ", 1)[1]) for line in ran.stdout.splitlines() if line.startswith("RESULT ")]
    return {(row["strategy"], row["stage"], row["precision"]): row for row in rows}


def _estimate(stage: int, precision: str, params: int, strategy: Strategy = Strategy.DEEPSPEED) -> float:
    rank = RankParams(
        total=params, trainable=params, quantized=0, block=65536, blocks_on_rank=8, embedding=0, largest_module=65536
    )
    config = TrainingConfig(strategy=strategy, zero_stage=stage, precision=PRECISIONS[precision])
    states = model_state_bytes(rank, config, 2, 2, 256)
    held = states.parameters + states.optimizer_states
    if stage == 3 and strategy is Strategy.DEEPSPEED:
        held += states.backward_gradients  # grad_partitions_flat_buffer outlives the step
    if stage == 0 and strategy is Strategy.ENGINE:
        held += states.backward_gradients  # ZeroStage0 keeps its gradient arena (keeps_gradient_buffers)
    return held


@pytest.mark.parametrize(
    ("stage", "precision"),
    [(1, "fp32"), (1, "bf16"), (2, "fp32"), (2, "bf16"), (3, "fp32"), (3, "bf16")],
)
def test_estimate_matches_deepspeed(measured: dict, stage: int, precision: str) -> None:
    row = measured[("deepspeed", stage, precision)]
    estimate = _estimate(stage, precision, row["params"])
    assert estimate == pytest.approx(row["bytes"], rel=TOLERANCE), (stage, precision, estimate, row["bytes"])


# Measured bytes per parameter on each of 2 ranks (docs/accuracy.md, Memory 2b): the fp32 master is
# 4/2, AdamW's two fp32 states 8/2; the weights 4 or 2 (ZeRO-3: their half, which at fp32 is the master).
# Stage 0 replicates: master 4, states 8, weights and the gradient arena it keeps 4 + 4 or 2 + 2.
ENGINE_BYTES_PER_PARAM = {(0, "fp32"): 20.0, (0, "bf16"): 16.0, (1, "fp32"): 10.0, (1, "bf16"): 8.0, (2, "fp32"): 10.0, (2, "bf16"): 8.0,
                          (3, "fp32"): 6.0, (3, "bf16"): 7.0}  # fmt: skip


@pytest.mark.parametrize(("stage", "precision"), list(ENGINE_BYTES_PER_PARAM))
def test_estimate_matches_engine(measured: dict, stage: int, precision: str) -> None:
    row = measured[("engine", stage, precision)]
    assert row["bytes"] / row["params"] == pytest.approx(
        ENGINE_BYTES_PER_PARAM[(stage, precision)], rel=ENGINE_TOLERANCE
    )
    estimate = _estimate(stage, precision, row["params"], Strategy.ENGINE)
    assert estimate == pytest.approx(row["bytes"], rel=ENGINE_TOLERANCE), (stage, precision, estimate, row["bytes"])

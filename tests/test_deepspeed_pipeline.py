"""DeepSpeed's pipeline engine, read from its code, against the planner's `megatron-deepspeed` preset.

The preset (planner/throughput/implementation.py) prices the published
Megatron-DeepSpeed runs (MT-NLG, BLOOM, GPT-NeoX; docs/accuracy.md). Two of
its mechanisms are checked here against DeepSpeed itself:

- The schedule. DeepSpeed's TrainSchedule numbers 2 (m + p - 1) steps in which
  neighbouring stages alternate forward and backward, and its send/recv block
  (deepspeed/runtime/pipe/p2p.py refuses async ops). That reads like a lock-step
  where each forward waits out the neighbour's longer backward, which would cost
  2 (m + p - 1) max(f, b). Run as written, with each transfer a rendezvous of its
  two stages, the instruction streams take (m + p - 1)(f + b): the 1F1B bubble
  the estimator charges, for any split between forward and backward.
- The transfers. DeepSpeed splits each stage-boundary activation and its
  gradient over the tp ranks (PartitionedTensor), as Megatron-LM does; its
  config defaults say so (`pipeline.pipe_partitioned`, `grad_partitioned`).
"""

from __future__ import annotations

import pytest

from benchmarks.accuracy.validate_published_runs import plan_inputs, published_rows
from planner.throughput.estimate import estimate_throughput
from planner.throughput.implementation import IMPLEMENTATIONS, MEGATRON_DEEPSPEED

# Which stage a transfer pairs with, and the instruction that stage must reach.
_PARTNER = {
    "SendActivation": (+1, "RecvActivation"),
    "RecvActivation": (-1, "SendActivation"),
    "SendGrad": (-1, "RecvGrad"),
    "RecvGrad": (+1, "SendGrad"),
}


def deepspeed_makespan(micro_batches: int, stages: int, forward_s: float, backward_s: float) -> float:
    """Run DeepSpeed's TrainSchedule instruction streams: compute advances a stage's clock; the n-th send
    to a neighbour meets that neighbour's n-th matching receive (NCCL orders a pair's messages), and both
    wait for the later of the two. Transfers take no time here: only the schedule is measured."""
    from deepspeed.runtime.pipe.schedule import TrainSchedule

    streams = [
        [type(command).__name__ for step in TrainSchedule(micro_batches, stages, stage).steps() for command in step]
        for stage in range(stages)
    ]
    position, clock = [0] * stages, [0.0] * stages
    done: list[dict[str, int]] = [{} for _ in range(stages)]

    def advance(stage: int) -> bool:
        moved = False
        while position[stage] < len(streams[stage]):
            instruction = streams[stage][position[stage]]
            if instruction == "ForwardPass":
                clock[stage] += forward_s
            elif instruction == "BackwardPass":
                clock[stage] += backward_s
            elif instruction in _PARTNER:
                offset, expected = _PARTNER[instruction]
                peer = stage + offset
                nth = done[stage].get(instruction, 0)
                waiting = position[peer] < len(streams[peer]) and streams[peer][position[peer]] == expected
                if not (waiting and done[peer].get(expected, 0) == nth):
                    return moved
                clock[stage] = clock[peer] = max(clock[stage], clock[peer])
                done[peer][expected] = nth + 1
                position[peer] += 1
            done[stage][instruction] = done[stage].get(instruction, 0) + 1
            position[stage] += 1
            moved = True
        return moved

    while any([advance(stage) for stage in range(stages)]):
        pass
    assert position == [len(stream) for stream in streams], "the schedule deadlocked"
    return max(clock)


@pytest.mark.parametrize("micro_batches, stages", [(4, 4), (16, 4), (8, 2), (32, 12)])
@pytest.mark.parametrize("forward_s, backward_s", [(1.0, 2.0), (1.0, 3.0), (2.0, 1.0)])
def test_deepspeeds_train_schedule_takes_the_1f1b_time_not_a_lock_step(micro_batches, stages, forward_s, backward_s):
    ideal = (micro_batches + stages - 1) * (forward_s + backward_s)
    # not the lock-step 2 (m + p - 1) max(f, b), which is larger whenever f != b
    assert deepspeed_makespan(micro_batches, stages, forward_s, backward_s) == pytest.approx(ideal, rel=1e-12)


def test_the_estimators_bubble_on_a_megatron_deepspeed_row_is_deepspeeds_schedule():
    """MT-NLG (t8 p35, 240 micro-batches of one sequence per pipeline, full recomputation): the estimator's
    compute, recomputation and bubble stand to the compute alone as DeepSpeed's schedule does."""
    row = next(row for row in published_rows() if row["id"] == "mt-nlg-530b-280-nodes")
    spec, config, cluster = plan_inputs(row)
    breakdown = estimate_throughput(spec, config, cluster, implementation=MEGATRON_DEEPSPEED).breakdown
    busy = breakdown.compute_s + breakdown.recompute_s
    m, p = config.grad_accum, config.pipeline_parallel
    assert (m, p) == (240, 35)
    # forward 1, recomputed forward + backward 3 per micro-batch: the split does not change the makespan
    simulated = deepspeed_makespan(m, p, 1.0, 3.0) / (m * 4.0)
    assert (busy + breakdown.pipeline_bubble_s) / busy == pytest.approx(simulated, rel=1e-9)


def test_deepspeed_splits_stage_boundary_tensors_over_tp_and_the_preset_says_so():
    from deepspeed.runtime.config import get_pipeline_config

    defaults = get_pipeline_config({})
    assert defaults["pipe_partitioned"] is True and defaults["grad_partitioned"] is True
    assert IMPLEMENTATIONS["megatron-deepspeed"].p2p_scatter_gather is True
    assert IMPLEMENTATIONS["ours"].p2p_scatter_gather is False  # torch.distributed.pipelining sends it whole

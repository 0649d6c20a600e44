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
  Each is a blocking send/recv of its own (p2p.py), one after another, where
  Megatron-LM pairs a send with a receive (batch_isend_irecv): timed in the
  same simulation, 4m + 2p - 8 transfers lie on the critical path, not 2m
  (Implementation.serial_pipeline_transfers).
- The data-parallel reduction: the engine turns the backward's all-reduce off
  and reduces the gradients in ReduceGrads, after the schedule's last backward
  (Implementation.reduces_gradients_after_flush); with the BF16Optimizer, the
  whole fp32 gradient is all-reduced (Implementation.all_reduces_fp32_gradients).
"""

from __future__ import annotations

import pytest

from benchmarks.accuracy.validate_published_runs import plan_inputs, published_rows
from planner.throughput.estimate import estimate_throughput
from planner.throughput.implementation import IMPLEMENTATIONS, MEGATRON_DEEPSPEED
from planner.throughput.kernel_stack import KernelStack

# Which stage a transfer pairs with, and the instruction that stage must reach.
_PARTNER = {
    "SendActivation": (+1, "RecvActivation"),
    "RecvActivation": (-1, "SendActivation"),
    "SendGrad": (-1, "RecvGrad"),
    "RecvGrad": (+1, "SendGrad"),
}


def deepspeed_makespan(
    micro_batches: int, stages: int, forward_s: float, backward_s: float, transfer_s: float = 0.0
) -> float:
    """Run DeepSpeed's TrainSchedule instruction streams: compute advances a stage's clock; the n-th send
    to a neighbour meets that neighbour's n-th matching receive (NCCL orders a pair's messages), and both
    wait for the later of the two, then for the transfer (`transfer_s`: blocking dist.send/dist.recv,
    deepspeed/runtime/pipe/p2p.py, which asserts async_op is False)."""
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
                clock[stage] = clock[peer] = max(clock[stage], clock[peer]) + transfer_s
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


@pytest.mark.parametrize("stages", [2, 3, 4, 5, 8, 12, 35])
@pytest.mark.parametrize("micro_batches", [1, 2, 4, 17, 64])
def test_the_transfers_on_deepspeeds_critical_path_are_counted_from_its_schedule(micro_batches, stages):
    """Each transfer timed: the makespan grows by deepspeed_critical_transfers(m, p) transfers, about twice the
    2m a paired 1F1B (Megatron-LM's send_forward_recv_backward) puts on its critical path."""
    from planner.throughput.communication import deepspeed_critical_transfers

    transfer = 1.0 / 64  # exact in binary: the count is read back without rounding
    grown = deepspeed_makespan(micro_batches, stages, 1.0, 3.0, transfer) - deepspeed_makespan(
        micro_batches, stages, 1.0, 3.0
    )
    assert grown / transfer == pytest.approx(deepspeed_critical_transfers(micro_batches, stages), abs=1e-9)


def _mt_nlg():
    row = next(row for row in published_rows() if row["id"] == "mt-nlg-530b-280-nodes")
    return plan_inputs(row)


def test_serial_transfers_alone_charge_deepspeeds_count_of_the_same_transfer():
    import dataclasses

    from planner.throughput.communication import deepspeed_critical_transfers

    spec, config, cluster = _mt_nlg()
    paired = dataclasses.replace(MEGATRON_DEEPSPEED, serial_pipeline_transfers=False)
    serial = dataclasses.replace(paired, serial_pipeline_transfers=True)
    before = estimate_throughput(spec, config, cluster, implementation=paired).breakdown
    after = estimate_throughput(spec, config, cluster, implementation=serial).breakdown
    m, p = config.grad_accum, config.pipeline_parallel
    assert after.pipeline_p2p_s / before.pipeline_p2p_s == pytest.approx(deepspeed_critical_transfers(m, p) / (2 * m))
    assert after.exposed_comm_s - before.exposed_comm_s == pytest.approx(after.pipeline_p2p_s - before.pipeline_p2p_s)
    assert (after.compute_s, after.data_parallel_comm_s) == (before.compute_s, before.data_parallel_comm_s)


def test_reducing_after_the_flush_alone_exposes_the_whole_data_parallel_reduction():
    import dataclasses

    spec, config, cluster = _mt_nlg()
    overlapped = dataclasses.replace(MEGATRON_DEEPSPEED, reduces_gradients_after_flush=False)
    before = estimate_throughput(spec, config, cluster, implementation=overlapped).breakdown
    after = estimate_throughput(spec, config, cluster, implementation=MEGATRON_DEEPSPEED).breakdown
    traffic = before.data_parallel_comm_s
    assert traffic == after.data_parallel_comm_s > 0
    hidden = traffic - (before.exposed_comm_s - before.tensor_parallel_comm_s - before.pipeline_p2p_s)
    assert hidden > 0  # ZeRO-1's reduce-scatter under the last backward, as Megatron-LM's distributed optimizer
    assert after.exposed_comm_s - before.exposed_comm_s == pytest.approx(hidden)
    # without a pipeline DeepSpeed's engine is not the PipelineEngine: nothing changes
    flat = config.model_copy(update={"layout": config.layout.model_copy(update={"pp": 1}), "grad_accum": 1})
    one_stage = [
        estimate_throughput(spec, flat, cluster, implementation=preset).breakdown.exposed_comm_s
        for preset in (overlapped, MEGATRON_DEEPSPEED)
    ]
    assert one_stage[0] == one_stage[1]


def test_the_bf16_optimizer_alone_all_reduces_fp32_gradients_in_place_of_zero1s_reduce_scatter():
    import dataclasses

    from planner.throughput.collectives import all_reduce_s, process_group, reduce_scatter_s
    from planner.throughput.derived import hardware_of

    row = next(row for row in published_rows() if row["id"] == "bloom-176b")
    assert row["bf16_optimizer"] is True  # its ds_config: bf16 with ZeRO stage 0, "bf16 must use z0!"
    spec, config, cluster = plan_inputs(row)
    zero1 = dataclasses.replace(MEGATRON_DEEPSPEED, kernels=KernelStack(row["kernel_stack"]))
    bf16 = dataclasses.replace(zero1, all_reduces_fp32_gradients=True)
    before = estimate_throughput(spec, config, cluster, implementation=zero1).breakdown
    after = estimate_throughput(spec, config, cluster, implementation=bf16).breakdown
    links = hardware_of(cluster, config)[1]
    dp = cluster.gpus_per_node * cluster.num_nodes // config.model_parallel_size
    group = process_group(dp, config.tensor_parallel, cluster.gpus_per_node)
    # a rank's gradients (the parameters over tp x pp, as the estimate shards them): 4 bytes all-reduced, not 2
    # reduce-scattered
    local = spec.params.total / (config.tensor_parallel * config.pipeline_parallel)
    grown = after.data_parallel_comm_s - before.data_parallel_comm_s
    expected = all_reduce_s(links, group, local * 4) - reduce_scatter_s(links, group, local * 2)
    assert grown == pytest.approx(expected, rel=1e-6)
    assert after.exposed_comm_s - before.exposed_comm_s == pytest.approx(grown)  # after the flush: all waited for

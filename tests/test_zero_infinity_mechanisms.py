"""The two mechanisms ZeRO-Infinity's single-DGX-2 rows name, each checked alone
(planner/throughput/implementation.py `checkpoints_to_cpu`, planner/hardware/cluster.py `host_GBps_per_gpu`;
docs/accuracy.md, "DeepSpeed's ZeRO papers on V100s"), and where the 10B row's gap lies (docs/accuracy.md, "What
DeepSpeed's own tracker measured of that ZeRO-3")."""

from __future__ import annotations

import dataclasses

import pytest

from benchmarks.accuracy.validate_published_runs import compare, implementation_of, plan_inputs, zero_paper_rows
from planner.hardware.gpus import pcie_bandwidth_GBps_per_direction
from planner.throughput.constants import CONSTANTS
from planner.throughput.derived import build_hardware
from planner.throughput.estimate import estimate_throughput
from planner.training_config import ActivationCheckpointing


def _row(name: str) -> dict:
    return next(row for row in zero_paper_rows() if row["id"] == name)


def test_a_measured_host_bandwidth_replaces_the_pcie_links_rate():
    """ZeRO-Infinity, Section 5.2.3: on a DGX-2 each GPU reads and writes CPU memory at about 3 GB/s when all 16 do;
    without a measured figure the link's PCIe rate at the link efficiency stands."""
    spec, config, cluster = plan_inputs(_row("zero-infinity-paper-50b-16-v100-cpu-nvme"))
    assert cluster.host_GBps_per_gpu == 3.0
    assert build_hardware(cluster, config, CONSTANTS)[2] == 3.0e9
    unmeasured = cluster.model_copy(update={"host_GBps_per_gpu": None})
    pcie = pcie_bandwidth_GBps_per_direction(3) * 1e9 * CONSTANTS.link_efficiency  # a V100's Gen3 x16
    assert build_hardware(unmeasured, config, CONSTANTS)[2] == pcie


def test_checkpoints_in_cpu_memory_cost_their_copies_both_ways_on_the_critical_path():
    """DeepSpeed's cpu_checkpointing (checkpointing.py at 0d4a54a0) copies each checkpoint to a pageable CPU buffer
    on the compute stream and back before the recomputation: 2 x blocks x checkpoints x the block's input, at the
    host bandwidth, added to the step; nothing without full checkpointing or with the switch off."""
    row = _row("zero-infinity-paper-50b-16-v100-cpu-nvme")
    spec, config, cluster = plan_inputs(row)
    with_copies = implementation_of(row)
    assert with_copies.memory.checkpoints_to_cpu == 1
    without = dataclasses.replace(with_copies, memory=dataclasses.replace(with_copies.memory, checkpoints_to_cpu=0))
    charged = estimate_throughput(spec, config, cluster, implementation=with_copies)
    kept = estimate_throughput(spec, config, cluster, implementation=without)
    block_input = config.micro_batch * config.seq_len * row["hidden"] * 2  # fp16 [s, b, h]
    copies = config.grad_accum * row["layers"] * 2 * block_input / 3.0e9
    assert charged.breakdown.offload_s - kept.breakdown.offload_s == pytest.approx(copies, rel=1e-9)
    assert charged.step_time_s - kept.step_time_s == pytest.approx(copies, rel=1e-9)
    selective = config.model_copy(update={"activation_checkpointing": ActivationCheckpointing.SELECTIVE})
    assert estimate_throughput(spec, selective, cluster, implementation=with_copies).breakdown.offload_s == (
        estimate_throughput(spec, selective, cluster, implementation=without).breakdown.offload_s
    )


def test_checkpoints_in_cpu_memory_leave_the_gpu_one_blocks_and_fill_the_node():
    """The same switch in the memory estimate (planner/memory/stack_memory.py): the GPU keeps the checkpoint of the
    block in flight, not every block's, and the node's CPU memory holds them all: per rank layers x the block's
    input, exactly (0.43 to 0.81 TB a node). The four rows that move them are estimated within their GPUs but the 1T (1.06x: one block's
    recomputation and its gathered parameters, which ZeRO-Infinity's memory-centric tiling splits and the estimate
    does not); counted on the GPU they were 1.5x to 2.6x."""
    from benchmarks.memory.published_runs_fit import row_memory
    from planner.evaluate import memory_on

    moved = 0
    for row in zero_paper_rows():
        if not row.get("checkpoints_to_cpu"):
            continue
        spec, config, cluster = plan_inputs(row)
        on_gpu, on_cpu = memory_on(spec, config, cluster), row_memory(row)
        block_input = config.micro_batch * config.seq_len * row["hidden"] * 2  # fp16 [s, b, h]
        extra_on_cpu = on_cpu.cpu_per_node_bytes - on_gpu.cpu_per_node_bytes
        assert extra_on_cpu == pytest.approx(row["layers"] * block_input * row["gpus_per_node"], rel=1e-6)
        assert on_gpu.activations_peak_bytes - on_cpu.activations_peak_bytes == pytest.approx(
            (row["layers"] - 1) * block_input, rel=1e-6
        )
        assert "checkpoints in CPU memory" in on_cpu.sources["cpu_per_node"]
        assert "checkpoints in CPU memory" not in on_gpu.sources["cpu_per_node"]
        ratio = on_cpu.total / on_cpu.gpu_capacity_bytes
        assert on_gpu.total / on_gpu.gpu_capacity_bytes > 1.45
        assert ratio < 0.8 or (row["id"].startswith("zero-infinity-paper-1t") and ratio < 1.2), row["id"]
        moved += 1
    assert moved == 4


def test_only_the_rows_whose_checkpoints_outgrow_the_gpu_move_them():
    """Section 5.1.2: ZeRO-Infinity moves activation checkpoints to CPU memory when necessary: 27-50 GB a GPU for
    the 50B-1T rows at one per block, against a 32 GB V100; the 10B run's 3.4 GB stay beside its model states. Two
    per block (the example script's --split-transformers) would not fit the 100B's and 1T's in the DGX-2's 1.5 TB."""
    for row in zero_paper_rows():
        if row.get("stack") != "deepspeed-zero-infinity-2021":
            continue
        per_gpu = row["layers"] * row["micro_batch"] * row["seq_len"] * row["hidden"] * 2 / 1e9
        assert row.get("checkpoints_to_cpu", 0) == (1 if per_gpu > 20 else 0), row["id"]
        if row["id"].startswith(("zero-infinity-paper-100b", "zero-infinity-paper-1t")):
            assert 2 * per_gpu * row["gpus_per_node"] / 1e3 >= 1.5  # TB: two per block would fill the node's CPU memory


# DeepSpeed's issue tracker on the ZeRO-3 of 2021: one parameter's all-gather "takes about 0.5ms" (issue #1069,
# 2021-06-21); PR #1188 (2021-06-25) saved 200 + 230 ms over some 2,048 parameter fetches of a 5B BERT.
_PER_GATHER_S = 0.5e-3
_PER_FETCH_S = 0.430 / 2048


def test_zero3s_measured_overheads_charged_in_full_leave_the_10b_over_25_percent():
    """An upper bound, not a charge: every data-parallel collective exposed (the code's prefetch never ran: its
    step counter ran one ahead of its trace), 4 gathered weights a block (biases and norms sit under the 1e5-element
    persistence threshold) in the forward, the recomputation and the backward, plus the embeddings, and every
    parameter's fetch at PR #1188's saving. The row moves by about a quarter of its gap and stays over 25%."""
    row = _row("zero-infinity-paper-10b-16-v100-zero3")
    spec, config, cluster = plan_inputs(row)
    estimate = estimate_throughput(spec, config, cluster, implementation=implementation_of(row))
    hidden_comm = estimate.breakdown.data_parallel_comm_s - estimate.breakdown.exposed_comm_s
    gathers = row["layers"] * 4 * 3 + 3
    fetches = row["layers"] * 12 * 3
    added = hidden_comm + gathers * _PER_GATHER_S + fetches * _PER_FETCH_S
    today = compare(row)
    bounded = today.predicted_tflops * estimate.step_time_s / (estimate.step_time_s + added)
    bounded_error = bounded / today.published_tflops - 1
    assert 0.25 < bounded_error < today.error
    assert bounded_error == pytest.approx(0.274, abs=0.005)  # docs/accuracy.md: +38.2% -> +27.4%


@pytest.mark.parametrize(
    ("name", "shared"),
    [
        ("zero-paper-zero2-dp-10b-128-v100", True),  # hidden 4096: ZeRO-2, 128 GPUs
        ("zero-offload-paper-10b-1-v100", True),  # hidden 4096: ZeRO-Offload, 1 GPU
        ("zero-offload-paper-10b-16-v100", True),  # hidden 4096: ZeRO-Offload, 16 GPUs
        ("zero-paper-zero2-dp-6b-128-v100", False),  # hidden 3072
        ("zero-paper-zero2-dp-8b-128-v100", False),  # hidden 3072
    ],
)
def test_the_10b_gap_is_shared_by_the_other_stacks_at_its_shape(name: str, shared: bool):
    """The rest of the 10B's gap is not ZeRO-3's: the same papers' other stacks at hidden 4096 on V100s miss by
    over 25% too, where their hidden-3072 rows are within 10%."""
    error = compare(_row(name)).error
    assert error > 0.25 if shared else abs(error) < 0.10

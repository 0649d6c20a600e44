"""On the cpu device the "device memory" is the host's RAM: offloading to the CPU frees nothing there.

Each figure is checked against the formula by hand (model_states.py's byte widths: fp32 training keeps 4-byte
weights and gradients and AdamW's two 4-byte states; a copy within RAM reads and writes each byte, at half the
measured copy bandwidth):

- the offloaded states stay in the peak, as the "host_offload" category with a source saying why, and the
  total is never below the same config's without offload (`estimate --offload-optimizer cpu` on `--gpu cpu`
  gives that accounting, not an error);
- offload adds its copies to the step and steps the optimizer on the rank's own core, as without it;
- torch steps CPU tensors one at a time, so no foreach temporary is charged there;
- ZeRO-2 offload keeps its fp32 gradient partition on the CPU, on any device. DeepSpeed keeps an fp32 master
  even at fp32 (measured: tests/test_deepspeed_master_copies.py), so its CPU partition holds the master, AdamW's
  two states and the gradients, 4 bytes each.

The search's rule built on these (no CPU offload candidates on the cpu device) is proved in
tests/test_search_pruning.py.
"""

from __future__ import annotations

import json

import pytest

from hardware_selector_cli.app import main
from planner.evaluate import memory_on
from planner.hardware.cluster import make_cluster
from planner.memory.estimate import DEFAULT_OVERHEAD
from planner.memory.phases import step_peak
from planner.models.resolve import resolve_model
from planner.throughput.communication import OPTIMIZER_STEP_BYTES
from planner.throughput.constants import CONSTANTS
from planner.throughput.estimate import estimate_throughput
from planner.training_config import Offload, Precision, Strategy, TrainingConfig

GPT2 = resolve_model("gpt2")
P = GPT2.params.trainable  # every parameter trains; tied weights counted once


def zero2(offload: Offload, micro_batch: int = 2, grad_accum: int = 1) -> TrainingConfig:
    return TrainingConfig(
        strategy=Strategy.DEEPSPEED,
        zero_stage=2,
        offload_optimizer=offload,
        precision=Precision.FP32,
        seq_len=512,
        micro_batch=micro_batch,
        grad_accum=grad_accum,
    )


def test_offloaded_states_count_in_the_cpu_device_peak():
    cluster = make_cluster("cpu", gpus_per_node=2)
    offloaded = memory_on(GPT2, zero2(Offload.CPU), cluster)
    kept = memory_on(GPT2, zero2(Offload.NONE), cluster)
    per_gpu = offloaded.per_gpu_bytes
    # ZeRO-2 over 2 ranks, fp32: the 4-byte master, AdamW's two 4-byte states and the 4-byte gradient partition.
    assert per_gpu["host_offload"] == pytest.approx(P / 2 * (4 + 8 + 4), abs=1)
    assert offloaded.cpu_per_node_bytes == pytest.approx(2 * per_gpu["host_offload"], abs=2)
    assert per_gpu["optimizer_states"] == 0 and per_gpu["gradients"] == 0  # moved off the device's books...
    tensors = sum(value for name, value in per_gpu.items() if name not in ("overhead", "total"))
    overhead = int(DEFAULT_OVERHEAD.host_process_bytes + DEFAULT_OVERHEAD.fragmentation_fraction * tensors)
    assert per_gpu["overhead"] == overhead
    assert per_gpu["total"] == tensors + overhead  # ...and into its total, the same RAM
    assert "whose RAM is this device's memory" in offloaded.sources["host_offload"]
    assert "offloaded states included" in offloaded.sources["total"]
    assert any("offload saves no memory here" in note for note in offloaded.notes)
    # Without offload the states sit in parameters / optimizer states instead: offload saves nothing.
    assert kept.per_gpu_bytes["optimizer_states"] == pytest.approx(P / 2 * (4 + 8), abs=1)  # the master, AdamW
    assert "host_offload" not in kept.per_gpu_bytes
    assert per_gpu["total"] >= kept.total


def test_a_gpu_keeps_offloaded_states_off_its_books():
    offloaded = memory_on(GPT2, zero2(Offload.CPU), make_cluster("A100-80GB", gpus_per_node=2))
    assert "host_offload" not in offloaded.per_gpu_bytes
    assert offloaded.per_gpu_bytes["optimizer_states"] == 0
    # fp32 ZeRO-2 offload: its CPU partition holds the master and the 4-byte gradients beside the states.
    assert offloaded.cpu_per_node_bytes == pytest.approx(2 * P / 2 * (4 + 8 + 4), abs=2)


@pytest.mark.parametrize("grad_accum", [1, 8])
def test_offload_on_the_cpu_device_adds_only_its_copies(grad_accum):
    cluster = make_cluster("cpu", gpus_per_node=2)
    offloaded = estimate_throughput(GPT2, zero2(Offload.CPU, grad_accum=grad_accum), cluster)
    kept = estimate_throughput(GPT2, zero2(Offload.NONE, grad_accum=grad_accum), cluster)
    shard = P / 2
    memory_Bps = cluster.gpu.memory_bandwidth_GBps * 1e9
    step = shard * OPTIMIZER_STEP_BYTES["adamw"] / memory_Bps  # the rank's own core, as without offload
    copy = shard * 4 / (memory_Bps / 2)  # 4-byte gradients down, 4-byte parameters up, within RAM
    # ZeRO-2's gradients leave after every backward, hidden under it but for the interference share.
    expected = grad_accum * CONSTANTS.overlap_interference * copy + step + copy
    assert kept.breakdown.optimizer_step_s == pytest.approx(step, rel=1e-9)
    assert offloaded.breakdown.optimizer_step_s == 0.0
    assert offloaded.breakdown.offload_s == pytest.approx(expected, rel=1e-9)
    assert offloaded.step_time_s > kept.step_time_s
    assert "copies within host RAM" in offloaded.sources["offload_s"]


def test_no_foreach_temporary_on_cpu_tensors():
    # One rank, a short sequence: on a GPU the step peaks at the optimizer step, with foreach's temporary. On the
    # cpu device the single-tensor step's own, 2 x the largest parameter (GPT-2's wte), replaces it: measured in
    # tests/test_cpu_device_optimizer_step.py.
    config = TrainingConfig(strategy=Strategy.DDP, precision=Precision.FP32, seq_len=64, micro_batch=1)
    cpu, gpu = make_cluster("cpu", gpus_per_node=1), make_cluster("A100-80GB", gpus_per_node=1)
    on_gpu = memory_on(GPT2, config, gpu)
    assert on_gpu.peak_phase == "optimizer-step"
    assert on_gpu.per_gpu_bytes["optimizer_states"] == pytest.approx(12 * P, abs=1)  # + foreach's sqrt of all
    on_cpu = memory_on(GPT2, config, cpu)
    assert on_cpu.per_gpu_bytes["optimizer_states"] == pytest.approx(8 * P, abs=1)  # exp_avg, exp_avg_sq only
    # The optimizer step itself is lighter by exactly that 4-byte temporary less the single-tensor one, nothing else.
    from planner.memory.runtime import runtime_for  # (here: main had none, and the rest above still runs there)

    moments = [
        step_peak(GPT2, config, world_size=1, gpus_per_node=1, runtime=runtime_for(cluster.gpu)).by_phase
        for cluster in (gpu, cpu)
    ]
    wte = GPT2.vocab_size * GPT2.hidden_size
    assert moments[0]["optimizer-step"] - moments[1]["optimizer-step"] == pytest.approx(4 * P - 2 * 4 * wte, abs=1)


def test_estimate_on_cpu_with_forced_offload_gives_the_accounting(capsys):
    base = ["estimate", "--model", "gpt2", "--gpu", "cpu", "--gpus-per-node", "2", "--strategy", "zero2"]
    base += ["--precision", "fp32", "--seq-len", "512", "--micro-batch", "2"]
    code = main([*base, "--offload-optimizer", "cpu", "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    memory = json.loads(captured.out)["memory"]
    per_gpu = memory["per_gpu_bytes"]
    assert per_gpu["host_offload"] == pytest.approx(P / 2 * 16, abs=1)
    assert per_gpu["total"] == sum(value for key, value in per_gpu.items() if key != "total")
    assert memory["runtime"] == "cpu"
    assert main([*base, "--offload-optimizer", "cpu"]) == 0  # the table names the row and why
    table = capsys.readouterr().out
    assert "offloaded to CPU (same RAM)" in table
    assert "in the total above" in table

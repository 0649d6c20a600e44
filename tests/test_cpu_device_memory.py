"""The cpu device (`--gpu cpu`) runs CPU processes: its memory estimate follows the CPU's kernels, not CUDA's.

References: the CPU trace runtime (Runtime.CPU_TRACE), which tests/test_memory_vs_trace.py holds to FakeTensor
traces of the CPU's kernels, for the activations; a measured RSS for the process baseline (docs/hardware.md).
Offload on the cpu device: tests/test_cpu_device_offload.py.
"""

from __future__ import annotations

import pytest

from planner.evaluate import memory_on
from planner.hardware.cluster import make_cluster
from planner.memory.estimate import estimate_memory
from planner.memory.runtime import Runtime
from planner.models.resolve import resolve_model
from planner.training_config import Precision, Strategy, TrainingConfig

GPT2 = resolve_model("gpt2")  # dropout 0.1 on attention, residual and embedding


@pytest.mark.parametrize("precision", [Precision.FP32, Precision.BF16])
def test_the_cpu_device_keeps_dropout_noise_as_the_cpu_trace_does(precision):
    """The CPU's dropout keeps its noise tensor at the input's width, not CUDA's 1-byte mask: the cpu device's
    activations are the CPU trace runtime's, and more than CUDA's."""
    config = TrainingConfig(strategy=Strategy.DDP, precision=precision, seq_len=512, micro_batch=2)
    on_cpu = memory_on(GPT2, config, make_cluster("cpu", gpus_per_node=2))
    traced = estimate_memory(
        GPT2, config, world_size=2, gpus_per_node=2, gpu_capacity_bytes=2**40, runtime=Runtime.CPU_TRACE
    )
    on_gpu = memory_on(GPT2, config, make_cluster("A100-80GB", gpus_per_node=2))
    assert on_cpu.per_gpu_bytes["activations"] == traced.per_gpu_bytes["activations"]
    assert on_cpu.per_gpu_bytes["activations"] > on_gpu.per_gpu_bytes["activations"]


def test_the_cpu_device_charges_a_process_baseline_not_a_cuda_context():
    """A CPU rank has no CUDA context: its fixed overhead is the process's own baseline (0.4 GiB, a measured RSS:
    docs/hardware.md), with the same 5% allocator share; a GPU keeps its 0.75 GiB context."""
    config = TrainingConfig(
        strategy=Strategy.DEEPSPEED, zero_stage=2, precision=Precision.FP32, seq_len=512, micro_batch=2
    )
    on_cpu = memory_on(GPT2, config, make_cluster("cpu", gpus_per_node=2))
    on_gpu = memory_on(GPT2, config, make_cluster("A100-80GB", gpus_per_node=2))
    for estimate, fixed in ((on_cpu, 0.4 * 2**30), (on_gpu, 0.75 * 2**30)):
        tensors = sum(value for name, value in estimate.per_gpu_bytes.items() if name not in ("overhead", "total"))
        assert estimate.per_gpu_bytes["overhead"] == int(int(fixed) + 0.05 * tensors)
    assert "process baseline" in on_cpu.sources["overhead"] and "CUDA" not in on_cpu.sources["overhead"]
    assert "0.75 GiB CUDA context" in on_gpu.sources["overhead"]

"""The optimizer step's temporaries on the cpu device, held to a measurement of torch's own AdamW.

On CPU tensors torch.optim.AdamW runs its single-tensor path (torch/optim/optimizer.py,
_default_to_fused_or_foreach), whose `denom = (exp_avg_sq.sqrt() / ...)` (torch/optim/adam.py:544) holds two
temporaries of the tensor it steps: the step peaks at 2 x the largest parameter. On a GPU foreach takes every
square root at once: one state-sized tensor over the whole group, as the same foreach code measures on CPU
tensors. Measured here in the test, single process, by benchmarks/memory/optimizer_step_transient.py.
"""

from __future__ import annotations

import functools
import json

import pytest

from planner.memory.estimate import estimate_memory
from planner.memory.model_states import model_state_bytes
from planner.memory.rank_params import rank_params
from planner.memory.runtime import Runtime
from planner.models.resolve import spec_from_config_path
from planner.training_config import Offload, Precision, Strategy, TrainingConfig

# A small GPT-2 with GPT-2's vocabulary: wte and the (untied) head are by far its largest parameters. Untied, so
# that no tied head's gradient makes backward's end the peak: the step peaks at the optimizer step.
GPT2_SMALL = {
    "model_type": "gpt2",
    "n_layer": 2,
    "n_embd": 64,
    "n_head": 2,
    "n_positions": 64,
    "vocab_size": 50257,
    "tie_word_embeddings": False,
}
DDP_FP32 = TrainingConfig(strategy=Strategy.DDP, precision=Precision.FP32, seq_len=16, micro_batch=2)


@functools.cache
def _measured(foreach: bool | None) -> int:
    """torch.optim.AdamW's step transient over the small GPT-2 on CPU (its default, or foreach forced)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from benchmarks.memory.optimizer_step_transient import causal_lm_backward, step_transient_bytes

    torch.manual_seed(0)
    config = {key: value for key, value in GPT2_SMALL.items() if key != "model_type"}
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(**config))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, foreach=foreach)
    return step_transient_bytes(optimizer, causal_lm_backward(model, GPT2_SMALL["vocab_size"]))


def _spec(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(GPT2_SMALL))
    return spec_from_config_path(tmp_path)


def _planned(tmp_path, runtime: Runtime) -> float:
    spec = _spec(tmp_path)
    params = rank_params(spec, DDP_FP32)
    return model_state_bytes(params, DDP_FP32, 1, 1, spec.hidden_size, runtime).step_temporary


def test_the_cpu_device_charges_the_single_tensor_adamw_step_as_measured(tmp_path):
    """The cpu device's step temporary is torch's default CPU AdamW step's measured peak (2 x wte's bytes)."""
    measured = _measured(foreach=None)
    wte = GPT2_SMALL["vocab_size"] * GPT2_SMALL["n_embd"] * 4
    assert measured == pytest.approx(2 * wte, rel=1e-4)  # the reading of adam.py:544 (and a few small tensors')
    assert _planned(tmp_path, Runtime.CPU) == pytest.approx(measured, rel=0.01)


def test_the_gpu_device_still_charges_the_foreach_group_temporary(tmp_path):
    """A GPU's step temporary is unchanged: foreach's square roots of the whole group, as measured."""
    measured = _measured(foreach=True)
    assert _planned(tmp_path, Runtime.CUDA) == pytest.approx(measured, rel=0.01)
    assert _planned(tmp_path, Runtime.CUDA) > 1.01 * _planned(tmp_path, Runtime.CPU) / 2  # the group, not one tensor


def test_the_cpu_device_estimate_peaks_with_the_measured_step_temporary_and_names_it(tmp_path):
    """At its optimizer-step peak the cpu device's optimizer_states category is the states plus the measured
    step transient, and its source (which the total's names) says where that comes from."""
    spec = _spec(tmp_path)
    states = model_state_bytes(rank_params(spec, DDP_FP32), DDP_FP32, 1, 1, spec.hidden_size, Runtime.CPU)
    estimate = estimate_memory(spec, DDP_FP32, world_size=1, gpus_per_node=1, gpu_capacity_bytes=2**40,
                               runtime=Runtime.CPU)  # fmt: skip
    assert estimate.peak_phase == "optimizer-step"
    assert estimate.per_gpu_bytes["optimizer_states"] - states.optimizer_states == pytest.approx(
        _measured(foreach=None), rel=0.01
    )
    assert "single-tensor AdamW temporaries" in estimate.sources["optimizer_states"]
    assert "torch/optim/adam.py:544" in estimate.sources["optimizer_states"]
    assert "optimizer states" in estimate.sources["total"]


def test_fsdp_cpu_offload_on_a_gpu_charges_the_host_step_as_measured(tmp_path):
    """FSDP's CPU offload steps torch's AdamW on CPU shards, so a GPU node's host RAM holds the same single-tensor
    temporaries at the step as the cpu device does (one rank: the shard is the whole parameter), and says so."""
    spec = _spec(tmp_path)
    plain = DDP_FP32.model_copy(update={"strategy": Strategy.FSDP})
    offloaded = plain.model_copy(update={"offload_params": Offload.CPU, "offload_optimizer": Offload.CPU})
    params = rank_params(spec, plain)
    kept = model_state_bytes(params, plain, 1, 1, spec.hidden_size, Runtime.CUDA)
    moved = model_state_bytes(params, offloaded, 1, 1, spec.hidden_size, Runtime.CUDA)
    on_host = kept.parameters + kept.gradients + kept.optimizer_states
    assert moved.cpu - on_host == pytest.approx(_measured(foreach=None), rel=0.01)
    estimate = estimate_memory(spec, offloaded, world_size=1, gpus_per_node=1, gpu_capacity_bytes=2**40)
    assert "single-tensor AdamW temporaries" in estimate.sources["cpu_per_node"]
    # DeepSpeed's offload steps DeepSpeedCPUAdam in place: nothing more on the host than its states.
    deepspeed = offloaded.model_copy(
        update={"strategy": Strategy.DEEPSPEED, "zero_stage": 2, "offload_params": Offload.NONE}
    )
    ds = estimate_memory(spec, deepspeed, world_size=1, gpus_per_node=1, gpu_capacity_bytes=2**40)
    assert "single-tensor AdamW temporaries" not in ds.sources["cpu_per_node"]

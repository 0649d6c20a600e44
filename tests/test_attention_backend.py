"""The runner's start note when torch's SDPA will not run the cuDNN attention the plan's speed estimate assumed on
Hopper and Blackwell (backends/parts/attention_backend.py). Reference: torch's own rule, read in
aten/src/ATen/native/transformers/cuda/sdp_utils.cpp (`check_prefer_cudnn_attention`)."""

from __future__ import annotations

import pytest
import torch


@pytest.mark.parametrize(
    ("major", "cudnn", "deprioritized", "says"),
    [
        (9, 92400, False, None),  # Hopper, torch 2.13's CUDA 13 build: cuDNN's attention, as planned
        (9, 91002, False, "cuDNN 9.10"),  # a CUDA 12 build's older cuDNN: FlashAttention-2
        (10, 91500, False, "2.7-3.4x"),  # 9.15 itself is not newer than 9.15
        (10, 91600, True, "TORCH_CUDNN_SDPA_DEPRIORITIZED"),
        (8, 91002, False, None),  # Ampere: the plan's factor is FlashAttention-2's anyway
        (12, None, False, None),  # consumer Blackwell: not sm100
    ],
)
def test_the_runner_says_when_sdpa_will_not_run_the_planned_cudnn_attention(major, cudnn, deprioritized, says):
    """torch's rule (check_prefer_cudnn_attention): cuDNN's attention first on sm90 and sm100 when the runtime cuDNN
    is newer than 9.15 and TORCH_CUDNN_SDPA_DEPRIORITIZED is not set; otherwise the runner's start notes say it."""
    from backends.parts.attention_backend import sdpa_kernel_note, sdpa_notes

    note = sdpa_kernel_note(major, cudnn, deprioritized)
    assert (note is None) == (says is None)
    if says is not None:
        assert note is not None and says in note and "\n" not in note
    assert sdpa_notes(torch.device("cpu")) == [] and sdpa_notes(torch.device("cuda"), context_parallel=2) == []

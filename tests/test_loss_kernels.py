"""What the cross-entropy holds of the logits, by the kernel a stack runs it with (planner/memory/loss_kernels.py).

References: torch's own autograd, traced on this CPU (what the eager loss and torch.compile's inductor graph save
for backward, and the dtype of the gradient it writes), and the published memory of the runs that used each kernel
(llm-foundry's and torchtitan's: tests/test_published_runs_fit.py)."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from planner.memory.loss_kernels import LossKernel, loss_bytes

ROWS, VOCAB = 128, 1000


def _cross_entropy(pred: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The loss transformers' causal LMs and torchtitan run: torch's cross-entropy on an fp32 copy."""
    return F.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))


def _saved_bytes(loss_fn, pred: torch.Tensor, labels: torch.Tensor) -> tuple[int, torch.Tensor]:
    """Bytes autograd keeps for the loss's backward (each storage once), and the loss."""
    storages: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storages[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        loss = loss_fn(pred, labels)
    return sum(storages.values()), loss


def _logits() -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    pred = torch.randn(2, ROWS // 2, VOCAB, dtype=torch.bfloat16, requires_grad=True)
    return pred, torch.randint(0, VOCAB, (2, ROWS // 2))


def test_the_eager_loss_keeps_its_fp32_log_softmax():
    pred, labels = _logits()
    saved, _ = _saved_bytes(_cross_entropy, pred, labels)
    per_row, scalar = 8, 4  # the int64 labels; nll_loss's fp32 total weight
    assert saved == loss_bytes(LossKernel.EAGER, 2).saved * ROWS * VOCAB + per_row * ROWS + scalar


def test_the_compiled_loss_keeps_the_16_bit_logits_and_two_numbers_a_row():
    """torchtitan compiles its loss under --compile: inductor saves the bf16 input, each row's max and logsumexp
    (fp32) and the labels, and its backward writes the gradient in the logits' own bf16: 2 bytes a logit held, 4
    while the backward runs (loss_kernels.FUSED), against the eager loss's 4 and 12. Same values as eager."""
    pred, labels = _logits()
    compiled = torch.compile(_cross_entropy)
    saved, loss = _saved_bytes(compiled, pred, labels)
    per_row, scalar = 4 + 4 + 8, 4  # max and logsumexp in fp32, the int64 labels; the fp32 total weight
    assert saved == loss_bytes(LossKernel.FUSED, 2).saved * ROWS * VOCAB + per_row * ROWS + scalar
    loss.backward()
    assert pred.grad is not None and pred.grad.dtype == torch.bfloat16
    eager_pred = pred.detach().clone().requires_grad_(True)
    eager_loss = _cross_entropy(eager_pred, labels)
    eager_loss.backward()
    assert loss.item() == pytest.approx(eager_loss.item(), rel=1e-3)
    assert eager_pred.grad is not None
    torch.testing.assert_close(pred.grad, eager_pred.grad, rtol=2e-2, atol=1e-5)


@pytest.mark.parametrize(
    ("kernel", "width", "expected"),
    [
        (LossKernel.EAGER, 2, (4, 10, 12)),  # bf16 logits, their fp32 copy, the fp32 log-softmax
        (LossKernel.EAGER, 4, (4, 8, 12)),  # fp32 logits: no copy
        (LossKernel.MEGATRON, 2, (4, 10, 6)),  # one fp32 softmax (two for a moment), the gradient cast to bf16
        (LossKernel.MEGATRON, 4, (4, 8, 4)),
        (LossKernel.FUSED, 2, (2, 2, 4)),
        (LossKernel.FUSED, 4, (4, 4, 8)),
    ],
)
def test_bytes_per_logit(kernel, width, expected):
    held = loss_bytes(kernel, width)
    assert (held.saved, held.forward_end, held.backward_start) == expected


def test_the_backward_start_moves_by_the_kernels_difference_alone():
    """The same step with the fused loss: the backward-start moment holds (12 - 4) bytes less per logit, every other
    moment's tensors are the same but forward-end's loss term ((10 - 2) less)."""
    from planner.memory.phases import step_peak
    from planner.memory.stack_memory import StackMemory
    from planner.models.resolve import resolve_model
    from planner.training_config import TrainingConfig

    spec = resolve_model("llama-3.1-8b")
    config = TrainingConfig(strategy="fsdp", precision="bf16-mixed", micro_batch=2, seq_len=4096)
    eager = step_peak(spec, config, world_size=8, gpus_per_node=8)
    fused = step_peak(spec, config, world_size=8, gpus_per_node=8, stack=StackMemory(uncompiled_loss=LossKernel.FUSED))
    logits = 2 * 4096 * spec.vocab_size
    assert eager.by_phase["backward-start"] - fused.by_phase["backward-start"] == pytest.approx(8 * logits)
    assert eager.by_phase["forward-end"] - fused.by_phase["forward-end"] == pytest.approx(8 * logits)
    for phase in ("backward-end", "optimizer-step"):
        assert eager.by_phase[phase] == fused.by_phase[phase]


def test_estimate_counts_the_implementations_loss(capsys):
    """`estimate --implementation llm-foundry` counts flash-attn's fused loss, and says so in its note and source
    (the model is a Llama: the loss is the stack's, whatever the blocks)."""
    from hardware_selector_cli.app import main

    def memory(implementation: str) -> dict:
        argv = ["estimate", "-m", "llama-3.1-8b", "--gpu", "H100-80GB", "--gpus-per-node", "8", "--strategy", "fsdp",
                "--seq-len", "4096", "--micro-batch", "2", "--ac", "full", "--implementation", implementation,
                "--json"]  # fmt: skip
        assert main(argv) == 0
        return json.loads(capsys.readouterr().out)["memory"]

    ours, foundry = memory("ours"), memory("llm-foundry")
    logits = 2 * 4096 * 128256  # Llama 3's vocabulary
    assert ours["per_gpu_bytes"]["total"] > foundry["per_gpu_bytes"]["total"]
    assert "fused cross-entropy kernel" in foundry["sources"]["temporaries"]
    assert "fp32 log-softmax" in ours["sources"]["temporaries"]
    assert any("cross-entropy (fused)" in note for note in foundry["notes"])
    assert ours["per_gpu_bytes"]["temporaries"] - foundry["per_gpu_bytes"]["temporaries"] == pytest.approx(
        8 * logits, rel=0.01
    )


def test_llm_foundrys_runs_fit_with_its_loss():
    """llm-foundry's 303 measured runs ran, so they fit: counted with its fused loss, 17 are estimated over their
    GPUs, none by more than 3.1% (within the estimate's own 0.75 GiB + 5% overhead); with the eager loss 107, up to
    1.38x (docs/accuracy.md, "Memory")."""
    from benchmarks.accuracy.calibrate_throughput import calibration_cases, held_out_cases
    from benchmarks.memory.published_runs_fit import capacity_ratio
    from planner.throughput.implementation import LLM_FOUNDRY

    cases = calibration_cases() + [case for group in held_out_cases().values() for case in group]
    assert len(cases) == 303
    fused = [capacity_ratio(*case[1:], LLM_FOUNDRY.stack_memory()) for case in cases]
    eager = [capacity_ratio(*case[1:]) for case in cases]
    assert sum(ratio > 1 for ratio in fused) == 17 and max(fused) < 1.032
    assert sum(ratio > 1 for ratio in eager) == 107 and 1.37 < max(eager) < 1.39

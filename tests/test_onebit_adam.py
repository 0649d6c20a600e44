"""1-bit Adam (backends/parts/onebit_adam.py) in one process: its warm-up against torch's AdamW and Adam, its
compressed phase against a hand-computed reference (variance frozen, momentum replaced by what the average
returns), and engine.json's refusals of onebit where 1-bit Adam cannot run (docs/parallelism.md, "Gradient
compression"). The 2-rank training run is tests/test_compressed_sum.py's."""

from __future__ import annotations

import math

import pytest
import torch

from backends.parts.onebit_adam import OneBitAdam
from planner.contract.engine_config import load_engine_config
from planner.errors import UserInputError

BETAS, EPS, LR, DECAY = (0.9, 0.999), 1e-8, 0.1, 0.01
GRADS = [[0.5, -1.0, 2.0, -0.25], [1.5, 0.5, -2.0, 0.75], [-0.5, 1.0, 1.0, 0.25], [2.0, -3.0, 0.5, 1.0]]


def _onebit(param: torch.nn.Parameter, freeze_step: int, average=None, decoupled: bool = True) -> OneBitAdam:
    return OneBitAdam(
        [param],
        lr=LR,
        betas=BETAS,
        eps=EPS,
        weight_decay=DECAY,
        decoupled=decoupled,
        freeze_step=freeze_step,
        segments=[("a", 0, 2), ("b", 2, 4)],
        average=average,
    )


def _steps(optimizer, param: torch.nn.Parameter, grads: list[list[float]]) -> list[torch.Tensor]:
    seen = []
    for grad in grads:
        param.grad = torch.tensor(grad)
        optimizer.step()
        seen.append(param.detach().clone())
    return seen


@pytest.mark.parametrize("decoupled, torch_class", [(True, torch.optim.AdamW), (False, torch.optim.Adam)])
def test_the_warmup_is_torchs_adam_to_the_last_bit(decoupled, torch_class):
    ours, theirs = (torch.nn.Parameter(torch.tensor([1.0, -2.0, 0.5, 3.0])) for _ in range(2))
    reference = torch_class([theirs], lr=LR, betas=BETAS, eps=EPS, weight_decay=DECAY)
    onebit = _onebit(ours, freeze_step=len(GRADS), decoupled=decoupled)
    for got, want in zip(_steps(onebit, ours, GRADS), _steps(reference, theirs, GRADS)):
        assert torch.equal(got, want)
    for key in ("exp_avg", "exp_avg_sq", "step"):
        assert torch.equal(onebit.state[ours][key], reference.state[theirs][key])


def _signs_times_mean(key, momentum: torch.Tensor) -> torch.Tensor:
    """A one-rank 'average' that compresses as onebit does: each segment's signs times its mean magnitude."""
    return torch.where(momentum >= 0, 1.0, -1.0) * momentum.abs().mean()


def _hand_reference(freeze_step: int) -> tuple[list[list[float]], list[list[float]]]:
    """The parameters after each step, and v after each, worked element by element in Python floats."""
    (b1, b2), p = BETAS, [1.0, -2.0, 0.5, 3.0]
    m, v, params, variances = [0.0] * 4, [0.0] * 4, [], []
    for t, g in enumerate(GRADS, start=1):
        p = [x * (1 - LR * DECAY) for x in p]  # decoupled weight decay, before the update as AdamW
        m = [b1 * mi + (1 - b1) * gi for mi, gi in zip(m, g)]
        if t <= freeze_step:
            v = [b2 * vi + (1 - b2) * gi * gi for vi, gi in zip(v, g)]
        else:  # the compressed phase: each segment (0:2, 2:4) replaced by its signs times its mean magnitude
            m = [math.copysign(sum(abs(x) for x in seg) / 2, mi) for seg in (m[:2], m[2:]) for mi in seg]
        corrected_v = [vi / (1 - b2 ** min(t, freeze_step)) for vi in v]
        p = [pi - LR / (1 - b1**t) * mi / (math.sqrt(vh) + EPS) for pi, mi, vh in zip(p, m, corrected_v)]
        params.append(p)
        variances.append(v)
    return params, variances


def test_after_freeze_step_the_variance_stays_and_the_update_takes_the_averaged_momentum():
    param = torch.nn.Parameter(torch.tensor([1.0, -2.0, 0.5, 3.0]))
    calls = []

    def average(key, momentum):
        calls.append((key, momentum.numel()))
        return _signs_times_mean(key, momentum)

    onebit = _onebit(param, freeze_step=2, average=average)
    want_params, want_variances = _hand_reference(freeze_step=2)
    frozen_before = []
    for step, grad in enumerate(GRADS):
        frozen_before.append(onebit.frozen)
        param.grad = torch.tensor(grad)
        onebit.step()
        assert param.detach().tolist() == pytest.approx(want_params[step], rel=1e-5)
        assert onebit.state[param]["exp_avg_sq"].tolist() == pytest.approx(want_variances[step], rel=1e-6)
    assert frozen_before == [False, False, True, True]  # the engine stops summing gradients from step 3 on
    assert want_variances[1] == want_variances[3]  # the reference itself froze v: the test can tell
    assert calls == [("a", 2), ("b", 2)] * 2  # the momentum averaged per segment, after the warm-up only
    # The frozen variance changes what the update is: the same steps with v still learning end elsewhere.
    unfrozen = torch.nn.Parameter(torch.tensor([1.0, -2.0, 0.5, 3.0]))
    _steps(_onebit(unfrozen, freeze_step=len(GRADS)), unfrozen, GRADS)
    assert not torch.allclose(unfrozen, param)


def test_a_resumed_run_stays_frozen():
    """`frozen` reads the step count, which a checkpoint restores: a resumed run does not warm up again."""
    param = torch.nn.Parameter(torch.zeros(4))
    first = _onebit(param, freeze_step=2)
    _steps(first, param, GRADS[:3])
    resumed = _onebit(param, freeze_step=2)
    resumed.load_state_dict(first.state_dict())
    assert resumed.frozen and int(resumed.state[param]["step"]) == 3


def _engine(stage: int, optimizer: str = "AdamW", warmup: int = 40) -> dict:
    return {
        "optimizer": {"type": optimizer, "params": {"lr": 1e-3}},
        "zero_optimization": {"stage": stage},
        "hardware_selector": {"compression": "onebit", "compression_warmup_steps": warmup},
    }


@pytest.mark.parametrize(
    "config, message",
    [
        (
            _engine(1),
            "compression 'onebit' is 1-bit Adam, which needs each rank's whole momentum: use "
            "zero_optimization.stage 0 (ZeRO-1 shards it), or int8",
        ),
        (_engine(3), "use zero_optimization.stage 0 (ZeRO-3 shards it)"),
        (_engine(0, "SGD"), "it needs optimizer type Adam or AdamW, not SGD"),
        (_engine(0, warmup=0), "freezes Adam's variance after compression_warmup_steps; set it to 1 or more"),
    ],
)
def test_engine_json_refuses_onebit_where_1bit_adam_cannot_run(config, message):
    with pytest.raises(UserInputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_engine_config(config)
    assert load_engine_config(_engine(0)).gradient_compression == "onebit"

"""A model with no transformer in it, and its data: what a hand-written DeepSpeed script trains.

Shared by tests/test_engine_any_module.py (the single-process reference) and
tests/engine_jobs/any_module.py (the engine on two ranks).
"""

from __future__ import annotations

from types import SimpleNamespace

import torch
from torch import nn

SAMPLES, FEATURES, STEPS, WORLD = 64, 6, 5, 2


class Regressor(nn.Module):
    """forward(x, y) returns an output object with .loss and .prediction, as HF models return theirs."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(FEATURES, 16), nn.Tanh(), nn.Linear(16, 1))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> SimpleNamespace:
        prediction = self.net(x).squeeze(-1)
        return SimpleNamespace(loss=nn.functional.mse_loss(prediction, y), prediction=prediction)


def dataset() -> torch.utils.data.TensorDataset:
    generator = torch.Generator().manual_seed(7)
    x = torch.randn(SAMPLES, FEATURES, generator=generator)
    y = x @ torch.linspace(-1, 1, FEATURES) + 0.1 * torch.randn(SAMPLES, generator=generator)
    return torch.utils.data.TensorDataset(x, y)


def hyperparameters() -> tuple[float, float, int]:
    """(lr, weight decay, micro-batch per rank)."""
    return 0.05, 0.01, 4


def global_order() -> list[int]:
    """The order DistributedSampler(shuffle=True, seed=0) deals the samples in at epoch 0 (its documented
    rule: a permutation seeded with seed + epoch, dealt round-robin to the ranks)."""
    return torch.randperm(SAMPLES, generator=torch.Generator().manual_seed(0)).tolist()

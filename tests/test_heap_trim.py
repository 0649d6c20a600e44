"""Every ZeRO stage hands the C heap's free pages back once per backward, before its last unit's gradients.

backends/zero/heap_trim.py: the trim (malloc_trim) is replaced by a recorder,
and each parameter's arrival is logged by a hook registered after the engine's,
so the log shows exactly where in backward the trim happened. World of one: no
process group needed. The trim changes no value; the stages' numerics are held
by tests/test_engine_zero.py and tests/test_gradient_arena.py.
"""

from __future__ import annotations

import pytest

from tests.zero_steps import zero_train_step

torch = pytest.importorskip("torch")

WIDTHS = (24, 20, 16, 12)
TRIM = "<trim>"


class Blocks(torch.nn.Module):
    """An embedding-like first layer, repeated blocks (a ModuleList: ZeRO-3's units) and a head."""

    def __init__(self):
        super().__init__()
        self.first = torch.nn.Linear(WIDTHS[0], WIDTHS[1])
        self.blocks = torch.nn.ModuleList(torch.nn.Linear(WIDTHS[1], WIDTHS[1]) for _ in range(3))
        self.head = torch.nn.Linear(WIDTHS[1], WIDTHS[3])

    def forward(self, x):
        x = self.first(x)
        for block in self.blocks:
            x = torch.tanh(block(x))
        return self.head(x)


def _optimizer(stage: int, log: list[str], monkeypatch):
    from backends.parts.mixed_precision import LossScaler, compute_dtype
    from backends.zero import heap_trim, zero_optimizer_class
    from backends.zero.comm import DataParallelComm
    from planner.contract.engine_config import EngineConfig

    def recorder(pad: int) -> int:
        assert pad == 0  # trim every free page, not just the heap's top
        log.append(TRIM)
        return 1

    monkeypatch.setattr(heap_trim, "MALLOC_TRIM", recorder)
    torch.manual_seed(0)
    model = Blocks()
    config = EngineConfig.model_validate(
        {
            "zero_optimization": {"stage": stage, "reduce_bucket_size": WIDTHS[1] * WIDTHS[1] + WIDTHS[1]},
            "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
        }
    )
    zero = zero_optimizer_class(stage)(model, config, DataParallelComm(), compute_dtype(config), LossScaler(config))
    names = {id(param): name for name, param in model.named_parameters()}
    for param in model.parameters():  # after the engine's hooks: an arrival is logged after the engine saw it
        param.register_post_accumulate_grad_hook(lambda p: log.append(names[id(p)]))
    return model, zero


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_the_heap_is_trimmed_once_per_backward_before_the_last_unit(stage, monkeypatch):
    log: list[str] = []
    model, zero = _optimizer(stage, log, monkeypatch)
    assert zero.heap_trim.enabled and len(zero.units) > 1
    # The unit that completes last holds the first layer (ZeRO-0/1/2: the first bucket; ZeRO-3: the root).
    last = next(unit for unit in zero.units if "first.weight" in unit.names)
    for boundary in (False, True, True):
        log.clear()
        zero_train_step(model, zero, torch.randn(3, WIDTHS[0]), boundary)
        assert log.count(TRIM) == 1, log
        at = log.index(TRIM)
        before, after = log[:at], log[at + 1 :]
        # The trim came as another unit's last gradient arrived (logged right after it), and only the last
        # unit's gradients were still to come.
        assert after[0] not in last.names
        assert after[1:] and set(after[1:]) <= set(last.names), log
        others = {name for unit in zero.units if unit is not last for name in unit.names}
        assert others <= set(before) | {after[0]}  # ZeRO-3's root also holds the head, whose gradients came early
    assert zero.heap_trim.trims == 3


def test_nothing_is_trimmed_with_one_unit_or_off_cpu(monkeypatch):
    from backends.zero.heap_trim import LateBackwardTrim

    log: list[str] = []
    model, zero = _optimizer(1, log, monkeypatch)
    assert not LateBackwardTrim(zero.units[:1], torch.device("cpu")).enabled
    assert not LateBackwardTrim(zero.units, torch.device("meta")).enabled

"""ZeRO-3's gathers (backends/zero/stage3.py): how many per step, and what they gather from.

World of one (no process group): a gather is then the rank's shard written into the unit's buffer, the
same code path as on gloo up to the broadcasts. Counts calls and compares values; times nothing.
"""

from __future__ import annotations

import pytest

from tests.allocations import zero_train_step

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

LAYERS = 3


def _zero3(precision: dict):
    from transformers import GPT2Config, GPT2LMHeadModel

    from backends.parts.mixed_precision import LossScaler, compute_dtype
    from backends.zero import zero_optimizer_class
    from backends.zero.comm import DataParallelComm
    from planner.contract.engine_config import EngineConfig

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=LAYERS, n_embd=32, n_head=4, vocab_size=128, n_positions=32))
    config = EngineConfig.model_validate(
        {"zero_optimization": {"stage": 3}, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}, **precision}
    )
    zero = zero_optimizer_class(3)(model, config, DataParallelComm(), compute_dtype(config), LossScaler(config))
    return model, zero


def _step(model, zero) -> None:
    tokens = torch.randint(0, 128, (2, 16), generator=torch.Generator().manual_seed(0))
    zero_train_step(zero, lambda: model(tokens, labels=tokens).loss)


def test_a_step_gathers_the_root_once_and_every_block_twice_but_the_last(monkeypatch):
    """The last block's forward is followed by its backward: it stays gathered across the turn."""
    from backends.zero.flat_unit import FlatUnit

    model, zero = _zero3({})
    assert len(zero.blocks) == LAYERS and len(zero.root) == 1
    gathered: list[int] = []
    allocate = FlatUnit.allocate_full
    monkeypatch.setattr(FlatUnit, "allocate_full", lambda unit: (gathered.append(unit.index), allocate(unit))[1])
    for _ in range(2):
        gathered.clear()
        _step(model, zero)
        last = zero.blocks[-1].index
        assert gathered.count(last) == 1
        assert sorted(gathered) == sorted(
            [zero.root[0].index, *[unit.index for unit in zero.blocks], *[unit.index for unit in zero.blocks[:-1]]]
        )
        assert not any(unit.is_materialized() for unit in zero.units)  # all freed after the step


def test_without_gradients_the_last_block_is_freed_after_its_forward():
    """Evaluation (no autograd) frees every block after its forward, the last one too."""
    model, zero = _zero3({})
    zero.begin_forward()
    with torch.no_grad():
        model(torch.zeros(1, 8, dtype=torch.long))
    assert not any(unit.is_materialized() for unit in zero.blocks)
    zero.release_parameters()


def test_fp32_gathers_from_the_master_shard_and_keeps_no_copy_of_it():
    model, zero = _zero3({})
    assert all(unit.local is unit.master for unit in zero.units)
    _step(model, zero)
    zero.gathered_parameters()
    for unit in zero.units:  # the gathered values are the stepped master's
        assert torch.equal(unit.full[: unit.shard], unit.master)
    zero.release_parameters()
    states = zero.optimizer.state[zero.master].values()
    master_and_states = zero.master.numel() * 4 + sum(value.numel() * value.element_size() for value in states)
    assert zero.tracked_bytes() == master_and_states  # the gradient shard is released; no shard copy counted


def test_bf16_keeps_a_bf16_shard_beside_the_fp32_master():
    model, zero = _zero3({"bf16": {"enabled": True}})
    assert all(unit.local is not unit.master and unit.local.dtype == torch.bfloat16 for unit in zero.units)
    _step(model, zero)
    for unit in zero.units:
        assert torch.equal(unit.local, unit.master.to(torch.bfloat16))

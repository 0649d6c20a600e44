"""The chunked in-place Adam step (backends/parts/chunked_adamw.py) against torch's single-tensor Adam / AdamW.

Every comparison is torch.equal, element for element, over several steps, on sizes no chunk divides (so the
last chunk is short and chunks start at odd offsets), with weight decay. Memory is checked by counting
allocations with torch's profiler, not by timing: after the first step (states and scratch created), a step
allocates nothing of the parameter's size, where torch's own step does (checked too, so the check can fail).
"""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

from backends.parts.chunked_adamw import ChunkedAdam  # noqa: E402
from tests.allocations import allocated_sizes  # noqa: E402

HYPER = {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8}


def _pair(size: int, chunk: int, *, decoupled: bool, decay: float, amsgrad: bool = False, maximize: bool = False):
    """torch's optimizer and ours, each over its own copy of the same parameter."""
    start = torch.randn(size, generator=torch.Generator().manual_seed(size))
    ref, ours = torch.nn.Parameter(start.clone()), torch.nn.Parameter(start.clone())
    options = dict(HYPER, weight_decay=decay, amsgrad=amsgrad, maximize=maximize)
    torch_class = torch.optim.AdamW if decoupled else torch.optim.Adam
    reference = torch_class([ref], foreach=False, **options)
    chunked = ChunkedAdam([ours], decoupled_weight_decay=decoupled, chunk=chunk, **options)
    return (ref, reference), (ours, chunked)


def _gradients(size: int, steps: int) -> list:
    generator = torch.Generator().manual_seed(size + 1)
    # magnitudes over six decades, so rounding differences in any of the passes would show
    return [
        torch.randn(size, generator=generator) * 10.0 ** torch.randint(-4, 2, (size,), generator=generator)
        for _ in range(steps)
    ]


def _assert_same(reference_pair, chunked_pair) -> None:
    (ref, reference), (ours, chunked) = reference_pair, chunked_pair
    assert torch.equal(ref, ours)
    assert set(reference.state[ref]) == set(chunked.state[ours])
    for key, value in reference.state[ref].items():
        assert value.dtype == chunked.state[ours][key].dtype and value.device == chunked.state[ours][key].device
        assert torch.equal(value, chunked.state[ours][key]), key


@pytest.mark.parametrize("size, chunk", [(10_007, 1_000), (10_007, 4_096), (1_000, 7), (333, 1_024), (65_537, 1 << 20)])
@pytest.mark.parametrize(
    "decoupled, decay, amsgrad, maximize",
    [(True, 0.1, False, False), (False, 0.1, False, False), (True, 0.0, False, False), (False, 0.05, True, True)],
)
def test_every_element_is_torchs_to_the_last_bit(size, chunk, decoupled, decay, amsgrad, maximize):
    reference_pair, chunked_pair = _pair(
        size, chunk, decoupled=decoupled, decay=decay, amsgrad=amsgrad, maximize=maximize
    )
    for gradient in _gradients(size, steps=4):
        for param, optimizer in (reference_pair, chunked_pair):
            param.grad = gradient.clone()
            optimizer.step()
        _assert_same(reference_pair, chunked_pair)


@pytest.mark.parametrize("writer", ["torch", "chunked"])
def test_a_checkpoint_of_either_resumes_in_the_other(writer):
    """Two steps in one optimizer, its state_dict loaded into a fresh one of the other kind beside it: the two
    then run identically (same keys, same step count, same moments)."""
    size, gradients = 5_003, _gradients(5_003, steps=4)
    reference_pair, chunked_pair = _pair(size, 1_000, decoupled=True, decay=0.1)
    first, resumed = (reference_pair, chunked_pair) if writer == "torch" else (chunked_pair, reference_pair)
    for gradient in gradients[:2]:
        first[0].grad = gradient.clone()
        first[1].step()
    saved = copy.deepcopy(first[1].state_dict())  # as written to disk: state_dict() shares the live moments
    assert set(saved["state"][0]) == {"step", "exp_avg", "exp_avg_sq"}
    resumed[0].data.copy_(first[0].data)
    resumed[1].load_state_dict(saved)
    for gradient in gradients[2:]:
        for param, optimizer in (reference_pair, chunked_pair):
            param.grad = gradient.clone()
            optimizer.step()
        _assert_same(reference_pair, chunked_pair)


def _allocations(step, repeats: int = 2) -> list[int]:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as profiler:
        for _ in range(repeats):
            step()
    return allocated_sizes(profiler)


@pytest.mark.parametrize("decoupled, maximize", [(True, False), (False, False), (False, True)])
def test_no_parameter_sized_temporary_after_the_first_step(decoupled, maximize):
    size, chunk = 200_003, 16_384
    reference_pair, chunked_pair = _pair(size, chunk, decoupled=decoupled, decay=0.1, maximize=maximize)
    gradient = _gradients(size, steps=1)[0]
    for param, optimizer in (reference_pair, chunked_pair):
        param.grad = gradient.clone()
        optimizer.step()  # states (and our scratch) are created here
    reference_sizes = _allocations(reference_pair[1].step)
    assert any(bytes_ >= size * 4 for bytes_ in reference_sizes), "the check would not see torch's temporaries"
    chunked_sizes = _allocations(chunked_pair[1].step)
    assert all(bytes_ <= chunk * 4 for bytes_ in chunked_sizes), sorted(chunked_sizes)[-3:]
    _assert_same(reference_pair, chunked_pair)


def test_options_it_cannot_run_are_refused():
    param = torch.nn.Parameter(torch.zeros(8))
    param.grad = torch.ones(8)
    optimizer = ChunkedAdam([param], decoupled_weight_decay=True, weight_decay=0.0, **HYPER)
    optimizer.param_groups[0]["capturable"] = True  # as a loaded state_dict of a capturable run would set it
    with pytest.raises(ValueError, match="does not support capturable=True"):
        optimizer.step()
    with pytest.raises(ValueError, match="at least one element"):
        ChunkedAdam([param], decoupled_weight_decay=True, weight_decay=0.0, chunk=0, **HYPER)


def test_the_zero_optimizer_steps_its_shard_with_it_as_torchs_adamw_would():
    """The engine's flat master (ZeRO-1, one rank) under the chunked step and under torch's AdamW."""
    from backends.parts.mixed_precision import LossScaler, compute_dtype
    from backends.zero import zero_optimizer_class
    from backends.zero.comm import DataParallelComm
    from planner.contract.engine_config import EngineConfig

    config = EngineConfig.model_validate(
        {"zero_optimization": {"stage": 1}, "optimizer": {"type": "AdamW", "params": {"lr": 1e-2, "weight_decay": 0.1}}}
    )
    base = zero_optimizer_class(1)
    with_torch = type(
        "TorchAdamW",
        (base,),
        {"optimizer_factory": lambda self, flat: torch.optim.AdamW(flat, lr=1e-2, weight_decay=0.1, foreach=False)},
    )
    runs = []
    for cls in (base, with_torch):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(37, 29), torch.nn.Tanh(), torch.nn.Linear(29, 3))
        zero = cls(model, config, DataParallelComm(), compute_dtype(config), LossScaler(config))
        for step in range(3):
            zero.begin_forward()
            loss = model(torch.randn(5, 37, generator=torch.Generator().manual_seed(step))).pow(2).mean()
            zero.begin_backward(True)
            loss.backward()
            zero.end_backward(True)
            zero.step()
            zero.zero_grad()
        runs.append(zero)
    ours, theirs = runs
    assert type(ours.optimizer).__name__ == "ChunkedAdam" and type(theirs.optimizer) is torch.optim.AdamW
    assert set(ours.flat_states()) == set(theirs.flat_states()) == {"master", "exp_avg", "exp_avg_sq"}
    for name, value in ours.flat_states().items():
        assert torch.equal(value, theirs.flat_states()[name]), name


def test_only_a_cpu_shard_is_stepped_in_chunks():
    """On a GPU torch's own AdamW steps the shard (its foreach or fused kernels: a few launches, no Python loop
    over chunks); the chunked step is the CPU's. A meta tensor stands in for a device shard here."""
    from backends.parts.chunked_adamw import ChunkedAdam
    from backends.parts.optimizers import build_flat_shard_optimizer
    from planner.contract.engine_config import OptimizerBlock

    block = OptimizerBlock()
    cpu = build_flat_shard_optimizer(torch.nn.Parameter(torch.zeros(8)), block)
    device = build_flat_shard_optimizer(torch.nn.Parameter(torch.zeros(8, device="meta")), block)
    assert isinstance(cpu, ChunkedAdam)
    assert type(device) is torch.optim.AdamW

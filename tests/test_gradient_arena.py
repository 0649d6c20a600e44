"""ZeRO-0/1/2 gradient buckets are views of one buffer, never allocated per step (backends/zero/grad_arena.py).

Counts allocations, not time: torch's profiler reports every CPU allocation
(a storage resize from Python as a "[memory]" event, one inside an op as that
op's self memory). Each bucket here has a size nothing else in the step has
(weight + bias of one layer; the layers differ in width), so an allocation of
exactly a bucket's bytes after the first step means buckets are allocated per
step, which is what used to leave ~350 MiB of freed 2.4 MB blocks in glibc's
heap on GPT-2-small. World of one: no process group needed.
"""

from __future__ import annotations

import pytest

from tests.allocations import allocated_sizes, zero_train_step

torch = pytest.importorskip("torch")

WIDTHS = (64, 48, 40, 32)  # layers of 3,120, 1,960 and 1,312 elements: no two fit one bucket


def _optimizer(stage: int):
    from backends.parts.mixed_precision import LossScaler, compute_dtype
    from backends.zero import zero_optimizer_class
    from backends.zero.comm import DataParallelComm
    from planner.contract.engine_config import EngineConfig

    torch.manual_seed(0)
    layers = [torch.nn.Linear(a, b) for a, b in zip(WIDTHS, WIDTHS[1:])]
    model = torch.nn.Sequential(*layers)
    largest = max(layer.weight.numel() + layer.bias.numel() for layer in layers)
    config = EngineConfig.model_validate(
        {
            "zero_optimization": {"stage": stage, "reduce_bucket_size": largest},
            "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
        }
    )
    cls = zero_optimizer_class(stage)
    return model, cls(model, config, DataParallelComm(), compute_dtype(config), LossScaler(config))


def _train_step(model, zero, boundary: bool = True) -> None:
    zero_train_step(zero, lambda: model(torch.randn(3, WIDTHS[0])).pow(2).mean(), boundary)


@pytest.mark.parametrize("stage", [0, 1, 2])
def test_no_bucket_is_allocated_after_the_first_step(stage):
    from torch.profiler import ProfilerActivity, profile

    model, zero = _optimizer(stage)
    bucket_bytes = {unit.padded * 4 for unit in zero.units}
    assert len(zero.units) == len(WIDTHS) - 1 and len(bucket_bytes) == len(zero.units)  # one bucket per layer
    _train_step(model, zero)  # the first step may allocate the buffer
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as profiler:
        for _ in range(3):
            _train_step(model, zero, boundary=False)  # accumulation micro-step, then the boundary
            _train_step(model, zero)
    sizes = allocated_sizes(profiler)
    assert sizes, "the profiler saw no allocation at all: the check would pass vacuously"
    assert not bucket_bytes & set(sizes), f"bucket-sized allocations during steps: {sorted(bucket_bytes & set(sizes))}"


@pytest.mark.parametrize("stage", [0, 1, 2])
def test_every_bucket_and_gradient_lives_in_one_buffer(stage):
    model, zero = _optimizer(stage)
    for _ in range(2):
        _train_step(model, zero)
    _train_step(model, zero, boundary=False)  # mid-window: the gradients are held locally
    storages = {unit.grad_full.untyped_storage().data_ptr() for unit in zero.units}
    assert len(storages) == 1 and 0 not in storages
    base = storages.pop()
    end = base + sum(unit.padded for unit in zero.units) * 4
    for param in model.parameters():
        assert param.grad is not None and base <= param.grad.data_ptr() < end


def test_stages_1_and_2_give_the_memory_back_after_each_step():
    """Released after the reduction (not beside the optimizer step). On Linux CPU the arena is wiped in place
    (madvise): one allocation, the same address every step, all zeros after the step."""
    from backends.zero.grad_arena import LIBC

    for stage in (1, 2):
        model, zero = _optimizer(stage)
        addresses = set()
        for _ in range(3):
            _train_step(model, zero, boundary=False)
            addresses.add(zero.units[0].grad_full.data_ptr())
            _train_step(model, zero)
            assert all(param.grad is None for param in model.parameters())
            if LIBC is None:
                assert zero.units[0].grad_full.untyped_storage().nbytes() == 0
            else:
                assert zero.arena.flat.abs().sum() == 0
        if LIBC is not None:
            assert zero.arena.allocations == 1 and len(addresses) == 1
        else:
            assert zero.arena.allocations == 3


def test_accumulating_in_place_matches_plain_gradients():
    """With the wiped arena, autograd adds straight into the views: a window of two micro-steps must hold the
    sum of both micro-steps' gradients, as plain autograd gives."""
    model, zero = _optimizer(1)
    _train_step(model, zero)
    reference = [param.detach().clone() for param in model.parameters()]
    batches = [torch.randn(3, WIDTHS[0]) for _ in range(2)]
    plain = [torch.zeros_like(param) for param in reference]
    for batch in batches:
        copy = torch.nn.Sequential(*[torch.nn.Linear(a, b) for a, b in zip(WIDTHS, WIDTHS[1:])])
        with torch.no_grad():
            for target, source in zip(copy.parameters(), reference):
                target.copy_(source)
        copy(batch).pow(2).mean().backward()
        for total, param in zip(plain, copy.parameters()):
            total += param.grad
    zero.begin_backward(False)
    for batch in batches:
        model(batch).pow(2).mean().backward()
    base = zero.arena.flat.data_ptr()
    for total, param in zip(plain, model.parameters()):
        assert base <= param.grad.data_ptr() < base + zero.arena.nbytes  # accumulated in the arena
        assert torch.allclose(param.grad, total, atol=1e-6)


@pytest.mark.skipif(not __import__("sys").platform.startswith("linux"), reason="madvise(MADV_DONTNEED) is Linux's")
def test_a_reduced_bucket_hands_its_whole_pages_back():
    """ZeRO-2 discards each bucket once reduced: the pages wholly inside it read as zeros (handed back), and the
    neighbours' bytes are untouched."""
    from backends.zero.grad_arena import PAGE

    model, zero = _optimizer(2)
    _train_step(model, zero, boundary=False)  # the arena holds every gradient
    zero.arena.flat.fill_(1.0)
    reduced = zero.units[0]  # 12,480 bytes: at least two whole pages whatever the alignment
    zero.arena.discard(reduced)
    begin = reduced.grad_full.data_ptr()
    first = (-(-begin // PAGE) * PAGE - begin) // 4  # first element on a whole page of the view
    assert reduced.grad_full[first : first + PAGE // 4].abs().sum() == 0
    assert all(param.grad is None for param in reduced.params)
    assert bool((zero.units[1].grad_full == 1).all()) and bool((zero.units[2].grad_full == 1).all())


@pytest.mark.skipif(not __import__("sys").platform.startswith("linux"), reason="madvise(MADV_DONTNEED) is Linux's")
def test_a_summed_bucket_hands_back_the_pages_outside_the_ranks_slice():
    """On gloo a reduce-scatter is an all-reduce and a slice: once the sum is in, the pages of the bucket outside
    this rank's slice go back before the slice is copied into the gradient shard (2 ranks, rank 0, by hand)."""
    from backends.zero.flat_unit import FlatUnit
    from backends.zero.grad_arena import PAGE, GradientArena

    params = [torch.nn.Parameter(torch.zeros(PAGE)) for _ in range(3)]  # 3 pages of floats: whole pages either side
    unit = FlatUnit(0, ["a", "b", "c"], params, world=2, rank=0)
    arena = GradientArena([unit], torch.float32, torch.device("cpu"))
    arena.acquire()
    if not arena.wipes_in_place:
        pytest.skip("no madvise here")
    unit.grad_full.fill_(1.0)
    arena.discard_unowned(unit)
    start, end = unit.owned_range
    assert start == 0 and bool((unit.grad_full[start:end] == 1).all())  # the rank's slice: untouched
    begin = unit.grad_full[end:].data_ptr()
    first = end + (-(-begin // PAGE) * PAGE - begin) // 4  # first element on a whole page past the slice
    assert unit.grad_full[first : first + PAGE // 4].abs().sum() == 0

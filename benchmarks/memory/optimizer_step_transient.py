"""The transient bytes of one torch optimizer step on CPU tensors, measured: what the step allocates beyond the
parameters, gradients and states already held, at its peak.

On CPU, torch.optim.AdamW takes its single-tensor path (foreach defaults on only for CUDA-like devices:
torch/optim/optimizer.py, _default_to_fused_or_foreach), which steps one parameter at a time and makes that
parameter's temporaries: `denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)` (torch/optim/adam.py,
_single_tensor_adam, line 544 in torch 2.13) holds the square root and the quotient at once. The counter here is
a TorchDispatchMode that adds every op's newly allocated output storage and subtracts it when the tensor is
freed, so the step's peak of live new bytes is read exactly, whatever the CPU allocator keeps.

    python -m benchmarks.memory.optimizer_step_transient
    python -m benchmarks.memory.optimizer_step_transient --deepspeed   # ZeRO-1/2/3 on one CPU rank
    python -m benchmarks.memory.optimizer_step_transient --smoke       # a small embedding: seconds
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

# GPT-2's token embedding (wte): the largest parameter of GPT-2 124M.
VOCAB, HIDDEN = 50257, 768


class LiveBytes(TorchDispatchMode):
    """Bytes of the storages the ops under it allocate, live now and at their peak."""

    def __init__(self) -> None:
        super().__init__()
        self.live = 0
        self.peak = 0

    def _freed(self, nbytes: int) -> None:
        self.live -= nbytes

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        inputs = {
            t.untyped_storage().data_ptr() for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)
        }
        seen: set[int] = set()
        for tensor in tree_flatten(out)[0]:
            if not isinstance(tensor, torch.Tensor):
                continue
            storage = tensor.untyped_storage()
            pointer = storage.data_ptr()
            if pointer in inputs or pointer in seen:
                continue  # in place, out=, or a view: nothing new
            seen.add(pointer)
            self.live += storage.nbytes()
            self.peak = max(self.peak, self.live)
            weakref.finalize(tensor, self._freed, storage.nbytes())
        return out


def model_with_one_large_parameter(vocab: int = VOCAB, hidden: int = HIDDEN) -> torch.nn.Module:
    """An fp32 embedding of vocab x hidden (the largest parameter) and a few small layers after it."""
    return torch.nn.Sequential(
        torch.nn.Embedding(vocab, hidden),
        torch.nn.LayerNorm(hidden),
        torch.nn.Linear(hidden, hidden),
        torch.nn.Linear(hidden, 8),
    )


def step_transient_bytes(optimizer: torch.optim.Optimizer, backward: Callable[[], None]) -> int:
    """Peak bytes one optimizer step allocates beyond what it starts with. The first step creates the states
    (they are the optimizer's states, counted apart): one step is taken first, and the second one measured.
    `backward` leaves the gradients."""
    backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=False)
    backward()
    counter = LiveBytes()
    with counter:
        optimizer.step()
    return counter.peak


def _tokens(vocab: int) -> torch.Tensor:
    return torch.randint(0, vocab, (2, 16), generator=torch.Generator().manual_seed(0))


def embedding_model_backward(model: torch.nn.Module) -> Callable[[], None]:
    tokens = _tokens(model[0].num_embeddings)
    return lambda: model(tokens).float().pow(2).mean().backward()


def causal_lm_backward(model: Any, vocab: int) -> Callable[[], None]:
    """A language-modelling loss's backward through a transformers causal LM."""
    tokens = _tokens(vocab)
    return lambda: model(input_ids=tokens, labels=tokens).loss.backward()


def largest_parameter_bytes(model: torch.nn.Module) -> int:
    return max(p.numel() * p.element_size() for p in model.parameters())


def adamw_step_multiple(vocab: int = VOCAB, hidden: int = HIDDEN, **options: Any) -> float:
    """torch.optim.AdamW's step transient on CPU as a multiple of the largest parameter's bytes."""
    torch.manual_seed(0)
    model = model_with_one_large_parameter(vocab, hidden)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, **options)
    return step_transient_bytes(optimizer, embedding_model_backward(model)) / largest_parameter_bytes(model)


def deepspeed_step_multiple(stage: int, vocab: int = 20000, hidden: int = 256) -> float:
    """DeepSpeed ZeRO-`stage`'s engine.step() on one CPU rank (gloo) with torch's AdamW as its client optimizer,
    as backends/adapters/deepspeed_adapter.py runs it on the CPU, at fp32: the step's transient as a multiple of
    the flat fp32 partition it hands AdamW (one rank: the whole model). It includes that partition's fp32
    gradient, which DeepSpeed concatenates at the step (and the planner counts as a gradient)."""
    import os

    import deepspeed

    from backends.cpu_distributed import skip_deepspeed_shm_build

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29517", RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    skip_deepspeed_shm_build()
    deepspeed.init_distributed(dist_backend="gloo")
    torch.manual_seed(0)
    model = model_with_one_large_parameter(vocab, hidden)
    elements = sum(p.numel() for p in model.parameters())  # before ZeRO-3 partitions them away
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    config = {
        "train_micro_batch_size_per_gpu": 2,
        "gradient_accumulation_steps": 1,
        "zero_optimization": {"stage": stage},
        "zero_force_ds_cpu_optimizer": False,
    }
    engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    tokens = _tokens(vocab)
    for _ in range(2):  # the first step makes the states
        engine.backward(engine(tokens).float().pow(2).mean())
        engine.step()
    engine.backward(engine(tokens).float().pow(2).mean())
    counter = LiveBytes()
    with counter:
        engine.step()
    return counter.peak / (elements * 4)


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.memory.optimizer_step_transient", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--deepspeed", action="store_true", help="DeepSpeed ZeRO-1/2/3 on one CPU rank instead")
    parser.add_argument("--smoke", action="store_true", help="a 2000 x 64 embedding instead of GPT-2's; seconds")
    args = parser.parse_args(argv)
    vocab, hidden = (2000, 64) if args.smoke else (VOCAB, HIDDEN)
    if args.deepspeed:
        for stage in (1, 2, 3):
            multiple = deepspeed_step_multiple(stage, *((vocab, hidden) if args.smoke else ()))
            print(f"DeepSpeed ZeRO-{stage}: step transient = {multiple:.4f} x the fp32 partition")
        return 0
    model = model_with_one_large_parameter(vocab, hidden)
    print(f"largest parameter: {largest_parameter_bytes(model) / 2**20:.1f} MiB ({vocab}x{hidden} fp32)")
    for label, options in (("default (single-tensor on CPU)", {}), ("foreach=True", {"foreach": True})):
        multiple = adamw_step_multiple(vocab, hidden, **options)
        print(f"AdamW {label}: step transient = {multiple:.4f} x the largest parameter")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""How a traced step (benchmarks/memory/memory_trace.py) is split over ranks: the fake process group, FSDP2 over it,
and context parallelism as our engine runs it (backends/context_parallel).

A context-parallel trace shards the model with FSDP2 over every rank (the engine's ZeRO also runs over dp x cp)
and swaps in the engine's attention: rank 0 keeps its zig-zag share of each sequence (chunks 0 and 2cp-1), at
their true positions, and attends over the keys and values all-gathered from the cp group (on the fake process
group the gather returns uninitialised tensors of the right size, which is all a memory trace needs). Each
chunk's attention runs as CUDA runs it, flash attention keeping no mask (cuda_flash_chunk_attention).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def fake_process_group(world_size: int, cp: int = 1) -> tuple[Any, Any]:
    """Start (or reuse) the fake process group; (a 1-D CPU mesh over every rank, the cp group or None). Both must
    be created outside FakeTensorMode."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized() and dist.get_world_size() != world_size:
        dist.destroy_process_group()
    if not dist.is_initialized():
        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world_size)
    mesh = init_device_mesh("cpu", (world_size,))
    if cp == 1:
        return mesh, None
    if world_size % cp:
        raise ValueError(f"context_parallel {cp} does not divide world_size {world_size}")
    split = init_device_mesh("cpu", (world_size // cp, cp), mesh_dim_names=("dp", "cp"))
    return mesh, split.get_group("cp")


def fsdp_wrap(model: Any, mesh: Any, precision: str) -> None:
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from transformers.modeling_layers import GradientCheckpointingLayer

    mp_policy = MixedPrecisionPolicy()  # fp32 and pure bf16: all-gather in the param dtype
    if precision in ("bf16-mixed", "fp16-mixed"):
        low = torch.bfloat16 if precision == "bf16-mixed" else torch.float16
        mp_policy = MixedPrecisionPolicy(param_dtype=low, reduce_dtype=torch.float32)
    layers = [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]
    if not layers:
        raise ValueError(f"{type(model).__name__}: no transformer layers to shard")
    for layer in layers:
        fully_shard(layer, mesh=mesh, mp_policy=mp_policy)
    fully_shard(model, mesh=mesh, mp_policy=mp_policy)


def cuda_flash_chunk_attention(query: Any, keys: Any, values: Any, **options: Any) -> Any:
    """What a chunk's attention keeps on CUDA, traced on the CPU. CUDA's flash kernel takes the lower-right causal
    alignment as a flag and keeps q, k, v, the output and a logsumexp; on the CPU, torch's lower-right bias builds
    a boolean mask for each call, which the kernel would keep. The CPU flash kernel under the (top-left) causal flag
    keeps exactly CUDA's tensors: the trace measures memory, so it stands in (other keys visible, same bytes)."""
    import torch

    return torch.nn.functional.scaled_dot_product_attention(query, keys, values, is_causal=True, **options)


def context_parallel_batch(model: Any, config: Any, trace: Any, group: Any) -> tuple[dict, Any, Callable]:
    """Swap in the engine's context-parallel attention; (forward kwargs, the tracked input, outputs -> loss) for
    rank 0's share of micro_batch sequences of seq_len tokens. Call under FakeTensorMode."""
    import torch

    from backends.context_parallel.attention import NAME, ContextParallelAttention, register
    from backends.context_parallel.sharding import shifted_labels

    cp = trace.context_parallel
    attention = ContextParallelAttention(group, cp, chunk_kernel=cuda_flash_chunk_attention)
    register(attention)
    for module in model.modules():
        if getattr(module, "config", None) is not None:
            module.config._attn_implementation = NAME
    local = attention.set_split(trace.seq_len, 0)
    input_ids = torch.randint(0, config.vocab_size, (trace.micro_batch, trace.seq_len))
    targets = shifted_labels(input_ids)[:, local]
    ids = input_ids[:, local]
    positions = local[None, :].expand(trace.micro_batch, -1)

    def loss_of(outputs: Any) -> Any:  # the engine's: summed over this rank's tokens in fp32, then scaled
        logits = outputs.logits.float()
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

    return {"input_ids": ids, "position_ids": positions}, ids, loss_of

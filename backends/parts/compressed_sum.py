"""Sums over the data-parallel group that carry 1 byte (int8) or 1 bit (onebit) per element: of gradients, or
of 1-bit Adam's momenta (backends/parts/onebit_adam.py).

A sum cannot be taken on compressed values by the wire itself (gloo and NCCL sum what they are sent), so the
sum is taken in two phases, in the manner of DeepSpeed's 1-bit Adam / 1-bit LAMB compressed all-reduce
(docs/parallelism.md, "Gradient compression"):

1. Scatter: each rank cuts its bucket into `world` chunks, compresses each (int8: a scale per block of 128,
   max |g| / 127, and the values rounded to [-127, 127]; onebit: a scale per block, mean |g|, and the signs
   packed 8 to a byte), and sends chunk j to rank j (an all-to-all of the packed bytes, and one of the scales).
   Each rank decompresses the `world` chunks it received with their senders' scales and adds them: its chunk
   of the sum, in fp32. That is a reduce-scatter (ZeRO-1/2's partitioned buckets stop here).
2. Gather (for an all-reduce): each rank compresses its summed chunk once more and all-gathers it.

What compression drops is kept and added to the same bucket's next contribution (error feedback): the
worker's residual of phase 1 on every rank, the server's residual of phase 2 for the chunk it owns. So the
error does not accumulate: over many steps the sum of the decompressed values tracks the sum of the exact
ones (tests/test_compressed_sum.py).

`wire_bytes` counts the bytes this rank sends, from the sizes of the tensors it hands to its collectives and
each collective's share on the wire: (world - 1) / world of an all-to-all's input, world - 1 copies of an
all-gather's piece. An uncompressed fp32 all-reduce of N elements sends 2 (world - 1) / world x 4N bytes in
the same units; int8's sends a quarter of that (plus its scales), onebit's a thirty-second.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

MODES = ("int8", "onebit")
_BIT_WEIGHTS = torch.tensor([128, 64, 32, 16, 8, 4, 2, 1], dtype=torch.uint8)


def pack_signs(values: torch.Tensor) -> torch.Tensor:
    """One bit per value (1: >= 0), 8 to a byte, most significant first; len(values) a multiple of 8."""
    bits = (values >= 0).to(torch.uint8).reshape(-1, 8)
    return (bits * _BIT_WEIGHTS.to(values.device)).sum(dim=1, dtype=torch.uint8)


def unpack_signs(packed: torch.Tensor) -> torch.Tensor:
    """+1.0 / -1.0 per bit of pack_signs' bytes."""
    bits = (packed.reshape(-1, 1) & _BIT_WEIGHTS.to(packed.device)).ne(0)
    return bits.reshape(-1).to(torch.float32) * 2 - 1


class Compressor:
    """Compresses rows of equal length (one per destination) with a scale per block of BLOCK elements, and
    back. A scale per block, not per row: a bucket spans layers whose gradients differ by orders of magnitude,
    and one scale for all would round a small layer's to nothing (int8) or to the large one's size (onebit).
    The scales cost 4 / BLOCK bytes per element."""

    BLOCK = 128  # a multiple of 8, so onebit's signs fill whole bytes

    def __init__(self, mode: str):
        if mode not in MODES:
            raise ValueError(f"compressed sums are {', '.join(MODES)}, not '{mode}'")
        self.mode = mode

    def row_length(self, elements: int) -> int:
        """A row's elements, padded to whole blocks."""
        return -(-elements // self.BLOCK) * self.BLOCK

    def compress(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(payload [rows, bytes], scales [rows, blocks]) of a [rows, length] fp32 tensor."""
        blocks = rows.reshape(rows.shape[0], -1, self.BLOCK)
        if self.mode == "int8":
            scales = (blocks.abs().amax(dim=2) / 127.0).clamp(min=torch.finfo(torch.float32).tiny)
            payload = torch.round(blocks / scales[..., None]).clamp_(-127, 127).to(torch.int8)
            return payload.reshape(rows.shape[0], -1), scales
        scales = blocks.abs().mean(dim=2)
        return pack_signs(rows).reshape(rows.shape[0], -1), scales

    def decompress(self, payload: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
        """The [rows, length] fp32 values that (payload, scales) stand for."""
        if self.mode == "int8":
            values = payload.to(torch.float32).reshape(scales.shape[0], -1, self.BLOCK)
        else:
            values = unpack_signs(payload).reshape(scales.shape[0], -1, self.BLOCK)
        return (values * scales[..., None]).reshape(scales.shape[0], -1)


class CompressedSum:
    """Sums of flat fp32 buckets over `group`, compressed both ways, with error feedback per bucket key."""

    def __init__(self, mode: str, group: Any = None):
        self.compressor = Compressor(mode)
        self.group = group
        self.world = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        self.worker_residuals: dict[Any, torch.Tensor] = {}
        self.server_residuals: dict[Any, torch.Tensor] = {}
        self.wire_bytes = 0

    def _rows(self, flat: torch.Tensor) -> torch.Tensor:
        """`flat` as [world, length], zero-padded at the end."""
        chunk = -(-flat.numel() // self.world)
        length = self.compressor.row_length(chunk)
        padded = torch.zeros(self.world * length, dtype=torch.float32, device=flat.device)
        for owner in range(self.world):
            piece = flat[owner * chunk : (owner + 1) * chunk]
            padded[owner * length : owner * length + piece.numel()] = piece
        return padded.reshape(self.world, length)

    def reduce_scatter(self, key: Any, flat: torch.Tensor) -> torch.Tensor:
        """This rank's chunk (the rank-th of `world`, ceil(numel / world) long) of the sum of `flat`."""
        chunk = -(-flat.numel() // self.world)
        rows = self._rows(flat.float())
        if key in self.worker_residuals:
            rows += self.worker_residuals[key]
        payload, scales = self.compressor.compress(rows)
        self.worker_residuals[key] = rows - self.compressor.decompress(payload, scales)
        received, their_scales = torch.empty_like(payload), torch.empty_like(scales)
        self._all_to_all(received, payload)
        self._all_to_all(their_scales, scales)
        return self.compressor.decompress(received, their_scales).sum(dim=0)[:chunk]

    def all_reduce(self, key: Any, flat: torch.Tensor) -> torch.Tensor:
        """The sum of `flat` over the group, the same on every rank."""
        own = self.reduce_scatter(key, flat)
        length = self.compressor.row_length(own.numel())
        row = torch.zeros(1, length, device=own.device)
        row[0, : own.numel()] = own
        if key in self.server_residuals:
            row += self.server_residuals[key]
        payload, scale = self.compressor.compress(row)
        self.server_residuals[key] = row - self.compressor.decompress(payload, scale)
        payloads = [torch.empty_like(payload) for _ in range(self.world)]
        scales = [torch.empty_like(scale) for _ in range(self.world)]
        self._all_gather(payloads, payload)
        self._all_gather(scales, scale)
        rows = self.compressor.decompress(torch.cat(payloads), torch.cat(scales))
        return rows[:, : own.numel()].reshape(-1)[: flat.numel()]

    def _all_to_all(self, output: torch.Tensor, tensor: torch.Tensor) -> None:
        self.wire_bytes += tensor.numel() * tensor.element_size() * (self.world - 1) // self.world
        dist.all_to_all_single(output.reshape(-1), tensor.reshape(-1), group=self.group)

    def _all_gather(self, outputs: list[torch.Tensor], tensor: torch.Tensor) -> None:
        self.wire_bytes += tensor.numel() * tensor.element_size() * (self.world - 1)
        dist.all_gather(outputs, tensor, group=self.group)

"""What a serving plan's tokens cost: USD per million generated tokens at the GPU's price, with that price's source.

price per GPU-hour x the GPUs the plan uses / 3600 / generated tokens per second of all its replicas x 1e6
(docs/inference.md, "Cost"). The price is the GPU's in the cluster: the dated price catalog's cheapest
on-demand price (planner/cost/prices.py), the user's --price ("user override"), or none, which the answer says.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.hardware.gpus import GpuSpec
from planner.units import counted


@dataclass(frozen=True)
class ServingCost:
    usd_per_million_tokens: float | None
    usd_per_gpu_hour: float | None
    price_source: str  # the catalog's source, "user override", or why there is no price
    price: str  # the price as the output prints it: "$2.69/GPU-hour [source]" or "no price: ..."


def serving_cost(gpu: GpuSpec, gpus: int, tokens_per_s: float) -> ServingCost:
    """The cost of the generated tokens of `gpus` GPUs of `gpu` serving `tokens_per_s` between them."""
    price = gpu.price_usd_per_hour
    per_million = None if price is None or tokens_per_s <= 0 else price * gpus / 3600 / tokens_per_s * 1e6
    return ServingCost(per_million, price, gpu.price_source, gpu.price_note())


def cost_line(cost: ServingCost, gpus: int, tokens_per_s: float) -> str:
    """The reason line that states the cost and every number it is made of, or that there is no price."""
    if cost.usd_per_million_tokens is None:
        return f"cost per token unknown: {cost.price}"
    return (
        f"${cost.usd_per_million_tokens:,.3g} per million generated tokens: {counted(gpus, 'GPU')} x {cost.price} / "
        f"{tokens_per_s:,.0f} tokens/s [formula: price x GPUs / tokens/s]"
    )

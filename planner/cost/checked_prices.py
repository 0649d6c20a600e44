"""The price catalog checked against the GPU catalog: every price names a GPU `hardware-selector gpus` lists.

Apart from planner/cost/prices.py because the GPU catalog itself reads the price catalog (each GPU's price
comes from it, planner/hardware/gpus.py): the check sits above both, so neither imports the other in a
circle (docs/architecture.md, "Floors").
"""

from __future__ import annotations

from pathlib import Path

from planner.cost.prices import PriceCatalog, read_price_catalog
from planner.errors import UserInputError
from planner.hardware.gpus import resolve_gpu


def load_price_catalog(path: Path | None = None) -> PriceCatalog:
    """The price catalog at `path` (default: the project's), checked whole: a missing or negative price, an
    unknown GPU or a malformed file is one UserInputError naming the entry and what to fix."""
    label = "the price catalog" if path is None else f"--price-catalog {path}"
    catalog = read_price_catalog(path)
    for index, entry in enumerate(catalog.prices):
        try:
            resolve_gpu(entry.gpu)
        except UserInputError:
            raise UserInputError(
                f"{label}: prices[{index}] ({entry.cloud}) names GPU '{entry.gpu}', which the GPU catalog does "
                "not have; use a name 'hardware-selector gpus' lists"
            ) from None
    return catalog

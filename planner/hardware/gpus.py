"""The GPU catalog: what each accelerator offers, and looking one up by name.

The data is `planner/catalog/gpus.json`; every figure in it carries its own
source in the entry's `sources` map (planner.hardware.gpu_sources): a vendor or
secondary document with URL and date, the shared published reference's row
(named by `reference_gpu`), or an explicit "unsourced" (recalled) marker.
Reading it needs neither torch nor NVML.

Conventions (also written into the JSON):
- memory_bytes: nominal capacity in GiB, so an "80GB" GPU holds 80 * 2**30 bytes.
- bandwidths: GB/s = 10**9 bytes/s. Links store both per direction and
  bidirectional (NVIDIA's way of quoting NVLink: 600 GB/s = 300 each way).
- dense_tflops: dense peak, no sparsity; None where the GPU lacks the dtype.
- price_usd_per_hour: not in the JSON. Each GPU takes the cheapest on-demand price that the dated price catalog
  (planner/catalog/prices.yaml) cites for it, with that entry's cloud, source and date; a GPU it has no price
  for has none (None): cost figures then need --price (GpuSpec.with_price).
"""

from __future__ import annotations

import datetime as dt
import difflib
import json
import re
from functools import cache, lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from planner.errors import UserInputError
from planner.hardware.gpu_sources import KNOWN_FIGURES, SCALAR_FIGURES, TFLOPS_FIGURES, FigureSource

if TYPE_CHECKING:
    from planner.cost.prices import PriceCatalog

GPU_CATALOG_FILE = Path(__file__).resolve().parent.parent / "catalog" / "gpus.json"

Dtype = Literal["fp32", "tf32", "fp16", "bf16", "fp8"]
DTYPES: tuple[str, ...] = ("fp32", "tf32", "fp16", "bf16", "fp8")

# PCIe x16 bandwidth per direction, GB/s. Gen3-5 as the reference quotes them
# (Gen3 "~16 GB/s per direction", Gen4 "64 GB/s bidir", Gen5 "128 GB/s bidir");
# the others follow the spec's doubling per generation.
PCIE_X16_GBPS_PER_DIRECTION: dict[int, float] = {1: 4.0, 2: 8.0, 3: 16.0, 4: 32.0, 5: 64.0, 6: 128.0}

# Driver-reported names carry vendor words ("NVIDIA GeForce RTX 4090",
# "Tesla T4", "AMD Instinct MI300X") that users usually leave out.
_VENDOR_PREFIXES = ("nvidia", "tesla", "geforce", "amd", "instinct")


class Interconnect(BaseModel):
    """The fastest link a GPU has to its neighbours in the same node."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["nvlink", "pcie", "infinity-fabric", "host-memory"]
    generation: str  # "NVLink 3", "PCIe Gen4 x16", ...
    links: int | None = Field(default=None, ge=1)
    # "node": every GPU of the node is reachable at this rate (NVSwitch, PCIe, IF mesh);
    # "pair": a bridge joins two cards only, the rest of the node goes over PCIe.
    reach: Literal["node", "pair"]
    bandwidth_GBps_per_direction: float = Field(gt=0)
    bandwidth_GBps_bidirectional: float = Field(gt=0)

    @model_validator(mode="after")
    def _bidirectional_is_twice_per_direction(self) -> Interconnect:
        if abs(self.bandwidth_GBps_bidirectional - 2 * self.bandwidth_GBps_per_direction) > 1e-6:
            raise ValueError("bandwidth_GBps_bidirectional must be 2 x bandwidth_GBps_per_direction")
        return self

    def describe(self) -> str:
        """'NVLink 3, 300 GB/s/dir' style summary for tables."""
        pair = " (pairs)" if self.reach == "pair" else ""
        return f"{self.generation}{pair}, {self.bandwidth_GBps_per_direction:g} GB/s/dir"


class DenseTflops(BaseModel):
    """Dense peak TFLOP/s per dtype; None where the hardware has no support."""

    model_config = ConfigDict(frozen=True)

    fp32: float | None = Field(default=None, gt=0)
    tf32: float | None = Field(default=None, gt=0)
    fp16: float | None = Field(default=None, gt=0)
    bf16: float | None = Field(default=None, gt=0)
    fp8: float | None = Field(default=None, gt=0)


class GpuSpec(BaseModel):
    """One accelerator model (or the `cpu` pseudo-device), as the planner sees it."""

    model_config = ConfigDict(frozen=True)

    name: str
    kind: Literal["gpu", "cpu"]
    vendor: Literal["nvidia", "amd", "generic"]
    architecture: str
    compute_capability: str | None = None  # CUDA compute capability; None for AMD and cpu
    form_factor: Literal["SXM", "PCIe", "OAM", "host"]
    segment: Literal["datacenter", "workstation", "consumer", "cpu"]
    memory_bytes: int = Field(gt=0)
    memory_type: str
    memory_bandwidth_GBps: float = Field(gt=0)
    dense_tflops: DenseTflops
    interconnect: Interconnect
    pcie_generation: int | None = None
    tdp_watts: int | None = None
    # USD per GPU-hour: the price catalog's cheapest on-demand price (see the module docstring), the user's
    # --price, or None where neither gives one; price_source says which, price_date when the source read it.
    price_usd_per_hour: float | None = Field(default=None, ge=0)
    price_source: str = ""
    price_date: dt.date | None = None
    # Inter-node preset (see planner.hardware.cluster) that clusters of this GPU usually have.
    typical_inter_node: str
    aliases: list[str] = Field(default_factory=list)
    # Names the driver reports: NVML's nvmlDeviceGetName for NVIDIA, rocm-smi for AMD.
    driver_names: list[str] = Field(default_factory=list)
    # Row label in published_reference.yaml gpu_specs.gpus, None if the GPU is not there.
    reference_gpu: str | None = None
    source: str
    confidence: str
    # Figure path ("memory_bytes", "dense_tflops.bf16", "interconnect", ...) -> where it comes from.
    sources: dict[str, FigureSource] = Field(default_factory=dict)
    # True for nominal values that must be calibrated before being trusted (the cpu entry).
    placeholder: bool = False
    notes: str = ""

    @model_validator(mode="after")
    def _sources_name_known_figures(self) -> GpuSpec:
        unknown = sorted(set(self.sources) - KNOWN_FIGURES)
        if unknown:
            raise ValueError(f"{self.name}: sources for unknown figures {unknown}")
        return self

    def figure_paths(self) -> list[str]:
        """The figures this entry states: memory, bandwidth, each supported dtype's rate, link, power."""
        rates = [path for path in TFLOPS_FIGURES if getattr(self.dense_tflops, path.split(".")[1]) is not None]
        memory, bandwidth, link, power = SCALAR_FIGURES
        return [memory, bandwidth, *rates, link, *([power] if self.tdp_watts is not None else [])]

    def unsourced_fields(self) -> list[str]:
        """Figures marked "unsourced" (recalled) or given no source at all."""
        return [
            path for path in self.figure_paths() if path not in self.sources or self.sources[path].kind == "unsourced"
        ]

    def supports(self, dtype: str) -> bool:
        return getattr(self.dense_tflops, _check_dtype(dtype)) is not None

    def peak_tflops(self, dtype: str) -> float:
        """Dense peak TFLOP/s for fp32, tf32, fp16, bf16 or fp8."""
        dtype = _check_dtype(dtype)
        value = getattr(self.dense_tflops, dtype)
        if value is None:
            raise UserInputError(f"{self.name} has no {dtype} support; use {self._fallback_precision(dtype)}")
        return value

    def _fallback_precision(self, missing: str) -> str:
        # tf32 is just a faster way to do fp32 math, so its fallback is fp32 itself.
        if missing == "tf32":
            return "fp32"
        for dtype, precision in (("bf16", "bf16-mixed"), ("fp16", "fp16-mixed")):
            if dtype != missing and getattr(self.dense_tflops, dtype) is not None:
                return precision
        return "fp32"

    def with_price(self, usd_per_hour: float) -> GpuSpec:
        """A copy with the user's price per GPU-hour instead of the catalog assumption."""
        if usd_per_hour < 0:
            raise UserInputError(f"price per GPU-hour must be >= 0, got {usd_per_hour}")
        return self.model_copy(
            update={"price_usd_per_hour": float(usd_per_hour), "price_source": "user override", "price_date": None}
        )

    def price_note(self, today: dt.date | None = None) -> str:
        """The price per GPU-hour with where it comes from, for the output: '$2.69/GPU-hour [source]', STALE
        where the source is older than the price catalog's limit, or that there is none and --price gives one."""
        from planner.cost.prices import STALE_AFTER_DAYS

        if self.price_usd_per_hour is None:
            return f"no price: {self.price_source}"
        stale = ""
        if self.price_date is not None:
            from planner.cost.prices import catalog_today

            age = ((today or catalog_today()) - self.price_date).days
            stale = f"; STALE: {age} days old (over {STALE_AFTER_DAYS})" if age > STALE_AFTER_DAYS else ""
        return f"${self.price_usd_per_hour:.2f}/GPU-hour [{self.price_source}{stale}]"

    @property
    def memory_is_host(self) -> bool:
        """The device's memory is the host's RAM (the cpu pseudo-device): what it offloads to the CPU stays in it."""
        return self.kind == "cpu"

    @property
    def memory_gib(self) -> float:
        return self.memory_bytes / 2**30


def _check_dtype(dtype: str) -> str:
    key = dtype.lower().strip()
    if key not in DTYPES:
        raise UserInputError(f"unknown dtype '{dtype}'; use one of {', '.join(DTYPES)}")
    return key


def normalize_gpu_name(name: str) -> str:
    """Matching key: case-insensitive, no '-', '_' or spaces, no vendor words, '80GB' == '80G'.

    'NVIDIA A100-SXM4-80GB', 'a100 sxm4 80g' and 'A100_SXM4_80GB' share one key.
    """
    key = "".join(ch for ch in name.lower().strip() if ch not in "-_ ")
    stripped = True
    while stripped:
        stripped = False
        for prefix in _VENDOR_PREFIXES:
            if key.startswith(prefix) and len(key) > len(prefix):
                key = key[len(prefix) :]
                stripped = True
    return re.sub(r"(\d)gb", r"\1g", key)


@lru_cache(maxsize=1)
def _entries() -> tuple[dict, ...]:
    """The catalog's entries as read, not yet validated."""
    with GPU_CATALOG_FILE.open(encoding="utf-8") as handle:
        return tuple(json.load(handle)["gpus"])


@cache
def _spec_at(position: int) -> GpuSpec:
    """The entry at `position` as a priced GpuSpec, built once: one object per entry, whoever asks."""
    from planner.cost.prices import read_price_catalog

    # The price catalog is parsed once for all GPUs (read_price_catalog caches it): PyYAML's pure-Python parser
    # takes ~0.1 s per read, and reading it for each of the ~30 GPUs was most of `hardware-selector plan`'s time.
    return _priced(GpuSpec.model_validate(_entries()[position]), read_price_catalog())


@lru_cache(maxsize=1)
def _catalog() -> tuple[GpuSpec, ...]:
    return tuple(_spec_at(position) for position in range(len(_entries())))


NO_PRICE = "planner/catalog/prices.yaml cites no price for this GPU; pass --price USD_PER_GPU_HOUR"
# A multi-node plan's nodes are joined by the GPU's cluster fabric, which a single-GPU rental does not come with.
SINGLE_GPU_RATE = "a rate for a machine of {gpus} GPU(s); multi-node InfiniBand clusters cost more: pass --price"


def _priced(spec: GpuSpec, prices: PriceCatalog, multi_node: bool = False) -> GpuSpec:
    """The entry with the price catalog's cheapest on-demand price for it (the cpu pseudo-device keeps its own).
    multi_node: the cheapest offer of whole servers (what a cluster of nodes is rented as) where the catalog has
    one; otherwise the cheapest of all, said to be a smaller machine's rate."""
    if spec.price_usd_per_hour is not None:
        return spec
    from planner.cost.prices import SERVER_GPUS, cheapest_on_demand

    entry = cheapest_on_demand(prices, spec.name, whole_servers=True) if multi_node else None
    kind = "the cheapest on-demand whole-server price (the plan has several nodes)" if entry else ""
    entry = entry or cheapest_on_demand(prices, spec.name)
    if entry is None:
        return spec.model_copy(update={"price_source": NO_PRICE})
    caveat = ""
    if multi_node and entry.gpus_per_instance < SERVER_GPUS:
        caveat = "; " + SINGLE_GPU_RATE.format(gpus=entry.gpus_per_instance)
    source = (
        f"{kind or 'the cheapest on-demand price'} of planner/catalog/prices.yaml: {entry.cloud} {entry.region}, "
        f"{entry.instance}, {entry.source}, {entry.date.isoformat()}{caveat}"
    )
    return spec.model_copy(
        update={"price_usd_per_hour": entry.on_demand, "price_source": source, "price_date": entry.date}
    )


def load_gpu_catalog() -> list[GpuSpec]:
    """All catalog entries, the `cpu` pseudo-device last."""
    return list(_catalog())


@lru_cache(maxsize=1)
def _index() -> dict[str, tuple[str, int]]:
    """Each name's key -> (the GPU's name, its entry's position), read off the entries as stored: a lookup
    validates and prices the one GPU it finds, not the catalog's ~30."""
    index: dict[str, tuple[str, int]] = {}
    for position, entry in enumerate(_entries()):
        canonical = entry["name"]
        for name in (canonical, *entry.get("aliases", []), *entry.get("driver_names", [])):
            key = normalize_gpu_name(name)
            other = index.get(key)
            if other is not None and other[0] != canonical:
                raise RuntimeError(f"GPU catalog names collide: '{name}' names both {other[0]} and {canonical}")
            index[key] = (canonical, position)
    return index


@cache
def multi_node_priced(name: str) -> GpuSpec:
    """The GPU `name` (a catalog name) priced for a multi-node plan (_priced, multi_node)."""
    from planner.cost.prices import read_price_catalog

    position = _index()[normalize_gpu_name(name)][1]
    return _priced(GpuSpec.model_validate(_entries()[position]), read_price_catalog(), multi_node=True)


def find_gpu(name: str) -> GpuSpec | None:
    """The entry with this canonical name, alias or driver-reported name, or None."""
    found = _index().get(normalize_gpu_name(name))
    return _spec_at(found[1]) if found is not None else None


def suggest_gpus(name: str, limit: int = 4) -> list[str]:
    """Canonical names closest to a mistyped one: names it is a prefix of ('a100'), then difflib's."""
    key = normalize_gpu_name(name)
    index = _index()
    same_prefix = sorted(k for k in index if key and k.startswith(key))
    close = difflib.get_close_matches(key, index.keys(), n=limit * 4, cutoff=0.6)
    suggestions: list[str] = []
    for match in [*same_prefix, *close]:
        canonical = index[match][0]
        if canonical not in suggestions:
            suggestions.append(canonical)
    return suggestions[:limit]


def resolve_gpu(name: str) -> GpuSpec:
    """The catalog entry for a user- or driver-given name; UserInputError with suggestions if unknown."""
    spec = find_gpu(name)
    if spec is not None:
        return spec
    suggestions = suggest_gpus(name)
    if suggestions:
        quoted = ", ".join(f"'{s}'" for s in suggestions)
        raise UserInputError(f"unknown GPU '{name}'; did you mean {quoted}?")
    raise UserInputError(f"unknown GPU '{name}'; list the known ones with `hardware-selector gpus`")


def pcie_bandwidth_GBps_per_direction(generation: int, width: int = 16) -> float:
    """Link bandwidth per direction, GB/s, for a PCIe generation and lane count."""
    if generation not in PCIE_X16_GBPS_PER_DIRECTION:
        raise UserInputError(f"unknown PCIe generation {generation}; use 1-6")
    return PCIE_X16_GBPS_PER_DIRECTION[generation] * width / 16

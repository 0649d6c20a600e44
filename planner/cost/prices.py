"""The dated cloud price catalog: USD per GPU-hour per cloud, region and GPU, each price with its source.

The data is planner/catalog/prices.yaml (or the user's `--price-catalog FILE` of the same shape); every entry
names the page it was read from, the date, the instance and how $/GPU-hour was derived (docs/search.md,
"Cost across clouds"). A price older than STALE_AFTER_DAYS is stale: still used, but said to be.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from planner.errors import UserInputError
from planner.limits import MAX_PRICE_PER_HOUR
from planner.yaml_cache import UnreadableYaml, load_yaml

PRICE_CATALOG_FILE = Path(__file__).resolve().parent.parent / "catalog" / "prices.yaml"
STALE_AFTER_DAYS = 180
# GPUs of a whole server: the instances sold with the GPU's cluster fabric (p5.48xlarge, ND96 v5, HGX nodes). Smaller
# instances (1-GPU VMs, pods priced per GPU) are single-machine rentals; the catalog records no network between them.
SERVER_GPUS = 8


def catalog_today() -> dt.date:
    """The date a price's age is counted to: today, or SOURCE_DATE_EPOCH's day (UTC) when it is set, the
    reproducible-builds convention, so an output that names prices can be reproduced byte for byte on a later day
    (tests/test_golden_plans.py sets it: its copies would otherwise turn STALE 180 days after the prices' dates)."""
    import os

    epoch = os.environ.get("SOURCE_DATE_EPOCH", "").strip()
    if epoch:
        try:
            return dt.datetime.fromtimestamp(int(epoch), tz=dt.timezone.utc).date()
        except (ValueError, OverflowError, OSError):
            raise UserInputError(f"SOURCE_DATE_EPOCH={epoch!r} is not whole seconds since 1970; unset it") from None
    return dt.date.today()


class CloudPrice(BaseModel):
    """One cloud's price for one GPU in one region: on-demand, and spot where the source publishes it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cloud: str = Field(min_length=1, max_length=40)
    region: str = Field(min_length=1, max_length=80)
    gpu: str = Field(min_length=1, max_length=80)  # a name of the GPU catalog (planner/catalog/gpus.json)
    instance: str = Field(min_length=1, max_length=120)
    gpus_per_instance: int = Field(ge=1, le=64)  # the smallest number of GPUs one can rent there
    on_demand: float = Field(gt=0, le=MAX_PRICE_PER_HOUR, allow_inf_nan=False)  # USD per GPU-hour
    spot: float | None = Field(default=None, gt=0, le=MAX_PRICE_PER_HOUR, allow_inf_nan=False)
    derivation: str = Field(min_length=1)  # how $/GPU-hour came from the instance's price
    source: str = Field(min_length=1)  # the page read
    date: dt.date  # when that page was published or read

    @field_validator("cloud")
    @classmethod
    def _lower(cls, value: str) -> str:
        return value.strip().lower()

    def age_days(self, today: dt.date) -> int:
        return (today - self.date).days

    def stale(self, today: dt.date) -> bool:
        return self.age_days(today) > STALE_AFTER_DAYS

    def price(self, spot: bool) -> float | None:
        return self.spot if spot else self.on_demand

    def cite(self, today: dt.date, spot: bool = False) -> str:
        """Where the price came from, for the output: source, date, instance, derivation, and whether stale."""
        kind = "spot" if spot else "on-demand"
        age = f"; STALE: {self.age_days(today)} days old (over {STALE_AFTER_DAYS})" if self.stale(today) else ""
        return f"{kind}, {self.instance} ({self.derivation}), {self.source}, {self.date.isoformat()}{age}"


class PriceCatalog(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    catalog_date: dt.date | None = None
    prices: list[CloudPrice] = Field(min_length=1)

    def clouds(self) -> list[str]:
        return sorted({entry.cloud for entry in self.prices})

    def for_clouds(self, clouds: list[str]) -> list[CloudPrice]:
        """The entries of the named clouds; an unknown cloud is an error that lists the known ones."""
        known = self.clouds()
        unknown = [cloud for cloud in clouds if cloud not in known]
        if unknown:
            raise UserInputError(
                f"--clouds: unknown cloud {', '.join(repr(c) for c in unknown)}; the price catalog has "
                f"{', '.join(known)}"
            )
        return [entry for entry in self.prices if entry.cloud in clouds]


def parse_clouds(text: str) -> list[str]:
    """--clouds aws,gcp,... as a list of lower-case names, in order, without repeats."""
    clouds = list(dict.fromkeys(part.strip().lower() for part in text.split(",") if part.strip()))
    if not clouds:
        raise UserInputError("--clouds needs at least one cloud name, e.g. --clouds aws,gcp,lambda")
    return clouds


def _where(error: ValidationError, document: dict) -> str:
    """The first problem of a catalog, as one phrase: which entry, which field, what is wrong."""
    first = error.errors()[0]
    loc = list(first["loc"])
    where = ".".join(str(part) for part in loc)
    if len(loc) >= 2 and loc[0] == "prices" and isinstance(loc[1], int):
        entries = document.get("prices") or []
        entry = entries[loc[1]] if loc[1] < len(entries) and isinstance(entries[loc[1]], dict) else {}
        field = ".".join(str(part) for part in loc[2:]) or "entry"
        label = f"{entry.get('cloud', '?')} {entry.get('gpu', '?')}"
        where = f"prices[{loc[1]}] ({label}) field '{field}'"
    message = first["msg"]
    if first["type"] == "missing":
        message = "is missing"
    elif first["type"] == "greater_than":
        message = f"must be a positive USD per GPU-hour, not {first.get('input')!r}"
    return f"{where} {message}"


def read_price_catalog(path: Path | None = None) -> PriceCatalog:
    """The price catalog at `path` (default: the project's), its entries checked but not their GPU names
    (planner/hardware/gpus.py reads the project's to price its GPUs, before it can resolve a name)."""
    file = PRICE_CATALOG_FILE if path is None else Path(path).expanduser()
    label = "the price catalog" if path is None else f"--price-catalog {path}"
    try:
        document = load_yaml(file.read_text(encoding="utf-8"))  # parsed once per content (planner/yaml_cache.py)
    except FileNotFoundError:
        raise UserInputError(f"{label}: no such file; give a YAML price catalog (docs/search.md)") from None
    except (OSError, UnicodeDecodeError, UnreadableYaml) as error:
        cause = error.__cause__ if isinstance(error, UnreadableYaml) else error  # PyYAML's error says where
        first = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
        raise UserInputError(f"{label}: not a readable YAML file ({first})") from None
    if not isinstance(document, dict):
        raise UserInputError(f"{label}: expected a mapping with a 'prices' list (docs/search.md)")
    try:
        return PriceCatalog.model_validate(document)
    except ValidationError as error:
        raise UserInputError(f"{label}: {_where(error, document)}; fix that entry or leave it out") from None


def cheapest_on_demand(catalog: PriceCatalog, gpu: str, whole_servers: bool = False) -> CloudPrice | None:
    """The catalog's cheapest on-demand entry for `gpu` (a GPU catalog name), or None where it has none: what
    plain `--objective cost` (without --clouds) prices a GPU at. whole_servers: only instances of SERVER_GPUS or
    more, the offers a multi-node plan (its nodes joined by the GPU's cluster fabric) can be rented as. Ties go to
    the newer entry."""
    entries = [
        entry
        for entry in catalog.prices
        if entry.gpu == gpu and (not whole_servers or entry.gpus_per_instance >= SERVER_GPUS)
    ]
    return min(entries, key=lambda entry: (entry.on_demand, -entry.date.toordinal())) if entries else None

"""Regenerate planner/catalog/catalog.json from the HF configs in planner/catalog/models/.

Each models/<name>.json holds a catalog entry: its name, HF id, aliases and the
model's config.json as published on the Hub (with config_source: where it was
checked, for the entries that were). For every entry this builds the
transformers model on the meta device (no memory, no download) for exact
counts, reads the architecture with planner.models.hf_config, and writes all specs,
sorted by name, to catalog.json -- atomically, so a reader never sees half a file.

    python scripts/build_catalog.py            # rebuild everything (about a minute)
    python scripts/build_catalog.py --check    # fail if catalog.json is out of date
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))  # run from a checkout without installing

from planner.files import write_text_atomic  # noqa: E402
from planner.models.catalog import CATALOG_DIR, CATALOG_FILE, normalize_name  # noqa: E402
from planner.models.hf_config import spec_from_hf_config  # noqa: E402
from planner.models.spec import ModelSpec  # noqa: E402

MODELS_DIR = CATALOG_DIR / "models"
SCHEMA_VERSION = 1


class ConfigSource(BaseModel):
    """Where an entry's config was checked: the official file, and the readable copies its values were read from
    (the Hub file itself may be gated or out of reach)."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(pattern=r"^https://")
    part: str | None = None  # the block of that file the entry holds, e.g. "text_config"
    revision: str | None = None
    read_from: list[str] = Field(min_length=1)
    note: str = ""


class CatalogEntry(BaseModel):
    """One models/<name>.json file."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    hf_id: str | None = None
    aliases: list[str] = Field(default_factory=list)
    config_source: ConfigSource | None = None
    config: dict


def load_entries(directory: Path = MODELS_DIR) -> list[CatalogEntry]:
    entries = []
    for path in sorted(directory.glob("*.json")):
        entry = CatalogEntry.model_validate_json(path.read_text(encoding="utf-8"))
        if path.stem != entry.name:
            raise SystemExit(f"{path}: file name must be the entry name '{entry.name}'.json")
        entries.append(entry)
    return entries


def check_names_unique(entries: list[CatalogEntry]) -> None:
    """Every name, alias, HF id and HF repo name selects one entry; no alias is redundant."""
    owner_of: dict[str, str] = {}
    for entry in entries:
        own_names = [entry.name] + ([entry.hf_id, entry.hf_id.split("/")[-1]] if entry.hf_id else [])
        seen = {normalize_name(name) for name in own_names}
        for alias in entry.aliases:
            if normalize_name(alias) in seen:
                raise SystemExit(f"alias '{alias}' of {entry.name} only repeats one of its other names")
            seen.add(normalize_name(alias))
        for key in seen:
            if owner_of.setdefault(key, entry.name) != entry.name:
                raise SystemExit(f"name '{key}' of {entry.name} collides with {owner_of[key]}")


def build_spec(entry: CatalogEntry) -> ModelSpec:
    from planner.models.param_count import count_params_on_meta

    counts = count_params_on_meta(entry.config)
    return spec_from_hf_config(
        entry.config,
        name=entry.name,
        hf_id=entry.hf_id,
        aliases=entry.aliases,
        origin="catalog",
        params=counts,
        source=f"{MODELS_DIR.name}/{entry.name}.json",
    )


def catalog_document(specs: list[ModelSpec]) -> dict:
    import transformers

    return {
        "schema_version": SCHEMA_VERSION,
        "generated_by": "scripts/build_catalog.py",
        "transformers_version": transformers.__version__,
        "models": [spec.model_dump(mode="json") for spec in sorted(specs, key=lambda spec: spec.name)],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if catalog.json differs from a fresh build")
    args = parser.parse_args(argv)

    entries = load_entries()
    check_names_unique(entries)
    started = time.perf_counter()
    specs = []
    for number, entry in enumerate(entries, start=1):
        began = time.perf_counter()
        spec = build_spec(entry)
        specs.append(spec)
        print(
            f"[{number:2d}/{len(entries)}] {entry.name:<20} {spec.params.total:>17,} params"
            f"  ({time.perf_counter() - began:.1f}s)",
            flush=True,
        )
    text = json.dumps(catalog_document(specs), indent=2) + "\n"
    if args.check:
        current = CATALOG_FILE.read_text(encoding="utf-8") if CATALOG_FILE.exists() else ""
        if current != text:
            print(f"{CATALOG_FILE} is out of date; run scripts/build_catalog.py", file=sys.stderr)
            return 1
        print(f"{CATALOG_FILE} is up to date")
        return 0
    write_text_atomic(CATALOG_FILE, text)
    print(f"wrote {len(specs)} models to {CATALOG_FILE} in {time.perf_counter() - started:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Access to ../shared/reference/published_reference.yaml, the published facts tests compare against."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent


def reference_path() -> Path | None:
    for candidate in (REPO_ROOT.parent / "shared" / "reference", REPO_ROOT / "shared" / "reference"):
        path = candidate / "published_reference.yaml"
        if path.is_file():
            return path
    return None


@lru_cache(maxsize=1)
def published_reference() -> dict:
    path = reference_path()
    if path is None:
        pytest.skip("shared/reference/published_reference.yaml is not beside this checkout")
    import yaml

    with path.open(encoding="utf-8") as handle:
        return yaml.safe_load(handle)

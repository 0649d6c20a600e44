"""Access to ../shared/reference/published_reference.yaml, the published facts tests compare against.

The live file sits beside the checkout (../shared/reference/). A verbatim copy
is kept in tests/data/ so that a clone on its own (CI, a contributor's laptop)
runs the same checks; test_reference_copy.py fails when the two drift apart.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent


def reference_path() -> Path | None:
    for candidate in (REPO_ROOT.parent / "shared" / "reference", REPO_ROOT / "tests" / "data"):
        path = candidate / "published_reference.yaml"
        if path.is_file():
            return path
    return None


@lru_cache(maxsize=1)
def published_reference() -> dict:
    path = reference_path()
    if path is None:
        pytest.skip(
            "published_reference.yaml is neither beside this checkout nor in tests/data", allow_module_level=True
        )
    import yaml

    with path.open(encoding="utf-8") as handle:
        return yaml.safe_load(handle)

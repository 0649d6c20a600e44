"""The vendored copy of the published reference equals the live one when both are present."""

from __future__ import annotations

import pytest

from tests.reference_data import REPO_ROOT

LIVE = REPO_ROOT.parent / "shared" / "reference" / "published_reference.yaml"
COPY = REPO_ROOT / "tests" / "data" / "published_reference.yaml"


def test_vendored_reference_matches_the_live_file():
    assert COPY.is_file(), "tests/data/published_reference.yaml is missing"
    if not LIVE.is_file():
        pytest.skip("no ../shared/reference beside this checkout; the vendored copy stands alone")
    assert COPY.read_bytes() == LIVE.read_bytes(), (
        "../shared/reference/published_reference.yaml changed; refresh tests/data/published_reference.yaml from it"
    )

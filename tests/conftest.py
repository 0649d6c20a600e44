"""Suite-wide isolation: no test reads or writes the user's real caches.

`plan` calibrates from the benchmark DB in ~/.cache when it exists (and every
real run records itself there), and model resolution looks in the local HF
cache; a developer's own records or cached models must not change what the
tests see.
"""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True, scope="session")
def isolated_user_caches(tmp_path_factory):
    cache_home = tmp_path_factory.mktemp("xdg-cache")
    patch = pytest.MonkeyPatch()
    patch.setenv("XDG_CACHE_HOME", str(cache_home))
    patch.setenv("HARDWARE_SELECTOR_DB", str(cache_home / "hardware-selector" / "benchmarks.duckdb"))
    # Runs record themselves by default, and a record calibrates every later plan in the same database: the
    # suite's runs do not, so that no test's plan depends on which tests ran before it on its worker.
    # tests/test_runner_watch.py turns it back on for its run, and shows the default.
    patch.setenv("HARDWARE_SELECTOR_RECORD", "0")
    patch.setenv("HF_HUB_CACHE", str(cache_home / "huggingface" / "hub"))
    patch.setenv("HF_HUB_OFFLINE", "1")
    patch.delenv("HF_HOME", raising=False)
    patch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    yield
    patch.undo()


def pytest_collection_modifyitems(config, items):
    """Slow files first (a test marked slow: multi-rank jobs, launches, long fuzz campaigns): with `make test`'s
    two workers, the long files start early and the quick ones fill the gaps at the end instead of one worker
    finishing a long file alone. A file of unmarked tests that takes ~10 s or more belongs here too: run alone,
    test_inference_memory (27 s), test_fuzz_run_inputs (25 s), test_warm_launch (20 s), test_search_sweep and
    test_fuzz_inputs (9 s each) were unmarked and so ran among the quick files (test_warm_launch,
    alphabetically, near the very end)."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: 0 if item.path in slow_files else 1)  # stable: each file's tests stay together

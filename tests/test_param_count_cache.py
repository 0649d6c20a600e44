"""Remembered exact counts (planner/models/param_count_cache.py) equal a fresh meta-device count, and are
counted afresh for another config, another counter source or a damaged entry."""

from __future__ import annotations

import json

import pytest

from backends.weights.model_factory import catalog_config, tiny_config
from planner.models import param_count_cache
from planner.models.param_count import count_params_on_meta
from planner.models.param_count_cache import cache_folder, cached_counts
from planner.models.resolve import resolve_model


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv(param_count_cache.NO_CACHE_ENV_VAR, raising=False)
    return cache_folder()


def _counting():
    calls = []

    def count(config):
        calls.append(config)
        return count_params_on_meta(config)

    return count, calls


def test_a_remembered_count_is_the_meta_device_count_and_is_not_rebuilt(cache):
    config = tiny_config(catalog_config("llama-3-8b"), layers=2)
    count, calls = _counting()
    first = cached_counts(config, count)
    assert first == count_params_on_meta(config) and len(calls) == 1
    assert cached_counts(config, count) == first and len(calls) == 1  # read back, not built again
    other = {**config, "num_hidden_layers": 3}
    assert cached_counts(other, count).total > first.total and len(calls) == 2


def test_a_damaged_entry_or_another_counter_counts_afresh(cache, monkeypatch, tmp_path):
    config = tiny_config(catalog_config("llama-3-8b"), layers=2)
    count, calls = _counting()
    cached_counts(config, count)
    (entry,) = cache.iterdir()
    entry.write_text('{"total": ')  # a truncated write by some other process
    assert cached_counts(config, count) == count_params_on_meta(config) and len(calls) == 2
    assert json.loads(entry.read_text())["total"] > 0  # rewritten whole

    changed = tmp_path / "param_count.py"
    changed.write_text("# how we count changed\n")
    monkeypatch.setattr(param_count_cache, "_COUNTER_SOURCE", changed)
    cached_counts(config, count)
    assert len(calls) == 3 and len(list(cache.iterdir())) == 2


def test_a_local_config_plans_from_the_remembered_count(cache, tmp_path):
    config = {**tiny_config(catalog_config("llama-3-8b"), layers=2), "model_type": "llama"}
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text(json.dumps(config))
    fresh = resolve_model(str(tmp_path / "model"))
    assert fresh.params.source == "meta-device" and len(list(cache.iterdir())) == 1
    assert resolve_model(str(tmp_path / "model")).params == fresh.params

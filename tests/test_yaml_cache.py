"""planner/yaml_cache.py: a YAML document read back from its JSON copy is the one PyYAML's safe loader reads."""

from __future__ import annotations

import json
import math
import pathlib
import re
import subprocess
import sys

import pytest
import yaml

from planner.cost.prices import PRICE_CATALOG_FILE, read_price_catalog
from planner.errors import UserInputError
from planner.yaml_cache import UnreadableYaml, cache_folder, load_yaml
from tests.distributed import REPO_ROOT, cpu_env


@pytest.fixture(autouse=True)
def own_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def reference(text: str) -> object:
    """What the price catalog was read with before the cache: libyaml's safe loader where PyYAML has it."""
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 (a safe loader)


def entries() -> list:
    return sorted(cache_folder().glob("*.json")) if cache_folder().exists() else []


def same(a: object, b: object) -> bool:
    """Equal, of the same types all the way down (a date is not a datetime, True is not 1), NaN equal to NaN."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[key], b[key]) for key in a)  # type: ignore[index]
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))  # type: ignore[arg-type]
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)  # type: ignore[arg-type]
    return a == b


KEPT = [
    PRICE_CATALOG_FILE.read_text(encoding="utf-8"),
    "when: 2026-11-27\nat: 2026-11-27 10:30:00\nzoned: 2026-11-27T10:30:00+02:00\nplain: '2026-11-27'\n",
    "numbers: [1, -0.0, .nan, .inf, -.inf, 1.5e300, 12345678901234567890, true, null, ~]\nnested: {a: [{b: []}]}\n",
    "- just\n- a list\n",
    "2026-11-27\n",
    'text: "\\u00e9\\u4e2d \\U0001F600 \\t"\n',
]
NOT_KEPT = [
    "!!set {a, b}\n",
    "1: int keys\n",
    "blob: !!binary aGVsbG8=\n",
    "looks: {$yaml-date: '2026-11-27'}\n",
]


@pytest.mark.parametrize("text", KEPT)
def test_a_kept_document_reads_back_as_pyyaml_reads_it(text):
    assert same(load_yaml(text), reference(text))  # parsed
    assert len(entries()) == 1
    assert same(load_yaml(text), reference(text))  # from the JSON copy


@pytest.mark.parametrize("text", NOT_KEPT)
def test_a_document_json_cannot_hold_exactly_is_parsed_every_time(text):
    assert same(load_yaml(text), reference(text))
    assert entries() == []


def test_an_entry_that_cannot_be_read_is_parsed_again_and_rewritten():
    text = KEPT[1]
    load_yaml(text)
    (entry,) = entries()
    entry.write_text('{"when": ')
    assert same(load_yaml(text), reference(text))
    assert same(json.loads(entry.read_text())["when"], {"$yaml-date": "2026-11-27"})


def _no_home():
    raise RuntimeError("Could not determine home directory.")  # Path.home's words


def test_without_a_home_folder_the_document_is_parsed_and_nothing_kept(monkeypatch):
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.delenv("HOME")
    monkeypatch.setattr(pathlib.Path, "home", _no_home)
    assert same(load_yaml(KEPT[1]), reference(KEPT[1]))


def test_a_changed_text_is_a_new_entry_never_a_stale_one():
    assert load_yaml("a: 1\n") == {"a": 1}
    assert load_yaml("a: 2\n") == {"a": 2}
    assert len(entries()) == 2


def test_text_that_is_not_yaml_says_pyyamls_first_line(tmp_path):
    text = "prices: [unclosed\n"
    with pytest.raises(yaml.YAMLError) as expected:
        reference(text)
    with pytest.raises(UnreadableYaml) as raised:
        load_yaml(text)
    assert isinstance(raised.value.__cause__, yaml.YAMLError) and str(raised.value) == str(expected.value)
    catalog = tmp_path / "prices.yaml"
    catalog.write_text(text)
    with pytest.raises(UserInputError) as refused:
        read_price_catalog(catalog)
    first = str(expected.value).strip().splitlines()[0]
    assert str(refused.value) == f"--price-catalog {catalog}: not a readable YAML file ({first})"
    assert entries() == []


def test_the_price_catalog_is_the_same_from_the_cache():
    parsed = read_price_catalog()
    assert len(entries()) == 1
    assert read_price_catalog() == parsed


PROBE = """
import sys
from hardware_selector import main
main(["plan", "--model", "gpt2", "--gpu", "H100-80GB", "--json", "--no-calibration"])
print("YAML=" + str("yaml" in sys.modules), file=sys.stderr)
"""


def test_plan_imports_no_yaml_once_the_price_catalog_is_kept(tmp_path):
    env = cpu_env({"XDG_CACHE_HOME": str(tmp_path / "fresh")})
    runs = [
        subprocess.run(
            [sys.executable, "-c", PROBE], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120
        )
        for _ in range(2)
    ]
    assert [run.stderr.strip().splitlines()[-1] for run in runs] == ["YAML=True", "YAML=False"], runs[1].stderr
    assert _without_timing(runs[0].stdout) == _without_timing(runs[1].stdout)


def _without_timing(text: str) -> str:
    return re.sub(r'"elapsed_s": [0-9.e-]+', "", text)

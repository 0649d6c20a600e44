"""pydantic's plugin lookup is skipped only where no distribution on sys.path can declare a plugin
(hardware_selector_cli/pydantic_plugins.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from hardware_selector_cli import pydantic_plugins
from hardware_selector_cli.pydantic_plugins import _no_plugin_declared, skip_lookup_without_plugins

REPO_ROOT = Path(__file__).resolve().parent.parent


def _distribution(root: Path, name: str, entry_points: str | None, version: str = "1.0") -> None:
    info = root / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    if entry_points is not None:
        (info / "entry_points.txt").write_text(entry_points)


def test_no_plugin_declared_reads_each_distribution(tmp_path, monkeypatch):
    _distribution(tmp_path, "tool", "[console_scripts]\ntool = tool:main\n")
    _distribution(tmp_path, "bare", None)
    monkeypatch.setattr(sys, "path", [str(tmp_path), str(tmp_path / "missing")])
    assert not _no_plugin_declared(), "no pydantic 2 found: its loader's interface is not known"
    _distribution(tmp_path, "pydantic", None, version="3.0.0")
    assert not _no_plugin_declared(), "pydantic 3: its loader's interface is not known"
    os.rename(tmp_path / "pydantic-3.0.0.dist-info", tmp_path / "pydantic-2.14.4.dist-info")
    assert _no_plugin_declared()
    _distribution(tmp_path, "watcher", "[pydantic]\nwatcher = watcher.plugin:plugin\n")
    assert not _no_plugin_declared()


def test_what_it_cannot_read_keeps_pydantics_lookup(tmp_path, monkeypatch):
    archive = tmp_path / "packages.zip"
    archive.write_bytes(b"PK\x05\x06" + bytes(18))
    monkeypatch.setattr(sys, "path", [str(archive)])
    assert not _no_plugin_declared()
    (tmp_path / "old.egg").mkdir()
    monkeypatch.setattr(sys, "path", [str(tmp_path)])
    assert not _no_plugin_declared()


def test_disabled_or_loaded_is_left_to_pydantic(monkeypatch):
    monkeypatch.setenv("PYDANTIC_DISABLE_PLUGINS", "1")
    monkeypatch.delitem(sys.modules, pydantic_plugins.LOADER, raising=False)
    assert not skip_lookup_without_plugins()
    assert pydantic_plugins.LOADER not in sys.modules
    monkeypatch.delenv("PYDANTIC_DISABLE_PLUGINS")
    monkeypatch.setitem(sys.modules, pydantic_plugins.LOADER, object())
    assert not skip_lookup_without_plugins()


PROBE = """
import sys
from hardware_selector import main
code = main(['plan', '--model', 'gpt2-xl', '--gpu', 'V100-32GB', '--nodes', '1', '--seq-len', '1024', '--json'])
from pydantic.plugin._loader import get_plugins
print('METADATA=' + str('importlib.metadata' in sys.modules), list(get_plugins()), file=sys.stderr)
sys.exit(code)
"""


def test_plan_imports_no_importlib_metadata_without_plugins():
    """Where pydantic's own lookup finds no plugin (no pydantic plugin installed, as here), `plan` neither imports
    importlib.metadata nor scans the distributions (~25 ms, docs/performance.md) and pydantic has no plugins;
    where it finds one, `plan` leaves the lookup to pydantic."""
    own = subprocess.run(  # pydantic's own lookup, in a process that did not skip it
        [sys.executable, "-c", "from pydantic.plugin._loader import get_plugins; print(len(list(get_plugins())))"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert own.returncode == 0, own.stderr
    completed = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )
    assert completed.returncode == 0, completed.stderr
    if own.stdout.strip() == "0":
        assert completed.stderr.rstrip().endswith("METADATA=False []"), completed.stderr
    else:  # plugins installed: pydantic's own lookup ran
        assert "METADATA=True" in completed.stderr, completed.stderr


PLUGIN = """
import sys


class Plugin:
    seen = False

    def new_schema_validator(self, schema, schema_type, path, kind, config, settings):
        if not Plugin.seen:
            Plugin.seen = True
            print("PLUGIN-CALLED", file=sys.stderr)
        return None, None, None


plugin = Plugin()
"""


def test_an_installed_plugin_is_called_by_plan(tmp_path):
    """A distribution on sys.path that declares a pydantic plugin: `plan` leaves the lookup to pydantic, which
    loads it and calls it for the validators it builds."""
    (tmp_path / "hs_probe_plugin.py").write_text(PLUGIN)
    _distribution(tmp_path, "hs_probe_plugin", "[pydantic]\nhs_probe = hs_probe_plugin:plugin\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO_ROOT)])}
    env.pop("PYDANTIC_DISABLE_PLUGINS", None)
    completed = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert completed.returncode == 0, completed.stderr
    assert "PLUGIN-CALLED" in completed.stderr and "METADATA=True" in completed.stderr, completed.stderr

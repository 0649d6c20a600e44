"""pydantic's plugin lookup is skipped only where no distribution on sys.path can declare a plugin
(hardware_selector_cli/pydantic_plugins.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from hardware_selector_cli import pydantic_plugins
from hardware_selector_cli.pydantic_plugins import _no_plugin_declared, skip_lookup_without_plugins

REPO_ROOT = Path(__file__).resolve().parent.parent


def _distribution(root: Path, name: str, entry_points: str | None) -> None:
    info = root / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    if entry_points is not None:
        (info / "entry_points.txt").write_text(entry_points)


def test_no_plugin_declared_reads_each_distribution(tmp_path, monkeypatch):
    _distribution(tmp_path, "tool", "[console_scripts]\ntool = tool:main\n")
    _distribution(tmp_path, "bare", None)
    monkeypatch.setattr(sys, "path", [str(tmp_path), str(tmp_path / "missing")])
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


def test_plan_imports_no_importlib_metadata():
    """In this environment (no pydantic plugin installed) `plan` neither imports importlib.metadata nor scans the
    distributions (~25 ms, docs/performance.md), and pydantic finds no plugins, as its own lookup does."""
    completed = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stderr.rstrip().endswith("METADATA=False []"), completed.stderr
    own = subprocess.run(  # pydantic's own lookup, in a process that did not skip it: the same answer
        [sys.executable, "-c", "from pydantic.plugin._loader import get_plugins; print(list(get_plugins()))"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert own.stdout.strip() == "[]", own.stderr

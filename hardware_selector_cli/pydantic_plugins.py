"""pydantic's plugin lookup without importlib.metadata, where no installed distribution can declare a plugin
(docs/performance.md, "Planner speed").

pydantic looks for plugins (the "pydantic" entry point group) when it builds its first validator:
pydantic/plugin/_loader.py imports importlib.metadata (~19 ms with the email package it brings) and reads
every installed distribution's entry points (~10 ms), for the command line of `plan` almost a tenth of its time.
Where no plugin is installed, which is the usual case, it finds none and every validator is a plain
SchemaValidator.

`skip_lookup_without_plugins` reads the same places itself, more cheaply: each directory on sys.path, and in
it each distribution's `entry_points.txt` (`*.dist-info`, `*.egg-info`). Only where none of them mentions
pydantic at all does it give pydantic a loader module that returns no plugins, the answer pydantic's own would
give. It does so only for pydantic 2, whose loader's interface (`get_plugins`, `PYDANTIC_ENTRY_POINT_GROUP`)
tests/test_cli_pydantic_plugins.py holds; the version is read from pydantic's own `.dist-info` name in the same
scan. Whatever it cannot read as such leaves pydantic's lookup as it is: PYDANTIC_DISABLE_PLUGINS set (pydantic's
rules apply), pydantic's loader already imported, a sys.path entry that is a file (a zip), an `.egg`, a
distribution finder on sys.meta_path besides importlib's PathFinder, an unreadable directory or file.
"""

from __future__ import annotations

import os
import sys
import types
from importlib.machinery import PathFinder

LOADER = "pydantic.plugin._loader"
_METADATA_SUFFIXES = (".dist-info", ".egg-info")


def skip_lookup_without_plugins() -> bool:
    """Whether pydantic was given the loader that returns no plugins (so none can be installed)."""
    if LOADER in sys.modules or "PYDANTIC_DISABLE_PLUGINS" in os.environ or not _no_plugin_declared():
        return False
    loader = types.ModuleType(LOADER, "pydantic's plugin loader where no distribution declares a plugin")
    loader.PYDANTIC_ENTRY_POINT_GROUP = "pydantic"  # type: ignore[attr-defined]
    loader.get_plugins = _no_plugins  # type: ignore[attr-defined]
    sys.modules[LOADER] = loader
    return True


def _no_plugins() -> tuple[()]:
    return ()


def _no_plugin_declared() -> bool:
    """True only if every distribution importlib.metadata would find is a directory on sys.path whose
    entry_points.txt, if any, does not mention pydantic, and pydantic's own is a 2.x release."""
    if any(hasattr(finder, "find_distributions") and finder is not PathFinder for finder in sys.meta_path):
        return False
    pydantic_2 = False
    try:
        for entry in sys.path:
            root = entry or "."
            if not os.path.isdir(root):
                if os.path.exists(root):  # a zip archive: importlib.metadata reads those too
                    return False
                continue
            with os.scandir(root) as children:
                for child in children:
                    name = child.name.lower()
                    if name.endswith(".egg"):
                        return False
                    if not (name.endswith(_METADATA_SUFFIXES) and child.is_dir()):
                        continue
                    if name.startswith("pydantic-"):
                        pydantic_2 = pydantic_2 or name.startswith("pydantic-2.")
                    if _mentions_pydantic(child.path):
                        return False
    except OSError:
        return False
    return pydantic_2


def _mentions_pydantic(metadata_dir: str) -> bool:
    try:
        with open(os.path.join(metadata_dir, "entry_points.txt"), "rb") as file:
            return b"pydantic" in file.read().lower()
    except FileNotFoundError:
        return False

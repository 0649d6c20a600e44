"""A virtual environment holding only the declared dependencies (and what they require), built in seconds.

`pip install hardware-selector` into an empty venv would take minutes and
the network; the same environment is built here from what is installed:
the closure of pyproject's [project] dependencies over the installed
distributions' own requirements (importlib.metadata), each linked into a
fresh venv's site-packages, plus a .pth file that puts the checkout on the
path and the project's console scripts (as an editable install does). Anything else installed here (pytest,
hypothesis, ruff, tensorboard, ...) is absent in it.
"""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import sysconfig
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from project_sources import REPO, core_requirements


def declared_closure(requirements: list[Requirement]) -> dict[str, importlib.metadata.Distribution]:
    """Every installed distribution the requirements pull in, by canonical name."""
    found: dict[str, importlib.metadata.Distribution] = {}
    pending = [(requirement, frozenset(requirement.extras)) for requirement in requirements]
    while pending:
        requirement, extras = pending.pop()
        name = canonicalize_name(requirement.name)
        if name in found:
            continue
        try:
            distribution = importlib.metadata.distribution(requirement.name)
        except importlib.metadata.PackageNotFoundError:
            continue  # an optional requirement that is not installed here is not installed there either
        found[name] = distribution
        for text in distribution.requires or []:
            child = Requirement(text)
            environments = [{**default_environment(), "extra": extra} for extra in extras or {""}]
            if child.marker is None or any(child.marker.evaluate(env) for env in environments):
                pending.append((child, frozenset(child.extras)))
    return found


def _top_level_entries(distribution: importlib.metadata.Distribution) -> set[str]:
    entries = set()
    for file in distribution.files or []:
        first = file.parts[0]
        if first not in ("..", "__pycache__") and not first.endswith(".pth"):
            entries.add(first)
    return entries


def build(root: Path) -> Path:
    """Create the venv under `root`; returns its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    python = root / "bin" / "python"
    site_packages = Path(
        subprocess.check_output(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True
        ).strip()
    )
    installed = Path(sysconfig.get_paths()["purelib"])
    for distribution in declared_closure(core_requirements()).values():
        source_root = Path(distribution.locate_file(""))
        if source_root != installed:
            continue  # the checkout itself (editable install): the .pth below stands for it
        for entry in _top_level_entries(distribution):
            link = site_packages / entry
            if (source_root / entry).exists() and not link.exists():
                link.symlink_to(source_root / entry)
    (site_packages / "hardware_selector_checkout.pth").write_text(f"{REPO}\n")
    _console_scripts(python)
    return python


def _console_scripts(python: Path) -> None:
    """pyproject's [project.scripts] as the venv's commands, as pip writes them (the README calls them)."""
    import tomllib

    scripts = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    for command, target in scripts.items():
        module, function = target.split(":")
        path = python.parent / command
        path.write_text(f"#!{python}\nimport sys\nfrom {module} import {function}\nsys.exit({function}())\n")
        path.chmod(0o755)

"""Every import in the tree resolves, and every third-party import is declared in pyproject.toml.

The reference is the source itself (tests/project_sources.py reads every
import statement, function-level ones included) and the installed
distributions' own metadata (importlib.metadata): a module that was moved or
renamed, a name that no longer exists, or a library imported but not
declared fails here with the file and line.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import importlib.util

import pytest
from packaging.utils import canonicalize_name
from project_sources import (
    DEVELOPER_ROOTS,
    FIRST_PARTY,
    PACKAGE_MODULES,
    PACKAGE_ROOTS,
    ImportSite,
    core_requirements,
    extra_requirements,
    import_sites,
    names,
    python_files,
    third_party,
)

ALL_FILES = python_files(PACKAGE_ROOTS + PACKAGE_MODULES + DEVELOPER_ROOTS)

# Optional features of the package, by the module they import and the extra that installs it.
# The code that needs one checks for it first and says which extra to install.
OPTIONAL_IMPORTS = {
    "tensorboard": "tensorboard",
    "matplotlib": "plot",
    "lightning": "lightning",
    "liger_kernel": "liger",
    "plotly": "report",
    "mpi4py": "mpi",
}


@functools.cache
def _installed() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()


def _distributions_of(top: str) -> set[str]:
    return {canonicalize_name(name) for name in _installed().get(top, [])}


def _resolves(site: ImportSite) -> str | None:
    """None when the import would succeed, else why not."""
    if importlib.util.find_spec(site.module) is None:
        return f"no module {site.module}"
    if not site.names or site.names == ("*",):
        return None
    module = importlib.import_module(site.module)
    for name in site.names:
        if not hasattr(module, name) and importlib.util.find_spec(f"{site.module}.{name}") is None:
            return f"{site.module} has no {name}"
    return None


def test_the_reader_sees_every_kind_of_import(tmp_path, monkeypatch):
    """The source reader itself, on a file whose imports are known."""
    import project_sources

    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "mod.py").write_text(
        "import json\nfrom .sibling import thing\n"
        "def f():\n    import yaml\n"
        "try:\n    import tensorboard\nexcept ImportError:\n    tensorboard = None\n"
    )
    monkeypatch.setattr(project_sources, "REPO", tmp_path)
    sites = {site.module: site for site in import_sites(package / "mod.py")}
    assert set(sites) == {"json", "pkg.sibling", "yaml", "tensorboard"}
    assert sites["pkg.sibling"].names == ("thing",)
    assert sites["tensorboard"].guarded and not sites["yaml"].guarded
    assert [third_party(sites[name]) for name in ("json", "yaml")] == [False, True]


@pytest.mark.slow
def test_every_first_party_import_resolves():
    sites = [site for path in ALL_FILES for site in import_sites(path) if site.top in FIRST_PARTY]
    assert len(sites) > 500  # the reader found the tree's imports
    broken = sorted(f"{site.where()}: {problem}" for site in sites if (problem := _resolves(site)))
    assert not broken, "imports that would fail:\n" + "\n".join(broken)


def test_package_code_imports_only_declared_dependencies():
    """What `pip install hardware-selector` ships imports its core dependencies, or an optional extra's module."""
    core = names(core_requirements())
    extras = extra_requirements()
    problems = []
    for path in python_files(PACKAGE_ROOTS + PACKAGE_MODULES):
        for site in filter(third_party, import_sites(path)):
            distributions = _distributions_of(site.top)
            if distributions & core:
                continue
            extra = OPTIONAL_IMPORTS.get(site.top)
            if extra is not None and canonicalize_name(site.top) in names(extras.get(extra, [])):
                continue
            problems.append(f"{site.where()}: imports {site.top} ({', '.join(distributions) or 'not installed'})")
    assert not problems, "declare these in [project] dependencies, or as an optional extra:\n" + "\n".join(problems)


def test_developer_code_imports_only_declared_dependencies():
    """benchmarks/, scripts/ and tests/ may also use the extras (`pip install -e '.[test]'`)."""
    declared = names(core_requirements()) | {
        name for requirements in extra_requirements().values() for name in names(requirements)
    }
    problems = []
    for path in python_files(DEVELOPER_ROOTS):
        for site in filter(third_party, import_sites(path)):
            # Not installed here (a requirement for another Python, e.g. tomli on 3.10): its own name is declared.
            distributions = _distributions_of(site.top) or {canonicalize_name(site.top)}
            if not distributions & declared and not site.guarded:
                problems.append(f"{site.where()}: imports {site.top} ({', '.join(distributions) or 'not installed'})")
    assert not problems, "declare these in an extra of pyproject.toml:\n" + "\n".join(problems)

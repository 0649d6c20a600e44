"""The import rules of docs/architecture.md, checked on every import statement of the tree.

Function-level imports count: a lazy `import torch.distributed` in planner/
breaks the rule as much as a top-level one. Each rule names the folder, what
it must never import, and the doc section that says why.
"""

from __future__ import annotations

import pytest
from project_sources import REPO, import_sites, python_files

# (folder, forbidden module prefixes)
NEVER_IMPORTS = [
    ("planner", ["torch.distributed", "deepspeed", "accelerate", "backends", "benchmarks", "benchmarks_db",
                 "hardware_selector_cli", "hardware_selector", "run_training_benchmark"]),
    ("planner/contract", ["torch", "transformers"]),
    ("planner/hardware", ["torch"]),
    ("planner/memory", ["torch"]),
    ("planner/throughput", ["torch"]),
    ("planner/search", ["torch"]),
    ("planner/emit", ["torch"]),
    ("benchmarks_db", ["torch", "transformers", "deepspeed", "backends", "benchmarks", "hardware_selector_cli"]),
    ("benchmarks/harness", ["torch", "backends", "hardware_selector_cli"]),
    ("backends", ["hardware_selector_cli", "hardware_selector", "benchmarks", "run_training_benchmark"]),
]  # fmt: skip

# What backends/ may read of the planner: the typed contract (planner/contract/ and the plan document it
# carries), the family registry (pure data), and the shared errors and atomic writes.
BACKENDS_SEE_OF_THE_PLANNER = {
    "planner.contract",
    "planner.plan",
    "planner.training_config",
    "planner.models.families",
    "planner.models.catalog",
    "planner.errors",
    "planner.files",
}

MAX_LINES = 430  # "one concept per file, at most about 400 lines"


def _matches(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


@pytest.mark.parametrize(("folder", "forbidden"), NEVER_IMPORTS, ids=[rule[0] for rule in NEVER_IMPORTS])
def test_folder_never_imports(folder, forbidden):
    sites = [site for path in python_files([folder]) for site in import_sites(path)]
    assert sites, f"no imports read under {folder}"
    broken = [
        f"{site.where()}: imports {site.module}"
        for site in sites
        if any(_matches(site.module, prefix) for prefix in forbidden)
    ]
    assert not broken, f"{folder}/ must never import {', '.join(forbidden)} (docs/architecture.md):\n" + "\n".join(
        broken
    )


def test_backends_see_the_planner_only_through_the_contract():
    sites = [site for path in python_files(["backends"]) for site in import_sites(path) if site.top == "planner"]
    assert sites
    broken = [
        f"{site.where()}: imports {site.module}"
        for site in sites
        if not any(_matches(site.module, allowed) for allowed in BACKENDS_SEE_OF_THE_PLANNER)
    ]
    assert not broken, "backends/ reads the planner only through its contract (docs/architecture.md):\n" + "\n".join(
        broken
    )


def test_the_rules_catch_a_breach(tmp_path, monkeypatch):
    """The checker on a planted file: a lazy torch.distributed import inside a planner function is found."""
    import project_sources

    (tmp_path / "planner").mkdir()
    (tmp_path / "planner" / "bad.py").write_text("def f():\n    import torch.distributed as dist\n")
    monkeypatch.setattr(project_sources, "REPO", tmp_path)
    sites = [site for path in project_sources.python_files(["planner"]) for site in import_sites(path)]
    assert [site.module for site in sites if _matches(site.module, "torch.distributed")] == ["torch.distributed"]


def test_files_stay_short():
    long = [
        f"{path.relative_to(REPO)}: {count} lines"
        for path in python_files(["planner", "backends", "benchmarks_db", "benchmarks", "hardware_selector_cli"])
        if (count := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    ]
    assert not long, "split these by concept:\n" + "\n".join(long)


def test_no_module_of_ours_shadows_a_dependency():
    """A file named like a library (backends/deepspeed.py once) hides it from every script run beside it."""
    import importlib.metadata

    from project_sources import DEVELOPER_ROOTS, PACKAGE_MODULES, PACKAGE_ROOTS

    libraries = {
        name
        for name, distributions in importlib.metadata.packages_distributions().items()
        if not name.startswith("_") and set(distributions) != {"hardware-selector"}  # ourselves, installed editable
    }
    assert {"torch", "deepspeed", "transformers", "accelerate", "datasets", "yaml"} <= libraries
    ours = python_files(PACKAGE_ROOTS + PACKAGE_MODULES + DEVELOPER_ROOTS)
    names = {path.stem: path for path in ours} | {
        path.parent.name: path.parent for path in ours if path.name == "__init__.py"
    }
    shadows = sorted(
        f"{path.relative_to(REPO)} shadows the library '{name}'" for name, path in names.items() if name in libraries
    )
    assert not shadows, "\n".join(shadows)

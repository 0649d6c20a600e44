"""The import rules of docs/architecture.md, checked on every import statement of the tree.

Function-level imports count: a lazy `import torch.distributed` in planner/
breaks the rule as much as a top-level one. Each rule names the folder, what
it must never import, and the doc section that says why.
"""

from __future__ import annotations

import pytest
from project_sources import REPO, import_cycles, import_graph, import_sites, python_files

# (folder, forbidden module prefixes)
NEVER_IMPORTS = [
    ("planner", ["torch.distributed", "deepspeed", "accelerate", "backends", "benchmarks", "benchmarks_db",
                 "hardware_selector_cli", "hardware_selector", "run_training_benchmark"]),
    ("planner/contract", ["torch", "transformers"]),
    ("planner/hardware", ["torch"]),
    ("planner/memory", ["torch"]),
    ("planner/throughput", ["torch"]),
    ("planner/search", ["torch"]),
    ("planner/cost", ["torch"]),
    ("planner/emit", ["torch"]),
    ("planner/report", ["torch"]),
    ("benchmarks_db", ["torch", "transformers", "deepspeed", "backends", "benchmarks", "hardware_selector_cli"]),
    ("benchmarks/harness", ["torch", "backends", "hardware_selector_cli"]),
    ("backends", ["hardware_selector_cli", "hardware_selector", "benchmarks", "run_training_benchmark"]),
]  # fmt: skip

# What backends/ may read of the planner: the typed contract (planner/contract/ and the plan document it
# carries), the run folder's derived configs and readers (planner/rundir/), the family registry (pure data), and
# the shared errors, atomic writes and progress bars.
BACKENDS_SEE_OF_THE_PLANNER = {
    "planner.contract",
    "planner.rundir",
    "planner.plan",
    "planner.elastic_plan",  # plan.json's elastic block, as planner.plan is its top level
    "planner.training_config",
    "planner.models.families",
    "planner.models.catalog",
    "planner.errors",
    "planner.files",
    "planner.progress",
}

# The floors of docs/architecture.md ("Floors"), bottom first: a module imports only from its own floor or
# those below it. A module of a listed package not named here sits on the "domain" floor.
PLANNER_FLOORS = [
    ("shared", ["planner.errors", "planner.files", "planner.limits", "planner.progress", "planner.units"]),
    ("contract", ["planner.contract"]),
    ("domain", []),  # models, hardware, training_config, memory, throughput, inference, search, plan, calibration
    ("emit", ["planner.emit", "planner.report"]),
    ("rundir", ["planner.rundir"]),
    ("selector", ["planner.selector"]),
]
# backends/, bottom first: shared helpers; the parts, data and weights a step is built from; the parallelisms
# (and checkpoints, which follow their splits); the engine; the adapters; the runner; the doors and the package.
BACKENDS_FLOORS = [
    (
        "shared",
        [
            "backends.ranks",
            "backends.distributed_init",
            "backends.mpi",
            "backends.cpu_distributed",
            "backends.parallel_dims",
            "backends.decoder_anatomy",
            "backends.monitoring",
        ],
    ),
    ("parts", ["backends.parts", "backends.data", "backends.weights"]),
    (
        "parallelisms",
        [
            "backends.zero",
            "backends.tensor_parallel",
            "backends.pipeline_parallel",
            "backends.context_parallel",
            "backends.expert_parallel",
            "backends.model_parallel",
            "backends.checkpoint",
            "backends.parallelize",
        ],
    ),
    ("engine", ["backends.engine"]),
    ("adapters", ["backends.adapters"]),
    ("runner", ["backends.runner", "backends.run"]),
    ("doors", ["backends.integrations"]),
    ("package", []),  # backends/__init__.py: re-exports initialize and the building blocks
]
MAX_BACKENDS_ROOT_FILES = 8
ALL_ROOTS = ["planner", "backends", "benchmarks_db", "benchmarks", "hardware_selector_cli", "scripts",
             "hardware_selector.py", "run_training_benchmark.py"]  # fmt: skip

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


def _floor(module: str, floors: list[tuple[str, list[str]]], default: str) -> int:
    """The floor of the longest prefix that names the module, else the default floor."""
    matches = [
        (len(prefix), position)
        for position, (_, prefixes) in enumerate(floors)
        for prefix in prefixes
        if _matches(module, prefix)
    ]
    return max(matches)[1] if matches else [name for name, _ in floors].index(default)


def floor_breaches(graph: dict[str, set[str]], package: str, floors, default: str) -> list[str]:
    """Imports inside `package` that run up the floors."""
    names = [name for name, _ in floors]
    breaches = []
    for module, targets in sorted(graph.items()):
        if not _matches(module, package):
            continue
        here = _floor(module, floors, default)
        for target in sorted(targets):
            there = _floor(target, floors, default)
            if _matches(target, package) and there > here:
                breaches.append(f"{module} ({names[here]}) imports {target} ({names[there]})")
    return breaches


def test_no_file_imports_itself_round_a_circle():
    """Every import counted (function level and TYPE_CHECKING too): the project's modules form no circle."""
    cycles = import_cycles(import_graph(ALL_ROOTS))
    assert not cycles, 'import circles (docs/architecture.md, "Floors"):\n' + "\n".join(" <-> ".join(c) for c in cycles)


def test_the_planner_imports_only_down_its_floors():
    breaches = floor_breaches(import_graph(["planner"]), "planner", PLANNER_FLOORS, "domain")
    assert not breaches, "an import runs up the planner's floors (docs/architecture.md):\n" + "\n".join(breaches)


def test_backends_import_only_down_their_floors():
    """Runner above adapters above engine above parallelisms above parts (docs/architecture.md, "Floors")."""
    breaches = floor_breaches(import_graph(["backends"]), "backends", BACKENDS_FLOORS, "package")
    assert not breaches, "an import runs up the floors of backends/:\n" + "\n".join(breaches)


def test_backends_keep_a_handful_of_root_files():
    roots = sorted(path.name for path in (REPO / "backends").glob("*.py"))
    assert len(roots) <= MAX_BACKENDS_ROOT_FILES, f"backends/ has {len(roots)} root files: {roots}"
    unplaced = [
        name
        for name in roots
        if name != "__init__.py"
        and _floor(f"backends.{name[:-3]}", BACKENDS_FLOORS, "package") == len(BACKENDS_FLOORS) - 1
    ]
    assert not unplaced, f"root files on no floor of BACKENDS_FLOORS: {unplaced}"


def test_the_graph_checks_catch_a_circle_and_a_climb():
    """The checkers on planted graphs: a lazy import that closes a circle, and the contract importing the plan."""
    graph = {"planner.contract.a": {"planner.plan"}, "planner.plan": {"planner.contract.a"}, "planner.errors": set()}
    assert import_cycles(graph) == [["planner.contract.a", "planner.plan"]]
    assert floor_breaches(graph, "planner", PLANNER_FLOORS, "domain") == [
        "planner.contract.a (contract) imports planner.plan (domain)"
    ]
    assert floor_breaches({"planner.plan": {"planner.contract.a"}}, "planner", PLANNER_FLOORS, "domain") == []


def test_the_graph_reads_imports_inside_functions(tmp_path, monkeypatch):
    import project_sources

    (tmp_path / "planner").mkdir()
    (tmp_path / "planner" / "a.py").write_text("def f():\n    from planner import b\n")
    (tmp_path / "planner" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import planner.a\n"
    )
    monkeypatch.setattr(project_sources, "REPO", tmp_path)
    assert import_graph(["planner"]) == {"planner.a": {"planner.b"}, "planner.b": {"planner.a"}}

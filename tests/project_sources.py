"""The project's own Python files and the imports they make, read from the source (no import runs).

Used by tests/test_imports.py (every import resolves and is declared) and
tests/test_clean_environment.py (the package imports with only the declared
dependencies installed).
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, declared in the test extra
    import tomli as tomllib

REPO = Path(__file__).resolve().parent.parent

# What `pip install hardware-selector` ships: it must run on the core dependencies alone.
PACKAGE_ROOTS = ["planner", "backends", "benchmarks_db", "hardware_selector_cli"]
PACKAGE_MODULES = ["hardware_selector.py", "run_training_benchmark.py"]
# Developer code: benchmarks, scripts and tests may also use the test extra.
DEVELOPER_ROOTS = ["benchmarks", "scripts", "tests"]

FIRST_PARTY = {
    "planner",
    "backends",
    "benchmarks_db",
    "benchmarks",
    "hardware_selector_cli",
    "hardware_selector",
    "run_training_benchmark",
    "scripts",
    "tests",
} | {path.stem for path in (REPO / "tests").glob("*.py")}  # pytest puts tests/ on sys.path


@dataclass(frozen=True)
class ImportSite:
    file: Path
    line: int
    module: str  # absolute dotted name
    names: tuple[str, ...]  # `from module import names`; empty for `import module`
    guarded: bool  # inside a try whose handler catches ImportError

    @property
    def top(self) -> str:
        return self.module.split(".")[0]

    def where(self) -> str:
        return f"{self.file.relative_to(REPO)}:{self.line}"


def python_files(roots: list[str]) -> list[Path]:
    files: list[Path] = []
    for root in roots:
        path = REPO / root
        files.extend([path] if path.is_file() else sorted(path.rglob("*.py")))
    return files


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    caught = handler.type
    names = caught.elts if isinstance(caught, ast.Tuple) else [caught]
    return caught is None or any(
        isinstance(name, ast.Name) and name.id in ("ImportError", "ModuleNotFoundError", "Exception") for name in names
    )


def import_sites(path: Path) -> list[ImportSite]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    guarded_nodes: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(_catches_import_error(h) for h in node.handlers):
            for statement in node.body:
                guarded_nodes.update(id(inner) for inner in ast.walk(statement))
    sites = []
    for node in ast.walk(tree):
        guarded = id(node) in guarded_nodes
        if isinstance(node, ast.Import):
            sites.extend(ImportSite(path, node.lineno, alias.name, (), guarded) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            sites.append(ImportSite(path, node.lineno, module, tuple(a.name for a in node.names), guarded))
    return sites


def third_party(site: ImportSite) -> bool:
    return site.top not in sys.stdlib_module_names and site.top not in FIRST_PARTY and site.top != "__future__"


def _pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))


def core_requirements() -> list[Requirement]:
    return [Requirement(text) for text in _pyproject()["project"]["dependencies"]]


def extra_requirements() -> dict[str, list[Requirement]]:
    extras = _pyproject()["project"].get("optional-dependencies", {})
    return {name: [Requirement(text) for text in texts] for name, texts in extras.items()}


def names(requirements: list[Requirement]) -> set[str]:
    return {canonicalize_name(requirement.name) for requirement in requirements}


def import_graph(roots: list[str]) -> dict[str, set[str]]:
    """Module -> the project modules it imports, every import statement counted: module level, inside functions
    and under TYPE_CHECKING. `from package import name` points at package.name when that is a module of ours,
    else at the package; `import a.b.c` at the longest prefix that is a module of ours."""
    modules = {module_name(path): path for path in python_files(roots)}

    def targets(site: ImportSite) -> list[str]:
        if site.names:
            found = [f"{site.module}.{name}" for name in site.names if f"{site.module}.{name}" in modules]
            if len(found) < len(site.names) and site.module in modules:
                found.append(site.module)
            return found
        parts = site.module.split(".")
        while parts and ".".join(parts) not in modules:
            parts.pop()
        return [".".join(parts)] if parts else []

    return {
        name: {target for site in import_sites(path) for target in targets(site) if target != name}
        for name, path in modules.items()
    }


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The graph's strongly connected components of more than one module (Tarjan's algorithm), sorted."""
    index: dict[str, int] = {}
    lowest: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = lowest[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in sorted(graph.get(module, ())):
            if target not in index:
                visit(target)
                lowest[module] = min(lowest[module], lowest[target])
            elif target in on_stack:
                lowest[module] = min(lowest[module], index[target])
        if lowest[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return sorted(cycles)

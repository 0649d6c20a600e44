"""What a run reads from outside its folder, for the targets that run it on other machines (k8s, SkyPilot).

plan.json holds absolute paths: the weights, the tokenizer and the data files (or globs) the run was emitted
with. A pod or a cloud node sees them only where they are mounted at the same paths, so the manifests list them
(docs/running.md, "Kubernetes" and "SkyPilot"). A glob is mounted as the folder above its first wildcard.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from planner.contract.run_config import RunConfig

_WILDCARDS = set("*?[")


def mount_root(path: str) -> str:
    """The folder to mount for `path`: itself, or for a glob the folder above its first wildcard."""
    parts = PurePosixPath(path).parts
    for index, part in enumerate(parts):
        if _WILDCARDS & set(part):
            return str(PurePosixPath(*parts[:index]))
    return path


def outside_inputs(run: RunConfig, run_dir: str) -> list[str]:
    """The paths (folders or files) the run reads that are not inside `run_dir`, each once, in a stable order."""
    model = run.model
    candidates = [
        *([model.path] if model.path else []),
        *([model.tokenizer] if model.tokenizer else []),
        *(mount_root(path) for path in [*run.data.train, *run.data.eval]),
    ]
    outside = list(dict.fromkeys(path for path in candidates if not PurePosixPath(path).is_relative_to(run_dir)))
    return [
        path
        for path in outside
        if not any(other != path and PurePosixPath(path).is_relative_to(other) for other in outside)
    ]

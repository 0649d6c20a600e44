"""skypilot.yaml: a SkyPilot task that trains the run folder on NODES cloud machines (`sky launch skypilot.yaml`).

Every node runs torchrun with SkyPilot's variables: the node count and rank (SKYPILOT_NUM_NODES,
SKYPILOT_NODE_RANK), its GPUs (SKYPILOT_NUM_GPUS_PER_NODE) and the first of SKYPILOT_NODE_IPS as the rendezvous;
torchrun starts the one runner, `python -m backends.run --plan RUN_DIR` (docs/running.md, "SkyPilot"). The folder
and what the run reads outside it are mounted at their own paths, because plan.json names them by absolute path.
tests/test_launch_skypilot.py validates the task with SkyPilot's schema and loads it with SkyPilot's own loader
(in .venv-skypilot, which `make env` builds).
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from planner.contract.run_config import RunConfig
from planner.emit.launch_scripts import DEFAULT_MASTER_PORT, RUNNER_MODULE, job_name
from planner.emit.run_inputs import outside_inputs
from planner.emit.yaml_text import comment_lines, manifest_yaml
from planner.launch_target import INSTANCE_GPU_COUNTS, LaunchTarget
from planner.plan import Plan

# Our catalog's names (planner/catalog/gpus.json) where SkyPilot's accelerator names (`sky show-gpus`) differ;
# the others are spelled alike.
SKYPILOT_ACCELERATORS = {
    "H100-80GB": "H100",
    "H100-PCIe": "H100",
    "A100-40GB": "A100",
    "A100-PCIe-40GB": "A100",
    "A100-PCIe-80GB": "A100-80GB",
    "V100-16GB": "V100",
    "V100-PCIe-16GB": "V100",
    "V100-PCIe-32GB": "V100-32GB",
    "V100S": "V100-32GB",
    "RTX-4090": "RTX4090",
    "RTX-3090": "RTX3090",
    "A6000": "RTXA6000",
}


def accelerators(gpu_name: str, count: int) -> str:
    """SkyPilot's `NAME:COUNT` for `count` of our catalog's `gpu_name` (H100-80GB, 8 -> H100:8)."""
    return f"{SKYPILOT_ACCELERATORS.get(gpu_name, gpu_name)}:{count}"


def project_root() -> Path | None:
    """This project's source tree, when it runs from one (pyproject.toml beside planner/): SkyPilot's workdir."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / "pyproject.toml").is_file() and (root / "backends").is_dir() else None


def skypilot_document(plan: Plan, run: RunConfig, run_dir: str, launch: LaunchTarget) -> dict[str, Any]:
    q = shlex.quote
    on_cpu = run.device == "cpu"
    resources: dict[str, Any] = (
        {"cpus": f"{run.nproc_per_node}+"}
        if on_cpu
        else {"accelerators": accelerators(plan.cluster.gpu.name, run.nproc_per_node)}
    )
    if launch.image:
        resources["image_id"] = f"docker:{launch.image}"
    document: dict[str, Any] = {"name": job_name(plan), "num_nodes": run.num_nodes, "resources": resources}
    root = None if launch.image else project_root()
    if root is not None:  # the source tree goes up to ~/sky_workdir (its .gitignore keeps .venv/ back)
        document["workdir"] = str(root)
        document["setup"] = "set -euo pipefail\npip install -e .\n"
    mounts = [run_dir, *outside_inputs(run, run_dir)]
    document["file_mounts"] = {path: path for path in mounts}
    nproc = str(run.nproc_per_node) if on_cpu else '"$SKYPILOT_NUM_GPUS_PER_NODE"'
    document["run"] = (
        "\n".join(
            [
                "set -euo pipefail",
                *(["export DS_ACCELERATOR=cpu"] if on_cpu else []),
                'MASTER_ADDR="$(echo "$SKYPILOT_NODE_IPS" | head -n1)"',
                f"cd {q(run_dir)}",
                'python -m torch.distributed.run --nnodes="$SKYPILOT_NUM_NODES" --node-rank="$SKYPILOT_NODE_RANK" \\',
                f'  --nproc-per-node={nproc} --master-addr="$MASTER_ADDR" --master-port={DEFAULT_MASTER_PORT} \\',
                f"  -m {RUNNER_MODULE} --plan {q(run_dir)}",
            ]
        )
        + "\n"
    )
    return document


def skypilot_yaml(plan: Plan, run: RunConfig, run_dir: str, launch: LaunchTarget) -> str:
    header = [
        f"{plan.model.name}, {plan.config.strategy.value}: a SkyPilot task written by hardware-selector.",
        f'Launch with `sky launch -c {job_name(plan)} skypilot.yaml`; docs/running.md, "SkyPilot".',
        f"{run.num_nodes} node(s) x {run.nproc_per_node} process(es); the process count is part of the plan.",
        "file_mounts copies the folder (and the run's data and weights) to every node at the same path. A run",
        "over several nodes writes its checkpoints from each of them: mount a bucket at the folder's path",
        "(file_mounts: {PATH: {source: s3://..., mode: MOUNT}}) to keep them in one place.",
    ]
    return comment_lines(header) + manifest_yaml(skypilot_document(plan, run, run_dir, launch))


def instance_shape_warning(launch: LaunchTarget | None, gpu_name: str, gpus_per_node: int) -> str | None:
    """The warning `plan --emit --launcher skypilot` prints when a node's GPU count is no instance's: the task is
    written (a private cloud may have it), but `sky launch` would find nothing on the public clouds."""
    if launch is None or launch.name != "skypilot" or gpus_per_node in INSTANCE_GPU_COUNTS:
        return None
    return (
        f"warning: skypilot.yaml asks for {accelerators(gpu_name, gpus_per_node)} per node, a count the public clouds do not rent "
        f"per instance (they rent {', '.join(map(str, INSTANCE_GPU_COUNTS))}); plan with --gpus-per-node 8 (or 4, 2, "
        "1) unless your cloud has it"
    )

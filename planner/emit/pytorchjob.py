"""pytorchjob.yaml: a Kubeflow PyTorchJob (Training Operator v1, kubeflow.org/v1) that trains the run folder.

Each pod runs torchrun, which takes its node count, node rank and rendezvous from the PET_* variables the
operator sets, and torchrun starts the one runner, `python -m backends.run --plan RUN_DIR` (docs/running.md,
"Kubernetes"). A static plan is one Master pod and NODES-1 Workers; an elastic plan (`--elastic MIN:MAX`) is
Workers only, with an elasticPolicy over the same node range and a c10d rendezvous on the first worker, so the
pods that remain after a loss restart and re-plan. tests/test_launch_targets.py validates the manifest against
the CRD's published schema (tests/data/k8s/).
"""

from __future__ import annotations

from typing import Any

from planner.contract.run_config import RunConfig
from planner.elastic_plan import ElasticPlan
from planner.emit.launch_scripts import RUNNER_MODULE, job_name
from planner.emit.run_inputs import outside_inputs
from planner.emit.yaml_text import comment_lines, manifest_yaml
from planner.launch_target import PLACEHOLDER_IMAGE, LaunchTarget
from planner.plan import Plan

# The operator finds the rendezvous port on the container named "pytorch", by this port name (its defaults).
CONTAINER_NAME = "pytorch"
PORT_NAME = "pytorchjob-port"
PORT = 23456
RUN_FOLDER_CLAIM = "hs-run-folder"  # the ReadWriteMany claim the header asks for


def pytorchjob_document(
    plan: Plan, run: RunConfig, run_dir: str, launch: LaunchTarget, elastic: ElasticPlan | None = None
) -> dict[str, Any]:
    container = {
        "name": CONTAINER_NAME,
        "image": launch.image or PLACEHOLDER_IMAGE,
        "imagePullPolicy": "IfNotPresent",
        "command": ["python", "-m", "torch.distributed.run", "-m", RUNNER_MODULE, "--plan", run_dir],
        "workingDir": run_dir,
        "env": [{"name": "DS_ACCELERATOR", "value": "cpu"}] if run.device == "cpu" else [],
        "ports": [{"name": PORT_NAME, "containerPort": PORT}],
        "resources": _resources(run, plan.cluster.gpu.vendor),
        "volumeMounts": [
            {"name": "run-folder", "mountPath": run_dir},
            {"name": "dshm", "mountPath": "/dev/shm"},
        ],
    }
    if not container["env"]:
        del container["env"]
    pod = {
        "spec": {
            "containers": [container],
            "volumes": [
                {"name": "run-folder", "persistentVolumeClaim": {"claimName": RUN_FOLDER_CLAIM}},
                # The data loaders' and NCCL's shared memory: a container's own /dev/shm is 64 MiB.
                {"name": "dshm", "emptyDir": {"medium": "Memory"}},
            ],
        }
    }
    spec: dict[str, Any] = {"nprocPerNode": str(run.nproc_per_node), "runPolicy": {"cleanPodPolicy": "None"}}
    if elastic is None:
        # A pod of a static rendezvous cannot rejoin it: a failed pod fails the job, which is resubmitted and
        # resumes from the newest checkpoint.
        replicas = {"Master": _replica(1, "Never", pod)}
        if run.num_nodes > 1:
            replicas["Worker"] = _replica(run.num_nodes - 1, "Never", pod)
    else:
        spec["elasticPolicy"] = {
            "rdzvBackend": "c10d",
            "minReplicas": elastic.min_nodes,
            "maxReplicas": elastic.max_nodes,
            "maxRestarts": elastic.max_restarts,
        }
        replicas = {"Worker": _replica(run.num_nodes, "OnFailure", pod)}
    spec["pytorchReplicaSpecs"] = replicas
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": job_name(plan)}, "spec": spec}


def _replica(count: int, restart: str, pod: dict[str, Any]) -> dict[str, Any]:
    return {"replicas": count, "restartPolicy": restart, "template": pod}


# The resource each vendor's device plugin advertises: NVIDIA's nvidia.com/gpu; AMD's "Exposes AMD GPUs as
# amd.com/gpu resources in Kubernetes" (https://instinct.docs.amd.com/projects/k8s-device-plugin/en/latest/). An
# AMD pod asking for nvidia.com/gpu would wait in Pending on an AMD cluster, saying nothing (a new user's audit).
GPU_RESOURCE = {"nvidia": "nvidia.com/gpu", "amd": "amd.com/gpu"}


def _resources(run: RunConfig, vendor: str) -> dict[str, Any]:
    if run.device == "cpu":
        return {"requests": {"cpu": run.nproc_per_node}}
    return {"limits": {GPU_RESOURCE.get(vendor, GPU_RESOURCE["nvidia"]): run.nproc_per_node}}


def pytorchjob_yaml(
    plan: Plan, run: RunConfig, run_dir: str, launch: LaunchTarget, elastic: ElasticPlan | None = None
) -> str:
    inputs = outside_inputs(run, run_dir)
    header = [
        f"{plan.model.name}, {plan.config.strategy.value}: a Kubeflow PyTorchJob written by hardware-selector.",
        "Submit with `kubectl create -f pytorchjob.yaml` (Training Operator v1 installed); docs/running.md.",
        f"{'Workers' if elastic else 'Pods'}: {run.num_nodes} x {run.nproc_per_node} process(es)"
        + (f", elastic over {elastic.node_range} pods." if elastic else "."),
        "",
        *(
            [f"The image: {launch.image} (--image)."]
            if launch.image
            else [
                f"The image, {PLACEHOLDER_IMAGE}, is a placeholder: replace it (or re-emit with",
                "--image) with an image that has this project and its dependencies installed.",
            ]
        ),
        "The run folder: a volume, not a ConfigMap. The runner writes metrics.jsonl, checkpoints/ and final/ into",
        "it from every pod, and a ConfigMap is read-only and capped at 1 MiB. Create a ReadWriteMany",
        f"PersistentVolumeClaim named {RUN_FOLDER_CLAIM} that holds this folder; it is mounted at the folder's own",
        f"path, {run_dir}, because plan.json names its files by absolute path.",
    ]
    if inputs:
        header.append("The run also reads, by absolute path, what each pod must see at the same place (add volumes):")
        header += [f"  {path}" for path in inputs]
    document = pytorchjob_document(plan, run, run_dir, launch, elastic)
    return comment_lines(header) + manifest_yaml(document)

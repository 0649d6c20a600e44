"""`plan --emit DIR --launcher torchrun|slurm|k8s|mpi`: each target's file against its published schema.

pytorchjob.yaml is validated against the Kubeflow Training Operator v1 CRD's openAPIV3Schema (tests/data/k8s/),
unknown fields refused as `kubectl create --validate=strict` refuses them, and the check is shown to refuse a
broken file. Bad input is one line and exit code 2. SkyPilot's task: tests/test_launch_skypilot.py.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import jsonschema
import pytest
import yaml

from planner.emit.launch_scripts import job_name
from planner.launch_target import PLACEHOLDER_IMAGE, LaunchTarget
from planner.rundir.write import emit_run_folder
from tests.distributed import cli_in_process as cli
from tests.emit_plans import make_plan

DATA = Path(__file__).parent / "data"


def _strict(schema: dict) -> dict:
    """The schema with unknown fields refused wherever it lists an object's fields (kubectl's strict field
    validation; the API server would drop them silently)."""
    schema = copy.deepcopy(schema)
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            listed = "properties" in node and "additionalProperties" not in node
            if listed and not node.get("x-kubernetes-preserve-unknown-fields"):
                node["additionalProperties"] = False
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return schema


@pytest.fixture(scope="module")
def pytorchjob_schema():
    crd = yaml.safe_load((DATA / "k8s" / "kubeflow.org_pytorchjobs.yaml").read_text())
    assert crd["spec"]["group"] == "kubeflow.org" and crd["spec"]["names"]["kind"] == "PyTorchJob"
    (version,) = [entry for entry in crd["spec"]["versions"] if entry["name"] == "v1"]
    return jsonschema.Draft7Validator(_strict(version["schema"]["openAPIV3Schema"]))


def _emit(run_dir: Path, launch: LaunchTarget | None, **plan_fields) -> dict[str, Path]:
    emit_run_folder(make_plan(**plan_fields), run_dir, launch=launch)
    return {path.name: path for path in run_dir.iterdir()}


# --- Kubernetes ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("nodes", "gpu"), [(1, "h100-80gb"), (3, "a100-80gb"), (2, "MI300X")])
def test_pytorchjob_follows_the_crd_and_the_plan(tmp_path, pytorchjob_schema, nodes, gpu):
    run_dir = tmp_path / "run dir"
    files = _emit(run_dir, LaunchTarget(name="k8s"), gpu=gpu, gpus_per_node=8, nodes=nodes, strategy="fsdp")
    manifest = yaml.safe_load(files["pytorchjob.yaml"].read_text())
    assert [error.message for error in pytorchjob_schema.iter_errors(manifest)] == []

    run = json.loads(files["plan.json"].read_text())["run"]
    spec = manifest["spec"]
    replicas = spec["pytorchReplicaSpecs"]
    assert sum(replica["replicas"] for replica in replicas.values()) == run["num_nodes"] == nodes
    assert replicas["Master"]["replicas"] == 1 and ("Worker" in replicas) == (nodes > 1)
    assert spec["nprocPerNode"] == str(run["nproc_per_node"]) and "elasticPolicy" not in spec
    for replica in replicas.values():
        pod = replica["template"]["spec"]
        (container,) = pod["containers"]
        assert container["image"] == PLACEHOLDER_IMAGE
        # AMD's device plugin advertises amd.com/gpu (planner/emit/pytorchjob.py GPU_RESOURCE; a new user's audit)
        resource = "amd.com/gpu" if gpu == "MI300X" else "nvidia.com/gpu"
        assert container["resources"]["limits"] == {resource: run["nproc_per_node"]}
        assert container["command"][-4:] == ["-m", "backends.run", "--plan", str(run_dir.resolve())]
        volumes = {volume["name"]: volume for volume in pod["volumes"]}
        mounts = {mount["mountPath"]: mount["name"] for mount in container["volumeMounts"]}
        assert volumes[mounts["/dev/shm"]]["emptyDir"] == {"medium": "Memory"}
        assert "persistentVolumeClaim" in volumes[mounts[str(run_dir.resolve())]]
    assert "pytorchjob.yaml" in files["README.md"].read_text() and "skypilot.yaml" not in files


def test_elastic_pytorchjob_takes_the_plans_node_range(tmp_path, pytorchjob_schema):
    run_dir = tmp_path / "elastic"
    completed = cli(
        "plan", "-m", "gpt2", "--gpu", "cpu", "--gpus-per-node", "2", "--nodes", "2", "--seq-len", "64",
        "--global-batch", "12", "--strategies", "ddp", "--elastic", "1:3", "--emit", run_dir,
        "--launcher", "k8s", "--image", "ghcr.io/you/train:1.0",
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr
    manifest = yaml.safe_load((run_dir / "pytorchjob.yaml").read_text())
    assert [error.message for error in pytorchjob_schema.iter_errors(manifest)] == []
    elastic = json.loads((run_dir / "plan.json").read_text())["elastic"]
    assert (elastic["min_nodes"], elastic["max_nodes"]) == (1, 3)  # global batch 12 splits over 2, 4 and 6 ranks
    policy = manifest["spec"]["elasticPolicy"]
    assert (policy["minReplicas"], policy["maxReplicas"], policy["maxRestarts"]) == (
        elastic["min_nodes"],
        elastic["max_nodes"],
        elastic["max_restarts"],
    )
    assert policy["rdzvBackend"] == "c10d" and list(manifest["spec"]["pytorchReplicaSpecs"]) == ["Worker"]
    (container,) = manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    assert container["image"] == "ghcr.io/you/train:1.0"
    assert container["resources"] == {"requests": {"cpu": 2}}  # a CPU plan asks for no GPU
    assert {"name": "DS_ACCELERATOR", "value": "cpu"} in container["env"]


def _admission_errors(manifest: dict) -> list[str]:
    """What the operator's admission webhook refuses beyond the schema (pkg/webhooks/pytorch/pytorchjob_webhook.go
    of the same v1.9.0 release): the name a DNS-1035 label, Master and Worker only, a container named "pytorch" with
    an image in each, one Master, at least one Worker, Workers under an elastic policy, and nprocPerNode once."""
    spec, errors = manifest["spec"], []
    if not re.fullmatch(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?", manifest["metadata"]["name"]):
        errors.append("metadata.name is not a DNS-1035 label")
    for role, replica in spec["pytorchReplicaSpecs"].items():
        containers = replica["template"]["spec"]["containers"]
        if role not in ("Master", "Worker"):
            errors.append(f"{role}: not a replica type")
        if not any(container["name"] == "pytorch" for container in containers) or not all(
            container.get("image") for container in containers
        ):
            errors.append(f"{role}: needs a container named pytorch, and every container an image")
        if replica["replicas"] != 1 if role == "Master" else replica["replicas"] < 1:
            errors.append(f"{role}: wrong replica count")
    if "elasticPolicy" in spec:
        if "Worker" not in spec["pytorchReplicaSpecs"]:
            errors.append("an elastic policy needs Workers")
        if "nProcPerNode" in spec["elasticPolicy"] and "nprocPerNode" in spec:
            errors.append("elasticPolicy.nProcPerNode must not be used with nprocPerNode")
    return errors


@pytest.mark.parametrize(
    ("model", "fields"),
    [("gpt2", {"nodes": 4, "strategy": "ddp"}), ("llama-2-7b", {"nodes": 2, "strategy": "deepspeed", "zero_stage": 3})],
)
def test_pytorchjob_passes_the_operators_admission_rules(tmp_path, model, fields):
    files = _emit(tmp_path / "run", LaunchTarget(name="k8s"), model=model, gpu="h100-80gb", gpus_per_node=8, **fields)
    assert _admission_errors(yaml.safe_load(files["pytorchjob.yaml"].read_text())) == []
    assert _admission_errors({"metadata": {"name": "hs-modèle-"}, "spec": {"pytorchReplicaSpecs": {}}}) == [
        "metadata.name is not a DNS-1035 label"
    ]  # the rules can fail
    plan = make_plan(strategy="ddp")
    local_folder = plan.model_copy(update={"model": plan.model.model_copy(update={"name": "Modèle_X.1"})})
    assert job_name(local_folder) == "hs-mod-le-x-1-ddp"  # a model folder's name, as a DNS-1035 label


def test_the_crd_check_refuses_a_broken_manifest(tmp_path, pytorchjob_schema):
    import hardware_selector  # the Python API takes the same target as the CLI

    hardware_selector.emit_run_folder(make_plan(gpu="h100-80gb", gpus_per_node=8), tmp_path / "run", launcher="k8s")
    manifest = yaml.safe_load((tmp_path / "run" / "pytorchjob.yaml").read_text())
    assert pytorchjob_schema.is_valid(manifest)
    misspelled = copy.deepcopy(manifest)
    misspelled["spec"]["pytorchReplicaSpecs"]["Master"]["replica"] = 1
    as_text = copy.deepcopy(manifest)
    as_text["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] = "one"
    no_replicas = copy.deepcopy(manifest)
    del no_replicas["spec"]["pytorchReplicaSpecs"]
    for broken in (misspelled, as_text, no_replicas):
        assert not pytorchjob_schema.is_valid(broken)


# --- torchrun and MPI: launch.sh's default; bad input --------------------------------------------------------


@pytest.mark.parametrize(("target", "launcher"), [("torchrun", "torchrun"), ("mpi", "mpirun"), ("slurm", "torchrun")])
def test_the_target_sets_launch_shs_launcher(tmp_path, target, launcher):
    files = _emit(tmp_path / "run", LaunchTarget(name=target), strategy="deepspeed", zero_stage=2)
    assert json.loads(files["plan.json"].read_text())["run"]["launcher"] == launcher
    assert f"LAUNCHER=${{LAUNCHER:-{launcher}}}\n" in files["launch.sh"].read_text()
    assert "slurm.sbatch" in files and not {"pytorchjob.yaml", "skypilot.yaml"} & set(files)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--launcher", "kube"], "error: --launcher must be one of torchrun, slurm, k8s, skypilot, mpi, not 'kube'"),
        # launch.sh's own launchers: the line says how to start them (it named only the five targets)
        (
            ["--launcher", "deepspeed"],
            "error: --launcher must be one of torchrun, slurm, k8s, skypilot, mpi, not "
            "'deepspeed': launch.sh starts the deepspeed launcher itself (`LAUNCHER=deepspeed bash DIR/launch.sh`",
        ),
        (
            ["--launcher", "accelerate"],
            "error: --launcher must be one of torchrun, slurm, k8s, skypilot, mpi, not "
            "'accelerate': launch.sh starts the accelerate launcher itself (`LAUNCHER=accelerate bash DIR/launch.sh`",
        ),
        (["--launcher", "mpi", "--image", "ghcr.io/a/b:1"], "error: --image is for --launcher k8s or skypilot"),
        (["--launcher", "k8s", "--image", "My Image"], "error: --image 'My Image' is not an image reference"),
        # a value with a line break, quoted in the message, split it over two lines (planner/errors.py)
        (["--launcher", "skypilot", "--image", "a\nb"], "error: --image 'a\\nb' is not an image reference"),
    ],
)
def test_bad_launch_targets_are_one_line(tmp_path, extra, message):
    run_dir = tmp_path / "run"
    completed = cli("plan", "-m", "gpt2", "--gpu", "cpu", "--gpus-per-node", "2", "--emit", run_dir, *extra)
    assert completed.returncode == 2 and completed.stderr.startswith(message)
    assert len(completed.stderr.strip().splitlines()) == 1 and not run_dir.exists()

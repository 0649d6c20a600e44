"""`plan --emit DIR --launcher skypilot`: skypilot.yaml against SkyPilot's own task and resources schemas
(tests/data/skypilot/) and by SkyPilot's own loader, `sky.Task.from_yaml`, in the venv of its own that `make env`
builds (.venv-skypilot; the test skips, saying why, where it could not be installed). Both checks are shown to
refuse a broken file. SkyPilot's run script is executed with SkyPilot's variables and a recording interpreter, to
compare the torchrun command it starts. (The other targets: tests/test_launch_targets.py.)
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from planner.contract.run_config import DataConfig
from planner.emit.skypilot_task import SKYPILOT_ACCELERATORS
from planner.launch_target import LaunchTarget
from planner.rundir.write import RunOptions, emit_run_folder
from scripts.demo_checkpoint import train_tokenizer, write_corpus
from tests.distributed import cli_in_process as cli
from tests.emit_plans import make_plan

DATA = Path(__file__).parent / "data"


def _case_insensitive_enum(validator, enums, instance, schema):
    """SkyPilot's own keyword (sky/utils/validator.py): an enum that ignores case."""
    if instance.lower() not in [enum.lower() for enum in enums]:
        yield jsonschema.ValidationError(f"{instance!r} is not one of {enums!r}")


SkyPilotValidator = jsonschema.validators.extend(
    jsonschema.Draft7Validator, validators={"case_insensitive_enum": _case_insensitive_enum}
)


@pytest.fixture(scope="module")
def skypilot_schemas():
    stored = json.loads((DATA / "skypilot" / "task_schema.json").read_text())
    return SkyPilotValidator(stored["task"]), SkyPilotValidator(stored["resources"])


def _skypilot_errors(task: dict, schemas) -> list[str]:
    task_schema, resources_schema = schemas
    errors = list(task_schema.iter_errors(task)) + list(resources_schema.iter_errors(task.get("resources", {})))
    return [error.message for error in errors]


# --- the task -----------------------------------------------------------------------------------------------

RECORDER = '#!/bin/bash\nprintf \'%s\\0\' "$@" > "$RECORD_FILE"\n'


def _skypilot_folder(tmp_path: Path) -> tuple[Path, list[str]]:
    """A 2-node H100 folder that reads a glob of text files and a tokenizer, both outside it."""
    corpus, tokenizer = tmp_path / "corpus", tmp_path / "tokenizer"
    corpus.mkdir()
    (corpus / "a.txt").write_text("some text\n" * 200)  # enough for one step (emit refuses less: data_bound.py)
    # A real tokenizer: emit loads it and checks it against the model's vocabulary, as train does.
    train_tokenizer(write_corpus(tmp_path / "tokenizer corpus.txt", 50), tokenizer)
    run_dir = tmp_path / "sky run"
    plan = make_plan(gpu="h100-80gb", gpus_per_node=8, nodes=2, strategy="fsdp")
    options = RunOptions(data=DataConfig(train=[str(corpus / "*.txt")]), tokenizer=str(tokenizer))
    emit_run_folder(plan, run_dir, options=options, launch=LaunchTarget(name="skypilot"))
    return run_dir, [str(tokenizer), str(corpus)]


def test_skypilot_task_follows_skypilots_schema_and_runs_torchrun_over_its_nodes(tmp_path, skypilot_schemas):
    run_dir, outside = _skypilot_folder(tmp_path)
    task = yaml.safe_load((run_dir / "skypilot.yaml").read_text())
    assert _skypilot_errors(task, skypilot_schemas) == []
    assert (task["num_nodes"], task["resources"]["accelerators"]) == (2, "H100:8")
    folder = str(run_dir.resolve())
    # the folder, the tokenizer and the glob's folder, each at its own path
    assert task["file_mounts"] == {path: path for path in [folder, *outside]}

    # Node 1 of 2, as SkyPilot starts the run script there; `python` on PATH records its argv.
    node = {
        "SKYPILOT_NODE_IPS": "10.0.0.7\n10.0.0.9\n",
        "SKYPILOT_NODE_RANK": "1",
        "SKYPILOT_NUM_NODES": "2",
        "SKYPILOT_NUM_GPUS_PER_NODE": "8",
    }
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "python").write_text(RECORDER)
    (fake_bin / "python").chmod(0o755)
    record = tmp_path / "argv"
    env = {**os.environ, **node, "PATH": f"{fake_bin}{os.pathsep}{os.environ['PATH']}", "RECORD_FILE": str(record)}
    subprocess.run(["bash", "-c", task["run"]], check=True, env=env, timeout=60)
    assert record.read_bytes().decode().split("\0")[:-1] == [
        "-m", "torch.distributed.run", "--nnodes=2", "--node-rank=1", "--nproc-per-node=8",
        "--master-addr=10.0.0.7", "--master-port=29500", "-m", "backends.run", "--plan", folder,
    ]  # fmt: skip


def test_skypilot_check_refuses_a_broken_task(tmp_path, skypilot_schemas):
    run_dir, _ = _skypilot_folder(tmp_path)
    task = yaml.safe_load((run_dir / "skypilot.yaml").read_text())
    assert _skypilot_errors({**task, "num_node": 2}, skypilot_schemas)
    assert _skypilot_errors({**task, "num_nodes": "two"}, skypilot_schemas)
    assert _skypilot_errors({**task, "resources": {**task["resources"], "accelerator": "H100:8"}}, skypilot_schemas)


# SkyPilot's own loader, in whichever interpreter has SkyPilot: this one (the [skypilot] extra) or the venv of its
# own that `make env` builds beside .venv (the Makefile's `skypilot` target: SkyPilot pins click below 8.2). It
# runs apart, with HOME in a temporary folder (no ~/.sky, no cloud credentials), only PATH and HOME of this
# environment, usage collection off, and every IP connection and host lookup refused and recorded: loading a task
# must reach nothing. The results are printed after SkyPilot's own exit handlers have run.
SKYPILOT_LOADER = r"""
import atexit, json, socket, sys

reached, out = [], {"tasks": []}
atexit.register(lambda: print("\n" + json.dumps({**out, "network": reached}, default=str)))
connect, connect_ex = socket.socket.connect, socket.socket.connect_ex


def guard(original):
    def call(self, address, *args):
        if self.family in (socket.AF_INET, socket.AF_INET6):
            reached.append(f"connect {address!r}")
            raise OSError("no network while loading a task")
        return original(self, address, *args)

    return call


def lookup(host, *args, **kwargs):
    reached.append(f"getaddrinfo {host!r}")
    raise OSError("no network while loading a task")


socket.socket.connect, socket.socket.connect_ex, socket.getaddrinfo = guard(connect), guard(connect_ex), lookup
import sky

out["version"] = sky.__version__
for path in sys.argv[1:]:
    try:
        task = sky.Task.from_yaml(path)
    except Exception as error:
        out["tasks"].append({"error": f"{type(error).__name__}: {error}"})
        continue
    out["tasks"].append({
        "name": task.name, "num_nodes": task.num_nodes, "run": task.run, "setup": task.setup,
        "workdir": task.workdir, "file_mounts": task.file_mounts,
        "resources": [{"accelerators": r.accelerators, "image_id": r.image_id} for r in task.resources],
    })
"""
# The Makefile passes SKY_VENV relative to the repository; the loader runs in another folder, so make it absolute
# (absolute(), not resolve(): resolving the venv's python symlink would leave the venv).
SKY_VENV = (Path(__file__).resolve().parents[1] / os.environ.get("SKY_VENV", ".venv-skypilot")).absolute()


def _skypilot_python() -> str:
    """An interpreter with SkyPilot, or a skip that says why there is none."""
    if importlib.util.find_spec("sky") is not None:
        return sys.executable
    python = SKY_VENV / "bin" / "python"
    if python.is_file():
        return str(python)
    failed = SKY_VENV / "install-failed.txt"
    if failed.is_file():
        pytest.skip(" ".join(failed.read_text().split()))
    pytest.skip(f"SkyPilot is in neither this venv nor {SKY_VENV}: `make skypilot` installs it there")


def _load_with_skypilot(tmp_path: Path, *paths: Path) -> dict:
    home = tmp_path / "sky home"
    home.mkdir()
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "SKYPILOT_DISABLE_USAGE_COLLECTION": "1"}
    completed = subprocess.run(
        [_skypilot_python(), "-c", SKYPILOT_LOADER, *map(str, paths)],
        capture_output=True, text=True, env=env, cwd=home, timeout=300,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout.strip().splitlines()[-1])


def test_skypilots_own_loader_reads_the_task(tmp_path):
    run_dir, outside = _skypilot_folder(tmp_path)
    task = yaml.safe_load((run_dir / "skypilot.yaml").read_text())
    broken = {
        "num_node": {**task, "num_node": 2},
        "accelerator": {**task, "resources": {**task["resources"], "accelerator": "H100:8"}},
    }
    for name, document in broken.items():
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(document))
    loaded = _load_with_skypilot(tmp_path, run_dir / "skypilot.yaml", *(tmp_path / f"{name}.yaml" for name in broken))
    assert loaded["network"] == []

    read, *refused = loaded["tasks"]
    assert read == {
        "name": task["name"],
        "num_nodes": 2,
        "run": task["run"],
        "setup": task["setup"],
        "workdir": task["workdir"],
        "file_mounts": {path: path for path in [str(run_dir.resolve()), *outside]},
        "resources": [{"accelerators": {"H100": 8}, "image_id": None}],
    }
    assert '--nnodes="$SKYPILOT_NUM_NODES"' in read["run"] and "$SKYPILOT_NODE_IPS" in read["run"]
    for (name, _), result in zip(broken.items(), refused, strict=True):
        assert name in result.get("error", ""), result


def test_catalog_gpus_take_skypilots_names():
    assert {name: SKYPILOT_ACCELERATORS.get(name, name) for name in ("H100-80GB", "A100-40GB", "A100-80GB")} == {
        "H100-80GB": "H100",
        "A100-40GB": "A100",
        "A100-80GB": "A100-80GB",
    }


@pytest.mark.parametrize(("gpus_per_node", "warned"), [(3, True), (8, False)])
def test_a_skypilot_node_of_a_count_no_cloud_rents_is_warned_of(tmp_path, gpus_per_node, warned):
    """`accelerators: H100:3` was written without a word; `sky launch` finds no instance of three H100s on the public
    clouds, which rent 1, 2, 4, 8 (or 16) per instance. The task is still written (a private cloud may have it)."""
    run_dir = tmp_path / "sky"
    completed = cli("plan", "-m", "llama-2-7b", "--gpu", "H100-80GB", "--gpus-per-node", str(gpus_per_node),
                    "--nodes", "2", "--launcher", "skypilot", "--emit", run_dir)  # fmt: skip
    assert completed.returncode == 0, completed.stderr
    assert f"accelerators: H100:{gpus_per_node}" in (run_dir / "skypilot.yaml").read_text()
    warning = f"warning: skypilot.yaml asks for H100:{gpus_per_node} per node, a count the public clouds do not"
    assert (warning in completed.stderr) is warned, completed.stderr

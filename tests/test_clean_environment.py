"""The package works in a venv holding only its declared dependencies (tests/clean_environment.py).

Every module of what `pip install hardware-selector` ships is imported
there, then the README's fine-tune path runs there end to end: the demo
checkpoint, `plan --emit` with data, `train` (torchrun, one process, real
tokens) and loading the result with transformers. A function-level import of
an undeclared library (the way `click` and `pyyaml` once slipped through)
fails here. The control proves the venv really lacks what was not declared.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from clean_environment import build, declared_closure
from project_sources import PACKAGE_MODULES, PACKAGE_ROOTS, core_requirements, module_name, python_files

pytestmark = pytest.mark.slow

OPTIONAL_MODULES = {"backends.integrations.lightning_strategy": "lightning"}  # module: the extra it needs


@pytest.fixture(scope="module")
def clean_python(tmp_path_factory):
    return build(tmp_path_factory.mktemp("clean-venv") / "venv")


def _run(python, *args: str, cwd=None, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    env["PATH"] = f"{python.parent}{os.pathsep}{env.get('PATH', '')}"
    return subprocess.run([str(python), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def test_the_closure_is_what_pyproject_declares_and_no_more():
    closure = declared_closure(core_requirements())
    assert {"torch", "transformers", "deepspeed", "accelerate", "typer", "duckdb", "click", "pyyaml"} <= set(closure)
    assert not {"pytest", "hypothesis", "ruff", "mypy", "tensorboard"} & set(closure)


def test_what_is_not_declared_is_absent_there(clean_python):
    result = _run(
        clean_python,
        "-c",
        "import importlib.util as u; print([u.find_spec(m) is None for m in ('pytest', 'hypothesis', 'tensorboard', 'torch')])",
    )
    assert result.stdout.strip() == "[True, True, True, False]", result.stderr


def test_every_module_imports_there(clean_python):
    modules = [module_name(path) for path in python_files(PACKAGE_ROOTS + PACKAGE_MODULES)]
    script = (
        "import importlib, json, sys\n"
        "failed = {}\n"
        f"for name in {modules!r}:\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except Exception as error:\n"
        "        failed[name] = f'{type(error).__name__}: {error}'\n"
        "print(json.dumps(failed))\n"
    )
    result = _run(clean_python, "-c", script)
    assert result.returncode == 0, result.stderr[-3000:]
    failed = json.loads(result.stdout.strip().splitlines()[-1])
    # A module of an optional extra may not import without it, but must say which extra to install.
    for name, extra in OPTIONAL_MODULES.items():
        assert f"pip install 'hardware-selector[{extra}]'" in failed.pop(
            name, f"pip install 'hardware-selector[{extra}]'"
        )
    assert failed == {}
    assert len(modules) > 150


def test_the_readme_fine_tune_runs_there(clean_python, tmp_path):
    steps = [
        ["scripts/demo_checkpoint.py", str(tmp_path / "demo")],
        [
            "-m", "hardware_selector", "plan", "--model", str(tmp_path / "demo" / "my-gpt2"), "--gpu", "cpu",
            "--gpus-per-node", "1", "--seq-len", "64", "--global-batch", "4", "--strategies", "ddp",
            "--emit", str(tmp_path / "run"), "--data", str(tmp_path / "demo" / "corpus.txt"), "--steps", "3",
            "--eval-every", "3",
        ],
        ["-m", "hardware_selector", "train", str(tmp_path / "run")],
        [
            "-c",
            "from transformers import AutoModelForCausalLM as M; import sys; "
            "print(M.from_pretrained(sys.argv[1]).num_parameters())",
            str(tmp_path / "run" / "final"),
        ],
    ]  # fmt: skip
    from project_sources import REPO

    for args in steps:
        result = _run(clean_python, *args, cwd=REPO)
        assert result.returncode == 0, f"{args[:3]}: {result.stdout[-2000:]}\n{result.stderr[-3000:]}"
    assert int(result.stdout.strip().splitlines()[-1]) > 0
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows if row["kind"] == "train"] == [1, 2, 3]

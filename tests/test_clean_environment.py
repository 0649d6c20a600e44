"""The package works in a venv holding only its declared dependencies (tests/clean_environment.py).

Every module of what `pip install hardware-selector` ships is imported
there, then the README's fine-tune block runs there as printed: the demo
checkpoint, `plan --emit` with data, `train` (torchrun, two processes, real
tokens), `watch` and loading the result with transformers. A function-level import of
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

OPTIONAL_MODULES = {  # module: the extra it needs
    "backends.integrations.lightning_strategy": "lightning",
    "backends.integrations.lightning_monitor": "lightning",
}


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


def test_the_readme_fine_tune_runs_there_as_printed(clean_python, tmp_path):
    """The README's four commands, as printed, in a fresh folder with the clean venv first on PATH: the
    evaluation loss falls below the checkpoint's own, final/ loads with `from_pretrained` (tied, with the
    tokenizer) and its eval loss equals the last one the run recorded, and `watch` reports the run finished."""
    from project_sources import REPO

    from tests.runner_reference import eval_loss_of

    script = readme_quick_start().replace(". .venv/bin/activate && ", "").replace("scripts/", f"{REPO}/scripts/")
    (tmp_path / "quick_start.sh").write_text("set -euo pipefail\n" + script)
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    env["PATH"] = f"{clean_python.parent}{os.pathsep}{env.get('PATH', '')}"
    completed = subprocess.run(
        ["bash", str(tmp_path / "quick_start.sh")], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    run_dir = tmp_path / "runs" / "ft"
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    evals = [row for row in rows if row["kind"] == "eval"]
    assert [row["step"] for row in evals] == [20, 40]
    assert [row["step"] for row in rows if row["kind"] == "train"] == list(range(1, 41))
    before = eval_loss_of(tmp_path / "demo" / "my-gpt2", run_dir)  # the checkpoint as the user gave it
    assert evals[-1]["eval_loss"] < evals[0]["eval_loss"] < before  # it learns the user's text
    assert "finished" in completed.stdout and "eval" in completed.stdout  # what `watch` showed
    assert completed.stdout.strip().splitlines()[-1].isdigit()  # from_pretrained loaded final/

    # final/ is an HF folder: config, safetensors and the tokenizer; its eval loss is the last recorded one.
    from transformers import AutoModelForCausalLM, AutoTokenizer

    final = run_dir / "final"
    assert AutoTokenizer.from_pretrained(final).eos_token == "<|endoftext|>"
    model = AutoModelForCausalLM.from_pretrained(final)
    assert model.lm_head.weight is model.transformer.wte.weight  # tied, as the checkpoint was
    assert eval_loss_of(final, run_dir) == pytest.approx(evals[-1]["eval_loss"], rel=1e-5)
    view = _run(clean_python, "-m", "hardware_selector", "watch", str(run_dir), "--json", cwd=REPO)
    state = json.loads(view.stdout)
    assert (state["state"], state["step"], state["total_steps"]) == ("finished", 40, 40)


def readme_quick_start() -> str:
    from project_sources import REPO

    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text[text.index("### Fine-tune your checkpoint on your text") :]
    return section[section.index("```bash\n") + len("```bash\n") : section.index("```\n", section.index("```bash"))]

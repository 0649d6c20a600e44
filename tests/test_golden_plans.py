"""Twenty fixed plans stay byte-identical: `plan --json` and every file `--emit` writes.

A guard for moves that must not change behaviour (docs/architecture.md, "Floors"): each case runs the CLI in
this process and compares its JSON and each emitted file with the copy stored under tests/golden/plans/<case>/.
Only three things are normalised, because they are not the plan: the search's wall time (`stats.elapsed_s`),
the temporary folders the case reads and writes and the test's cache (`<RUN>`, `<DEMO>`: the README's demo checkpoint, `<CACHE>`), the interpreter the launch scripts default to (`<PYTHON>`), and module paths of the project's own code
(none are printed today; the pattern is here so that a file move that renames one does not read as a change of
behaviour).

After an intended change of the output, rewrite the copies with `GOLDEN_UPDATE=1 pytest tests/test_golden_plans.py`
and read the diff before committing it.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest
from distributed import cli_in_process

GOLDEN = Path(__file__).parent / "golden" / "plans"
UPDATE = os.environ.get("GOLDEN_UPDATE") == "1"

H100x16 = ["--gpu", "H100-80GB", "--gpus-per-node", "8", "--nodes", "2"]
CASES: dict[str, list[str]] = {
    "make-plan": ["--model", "llama-3-8b", *H100x16, "--global-batch", "512", "--seq-len", "4096", "--emit"],
    "gpt2-cpu-engine": ["--model", "gpt2", "--gpu", "cpu", "--gpus-per-node", "2", "--strategies", "engine", "--emit"],
    "demo-cpu-finetune": ["--model", "<DEMO>/my-gpt2", "--gpu", "cpu", "--gpus-per-node", "2", "--seq-len", "128",
                          "--global-batch", "16", "--strategies", "ddp", "--emit", "--data", "<DEMO>/corpus.txt",
                          "--steps", "40", "--eval-every", "20", "--lr", "1e-3"],
    "llama-3-70b-64gpu": ["--model", "llama-3-70b", "--gpu", "H100-80GB", "--gpus-per-node", "8", "--nodes", "8",
                          "--global-batch", "1024", "--seq-len", "4096"],
    "llama-2-7b-cost": ["--model", "llama-2-7b", "--gpu", "A100-80GB", "--nodes", "4", "--objective", "cost",
                        "--tokens", "2e11"],
    "gpt2-xl-v100-explain": ["--model", "gpt2-xl", "--gpu", "V100-32GB", "--micro-batch", "1", "--seq-len", "1024",
                             "--explain"],
    "serve-llama-2-70b": ["--mode", "inference", "--model", "llama-2-70b", "--gpu", "H100-80GB", "--context", "2048",
                          "--batch", "32"],
    "serve-llama-3-8b-l4": ["--mode", "inference", "--model", "llama-3-8b", "--gpu", "L4", "--gpus-per-node", "1",
                            "--weights", "int4", "--kv-cache", "fp8"],
    "mixtral-engine-ep": ["--model", "mixtral-8x7b", "--gpu", "H100-80GB", "--gpus-per-node", "8", "--nodes", "4",
                          "--global-batch", "512", "--seq-len", "4096", "--emit"],
    "llama-3-8b-engine-tp": ["--model", "llama-3-8b", "--gpu", "A100-80GB", "--gpus-per-node", "4",
                             "--strategies", "engine", "--emit"],
    "llama-2-13b-deepspeed": ["--model", "llama-2-13b", "--gpu", "A100-40GB", "--gpus-per-node", "4",
                              "--strategies", "deepspeed", "--emit"],
    "llama-2-7b-fsdp": ["--model", "llama-2-7b", "--gpu", "A100-80GB", "--gpus-per-node", "8",
                        "--strategies", "fsdp", "--emit"],
    "raw-dims": ["--hidden", "2048", "--layers", "24", "--heads", "16", "--vocab", "32000", "--ffn", "8192", "--gpu", "H100-80GB",
                 "--emit"],
    "llama-3-70b-fsdp-elastic": ["--model", "llama-3-70b", "--gpu", "H100-80GB", "--gpus-per-node", "8", "--nodes", "4",
                                 "--strategies", "fsdp", "--no-offload", "--elastic", "2:4", "--emit"],
    "llama-3-8b-lora": ["--model", "llama-3-8b", "--gpu", "A100-40GB", "--gpus-per-node", "1", "--lora-rank", "16"],
    "llama-3-8b-qlora": ["--model", "llama-3-8b", "--gpu", "L4", "--gpus-per-node", "1", "--qlora", "--lora-rank", "16"],
    "llama-2-70b-engine-pp": ["--model", "llama-2-70b", "--gpu", "A100-80GB", "--gpus-per-node", "8", "--nodes", "4",
                              "--global-batch", "256", "--seq-len", "4096", "--strategies", "engine", "--emit"],
    "qwen3-moe-engine": ["--model", "qwen3-30b-a3b", *H100x16, "--global-batch", "256", "--seq-len", "4096",
                         "--strategies", "engine", "--emit"],
    "llama-3-8b-fp8": ["--model", "llama-3-8b", *H100x16, "--global-batch", "512", "--fp8"],
    "gpt2-large-fp16-v100": ["--model", "gpt2-large", "--gpu", "V100-32GB", "--gpus-per-node", "4",
                             "--precision", "fp16-mixed", "--strategies", "deepspeed", "--emit"],
    "gpt2-cpu-compile-ac": ["--model", "gpt2", "--gpu", "cpu", "--gpus-per-node", "2", "--seq-len", "256",
                            "--global-batch", "8", "--ac", "full", "--kernels", "compile", "--strategies", "fsdp", "--emit"],
}  # fmt: skip

# A module path of our own code, e.g. backends.runner.loop or planner/rundir/run_options.py.
MODULE_PATH = re.compile(
    r"\b(?:planner|backends|benchmarks_db|benchmarks(?!\.duckdb)|hardware_selector_cli)(?:[./][A-Za-z_][A-Za-z0-9_]*)+"
)


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Path:
    """The README's demo checkpoint and corpus (scripts/demo_checkpoint.py: seeded, the same bytes every time)."""
    from scripts.demo_checkpoint import make_local_gpt2

    folder = tmp_path_factory.mktemp("demo")
    make_local_gpt2(folder)
    return folder


def _without_folders(text: str, **folders: Path) -> str:
    for name, folder in folders.items():
        text = text.replace(str(folder), f"<{name.upper()}>")
    return text


def _outputs(case: str, run: Path, demo: Path) -> dict[str, str]:
    cache = Path(os.environ["XDG_CACHE_HOME"])  # the case's own (test_plan_output_is_unchanged)
    args = [arg.replace("<DEMO>", str(demo)) for arg in CASES[case]]
    args = [item for arg in args for item in (["--emit", str(run)] if arg == "--emit" else [arg])]
    result = cli_in_process("plan", *args, "--json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    if "stats" in document:  # training plans; a serving plan has no search statistics
        document["stats"]["elapsed_s"] = 0.0
    outputs = {"plan.stdout.json": json.dumps(document, indent=2, sort_keys=True) + "\n"}
    if run.exists():
        outputs |= {f"emit/{path.name}": path.read_text(encoding="utf-8") for path in sorted(run.iterdir())}
    return {
        name: MODULE_PATH.sub(
            "<MODULE>", _without_folders(text.replace(sys.executable, "<PYTHON>"), run=run, demo=demo, cache=cache)
        )
        for name, text in outputs.items()
    }


GOLDEN_DAY_EPOCH = 1795824000  # 2026-11-28 00:00 UTC


@pytest.mark.parametrize("case", list(CASES))
def test_plan_output_is_unchanged(case, tmp_path, demo, monkeypatch):
    # A cache and a benchmark database of this case's own: a record another test left would calibrate the plan.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("HARDWARE_SELECTOR_DB", str(tmp_path / "cache" / "hardware-selector" / "benchmarks.duckdb"))
    # Prices' ages are counted to this day, not the day the suite runs: the copies name prices, which would turn
    # STALE 180 days after their dates (planner/cost/prices.catalog_today).
    monkeypatch.setenv("SOURCE_DATE_EPOCH", str(GOLDEN_DAY_EPOCH))
    outputs = _outputs(case, tmp_path / "run", demo)
    folder = GOLDEN / case
    if UPDATE:
        if folder.exists():
            for stale in folder.rglob("*"):
                if stale.is_file():
                    stale.unlink()
        for name, text in outputs.items():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_text(text, encoding="utf-8")
    stored = {
        str(path.relative_to(folder)): path.read_text(encoding="utf-8") for path in folder.rglob("*") if path.is_file()
    }
    assert sorted(outputs) == sorted(stored), f"{case}: the emitted files changed"
    for name, text in outputs.items():
        assert text == stored[name], f"{case}/{name} differs from tests/golden/plans/{case}/{name}"


def test_cases_are_twenty_one_and_cover_the_emitters():
    assert len(CASES) == 21
    emitted = {path.name for path in GOLDEN.glob("*/emit/*")}
    assert {"plan.json", "engine.json", "launch.sh", "slurm.sbatch", "accelerate_config.yaml", "README.md"} <= emitted
    assert any("ds_config.json" == path.name for path in GOLDEN.glob("*/emit/*"))

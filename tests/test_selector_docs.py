"""Every selector example in docs/selector.md and the README runs, and asserts what its prose promises.

In-process blocks run as written (their assertions are the documented
outcomes). The two integration scripts (a block whose first line is
`# NAME.py`) run under torchrun on 2 CPU ranks with a small OPT built from a
config: the PyTorch loop once per strategy, whose losses must agree with
each other (DDP, FSDP and ZeRO run the same model on the same data) and start
at the checkpoint's own loss on the same batches (computed in the test
process), and the Trainer script on the text file the test writes. The DDP
loop runs as the page prints it, a torchrun job of its own; the other loops
and the Trainer script share one job (tests/shared_scripts.py).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.distributed import REPO_ROOT, cpu_env, run_torchrun

SELECTOR_DOC = REPO_ROOT / "docs" / "selector.md"
BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)
SCRIPT_NAME = re.compile(r"^# (\w+\.py)\n")


def python_blocks(path: Path) -> list[str]:
    return BLOCK.findall(path.read_text(encoding="utf-8"))


def in_process_blocks() -> list[tuple[str, str]]:
    blocks = [(f"selector.md #{index}", code) for index, code in enumerate(python_blocks(SELECTOR_DOC), 1)]
    readme = [code for code in python_blocks(REPO_ROOT / "README.md") if "get_distributed_training_config" in code]
    blocks += [(f"README #{index}", code) for index, code in enumerate(readme, 1)]
    return [(name, code) for name, code in blocks if not SCRIPT_NAME.match(code)]


def scripts() -> dict[str, str]:
    return {match.group(1): code for code in python_blocks(SELECTOR_DOC) if (match := SCRIPT_NAME.match(code))}


def test_the_page_has_the_examples_the_selectors_users_know():
    text = SELECTOR_DOC.read_text(encoding="utf-8")
    for call in (
        'select_hardware_for_task(\n    model_family="text_generation",\n    model_name="facebook/opt-1.3b"',
        'model_name="facebook/opt-1.3b", gpu_count=8, batch_size=4, max_memory_gb=24',
        '"facebook/opt-6.7b", gpu_count=4, batch_size=8, max_memory_gb=16',
        '"facebook/opt-30b", gpu_count=8, batch_size=1, max_memory_gb=40',
        '"facebook/opt-13b", gpu_count=4, batch_size=1, max_memory_gb=16',
    ):
        assert call in text, call
    assert set(scripts()) == {"train_with_plan.py", "finetune_with_trainer.py"}


@pytest.mark.parametrize("name, code", in_process_blocks(), ids=lambda value: value if " #" in str(value) else "")
def test_documented_example_runs_and_holds(name, code):
    exec(compile(code, name, "exec"), {"__name__": "__doc_example__"})


@pytest.fixture(scope="module")
def small_opt(tmp_path_factory):
    from scripts.demo_checkpoint import make_local_opt

    return make_local_opt(tmp_path_factory.mktemp("selector-docs"))


OWN_LAUNCH = "DDP"  # train_with_plan.py as its page prints it: `torchrun --nproc_per_node=N train_with_plan.py`
SHARED = ("FSDP", "DeepSpeed")  # and the Trainer script: one job (tests/shared_scripts.py)
STRATEGIES = (OWN_LAUNCH, *SHARED)


def _write_scripts(folder: Path) -> dict[str, Path]:
    paths = {name: folder / name for name in scripts()}
    for name, path in paths.items():
        path.write_text(scripts()[name], encoding="utf-8")
    return paths


@pytest.fixture(scope="module")
def shared_launch(tmp_path_factory, small_opt) -> dict[str, str]:
    """FSDP and DeepSpeed under train_with_plan.py and the Trainer script in one torchrun job, each script
    unchanged with its own environment; each case's output, every rank's lines joined as torchrun's output
    would hold them."""
    from tests.shared_scripts import launch_cases

    model_dir, corpus = small_opt
    folder = tmp_path_factory.mktemp("selector-scripts")
    paths = _write_scripts(folder)
    loop = [
        {"name": strategies, "script": str(paths["train_with_plan.py"]), "cwd": str(folder),
         "env": _loop_env(model_dir, strategies, folder),
         "skip_deepspeed_shm": strategies == "DeepSpeed"}
        for strategies in SHARED
    ]  # fmt: skip
    trainer = {"name": "finetune_with_trainer.py", "script": str(paths["finetune_with_trainer.py"]),
               "cwd": str(folder), "env": {"MODEL": str(model_dir), "DATA": str(corpus),
                                           "OUTPUT": str(folder / "finetuned"), "STEPS": "4"}}  # fmt: skip
    by_rank = launch_cases(folder / "out", [*loop, trainer])
    outputs = {name: by_rank[0][name] + by_rank[1][name] for name in by_rank[0]}
    return {**outputs, "finetuned": str(folder / "finetuned"), "folder": str(folder)}


def _loop_env(model_dir: Path, strategies: str, folder: Path) -> dict[str, str]:
    """train_with_plan.py's environment: its PlanRecorder records into a database of the strategy's own (the
    suite turns recording off, tests/conftest.py), so that no run's record calibrates another's answer."""
    return {"MODEL": str(model_dir), "STRATEGIES": strategies, "LR": "0.05",
            "HARDWARE_SELECTOR_DB": str(folder / f"{strategies}.duckdb"), "HARDWARE_SELECTOR_RECORD": "1"}  # fmt: skip


@pytest.mark.slow
def test_pytorch_loop_runs_the_answer_on_ddp_fsdp_and_deepspeed(tmp_path, small_opt, shared_launch):
    model_dir, _ = small_opt
    script = _write_scripts(tmp_path)["train_with_plan.py"]
    env = _loop_env(model_dir, OWN_LAUNCH, tmp_path)
    own = run_torchrun([str(script)], nproc=2, timeout=400, cwd=tmp_path, env=cpu_env(env)).stdout

    def losses(strategies: str) -> list[float]:
        out = own if strategies == OWN_LAUNCH else shared_launch[strategies]
        lines = re.findall(rf"^{strategies} step (\d+) loss ([\d.]+)$", out, re.MULTILINE)
        assert [int(step) for step, _ in lines] == [0, 1, 2], out
        return [float(loss) for _, loss in lines]

    ddp, fsdp, zero = (losses(strategies) for strategies in STRATEGIES)
    # The same model, data and update on three stacks: the same losses.
    assert fsdp == pytest.approx(ddp, rel=1e-3) and zero == pytest.approx(ddp, rel=1e-3)
    # And the updates happened: the checkpoint's own losses on rank 0's batches equal the first step's (printed
    # to 4 decimals) and differ from the later ones.
    frozen = _frozen_losses(model_dir, steps=len(ddp))
    assert frozen[0] == pytest.approx(ddp[0], abs=6e-5)
    assert all(abs(a - b) > 1e-3 * b for a, b in zip(ddp[1:], frozen[1:]))

    # PlanRecorder stored each run: a GPU answer (24 GB) run on CPU processes, so as a CPU run without the GPU's
    # prediction (the runner's rule), 3 steps of which the first warms up.
    from benchmarks_db.store import BenchmarkStore

    for strategies in STRATEGIES:
        folder = tmp_path if strategies == OWN_LAUNCH else Path(shared_launch["folder"])
        (stored,) = BenchmarkStore(folder / f"{strategies}.duckdb").runs()
        assert (stored.runner, stored.strategy, stored.gpu_name, stored.gpu_count) == (
            "own-loop",
            strategies.lower(),
            "cpu",
            2,
        )
        assert stored.steps_measured == 2 and stored.predicted_step_time_s is None


def _frozen_losses(model_dir: Path, *, steps: int) -> list[float]:
    """What train_with_plan.py prints on rank 0 without any update, in this process: the checkpoint (in eval
    mode, as from_pretrained returns it and the script keeps it) on the last micro-batch of each step that rank
    0's generator draws, with the batch split the answer gives 2 ranks."""
    import torch
    from transformers import AutoModelForCausalLM

    from hardware_selector import get_distributed_training_config

    config = get_distributed_training_config(
        "text_generation", str(model_dir), gpu_count=2, batch_size=4, max_memory_gb=24, strategies=["DDP"]
    )
    micro, accumulation = config["per_gpu_batch_size"], config["gradient_accumulation_steps"]
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    generator = torch.Generator().manual_seed(0)
    losses = []
    with torch.no_grad():
        for _ in range(steps):
            for _ in range(accumulation):
                shape = (micro, config["sequence_length"])
                tokens = torch.randint(0, model.config.vocab_size, shape, generator=generator)
                loss = model(input_ids=tokens, labels=tokens).loss
            losses.append(loss.item())
    return losses


@pytest.mark.slow
def test_trainer_script_fine_tunes_the_checkpoint_on_a_text_file(small_opt, shared_launch):
    model_dir, _ = small_opt
    from transformers import AutoModelForCausalLM

    trained = AutoModelForCausalLM.from_pretrained(shared_launch["finetuned"])
    original = AutoModelForCausalLM.from_pretrained(model_dir)
    changed = [
        name
        for (name, after), before in zip(trained.state_dict().items(), original.state_dict().values())
        if not after.equal(before)
    ]
    assert changed  # the Trainer trained the user's checkpoint and saved it

"""docs/integrations.md runs as written: the Trainer with PlanCallback on 2 CPU ranks, under DeepSpeed ZeRO-2
and under FSDP, on a local checkpoint and a text file (the real-data path).

References: the plan itself (the callback refuses a Trainer that does not
run it: the strategy, ZeRO stage and batch it checks are the plan's), the
benchmark database (the recorded run is read back with the plan's numbers),
and the user's checkpoint (the saved model differs from it: it trained).
The Trainer script under FSDP runs as the page prints it, a torchrun job of
its own; under ZeRO-2 it shares one job with the DeepSpeed script on
DeepSpeed and on our engine (tests/shared_scripts.py).
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

from tests.distributed import REPO_ROOT, cpu_env, run_torchrun

DOC = REPO_ROOT / "docs" / "integrations.md"
SCRIPT = re.compile(r"```python\n# (\w+\.py)\n(.*?)```", re.DOTALL)


def scripts() -> dict[str, str]:
    return {name: f"# {name}\n{code}" for name, code in SCRIPT.findall(DOC.read_text(encoding="utf-8"))}


def plan_cli(*args) -> str:
    import hardware_selector

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert hardware_selector.main([str(arg) for arg in args]) == 0
    return out.getvalue()


@pytest.fixture(scope="module")
def user(tmp_path_factory):
    from scripts.demo_checkpoint import make_local_gpt2

    root = tmp_path_factory.mktemp("integrations")
    model_dir, corpus = make_local_gpt2(root / "user")
    return root, model_dir, corpus


def emit(user, name: str, *strategy) -> Path:
    root, model_dir, corpus = user
    plan_cli("plan", "-m", model_dir, "--gpu", "cpu", "--gpus-per-node", "2", "--seq-len", "64",
             "--global-batch", "8", "--data", corpus, "--emit", root / name, *strategy)  # fmt: skip
    return root / name


def test_the_page_has_the_trainer_script():
    assert "train_with_plan_callback.py" in scripts()


TRAINER = "train_with_plan_callback.py"
OWN_LAUNCH = (
    "fsdp"  # the Trainer script as the page prints it: `torchrun --nproc_per_node=2 train_with_plan_callback.py`
)


def _trainer_env(user, run_dir: Path, database: Path) -> dict[str, str]:
    root, model_dir, corpus = user
    # The suite turns recording off (tests/conftest.py); the documented script records by default, as here.
    return {"RUN": str(run_dir), "MODEL": str(model_dir), "DATA": str(corpus), "STEPS": "4",
            "HARDWARE_SELECTOR_DB": str(database), "HARDWARE_SELECTOR_RECORD": "1"}  # fmt: skip


def _deepspeed_env(user, run_dir: Path, engine: str) -> dict[str, str]:
    """Each engine's PlanRecorder records into a database of its own, beside the run folder."""
    root, model_dir, corpus = user
    return {"RUN": str(run_dir), "MODEL": str(model_dir), "DATA": str(corpus), "STEPS": "3", "ENGINE": engine,
            "HARDWARE_SELECTOR_DB": str(run_dir / f"{engine}.duckdb"), "HARDWARE_SELECTOR_RECORD": "1"}  # fmt: skip


@pytest.fixture(scope="module")
def shared_launch(user, tmp_path_factory) -> dict[str, str]:
    """The Trainer script under DeepSpeed ZeRO-2 and the DeepSpeed script on DeepSpeed and on our engine, in
    one torchrun job, each script unchanged with its own environment (tests/shared_scripts.py); each case's
    output, every rank's lines joined as torchrun's output would hold them."""
    from tests.shared_scripts import launch_cases

    folder = tmp_path_factory.mktemp("integrations-scripts")
    for name, code in scripts().items():
        (folder / name).write_text(code, encoding="utf-8")
    trainer_run = emit(user, "deepspeed-zero2", "--strategies", "zero2")
    script_run = emit(user, "deepspeed-script", "--strategies", "zero2")
    cases = [{"name": "deepspeed-zero2", "script": str(folder / TRAINER), "cwd": str(folder),
              "env": _trainer_env(user, trainer_run, folder / "runs.duckdb")}]  # fmt: skip
    cases += [
        {"name": engine, "script": str(folder / "deepspeed_script.py"), "cwd": str(folder),
         "env": _deepspeed_env(user, script_run, engine), "skip_deepspeed_shm": True}
        for engine in ("deepspeed", "ours")
    ]  # fmt: skip
    readme = folder / "readme"  # the README's engine loop, where its plan command put runs/engine
    (readme / "demo").mkdir(parents=True)
    (readme / "demo" / "my-gpt2").symlink_to(user[1])
    plan_command, loop = readme_engine_loop()
    (readme / README_LOOP).write_text(loop, encoding="utf-8")
    with contextlib.chdir(readme):
        plan_cli(*plan_command)
    cases.append({"name": "readme-engine", "script": str(readme / README_LOOP), "cwd": str(readme)})
    by_rank = launch_cases(folder / "out", cases)
    return {
        **{name: by_rank[0][name] + by_rank[1][name] for name in by_rank[0]},
        "database": str(folder / "runs.duckdb"),
        "deepspeed-script": str(script_run),
        "readme": str(readme),
    }


README_LOOP = "engine_loop.py"


def readme_engine_loop() -> tuple[list[str], str]:
    """The README's engine section: its `plan ... --strategies engine` command (the arguments after
    `hardware-selector`) and its loop script, as printed."""
    import shlex

    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    (command,) = [line for line in re.findall(r"```bash\n(.*?)```", text, re.DOTALL) if "--strategies engine" in line]
    (loop,) = re.findall(rf"```python\n(# {README_LOOP}\n.*?)```", text, re.DOTALL)
    return shlex.split(command.replace("\\\n", " "))[1:], loop


@pytest.mark.slow
def test_the_readmes_engine_loop_runs_as_printed_on_its_plan(shared_launch):
    """README "The engine": its loop on the plan its command makes (2 CPU ranks, split as the plan splits the
    model), against the model's own loss on one process: the first step's loss is the checkpoint's on those
    micro-batches; it trains, and leaves its checkpoint. Before, the block used names it never defined."""
    import json

    import torch
    from transformers import AutoModelForCausalLM

    out, readme = shared_launch["readme-engine"], Path(shared_launch["readme"])
    found = [float(loss) for loss in re.findall(r"^step \d+ loss ([\d.]+)$", out, re.M)]
    assert len(found) == 6, out[-3000:]  # 3 steps, printed by each of the 2 ranks
    config = json.loads((readme / "runs" / "engine" / "engine.json").read_text())
    micro, accumulation = config["train_micro_batch_size_per_gpu"], config["gradient_accumulation_steps"]
    model = AutoModelForCausalLM.from_pretrained(readme / "demo" / "my-gpt2")
    torch.manual_seed(0)
    batches = [torch.randint(0, model.config.vocab_size, (micro, 64)) for _ in range(4)][:accumulation]
    with torch.no_grad():
        reference = sum(float(model(input_ids=ids, labels=ids).loss) for ids in batches) / len(batches)
    assert found[0] == pytest.approx(reference, rel=1e-4) and found[-1] < found[0]
    assert (readme / "runs" / "engine" / "my-checkpoint" / "latest").is_file()


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, kind, strategy, zero", [("deepspeed-zero2", "zero2", "deepspeed", 2), ("fsdp", "fsdp", "fsdp", 0)]
)
def test_the_trainer_runs_the_plan_with_the_callback_on_two_ranks(user, tmp_path, name, kind, strategy, zero, request):
    from benchmarks_db.store import BenchmarkStore

    root, model_dir, corpus = user
    if name == OWN_LAUNCH:
        run_dir = emit(user, name, "--strategies", kind)
        script = tmp_path / TRAINER
        script.write_text(scripts()[TRAINER], encoding="utf-8")
        database = tmp_path / "runs.duckdb"
        env = cpu_env(_trainer_env(user, run_dir, database))
        stdout = run_torchrun([str(script)], nproc=2, timeout=400, cwd=tmp_path, env=env).stdout
    else:
        shared = request.getfixturevalue("shared_launch")
        run_dir, database, stdout = root / name, Path(shared["database"]), shared[name]
    from planner.rundir.plan_file import read_plan_file

    plan, _ = read_plan_file(run_dir)
    assert plan.config.strategy.value == strategy and plan.config.zero_stage == zero
    # A --gpu cpu plan: the step time and the host RSS beside its predictions, as `train` sets them.
    pattern = r"^step (\d+): [\d.e-]+ s/step vs predicted [\d.e-]+ \([+-]\d+%; .*\); host peak RSS [\d.]+ GiB vs pre"
    lines = re.findall(pattern, stdout, re.M)
    assert [int(step) for step in lines] == [2, 3, 4], stdout[-3000:]
    (stored,) = BenchmarkStore(database).runs()
    assert (stored.runner, stored.strategy, stored.global_batch, stored.gpu_count) == ("hf-trainer", strategy, 8, 2)
    assert stored.step_time_median_s > 0 and f"recorded run {stored.id[:12]}" in stdout
    # A --gpu cpu plan predicts these processes' step time: recorded beside it, as `train` records its runs.
    assert stored.gpu_name == "cpu" and stored.predicted_step_time_s == pytest.approx(plan.throughput.step_time_s)

    from transformers import AutoModelForCausalLM

    trained = AutoModelForCausalLM.from_pretrained(run_dir / "trainer" / "final")
    original = AutoModelForCausalLM.from_pretrained(model_dir)
    assert any(not a.equal(b) for a, b in zip(trained.state_dict().values(), original.state_dict().values()))


def test_a_trainer_that_does_not_run_the_plan_is_one_line_before_the_first_step(user, tmp_path):
    from transformers import TrainerControl, TrainerState

    from hardware_selector import training_arguments
    from hardware_selector.integrations import PlanCallback, PlanMismatch

    run_dir = emit(user, "ddp", "--strategies", "ddp")
    state, control = TrainerState(), TrainerControl()
    callback = PlanCallback(run_dir)
    assert callback.run.global_batch == 8
    # The plan's own arguments, on one process with its accumulation doubled: the same global batch, no word.
    same = training_arguments(run_dir, tmp_path / "a", gradient_accumulation_steps=2 * callback.run.grad_accum)
    callback.on_train_begin(same, state, control)
    other = training_arguments(run_dir, tmp_path / "b", gradient_accumulation_steps=3, bf16=True, use_cpu=True)
    with pytest.raises(PlanMismatch) as caught:
        callback.on_train_begin(other, state, control)
    message = str(caught.value)
    assert "\n" not in message and isinstance(caught.value, ValueError)
    assert (
        f"global batch {callback.run.micro_batch} x 3 x 1 ranks" in message
        and "mixed precision bf16 (plan no)" in message
    )
    said = []
    PlanCallback(run_dir, strict=False, say=said.append).on_train_begin(other, state, control)
    assert said == [f"warning: {message}"]


@pytest.mark.slow
def test_the_deepspeed_script_follows_deepspeeds_losses_on_our_engine(shared_launch):
    """The same script, ds_config.json and data on DeepSpeed itself (the reference) and on our engine."""

    def losses(engine: str) -> list[float]:
        out = shared_launch[engine]
        found = re.findall(r"^step (\d+) loss ([\d.]+)$", out, re.M)
        assert [int(step) for step, _ in found] == [1, 2, 3], out[-3000:]
        return [float(loss) for _, loss in found]

    reference = losses("deepspeed")
    assert reference[0] != reference[-1]  # it trained
    assert losses("ours") == pytest.approx(reference, rel=1e-4)

    # PlanRecorder measured each run against the plan and recorded it, as PlanCallback records a Trainer's run:
    # the plan's own batch split on the CPU processes a `--gpu cpu` plan predicts, so beside its prediction.
    from benchmarks_db.store import BenchmarkStore
    from planner.rundir.plan_file import read_plan_file

    plan, run = read_plan_file(Path(shared_launch["deepspeed-script"]))
    for engine in ("deepspeed", "ours"):
        (stored,) = BenchmarkStore(Path(shared_launch["deepspeed-script"]) / f"{engine}.duckdb").runs()
        assert (stored.runner, stored.strategy, stored.gpu_count, stored.steps_measured) == (
            "own-loop",
            "deepspeed",
            2,
            2,
        )
        assert (stored.micro_batch, stored.grad_accum) == (run.micro_batch, run.grad_accum)
        assert stored.predicted_step_time_s == pytest.approx(plan.throughput.step_time_s)
        assert f"recorded run {stored.id[:12]} in the benchmark database" in shared_launch[engine]
        lines = re.findall(r"^step (\d+): [\d.e-]+ s/step vs predicted ", shared_launch[engine], re.M)
        assert lines == ["2", "3"], shared_launch[engine][-3000:]

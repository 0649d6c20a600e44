"""Encoder and encoder-decoder checkpoints train on DDP, FSDP and DeepSpeed; the engine's tp/pp says what does.

A local BERT (masked-LM objective: BERT's 15% / 80-10-10 masking) and a
local T5 (prefix LM: encode the first half of a block, predict the second)
fine-tune from their checkpoints on the user's text under each of the three
peers, on 2 ranks in one torchrun job. Their loss starts where the checkpoint
puts it and falls. Tensor parallelism has no plan for them: one line that
names the strategies that work.
"""

from __future__ import annotations

import json

import pytest

from planner.contract.run_config import DataConfig, Hyperparameters
from planner.rundir.write import RunOptions, emit_run_folder
from scripts.demo_checkpoint import make_local_encoder, make_local_gpt2
from tests.distributed import run_torchrun
from tests.emit_plans import make_plan

pytestmark = pytest.mark.slow
STRATEGIES = {
    "ddp": {"strategy": "ddp"},
    "fsdp": {"strategy": "fsdp"},
    "deepspeed": {"strategy": "deepspeed", "zero_stage": 2},
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("families")
    _, corpus = make_local_gpt2(root / "user")
    options = RunOptions(
        data=DataConfig(train=[str(corpus)], eval_every=0),
        optim=Hyperparameters(max_steps=8, learning_rate=2e-3, warmup_steps=1),
    )
    folders = []
    for family in ("bert", "t5"):
        model_dir = make_local_encoder(root / "user", family)
        for name, fields in STRATEGIES.items():
            folder = root / f"{family}-{name}"
            emit_run_folder(
                make_plan(str(model_dir), seq_len=64, micro_batch=4, grad_accum=1, **fields), folder, options=options
            )
            folders.append(folder)
    out = root / "results.json"
    run_torchrun(["tests/engine_jobs/runner_folders.py", str(out), *map(str, folders)], nproc=2, timeout=900)
    return root, json.loads(out.read_text())


@pytest.mark.parametrize("family", ["bert", "t5"])
@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_the_family_fine_tunes_under_each_peer(runs, family, strategy):
    _, results = runs
    rows = [row for row in results[f"{family}-{strategy}"]["rows"] if row["kind"] == "train"]
    losses = [row["loss"] for row in rows]
    assert len(losses) == 8 and losses[-1] < losses[0]
    assert results[f"{family}-{strategy}"]["summary"]["eval"]["eval_loss"] < losses[0]


@pytest.mark.parametrize("family", ["bert", "t5"])
def test_peers_agree_on_the_first_step(runs, family):
    """Same checkpoint, same blocks and masks: the first loss (before any update) is the same everywhere."""
    _, results = runs
    first = [results[f"{family}-{name}"]["rows"][0]["loss"] for name in STRATEGIES]
    assert first == pytest.approx([first[0]] * len(first), rel=1e-5)


def test_tensor_parallel_plans_for_them_are_one_line_naming_what_works(runs):
    from backends.runner.preflight import preflight
    from planner.errors import UserInputError
    from planner.rundir.plan_file import read_plan_file

    root, _ = runs
    folder = root / "bert-tp"
    emit_run_folder(
        make_plan(
            str(root / "user" / "my-bert"),
            seq_len=64,
            micro_batch=4,
            grad_accum=1,
            strategy="engine",
            tensor_parallel=2,
        ),
        folder,
    )
    _, run = read_plan_file(folder)
    with pytest.raises(UserInputError, match="no plan for model_type 'bert'.*ZeRO/FSDP") as caught:
        preflight(run, tiny=False)
    assert "\n" not in str(caught.value)

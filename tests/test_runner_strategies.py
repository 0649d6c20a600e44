"""Every strategy the runner has trains the user's checkpoints: a decoder exactly as one process would, encoders
and encoder-decoders on each of the peers.

A local GPT-2-architecture checkpoint with its own tokenizer, fine-tuned on a
corpus the test writes, all in fp32 with the same data, seed and steps under
DDP, FSDP2, DeepSpeed ZeRO-1/2/3, our engine's ZeRO-1/2/3, and our engine's
tp2 and pp2 (each rank reading only its slice of the checkpoint). The
reference is `from_pretrained` trained on one process over the same global
batches (tests/runner_reference.py): every per-step loss must match it
within 1e-4 relative.

A local BERT (masked-LM objective: BERT's 15% / 80-10-10 masking) and a
local T5 (prefix LM: encode the first half of a block, predict the second)
fine-tune from their checkpoints on the user's text under each of the three
peers. Their loss starts where the checkpoint puts it and falls. Tensor
parallelism has no plan for them: one line that names the strategies that work.

Every folder trains on 2 ranks in one torchrun launch (tests/engine_jobs/one_launch.py running
tests/engine_jobs/runner_folders.py for the decoder's folders, then for the encoders'), as each launch costs its
ranks' start-up.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.contract.run_config import DataConfig, Hyperparameters
from planner.rundir.write import RunOptions, emit_run_folder
from scripts.demo_checkpoint import make_local_encoder, make_local_gpt2
from tests.emit_plans import make_plan
from tests.engine_jobs.one_launch import launch_jobs
from tests.runner_reference import hf_reference_losses

STEPS = 3
pytestmark = pytest.mark.slow

# Global batch 8 of 64-token blocks everywhere: micro 2 x accumulation 2 x dp 2, or micro 2 x 4 under tp2/pp2.
STRATEGIES = {
    "ddp": {"strategy": "ddp"},
    "fsdp": {"strategy": "fsdp"},
    "deepspeed-zero1": {"strategy": "deepspeed", "zero_stage": 1},
    "deepspeed-zero2": {"strategy": "deepspeed", "zero_stage": 2},
    "deepspeed-zero3": {"strategy": "deepspeed", "zero_stage": 3},
    "engine-zero1": {"strategy": "engine", "zero_stage": 1},
    "engine-zero2": {"strategy": "engine", "zero_stage": 2},
    "engine-zero3": {"strategy": "engine", "zero_stage": 3},
    "engine-tp2": {"strategy": "engine", "zero_stage": 1, "tensor_parallel": 2, "grad_accum": 4},
    "engine-pp2": {"strategy": "engine", "zero_stage": 1, "pipeline_parallel": 2, "grad_accum": 4},
}
PEERS = {  # what the encoder families train under
    "ddp": {"strategy": "ddp"},
    "fsdp": {"strategy": "fsdp"},
    "deepspeed": {"strategy": "deepspeed", "zero_stage": 2},
}
FAMILY_STEPS = 8


def _emit_decoder_folders(root: Path, model_dir: Path, corpus: Path) -> list[Path]:
    options = RunOptions(
        data=DataConfig(train=[str(corpus)]), optim=Hyperparameters(max_steps=STEPS, learning_rate=1e-3, warmup_steps=1)
    )
    for name, fields in STRATEGIES.items():
        plan = make_plan(str(model_dir), seq_len=64, micro_batch=2, **{"grad_accum": 2, **fields})
        emit_run_folder(plan, root / name, options=options)
    return [root / name for name in STRATEGIES]


def _emit_family_folders(root: Path, user: Path, corpus: Path) -> list[Path]:
    options = RunOptions(
        data=DataConfig(train=[str(corpus)], eval_every=0),
        optim=Hyperparameters(max_steps=FAMILY_STEPS, learning_rate=2e-3, warmup_steps=1),
    )
    folders = []
    for family in ("bert", "t5"):
        model_dir = make_local_encoder(user, family)
        for name, fields in PEERS.items():
            folder = root / f"{family}-{name}"
            emit_run_folder(
                make_plan(str(model_dir), seq_len=64, micro_batch=4, grad_accum=1, **fields), folder, options=options
            )
            folders.append(folder)
    return folders


@pytest.fixture(scope="module")
def launched(tmp_path_factory) -> Path:
    """root/user (the checkpoints), root/decoder/STRATEGY and root/families/FAMILY-PEER, each folder trained, and
    each set's results (runner_folders.py's JSON) in root/decoder/out and root/families/out."""
    root = tmp_path_factory.mktemp("runner_strategies")
    model_dir, corpus = make_local_gpt2(root / "user")
    decoder = _emit_decoder_folders(root / "decoder", model_dir, corpus)
    families = _emit_family_folders(root / "families", root / "user", corpus)
    jobs = {"decoder": ("runner_folders", *decoder), "families": ("runner_folders", *families)}
    return launch_jobs(root, 2, jobs, timeout=1500)


@pytest.fixture(scope="module")
def results(launched) -> dict:
    return json.loads((launched / "decoder" / "out").read_text())


@pytest.fixture(scope="module")
def reference(launched):
    return hf_reference_losses(launched / "decoder" / "ddp", STEPS)


@pytest.fixture(scope="module")
def runs(launched) -> tuple[Path, dict]:
    return launched, json.loads((launched / "families" / "out").read_text())


def _losses(result: dict) -> list[float]:
    return [row["loss"] for row in result["rows"] if row["kind"] == "train"]


def test_every_strategy_trains_the_plans_steps_from_the_checkpoint(results):
    assert set(results) == set(STRATEGIES)
    for name, result in results.items():
        summary = result["summary"]
        assert (summary["steps"], summary["world_size"], summary["global_batch"]) == (STEPS, 2, 8), name
        assert len(_losses(result)) == STEPS, name


@pytest.mark.parametrize("name", list(STRATEGIES))
def test_per_step_losses_match_the_single_process_hf_reference(results, reference, name):
    losses = _losses(results[name])
    assert losses == pytest.approx(reference, rel=1e-4), (name, losses, reference)
    assert losses[-1] < losses[0]  # it learns


@pytest.mark.parametrize("family", ["bert", "t5"])
@pytest.mark.parametrize("strategy", list(PEERS))
def test_the_family_fine_tunes_under_each_peer(runs, family, strategy):
    _, results = runs
    rows = [row for row in results[f"{family}-{strategy}"]["rows"] if row["kind"] == "train"]
    losses = [row["loss"] for row in rows]
    assert len(losses) == FAMILY_STEPS and losses[-1] < losses[0]
    assert results[f"{family}-{strategy}"]["summary"]["eval"]["eval_loss"] < losses[0]


@pytest.mark.parametrize("family", ["bert", "t5"])
def test_peers_agree_on_the_first_step(runs, family):
    """Same checkpoint, same blocks and masks: the first loss (before any update) is the same everywhere."""
    _, results = runs
    first = [_losses(results[f"{family}-{name}"])[0] for name in PEERS]
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

"""An emitted run folder of an MoE model trains under the engine's expert parallelism, end to end.

A tiny Mixtral checkpoint with its own tokenizer is planned as "engine EP" on 2 CPU ranks (ep 2, ZeRO-1), and
as ep 2 x tp 2 with sequence parallelism and ep 2 x pp 2 on 4 (each rank reading only its experts' ffn share or its
stage of the checkpoint), emitted, and trained: the ep 2 folder by its launch.sh, as a user starts it; the two of 4
ranks by the runner's loop in one launch (tests/engine_jobs/runner_folders.py, with launch.sh's options), as each
launch costs its ranks' start-up. The losses equal the single-process HF reference of the same checkpoint, data,
schedule and gradient clipping (tests/runner_reference.py), which needs the global gradient norm to count every
expert once; final/ loads with from_pretrained and holds all the experts.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from planner.contract.layout import ParallelDims
from planner.contract.run_config import DataConfig, Hyperparameters
from planner.rundir.write import RunOptions, emit_run_folder
from scripts.demo_checkpoint import VOCAB, train_tokenizer, write_corpus
from tests.distributed import cpu_env, free_port, run_torchrun
from tests.emit_plans import make_plan
from tests.runner_reference import hf_reference_losses

STEPS = 3
RUNNER_OPTIONS = ["--steps", str(STEPS), "--save-every", "1"]
LAYOUTS = {"ep2": (1, 1), "ep2xtp2": (2, 1), "ep2xpp2": (1, 2)}  # name: (tp, pp), ep 2 in each
pytestmark = pytest.mark.slow


def _local_mixtral(root: Path) -> tuple[Path, Path]:
    import torch
    from transformers import MixtralConfig, MixtralForCausalLM

    corpus = write_corpus(root / "corpus.txt", 1500)
    model_dir = root / "my-mixtral"
    train_tokenizer(corpus, model_dir)
    eos = json.loads((model_dir / "tokenizer.json").read_text())["added_tokens"][0]["id"]
    torch.manual_seed(0)
    config = MixtralConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_local_experts=4,
        num_experts_per_tok=2,
        max_position_embeddings=256,
        bos_token_id=eos,
        eos_token_id=eos,
    )
    MixtralForCausalLM(config).save_pretrained(str(model_dir))
    return model_dir, corpus


@pytest.fixture(scope="module")
def user(tmp_path_factory) -> tuple[Path, Path]:
    """The user's checkpoint folder and corpus, shared by the three run folders."""
    return _local_mixtral(tmp_path_factory.mktemp("user"))


def _emit(user: tuple[Path, Path], run_dir: Path, tp: int, pp: int) -> Path:
    model_dir, corpus = user
    plan = make_plan(
        str(model_dir), gpus_per_node=2 * tp * pp, seq_len=64, micro_batch=2, grad_accum=2, strategy="engine",
        zero_stage=1, layout=ParallelDims(ep=2, tp=tp, pp=pp), sequence_parallel=tp > 1,
    )  # fmt: skip
    options = RunOptions(
        data=DataConfig(train=[str(corpus)]), optim=Hyperparameters(max_steps=STEPS, learning_rate=1e-3, warmup_steps=1)
    )
    emit_run_folder(plan, run_dir, options=options)
    return run_dir


@pytest.fixture(scope="module")
def two_ranks(user, tmp_path_factory) -> Path:
    """The ep 2 folder, trained by its launch.sh."""
    run_dir = _emit(user, tmp_path_factory.mktemp("ep2") / "run", 1, 1)
    completed = subprocess.run(
        ["bash", str(run_dir / "launch.sh"), *RUNNER_OPTIONS],
        env=cpu_env({"MASTER_PORT": str(free_port())}),
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-4000:]
    return run_dir


@pytest.fixture(scope="module")
def four_ranks(user, tmp_path_factory) -> Path:
    """The ep 2 x tp 2 and ep 2 x pp 2 folders (root/NAME), trained in one launch of 4 ranks."""
    root = tmp_path_factory.mktemp("ep2_four_ranks")
    folders = [str(_emit(user, root / name, tp, pp)) for name, (tp, pp) in LAYOUTS.items() if tp * pp == 2]
    job = ["tests/engine_jobs/runner_folders.py", str(root / "runs.json"), *folders, "--", *RUNNER_OPTIONS]
    run_torchrun(job, nproc=4, timeout=900)
    return root


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_an_ep_run_folder_trains_like_the_reference_and_exports_every_expert(request, user, name):
    import torch
    from transformers import AutoModelForCausalLM

    tp, pp = LAYOUTS[name]
    run_dir = request.getfixturevalue("two_ranks") if name == "ep2" else request.getfixturevalue("four_ranks") / name
    layout = json.loads((run_dir / "engine.json").read_text())["hardware_selector"]["layout"]
    assert (layout["ep"], layout["tp"], layout["pp"]) == (2, tp, pp)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    losses = [row["loss"] for row in rows if row["kind"] == "train"]
    assert losses == pytest.approx(hf_reference_losses(run_dir, STEPS), abs=1e-4)
    from safetensors.torch import load_file

    exported = {}
    for path in (run_dir / "final").glob("*.safetensors"):
        exported.update(load_file(str(path)))
    model_dir, _ = user
    expected = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).state_dict()
    assert set(exported) == set(expected)  # every stage's layers, every rank's experts
    final = AutoModelForCausalLM.from_pretrained(str(run_dir / "final"), dtype=torch.float32)
    assert all(layer.mlp.experts.gate_up_proj.shape[0] == 4 for layer in final.model.layers)

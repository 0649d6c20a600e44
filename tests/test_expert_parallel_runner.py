"""An emitted run folder of an MoE model trains under the engine's expert parallelism, end to end.

A tiny Mixtral checkpoint with its own tokenizer is planned as "engine EP" on 2 CPU ranks (ep 2, ZeRO-1), and
as ep 2 x tp 2 with sequence parallelism on 4 (each rank reading only its experts' ffn share of the checkpoint),
emitted, and launched with its launch.sh: the losses equal the single-process HF reference of the same
checkpoint, data, schedule and gradient clipping (tests/runner_reference.py), which needs the global
gradient norm to count every expert once; final/ loads with from_pretrained and holds all the experts.
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
from tests.distributed import cpu_env, free_port
from tests.emit_plans import make_plan
from tests.runner_reference import hf_reference_losses

STEPS = 3
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


@pytest.mark.parametrize(("tp", "pp"), [(1, 1), (2, 1), (1, 2)], ids=["ep2", "ep2xtp2", "ep2xpp2"])
def test_an_ep_run_folder_trains_like_the_reference_and_exports_every_expert(tmp_path, tp, pp):
    import torch
    from transformers import AutoModelForCausalLM

    model_dir, corpus = _local_mixtral(tmp_path)
    plan = make_plan(
        str(model_dir), gpus_per_node=2 * tp * pp, seq_len=64, micro_batch=2, grad_accum=2, strategy="engine",
        zero_stage=1, layout=ParallelDims(ep=2, tp=tp, pp=pp), sequence_parallel=tp > 1,
    )  # fmt: skip
    options = RunOptions(
        data=DataConfig(train=[str(corpus)]), optim=Hyperparameters(max_steps=STEPS, learning_rate=1e-3, warmup_steps=1)
    )
    run_dir = tmp_path / "run"
    emit_run_folder(plan, run_dir, options=options)
    layout = json.loads((run_dir / "engine.json").read_text())["hardware_selector"]["layout"]
    assert (layout["ep"], layout["tp"], layout["pp"]) == (2, tp, pp)
    completed = subprocess.run(
        ["bash", str(run_dir / "launch.sh"), "--steps", str(STEPS), "--save-every", "1"],
        env=cpu_env({"MASTER_PORT": str(free_port())}),
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-4000:]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    losses = [row["loss"] for row in rows if row["kind"] == "train"]
    assert losses == pytest.approx(hf_reference_losses(run_dir, STEPS), abs=1e-4)
    from safetensors.torch import load_file

    exported = {}
    for path in (run_dir / "final").glob("*.safetensors"):
        exported.update(load_file(str(path)))
    expected = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).state_dict()
    assert set(exported) == set(expected)  # every stage's layers, every rank's experts
    final = AutoModelForCausalLM.from_pretrained(str(run_dir / "final"), dtype=torch.float32)
    assert all(layer.mlp.experts.gate_up_proj.shape[0] == 4 for layer in final.model.layers)

"""The kernel stack as a plan dimension: eager transformers modules, torch.compile of each block, or Liger.

References: the fused stack's element-wise traffic (planner/throughput/kernel_stack.py: what RMSNorm's,
rotary's and the MLP activation's eager op chains move beyond one fused kernel), which compile and Liger remove
(GPT-2, with LayerNorm and learned positions, has only its gelu_new chain); Liger's chunked linear cross-entropy (no whole
logits in memory); and, on this CPU, the engine's compiled blocks against the same run in eager mode.
"""

from __future__ import annotations

import json

import pytest

from hardware_selector_cli.app import main


def _estimate(capsys, model: str, kernels: str, seq_len: int = 4096) -> dict:
    argv = ["estimate", "-m", model, "--gpu", "H100-80GB", "--gpus-per-node", "8", "--strategy", "fsdp",
            "--seq-len", str(seq_len), "--micro-batch", "2", "--ac", "full", "--kernels", kernels, "--json"]  # fmt: skip
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_compile_removes_exactly_the_unfused_traffic(capsys):
    import dataclasses

    from planner.hardware.cluster import make_cluster
    from planner.models.resolve import resolve_model
    from planner.throughput.estimate import estimate_throughput
    from planner.throughput.implementation import implementation_named
    from planner.training_config import TrainingConfig

    eager, compiled = _estimate(capsys, "llama-3.1-8b", "eager"), _estimate(capsys, "llama-3.1-8b", "compile")
    assert compiled["throughput"]["tokens_per_s"] > eager["throughput"]["tokens_per_s"]
    assert "torch.compile" in compiled["throughput"]["sources"]["kernels"]
    # The same step as a fused-stack implementation (llm-foundry's) predicts for these shapes, with our attention
    # kernel (cuDNN's on Hopper: implementation.py, hopper_native_attention).
    config = TrainingConfig(strategy="fsdp", seq_len=4096, micro_batch=2, activation_checkpointing="full")
    cluster = make_cluster("H100-80GB", gpus_per_node=8)
    fused_stack = dataclasses.replace(implementation_named("llm-foundry"), hopper_native_attention=True)
    fused = estimate_throughput(resolve_model("llama-3.1-8b"), config, cluster, implementation=fused_stack)
    assert compiled["throughput"]["breakdown"]["compute_s"] == pytest.approx(fused.breakdown.compute_s, rel=1e-9)
    # GPT-2 has no RMSNorm nor rotary: compile removes its gelu_new chain alone, what the fused stack predicts.
    gpt_eager, gpt_compiled = _estimate(capsys, "gpt2-xl", "eager", 1024), _estimate(capsys, "gpt2-xl", "compile", 1024)
    assert gpt_compiled["throughput"]["tokens_per_s"] > gpt_eager["throughput"]["tokens_per_s"]
    config = TrainingConfig(strategy="fsdp", seq_len=1024, micro_batch=2, activation_checkpointing="full")
    gpt_fused = estimate_throughput(resolve_model("gpt2-xl"), config, cluster, implementation=fused_stack)
    assert gpt_compiled["throughput"]["breakdown"]["compute_s"] == pytest.approx(
        gpt_fused.breakdown.compute_s, rel=1e-9
    )


def test_liger_holds_no_whole_logits(capsys):
    eager, liger = _estimate(capsys, "llama-3.1-8b", "eager"), _estimate(capsys, "llama-3.1-8b", "liger")
    assert liger["memory"]["per_gpu_bytes"]["total"] < eager["memory"]["per_gpu_bytes"]["total"]
    logits = 2 * 4096 * 128256
    saved = eager["memory"]["per_gpu_bytes"]["total"] - liger["memory"]["per_gpu_bytes"]["total"]
    assert saved > 8 * logits  # the fp32 log-softmax and its gradients, 12 bytes per logit, mostly gone


def test_the_emitted_configs_turn_the_choice_on(tmp_path):
    from planner.rundir.write import emit_run_folder
    from tests.emit_plans import make_plan

    emit_run_folder(make_plan("gpt2", strategy="engine", zero_stage=1, kernels="compile"), tmp_path / "run")
    assert json.loads((tmp_path / "run" / "engine.json").read_text())["hardware_selector"]["kernels"] == "compile"
    from planner.emit.training_args import training_args_json_document
    from planner.rundir.run_options import run_config

    plan = make_plan("gpt2", strategy="ddp", kernels="compile")
    document = training_args_json_document(plan, run_config(plan))
    assert document is not None and document["torch_compile"] is True


def test_liger_is_refused_where_it_cannot_run(capsys, tmp_path):
    assert main(["estimate", "-m", "gpt2", "--gpu", "H100-80GB", "--kernels", "liger"]) == 2
    assert "no patch for gpt2's model type 'gpt2'" in capsys.readouterr().err
    from planner.errors import UserInputError
    from planner.rundir.write import emit_run_folder
    from tests.emit_plans import make_plan

    with pytest.raises(UserInputError, match="Triton GPU kernels"):
        emit_run_folder(make_plan("llama-3.2-1b", kernels="liger"), tmp_path / "run")


@pytest.mark.slow
def test_the_engine_compiles_each_block_and_trains_as_eager():
    """One process, a tiny GPT-2: two steps with every block compiled (inductor on the CPU) against eager.
    Its blocks have the shapes of the run-folder tests' below (scripts/demo_checkpoint.py's GPT-2, 2 x 64
    tokens), so their ranks find these compiled kernels in inductor's cache instead of building them again."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    import backends

    def run(kernels: str) -> list[float]:
        torch.manual_seed(0)
        model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=64, n_positions=256,
                                           resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))  # fmt: skip
        config = {"train_micro_batch_size_per_gpu": 2, "hardware_selector": {"kernels": kernels}}
        engine, _, _, _ = backends.initialize(model=model, config=config)
        ids = torch.randint(0, 64, (2, 64), generator=torch.Generator().manual_seed(1))
        losses = []
        for _ in range(2):
            engine.backward(engine(input_ids=ids, labels=ids))
            engine.step()
            losses.append(engine.last_loss)
        return losses

    assert run("compile") == pytest.approx(run("eager"), abs=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_an_emitted_compile_run_folder_trains_like_the_reference(tmp_path, strategy):
    """The runner compiles each block under DDP and FSDP2 (after AC, before wrapping): the HF reference's losses."""
    from planner.contract.run_config import DataConfig, Hyperparameters
    from planner.rundir.write import RunOptions, emit_run_folder
    from scripts.demo_checkpoint import make_local_gpt2
    from tests.distributed import run_torchrun
    from tests.emit_plans import make_plan
    from tests.runner_reference import hf_reference_losses

    # Two blocks, as the engine test's model above: each rank traces every block instance anew under dynamo
    # (transformers' KV cache, built in training too, differs per layer and is guarded), so each block more
    # is seconds of a rank's CPU, and two compare with the reference as four do.
    model_dir, corpus = make_local_gpt2(tmp_path / "user", layers=2)
    options = RunOptions(
        data=DataConfig(train=[str(corpus)]), optim=Hyperparameters(max_steps=3, learning_rate=1e-3, warmup_steps=1)
    )
    plan = make_plan(str(model_dir), seq_len=64, micro_batch=2, grad_accum=2, strategy=strategy, kernels="compile")
    run_dir = tmp_path / "run"
    emit_run_folder(plan, run_dir, options=options)
    # The runner as launch.sh starts it (launch.sh itself: tests/test_emit_runs.py), its ranks forked warm
    # (tests/warm_launch.py): a cold launch per strategy was ~12 s more CPU.
    run_torchrun(["-m", "backends.run", "--plan", str(run_dir), "--steps", "3"], nproc=2, timeout=600)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [row["loss"] for row in rows if row["kind"] == "train"] == pytest.approx(
        hf_reference_losses(run_dir, 3), abs=1e-5
    )

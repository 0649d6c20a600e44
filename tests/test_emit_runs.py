"""Every launch form of an emitted run folder completes a run (CPU, gloo, 2 processes, tiny GPT-2, 3 steps).

The reference is a single-process run of the same model on the same samples:
DDP, DeepSpeed ZeRO-1 (torchrun), ZeRO-2 (DeepSpeed launcher), ZeRO-3 (accelerate
launch, which starts torchrun's agent) and accelerate FSDP2 must reproduce
its per-micro-step losses, since all of them compute the same averaged
gradient and the same AdamW update. The HF Trainer shuffles its data, so its
two runs (DeepSpeed, FSDP) are compared with each other.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from planner.emit import emit_run_folder

from distributed import cpu_env, free_port
from emit_plans import make_plan

STEPS = 3
pytestmark = pytest.mark.slow


def _launch(run_dir: Path, *args: str, env: dict[str, str] | None = None) -> dict:
    """bash launch.sh --tiny --steps 3 ...; returns rank 0's TRAIN_RESULT."""
    completed = subprocess.run(
        ["bash", str(run_dir / "launch.sh"), "--tiny", "--steps", str(STEPS), *args],
        env=cpu_env({"MASTER_PORT": str(free_port()), **(env or {})}), capture_output=True, text=True, timeout=400,
    )
    return _result(completed)


def _result(completed: subprocess.CompletedProcess) -> dict:
    lines = [line for line in completed.stdout.splitlines() if line.startswith("TRAIN_RESULT ")]
    if completed.returncode != 0 or len(lines) != 1:
        raise AssertionError(f"exit {completed.returncode}\n--- stdout\n{completed.stdout[-4000:]}\n--- stderr\n{completed.stderr[-6000:]}")
    return json.loads(lines[0].removeprefix("TRAIN_RESULT "))


@pytest.fixture(scope="module")
def reference_losses() -> list[float]:
    """Rank 0's losses of a 2-rank data-parallel run, computed in one process."""
    import torch

    from backends.data import SyntheticTokens, micro_batches
    from backends.model_factory import build_causal_lm, catalog_config, tiny_config
    from planner.emit.target import ADAM_BETAS, ADAM_EPS, GRADIENT_CLIPPING, LEARNING_RATE, WEIGHT_DECAY

    world, micro, accum, seq = 2, 1, 2, 32
    config = tiny_config(catalog_config("gpt2"))
    model = build_causal_lm(config, seed=0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, betas=ADAM_BETAS, eps=ADAM_EPS,
                                  weight_decay=WEIGHT_DECAY)
    tokens = SyntheticTokens(STEPS * accum * micro * world, seq, config["vocab_size"], seed=0)
    streams = [micro_batches(tokens, micro_batch=micro, rank=r, world=world, seed=0, shuffle=False) for r in range(world)]
    losses = []
    for _ in range(STEPS):
        for _ in range(accum):
            for rank, stream in enumerate(streams):
                batch = next(stream)
                loss = model(input_ids=batch, labels=batch).loss
                (loss / (accum * world)).backward()
                if rank == 0:
                    losses.append(loss.item())
        torch.nn.utils.clip_grad_norm_(model.parameters(), GRADIENT_CLIPPING)
        optimizer.step()
        optimizer.zero_grad()
    return losses


def _assert_matches(result: dict, reference: list[float]) -> None:
    assert result["steps"] == STEPS and result["world_size"] == 2 and result["global_batch"] == 4
    assert result["losses"] == pytest.approx(reference, abs=2e-4)


def test_ddp_torchrun_and_multi_node_loopback(tmp_path, reference_losses):
    single = tmp_path / "ddp"
    emit_run_folder(make_plan(strategy="ddp"), single)
    result = _launch(single)
    assert result["mode"] == "ddp" and result["wrapper"] == "DistributedDataParallel"
    _assert_matches(result, reference_losses)

    # Two "nodes" of one process each, started with the emitted multi-node command.
    nodes = tmp_path / "two nodes"
    emit_run_folder(make_plan(strategy="ddp", gpus_per_node=1, nodes=2), nodes)
    port = str(free_port())
    command = ["bash", str(nodes / "launch.sh"), "--tiny", "--steps", str(STEPS)]
    procs = [
        subprocess.Popen(command, env=cpu_env({"NODE_RANK": str(rank), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port}),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for rank in (0, 1)
    ]
    outputs = [proc.communicate(timeout=400) for proc in procs]
    completed = [subprocess.CompletedProcess(command, proc.returncode, out, err) for proc, (out, err) in zip(procs, outputs)]
    assert completed[1].returncode == 0, completed[1].stderr[-4000:]
    _assert_matches(_result(completed[0]), reference_losses)


def test_deepspeed_zero_stages(tmp_path, reference_losses):
    """ZeRO-1 under torchrun, ZeRO-2 under the DeepSpeed launcher; ZeRO-3 runs under accelerate below."""
    extensions = tmp_path / "torch_extensions"
    env = {"TORCH_EXTENSIONS_DIR": str(extensions)}
    for stage, launcher in ((1, "torchrun"), (2, "deepspeed")):
        run_dir = tmp_path / f"zero{stage}"
        emit_run_folder(make_plan(strategy="deepspeed", zero_stage=stage), run_dir)
        result = _launch(run_dir, env={**env, "LAUNCHER": launcher})
        assert (result["mode"], result["zero_stage"], result["optimizer_steps"]) == ("deepspeed", stage, STEPS)
        _assert_matches(result, reference_losses)
    assert not extensions.exists() or not any(extensions.iterdir())  # nothing was compiled


def test_accelerate_launch_fsdp_and_deepspeed(tmp_path, reference_losses):
    fsdp = tmp_path / "fsdp"
    emit_run_folder(make_plan(strategy="fsdp"), fsdp)
    result = _launch(fsdp)  # the plan's launcher: accelerate launch --config_file
    assert (result["mode"], result["distributed_type"], result["wrapper"]) == ("accelerate", "FSDP", "FSDPGPT2LMHeadModel")
    _assert_matches(result, reference_losses)

    zero3 = tmp_path / "zero3"
    emit_run_folder(make_plan(strategy="deepspeed", zero_stage=3), zero3)
    result = _launch(zero3, env={"LAUNCHER": "accelerate", "TORCH_EXTENSIONS_DIR": str(tmp_path / "ext")})
    assert (result["mode"], result["distributed_type"], result["wrapper"]) == ("accelerate", "DEEPSPEED", "DeepSpeedEngine")
    assert result["zero_stage"] == 3 and not (tmp_path / "ext").exists()
    _assert_matches(result, reference_losses)


def test_accelerate_launch_ddp_plan(tmp_path, reference_losses):
    """DDP plans' YAML too: accelerate starts torchrun and wraps the model in DDP (MULTI_CPU on gloo here)."""
    ddp = tmp_path / "ddp"
    emit_run_folder(make_plan(strategy="ddp"), ddp)
    result = _launch(ddp, env={"LAUNCHER": "accelerate"})
    assert (result["mode"], result["wrapper"]) == ("accelerate", "DistributedDataParallel")
    _assert_matches(result, reference_losses)


def test_hf_trainer_with_deepspeed_and_fsdp_plans(tmp_path):
    results = {}
    for name, fields in (("deepspeed", {"strategy": "deepspeed", "zero_stage": 2}), ("fsdp", {"strategy": "fsdp"})):
        run_dir = tmp_path / name
        emit_run_folder(make_plan(**fields), run_dir)
        results[name] = _launch(run_dir, "--mode", "trainer", env={"LAUNCHER": "torchrun"})
        assert results[name]["optimizer_steps"] == STEPS and results[name]["world_size"] == 2
    assert results["deepspeed"]["distributed_type"] == "DEEPSPEED" and results["deepspeed"]["wrapper"] == "DeepSpeedEngine"
    assert results["fsdp"]["distributed_type"] == "FSDP" and results["fsdp"]["wrapper"] == "FSDPGPT2LMHeadModel"
    # Same seed, same sampler, same update: the two backends log the same losses.
    assert results["deepspeed"]["losses"] == pytest.approx(results["fsdp"]["losses"], abs=2e-4)
    assert len(results["fsdp"]["losses"]) == STEPS


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))

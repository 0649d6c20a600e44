"""Every strategy the runner has trains the user's checkpoint on the user's data exactly as one process would.

A local GPT-2-architecture checkpoint with its own tokenizer, fine-tuned on a
corpus the test writes, all in fp32 with the same data, seed and steps under
DDP, FSDP2, DeepSpeed ZeRO-1/2/3, our engine's ZeRO-1/2/3, and our engine's
tp2 and pp2 (each rank reading only its slice of the checkpoint). The
reference is `from_pretrained` trained on one process over the same global
batches (tests/runner_reference.py): every per-step loss must match it
within 1e-4 relative.
"""

from __future__ import annotations

import json

import pytest

from planner.contract.run_config import DataConfig, Hyperparameters
from planner.rundir.write import RunOptions, emit_run_folder
from scripts.demo_checkpoint import make_local_gpt2
from tests.distributed import run_torchrun
from tests.emit_plans import make_plan
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


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("equivalence")
    model_dir, corpus = make_local_gpt2(root / "user")
    options = RunOptions(
        data=DataConfig(train=[str(corpus)]), optim=Hyperparameters(max_steps=STEPS, learning_rate=1e-3, warmup_steps=1)
    )
    for name, fields in STRATEGIES.items():
        plan = make_plan(str(model_dir), seq_len=64, micro_batch=2, **{"grad_accum": 2, **fields})
        emit_run_folder(plan, root / name, options=options)
    return root


@pytest.fixture(scope="module")
def results(folders):
    out = folders / "results.json"
    run_torchrun(
        ["tests/engine_jobs/runner_folders.py", str(out), *(str(folders / name) for name in STRATEGIES)],
        nproc=2,
        timeout=900,
    )
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def reference(folders):
    return hf_reference_losses(folders / "ddp", STEPS)


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

"""Context parallelism: each sequence split over cp ranks, in the engine and in the planner.

References: a single-process run of the same tiny Llama on the same global batches (transformers' own
loss, torch's AdamW, clipping by the global norm), for cp2 on 2 ranks and cp2 x dp2 on 4, under ZeRO-0
to ZeRO-3; the runner's HF reference (tests/runner_reference.py) for an emitted cp2 run folder; and, for
the planner, its own block formula (Korthikanti et al. 2022, docs/accuracy.md) with the gathered keys
and values as the only difference between a cp rank and a sequence of s / cp.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hardware_selector_cli.app import main
from planner.contract.layout import ParallelDims
from planner.errors import UserInputError
from planner.memory.activation_batch import estimate_activations
from planner.memory.activations import activation_widths
from planner.models.resolve import resolve_model
from planner.training_config import TrainingConfig
from tests.context_parallel_model import LR, MICRO, STEPS, global_batch, tiny_llama
from tests.engine_jobs.one_launch import launch_jobs


def _reference(replicas: int) -> tuple[list[float], list[float], dict, float]:
    import torch

    model = tiny_llama()
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0)
    losses, norms = [], []
    for step in range(STEPS):
        chunks = global_batch(step, replicas).split(MICRO)
        loss = sum(model(input_ids=chunk, labels=chunk).loss for chunk in chunks) / replicas
        loss.backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)))
        optimizer.step()
        optimizer.zero_grad()
        losses.append(float(loss.detach()))
    with torch.no_grad():
        first = global_batch(0, 1)
        evaluation = float(model(input_ids=first, labels=first).loss)
    return losses, norms, {name: p.detach() for name, p in model.named_parameters()}, evaluation


STEPS_OF_THE_RUN_FOLDER = 3
LAYOUTS = {"cp2": (2, 1), "cp2xdp2": (4, 1), "cp2xtp2": (4, 2)}  # name: (world, tp), cp 2 in each


def _emit_cp_run_folder(root: Path) -> Path:
    """cp 2 beside tp 2 with sequence parallelism, as the search offers it for long sequences, of a GPT-2 checkpoint."""
    from planner.contract.run_config import DataConfig, Hyperparameters
    from planner.rundir.write import RunOptions, emit_run_folder
    from scripts.demo_checkpoint import make_local_gpt2
    from tests.emit_plans import make_plan

    model_dir, corpus = make_local_gpt2(root / "user")
    optim = Hyperparameters(max_steps=STEPS_OF_THE_RUN_FOLDER, learning_rate=1e-3, warmup_steps=1)
    plan = make_plan(
        str(model_dir), gpus_per_node=4, seq_len=64, micro_batch=2, grad_accum=2, strategy="engine", zero_stage=1,
        layout=ParallelDims(cp=2, tp=2), sequence_parallel=True,
    )  # fmt: skip
    emit_run_folder(plan, root / "run", options=RunOptions(data=DataConfig(train=[str(corpus)]), optim=optim))
    return root / "run"


def _launch(root: Path, world: int) -> Path:
    """One launch of `world` ranks (tests/engine_jobs/one_launch.py), as each costs its ranks' start-up: the
    engine job of each layout of that world (its OUT: root/LAYOUT/out), and on 4 ranks also the emitted run folder
    (root/run) trained through the runner's loop, with launch.sh's --steps."""
    jobs: dict[str, tuple[object, ...]] = {
        name: ("context_parallel", 2, tp) for name, (layout_world, tp) in LAYOUTS.items() if layout_world == world
    }
    if world == 4:
        jobs["runs"] = ("runner_folders", _emit_cp_run_folder(root), "--", "--steps", STEPS_OF_THE_RUN_FOLDER)
    return launch_jobs(root, world, jobs, timeout=900)


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory) -> Path:
    return _launch(tmp_path_factory.mktemp("cp_two_ranks"), 2)


@pytest.fixture(scope="module")
def four_ranks(tmp_path_factory) -> Path:
    return _launch(tmp_path_factory.mktemp("cp_four_ranks"), 4)


@pytest.mark.slow
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_context_parallel_training_equals_the_single_process_reference(request, layout):
    """Losses, clipped global norms and evaluation within 1e-5. Parameters within 5e-5: after three AdamW
    steps a near-zero gradient's float-level difference moves its parameter by up to ~1e-2 of the lr.
    Under cp2 x tp2 each cp rank is a tp pair (heads and the vocabulary split) and the whole model is compared."""
    import torch

    world, tp = LAYOUTS[layout]
    replicas = world // (2 * tp)
    losses, norms, params, evaluation = _reference(replicas)
    launch = request.getfixturevalue("two_ranks" if world == 2 else "four_ranks")
    for rank in range(world):
        results = json.loads((launch / layout / f"out.{rank}.json").read_text())
        for stage, result in results.items():
            assert result["replicas"] == replicas
            assert result["losses"] == pytest.approx(losses, abs=1e-5), (rank, stage)
            assert result["norms"] == pytest.approx(norms, rel=1e-5), (rank, stage)
            assert result["eval"] == pytest.approx(evaluation, abs=1e-5)
            for name, values in result["params"].items():
                assert torch.allclose(torch.tensor(values), params[name].flatten(), atol=5e-5), (rank, stage, name)


@pytest.mark.slow
def test_an_emitted_cp_run_folder_trains_like_the_reference(four_ranks):
    """cp 2 beside tp 2 with sequence parallelism: the run folder's 4 ranks, each reading its tensor slices of the
    checkpoint, train the HF losses. (The engine under cp alone is held to the single-process run above; launch.sh
    itself is run by tests/test_expert_parallel_runner.py and tests/test_emit_runs.py.)"""
    from tests.runner_reference import hf_reference_losses

    run_dir = four_ranks / "run"
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    # rel 1e-4 as in tests/test_runner_strategies.py: sequence parallelism sums in another order, and AdamW's
    # first steps turn near-zero gradients' float-level differences into parameter moves of up to the lr.
    assert [row["loss"] for row in rows if row["kind"] == "train"] == pytest.approx(
        hf_reference_losses(run_dir, STEPS_OF_THE_RUN_FOLDER), rel=1e-4
    )


def test_a_cp_rank_keeps_a_shorter_sequence_plus_the_gathered_keys_and_values():
    """Against a plain run of the rank's seq/cp tokens: each block keeps the whole sequence's keys and values at
    their 8 kv heads (gathered; SDPA's enable_gqa does not repeat them) instead of this rank's repeated to the 32
    query heads, no mask (each chunk attends through the lower-right causal bias), and the chunks' joined output
    as a copy beside the kernels' own (backends/context_parallel)."""
    spec = resolve_model("llama-3.1-8b")
    seq, cp, micro = 131072, 8, 1
    split = TrainingConfig(strategy="engine", layout=ParallelDims(cp=cp), seq_len=seq, micro_batch=micro)
    short = TrainingConfig(strategy="engine", seq_len=seq // cp, micro_batch=micro)
    widths = activation_widths(split, native_mixed=False)
    q_width, kv_width = spec.num_heads * spec.head_dim, spec.num_kv_heads * spec.head_dim
    per_token = 2 * kv_width * cp - 2 * q_width + q_width
    expected = spec.num_layers * micro * (seq // cp) * per_token * widths.compute
    difference = (
        estimate_activations(spec, split, widths).activations - estimate_activations(spec, short, widths).activations
    )
    assert difference == pytest.approx(expected, rel=1e-9)


def test_long_sequences_plan_with_context_parallelism_the_engine_runs(capsys, tmp_path):
    """1M-token sequences of Llama-3.1-8B on 64 H100s fit only split over cp; the plan is one the engine runs
    (cp beside tp with pp 1, its ZeRO over the dp x cp ranks), and a layout it cannot run is not emitted."""
    argv = ["plan", "--model", "llama-3.1-8b", "--gpu", "H100-80GB", "--gpus-per-node", "8", "--nodes", "8",
            "--global-batch", "64", "--seq-len", "1048576", "--json"]  # fmt: skip
    assert main(argv) == 0
    best = json.loads(capsys.readouterr().out)["best"]
    layout = best["config"]["layout"]
    assert layout["cp"] > 1 and layout["pp"] == 1 and best["config"]["seq_len"] == 1048576
    from planner.rundir.write import emit_run_folder
    from tests.emit_plans import make_plan

    plan = make_plan(
        "llama-3.1-8b",
        "H100-80GB",
        8,
        4,
        seq_len=131072,
        strategy="engine",
        zero_stage=1,
        layout=ParallelDims(pp=2, cp=4),
        grad_accum=2,
    )
    with pytest.raises(UserInputError, match="splits sequences over cp with pp and ep 1") as error:
        emit_run_folder(plan, tmp_path / "run")
    assert "\n" not in str(error.value) and not (tmp_path / "run").exists()


def test_the_engines_zero_shards_over_dp_times_cp():
    """backends/context_parallel: every cp rank holds the model, so the engine's ZeRO runs over dp x cp ranks;
    the estimate's optimizer states per rank shrink by cp as they would by dp."""
    from planner.memory.model_states import model_state_bytes
    from planner.memory.rank_params import rank_params

    spec = resolve_model("llama-3.1-8b")
    for stage in (1, 2, 3):
        split, whole = (
            TrainingConfig(strategy="engine", zero_stage=stage, seq_len=32768, layout=ParallelDims(cp=cp))
            for cp in (8, 1)
        )
        ours = model_state_bytes(rank_params(spec, split), split, split.data_parallel_size(8), 8, spec.hidden_size)
        as_dp = model_state_bytes(rank_params(spec, whole), whole, whole.data_parallel_size(8), 8, spec.hidden_size)
        assert (ours.parameters, ours.gradients, ours.optimizer_states) == pytest.approx(
            (as_dp.parameters, as_dp.gradients, as_dp.optimizer_states), rel=1e-9
        )


def test_what_does_not_compose_is_one_line():
    spec = resolve_model("llama-3.1-8b")
    for fields, message in (
        (dict(strategy="fsdp", layout=ParallelDims(cp=2)), "context parallelism is our engine's"),
        (dict(strategy="engine", layout=ParallelDims(cp=4), seq_len=1004), "make --seq-len a multiple of 8"),
    ):
        with pytest.raises(UserInputError, match=message):
            TrainingConfig(**fields).check_against(spec, world_size=8, gpus_per_node=8)
    import backends
    from tests.context_parallel_model import engine_config

    config = engine_config(1, 2)
    config["hardware_selector"]["layout"]["ep"] = 2
    with pytest.raises(UserInputError, match="context parallelism composes with data and tensor parallelism"):
        backends.initialize(model=tiny_llama(), config=config)

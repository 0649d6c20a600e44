"""Expert parallelism in the engine: a tiny Mixtral trained with its experts split over ep ranks, alone and beside
tp and pp, equals the single-process reference (docs/parallelism.md, "Expert parallelism").

Reference: transformers' MixtralForCausalLM trained by torch's AdamW in one process on the same global
batches (the loss, router load-balancing loss included, averaged over the data-parallel ranks' chunks).
EP2 on 2 ranks and EP2 x dp2 on 4 ranks, under ZeRO-0 to ZeRO-3: losses, gradient norms and every
parameter (each rank's own experts compared under their global index) agree to 1e-5. With a capacity
factor, each rank drops exactly the assignments beyond capacity that the reference routing implies. A
checkpoint under ep resumes bit-exactly, resumes under another ep (ep 2 -> 1, 1 -> 2, and 2 -> 4 on 4 ranks) to
the saving run's next step, and the consolidated export (an HF-named safetensors file) holds
every expert with the reference's values. Beside tp (tests/engine_jobs/expert_tensor_parallel.py) and pp
(tests/engine_jobs/expert_pipeline.py) on 4 ranks, the runs named in their tests below.

The jobs of one world size share a launch (tests/engine_jobs/one_launch.py): the ep2 runs and the other MoE
families on 2 ranks; ep2 x dp2, ep x tp and the pipelined experts on 4.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.engine_jobs.one_launch import launch_jobs
from tests.expert_parallel_model import (
    LR,
    STEPS,
    engine_config,
    global_batch,
    reference_run,
    tiny_deepseek_v2,
    tiny_deepseek_v3,
    tiny_mixtral,
    tiny_qwen3_moe,
)

OTHER_FAMILIES = ("qwen2_moe", "qwen3_moe", "deepseek_v3")
JOBS = {  # world size: each job's name (its OUT: NAME/out), module and arguments after OUT
    2: {"ep2": ("expert_parallel", 2), "families": ("expert_parallel", 2, *OTHER_FAMILIES)},
    4: {"ep2xdp2": ("expert_parallel", 2), "ep_tp": ("expert_tensor_parallel",), "pipelined": ("expert_pipeline",)},
}


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory) -> Path:
    """The 2-rank jobs in one launch, as each launch costs its ranks' start-up: their results in JOB/out.<rank>.json."""
    return launch_jobs(tmp_path_factory.mktemp("ep_two_ranks"), 2, JOBS[2], timeout=900)


@pytest.fixture(scope="module")
def four_ranks(tmp_path_factory) -> Path:
    """The 4-rank jobs in one launch, as above."""
    return launch_jobs(tmp_path_factory.mktemp("ep_four_ranks"), 4, JOBS[4], timeout=1500)


def planned_rank_params(ep: int, tp: int = 1, **layout: Any) -> int:
    """The memory estimator's parameters on one rank of this layout, its heaviest rank under pp
    (planner/memory/rank_params.py)."""
    from planner.contract.layout import ParallelDims
    from planner.memory.rank_params import rank_params
    from planner.models.hf_config import spec_from_hf_config
    from planner.training_config import TrainingConfig

    config = tiny_mixtral().config.to_dict()
    spec = spec_from_hf_config({**config, "model_type": "mixtral"}, name="tiny-mixtral")
    schedule = "interleaved-1f1b" if layout.get("virtual_stages", 1) > 1 else "1f1b"
    dims = ParallelDims(ep=ep, tp=tp, **layout)
    config = TrainingConfig(strategy="engine", layout=dims, grad_accum=2, pipeline_schedule=schedule)
    return rank_params(spec, config).total


def _reference_value(params: dict, name: str):
    last = name.rsplit(".", 1)
    if last[-1].isdigit():  # an expert's rows, under its global index
        return params[last[0]][int(last[1])]
    return params[name]


@pytest.mark.slow
@pytest.mark.parametrize(("world", "job"), [(2, "ep2"), (4, "ep2xdp2")], ids=["ep2", "ep2xdp2"])
def test_expert_parallel_training_equals_the_single_process_reference(request, world, job):
    import torch

    folder = request.getfixturevalue("two_ranks" if world == 2 else "four_ranks") / job
    losses, norms, params, over_capacity = reference_run(world)
    planned = planned_rank_params(ep=2)
    for rank in range(world):
        results = json.loads((folder / f"out.{rank}.json").read_text())
        for run in ("zero0", "zero1", "zero2", "zero3") if world == 4 else ("zero0", "zero1"):
            result = results[run]
            assert result["world"] == world and result["dropped"] == 0
            if run != "zero3":  # ZeRO-3 holds its shards, not the whole parameters, between uses
                assert result["held"] == pytest.approx(planned, rel=0.03)  # the planner's per-rank count
            assert result["losses"] == pytest.approx(losses, abs=1e-5)
            assert result["norms"] == pytest.approx(norms, rel=1e-5)
            for name, values in result["params"].items():
                reference = _reference_value(params, name).flatten()
                assert torch.allclose(torch.tensor(values), reference, atol=1e-5), (rank, run, name)
            experts_held = {name.rsplit(".", 1)[1] for name in result["params"] if name[-1].isdigit()}
            assert len(experts_held) == 2  # 4 experts over ep 2: this rank holds two of them
        assert results["capacity"]["dropped"] == over_capacity[rank] > 0
        resume = results["resume"]  # bit-exact: the same shards, RNG and step come back
        assert resume["resumed"] == resume["uninterrupted"] and resume["same_parameters"]
        for move, resharded in results["reshard"].items():  # another ep: the same next step (1e-5, fp32)
            assert resharded["resumed"] == pytest.approx(resharded["uninterrupted"], abs=1e-5), move
            assert resharded["step"] == STEPS, move
        assert set(results["reshard"]) == {"ep2->ep1", "ep1->ep2"} | ({"ep2->ep4"} if world == 4 else set())
    from safetensors.torch import load_file

    exported = load_file(str(folder / "out.safetensors"))  # every expert, gathered from the ep ranks
    assert set(exported) == set(params)
    for name, reference in params.items():
        assert torch.allclose(exported[name], reference, atol=1e-5), name


def test_what_does_not_compose_is_refused_in_one_line():
    import backends
    from planner.errors import UserInputError

    with pytest.raises(UserInputError, match="layout.ep 2 splits the experts over 2 ranks but the job has 1"):
        backends.initialize(model=tiny_mixtral(), config=engine_config(stage=1, ep=2))


@pytest.mark.slow
def test_other_moe_families_equal_the_reference(two_ranks):
    """Qwen2-MoE's routed experts beside its gated shared expert, Qwen3-MoE's fine-grained ones, and DeepSeek-V3's
    (a dense first block, sigmoid routing with a bias, a shared expert, latent attention): split over ep 2 under
    ZeRO-1, each equals its single-process run."""
    import torch

    from tests.expert_parallel_model import MODELS

    for family in OTHER_FAMILIES:
        losses, norms, params, _ = reference_run(2, make=MODELS[family], count_routes=False)
        for rank in range(2):
            result = json.loads((two_ranks / "families" / f"out.{rank}.json").read_text())[family]
            assert result["losses"] == pytest.approx(losses, abs=1e-5), family
            assert result["norms"] == pytest.approx(norms, rel=1e-5), family
            for name, values in result["params"].items():
                reference = _reference_value(params, name).flatten()
                assert torch.allclose(torch.tensor(values), reference, atol=1e-5), (family, name)


def test_only_the_expert_layout_the_dispatch_computes_is_split():
    """gpt-oss (biased, clamped, interleaved gate/up) and Llama 4 ((E, H, 2F), every expert on every token) store
    their experts otherwise than the dispatch's act(gate) * up over (E, 2F, H): they are not split."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from backends.expert_parallel.apply import _is_experts_module

    sizes = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=1, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=8, vocab_size=64, num_local_experts=4)  # fmt: skip
    for model_type, expected in (("mixtral", True), ("gpt_oss", False), ("llama4_text", False)):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **sizes))
        found = [_is_experts_module(module) for name, module in model.named_modules() if name.endswith("experts")]
        assert found == [expected], model_type


@pytest.mark.slow
def test_experts_over_ep_and_tp_train_the_single_process_reference(four_ranks):
    """On 4 ranks, ep 2 x tp 2 under ZeRO-0, 1, 2 (with sequence parallelism) and 3, and tp 2 alone (the experts'
    ffn split over tp only, with SP), each train the reference's losses (1e-5) and gradient norms (rel 1e-5) on the
    same two data-parallel ranks' batches, and their consolidated export (HF-named, every expert gathered over ep
    and tp) holds the reference's final weights (1e-5). Each rank holds the planner's per-rank parameter count
    (within 3%). A checkpoint resumes across ep 2 x tp 2 and tp 2 to the saving run's next step."""
    import torch
    from safetensors.torch import load_file

    folder = four_ranks / "ep_tp"
    losses, norms, params, _ = reference_run(2)
    runs = ("ep2-tp2-zero0", "ep2-tp2-zero1", "ep2-tp2-zero3", "ep2-tp2-sp-zero2", "ep1-tp2-sp")
    for rank in range(4):
        results = json.loads((folder / f"out.{rank}.json").read_text())
        for run in runs:
            result = results[run]
            assert result["world"] == 2, run  # two data-parallel ranks: the ep pair, or the tp pairs' replicas
            assert result["losses"] == pytest.approx(losses, abs=1e-5), (rank, run)
            assert result["norms"] == pytest.approx(norms, rel=1e-5), (rank, run)
            ep = 2 if run.startswith("ep2") else 1
            assert result["held"] == pytest.approx(planned_rank_params(ep=ep, tp=2), rel=0.03), (rank, run)
        for move, resumed in results["reshard"].items():
            assert resumed["resumed"] == pytest.approx(resumed["uninterrupted"], abs=1e-5), move
        assert set(results["reshard"]) == {"ep2-tp2->ep1-tp2", "ep1-tp2->ep2-tp2"}
    for run in runs:
        exported = load_file(str(folder / f"out.{run}.safetensors"))
        assert set(exported) == set(params), run
        for name, reference in params.items():
            assert torch.allclose(exported[name], reference, atol=1e-5), (run, name)


FAMILY_OF_PIPELINED_RUN = {
    "qwen3-moe-ep2-tp2-sp": "qwen3_moe",
    "deepseek-v3-ep2-pp2": "deepseek_v3",
    "deepseek-v2-ep2-pp2": "deepseek_v2",
}


def _pipelined_reference(world: int, make=tiny_mixtral) -> tuple[list[float], list[float], list[float]]:
    """Losses, gradient norms, and each data-parallel rank's evaluation loss after the steps, one row per
    micro-batch: the router's load-balancing loss is per micro-batch, so the reference batches as the engine does."""
    import torch

    model = make()
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0)
    losses, norms = [], []
    for step in range(STEPS):
        rows = global_batch(step, world)
        loss = sum(model(input_ids=row[None], labels=row[None]).loss for row in rows) / len(rows)
        loss.backward()
        norms.append(float(torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in model.parameters()]))))
        optimizer.step()
        optimizer.zero_grad()
        losses.append(float(loss.detach()))
    with torch.no_grad():
        evals = [float(model(input_ids=part, labels=part).loss) for part in global_batch(STEPS, world).split(2)]
    return losses, norms, evals


@pytest.mark.slow
def test_pipelined_experts_train_the_single_process_reference(four_ranks):
    """A mixture of experts pipelined (tests/engine_jobs/expert_pipeline.py): the tiny Mixtral under ep 2 x pp 2
    with full checkpointing, ep 2 x pp 2 interleaved over the map 0, 1, 1, 0, and tp 2 x pp 2 with sequence
    parallelism; the tiny Qwen3-MoE (QK-norm attention, the family's tp plan) under ep 2 x tp 2; the tiny
    DeepSeek-V3 and V2 (a dense first block, latent attention; pipelined, not split over tp) under ep 2 x pp 2.
    Each trains the reference's losses (1e-5) and gradient norms (rel 1e-5) and evaluates each rank's rows to the
    reference's loss on them; the heaviest Mixtral rank holds the planner's per-rank parameters (within 3%);
    checkpoints of ep 2 x pp 2 and tp 2 x pp 2 resume under ep 2 x tp 2 and tp 4 to the saving run's next step
    (every stage's record of how its tensors split is saved); DeepSeek under tp is one line. Made to fail:
    without the routers' sums handed on between stages the pipelined losses miss the reference's aux term."""
    expected = {
        "mixtral": {2: _pipelined_reference(2), 1: _pipelined_reference(1)},
        "qwen3_moe": {2: _pipelined_reference(2, tiny_qwen3_moe)},
        "deepseek_v3": {2: _pipelined_reference(2, tiny_deepseek_v3)},
        "deepseek_v2": {2: _pipelined_reference(2, tiny_deepseek_v2)},
    }
    layouts = {
        "ep2-pp2-full": {"ep": 2, "pp": 2},
        "ep2-pp2-interleaved": {"ep": 2, "pp": 2, "virtual_stages": 2, "stage_layers": [0, 1, 1, 0]},
        "tp2-pp2-sp": {"ep": 1, "tp": 2, "pp": 2},
        "qwen3-moe-ep2-tp2-sp": {"ep": 2, "tp": 2},
        "deepseek-v3-ep2-pp2": {"ep": 2, "pp": 2},
        "deepseek-v2-ep2-pp2": {"ep": 2, "pp": 2},
    }
    results = [json.loads((four_ranks / "pipelined" / f"out.{rank}.json").read_text()) for rank in range(4)]
    for run, layout in layouts.items():
        model = FAMILY_OF_PIPELINED_RUN.get(run, "mixtral")
        losses, norms, evals = expected[model][results[0][run]["world"]]
        for rank, result in enumerate(results):
            assert result[run]["losses"] == pytest.approx(losses, abs=1e-5), (rank, run)
            assert result[run]["norms"] == pytest.approx(norms, rel=1e-5), (rank, run)
            assert result[run]["eval"] == pytest.approx(evals[result[run]["dp_rank"]], abs=1e-5), (rank, run)
        if model == "mixtral":
            heaviest = max(result[run]["held"] for result in results)
            assert heaviest == pytest.approx(planned_rank_params(**layout), rel=0.03), run
    for result in results:
        assert result["deepseek_tp_refused"] == (
            "the engine pipelines deepseek_v3 models but does not split them over tp; use tp 1 (pp and ep)"
        )
    moves = [result[run]["reshard"] for result in results for run in ("ep2-pp2-full", "tp2-pp2-sp")]
    assert {move["move"] for move in moves} == {"ep2-pp2->ep2-tp2", "tp2-pp2->tp4"}
    for move in moves:
        assert move["resumed"] == pytest.approx(move["uninterrupted"], abs=1e-5), move

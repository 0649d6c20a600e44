"""Expert parallelism in the engine: a tiny Mixtral trained with its experts split over ep ranks equals
the single-process reference (docs/parallelism.md, "Expert parallelism").

Reference: transformers' MixtralForCausalLM trained by torch's AdamW in one process on the same global
batches (the loss, router load-balancing loss included, averaged over the data-parallel ranks' chunks).
EP2 on 2 ranks and EP2 x dp2 on 4 ranks, under ZeRO-0 to ZeRO-3: losses, gradient norms and every
parameter (each rank's own experts compared under their global index) agree to 1e-5. With a capacity
factor, each rank drops exactly the assignments beyond capacity that the reference routing implies. A
checkpoint under ep resumes bit-exactly, resumes under another ep (ep 2 -> 1, 1 -> 2, and 2 -> 4 on 4 ranks) to
the saving run's next step, and the consolidated export (an HF-named safetensors file) holds
every expert with the reference's values.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.distributed import run_torchrun
from tests.expert_parallel_model import STEPS, engine_config, reference_run, tiny_mixtral


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
@pytest.mark.parametrize("world", [2, 4], ids=["ep2", "ep2xdp2"])
def test_expert_parallel_training_equals_the_single_process_reference(tmp_path, world):
    import torch

    run_torchrun(["tests/engine_jobs/expert_parallel.py", str(tmp_path / "out"), "2"], nproc=world, timeout=300)
    losses, norms, params, over_capacity = reference_run(world)
    planned = planned_rank_params(ep=2)
    for rank in range(world):
        results = json.loads((tmp_path / f"out.{rank}.json").read_text())
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

    exported = load_file(str(tmp_path / "out.safetensors"))  # every expert, gathered from the ep ranks
    assert set(exported) == set(params)
    for name, reference in params.items():
        assert torch.allclose(exported[name], reference, atol=1e-5), name


def test_what_does_not_compose_is_refused_in_one_line():
    import backends
    from planner.errors import UserInputError

    with pytest.raises(UserInputError, match="layout.ep 2 splits the experts over 2 ranks but the job has 1"):
        backends.initialize(model=tiny_mixtral(), config=engine_config(stage=1, ep=2))


OTHER_FAMILIES = ("qwen2_moe", "qwen3_moe", "deepseek_v3")


@pytest.mark.slow
def test_other_moe_families_equal_the_reference(tmp_path):
    """Qwen2-MoE's routed experts beside its gated shared expert, Qwen3-MoE's fine-grained ones, and DeepSeek-V3's
    (a dense first block, sigmoid routing with a bias, a shared expert, latent attention): split over ep 2 under
    ZeRO-1, each equals its single-process run."""
    import torch

    from tests.expert_parallel_model import MODELS

    run_torchrun(["tests/engine_jobs/expert_parallel.py", str(tmp_path / "out"), "2", *OTHER_FAMILIES], timeout=400)
    for family in OTHER_FAMILIES:
        losses, norms, params, _ = reference_run(2, make=MODELS[family], count_routes=False)
        for rank in range(2):
            result = json.loads((tmp_path / f"out.{rank}.json").read_text())[family]
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

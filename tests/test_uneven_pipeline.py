"""Uneven pipeline stages: --pp need not divide the layers (Llama 3 405B: 126 layers over pp 16).

References: the published layouts (Llama 3 405B's 7, 8 x 14, 7 and BLOOM's
5, 6 x 10, 5 come out of the default map) and the real model's parameters per
stage under the engine's own split (the estimator's heaviest rank within
3%). That the engine trains a 2, 3, 3, 2 map over 4 ranks to a single-process
run's losses is checked in tests/test_3d_layouts.py, in its 4-rank job.
"""

from __future__ import annotations

import json

import pytest

from hardware_selector_cli.app import main
from planner.contract.layout import default_stage_layers
from planner.rundir.write import emit_run_folder


def test_the_default_map_is_the_published_one():
    assert default_stage_layers(126, 16) == (7, *[8] * 14, 7)
    assert default_stage_layers(70, 12) == (5, *[6] * 10, 5)
    assert default_stage_layers(10, 4) == (2, 3, 3, 2) and default_stage_layers(32, 4) == (8, 8, 8, 8)


def _estimate(capsys, *extra):
    argv = ["estimate", "-m", "llama-3.1-405b", "--gpu", "H100-80GB", "--gpus-per-node", "8", "--nodes", "2048",
            "--strategy", "engine", "--tp", "8", "--pp", "16", "--grad-accum", "16", "--seq-len", "8192",
            "--ac", "full", "--json", *extra]  # fmt: skip
    code = main(argv)
    out, err = capsys.readouterr()
    return code, (json.loads(out) if code == 0 else err)


def test_llama_3_405b_plans_on_its_published_layout(capsys):
    code, document = _estimate(capsys)
    assert code == 0
    assert document["config"]["layout"]["stage_layers"] == [7, *[8] * 14, 7]
    assert document["throughput"]["mfu"] > 0
    code, explicit = _estimate(capsys, "--pp-layers", ",".join(["6", *["8"] * 15]))  # 126 with a light first stage
    assert code == 0 and explicit["config"]["layout"]["stage_layers"][0] == 6
    assert explicit["memory"]["per_gpu_bytes"]["total"] != document["memory"]["per_gpu_bytes"]["total"]
    code, error = _estimate(capsys, "--pp-layers", "8,8")
    assert code == 2 and "stage_layers lists 2 stages; pp x virtual_stages is 16" in error
    code, error = _estimate(capsys, "--pp-layers", ",".join(["8"] * 16))
    assert code == 2 and "sums to 128, but llama-3.1-405b has 126 layers" in error and error.count("\n") == 1


def test_the_heaviest_ranks_parameters_match_the_real_model_under_the_engines_split(tmp_path):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from backends.pipeline_parallel.split import stage_layer_ranges
    from backends.weights.model_factory import catalog_config
    from planner.memory.rank_params import rank_params
    from planner.models.resolve import resolve_model
    from planner.training_config import TrainingConfig

    hf = {**catalog_config("llama-3-8b"), "num_hidden_layers": 10}
    (tmp_path / "config.json").write_text(json.dumps(hf))
    spec = resolve_model(str(tmp_path / "config.json"))
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**hf))
    per_layer = [sum(p.numel() for p in layer.parameters()) for layer in model.model.layers]
    embedding = model.model.embed_tokens.weight.numel()
    head = model.lm_head.weight.numel() + model.model.norm.weight.numel()
    stage_map = (1, 4, 4, 1)  # the heaviest rank is a middle one (4 blocks), not an end one (1 block + 128k vocab)
    ranges = stage_layer_ranges(10, 4, stage_map)
    real = [
        sum(per_layer[a:b]) + (embedding if i == 0 else 0) + (head if i == 3 else 0) for i, (a, b) in enumerate(ranges)
    ]
    config = TrainingConfig(strategy="engine", layout={"pp": 4, "stage_layers": stage_map}, grad_accum=4, seq_len=128)
    assert rank_params(spec, config).total == pytest.approx(max(real), rel=0.03)


def test_the_search_offers_uneven_pipelines_and_the_run_folder_carries_the_map(tmp_path):
    from planner.hardware.cluster import make_cluster
    from planner.models.resolve import resolve_model
    from planner.search.layouts import enumerate_layouts
    from planner.search.request import PlanRequest
    from tests.emit_plans import make_plan

    spec = resolve_model("llama-3.1-405b")
    layouts = [
        layout.fields["layout"]
        for layout in enumerate_layouts(spec, make_cluster("H100-80GB", gpus_per_node=8, nodes=2048), PlanRequest())
        if "layout" in layout.fields
    ]
    assert any(dims.tp == 8 and dims.pp == 16 and dims.stage_layers == (7, *[8] * 14, 7) for dims in layouts)
    # and Llama 3's interleaved one-layer chunks with the embedding and the head in chunks of their own
    llama_3 = [dims for dims in layouts if dims.tp == 8 and dims.pp == 16 and dims.virtual_stages == 8]
    assert llama_3 and all(dims.stage_layers == (0, *[1] * 126, 0) for dims in llama_3)

    stage_map = default_stage_layers(12, 5)  # GPT-2's 12 layers over 5 stages
    plan = make_plan(strategy="engine", gpus_per_node=5, grad_accum=5, layout={"pp": 5, "stage_layers": stage_map})
    emit_run_folder(plan, tmp_path / "run")
    engine = json.loads((tmp_path / "run" / "engine.json").read_text())
    assert tuple(engine["hardware_selector"]["layout"]["stage_layers"]) == stage_map == (2, 2, 3, 3, 2)


def test_the_embedding_and_the_head_may_take_a_chunk_of_their_own(capsys):
    """Llama 3 405B's interleaved layout: 126 layers in 128 one-layer chunks over 16 ranks, the first chunk the
    embedding alone and the last the head alone (0, 1 x 126, 0), from --virtual-stages 8 or --pp-layers."""
    assert default_stage_layers(126, 128) == (0, *[1] * 126, 0)
    assert default_stage_layers(126, 127) == (0, *[1] * 126)
    interleaved = ["--pp-schedule", "interleaved-1f1b", "--virtual-stages", "8"]
    code, document = _estimate(capsys, *interleaved)
    assert code == 0 and document["config"]["layout"]["stage_layers"] == [0, *[1] * 126, 0]
    code, explicit = _estimate(capsys, *interleaved, "--pp-layers", "0,1x126,0")
    assert code == 0 and explicit["throughput"] == document["throughput"]
    code, error = _estimate(capsys, *interleaved, "--pp-layers", "1,0,1x125,0")  # an empty chunk in the middle
    assert code == 2 and "the first may hold the embedding alone" in error and error.count("\n") == 1
    code, error = _estimate(capsys, "--pp-layers", "0,1x126,0")  # the map without the interleaving it needs
    assert code == 2 and "(for 8 chunks per rank: --virtual-stages 8 --pp-schedule interleaved-1f1b)" in error


def test_the_slowest_rank_paces_the_step_head_included():
    """The step is paced by the rank whose blocks plus head take longest. Llama 3.1 405B's head (128k vocab)
    costs less than a block, so under 7, 8 x 14, 7 a middle rank (8 blocks, no head) is the slowest, as under
    8, 8 x 14, 6; a last rank of 8 blocks (6, 8 x 14, 8) adds the head, as the unmapped estimate does."""
    from planner.hardware.cluster import make_cluster
    from planner.models.resolve import resolve_model
    from planner.throughput.estimate import estimate_throughput
    from planner.training_config import TrainingConfig

    spec, cluster = resolve_model("llama-3.1-405b"), make_cluster("H100-80GB", 8, 16)

    def compute(stage_map):
        layout = {"tp": 8, "pp": 16, "stage_layers": stage_map}
        config = TrainingConfig(strategy="engine", layout=layout, grad_accum=16, seq_len=4096, micro_batch=1)
        return estimate_throughput(spec, config, cluster).breakdown.compute_s

    light_last, light_first = compute((7, *[8] * 14, 7)), compute((8, *[8] * 14, 6))
    heavy_last = compute((6, *[8] * 14, 8))
    assert light_last == pytest.approx(light_first, rel=1e-12)
    assert heavy_last > light_last * 1.02  # the head is more than 2% of a rank's work
    assert compute(None) == pytest.approx(heavy_last, rel=1e-12)


def test_stage_maps_print_in_the_shorthand_pp_layers_reads():
    from hardware_selector_cli.training_options import _stage_layers
    from planner.contract.layout import describe_stage_layers

    assert describe_stage_layers((0, *[1] * 126, 0)) == "0,1x126,0"
    for stage_map in [(7, *[8] * 14, 7), (2, 3, 3, 2), (8,), (0, 1, 0), default_stage_layers(70, 12)]:
        assert _stage_layers(describe_stage_layers(stage_map)) == stage_map

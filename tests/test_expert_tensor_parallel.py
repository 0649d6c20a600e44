"""Expert parallelism composed with tensor parallelism, as the planner offers and estimates it and as --emit and the
engine refuse what does not compose (docs/parallelism.md, "Expert parallelism").

The engine trained under ep x tp against the single-process reference is in tests/test_expert_parallel_engine.py, in
the one 4-rank launch of the expert-parallel runs.
"""

from __future__ import annotations

import json

import pytest


def _engine_expert_layouts(model: str) -> set[tuple[int, int, int, bool, int]]:
    """(ep, tp, pp, sequence parallel, ZeRO stage) of the search's engine layouts on 2 nodes of 8 H100s."""
    from planner.hardware.cluster import make_cluster
    from planner.models.resolve import resolve_model
    from planner.search import PlanRequest
    from planner.search.layouts import enumerate_layouts

    layouts = enumerate_layouts(resolve_model(model), make_cluster("H100-80GB", 8, 2), PlanRequest())
    return {
        (
            layout.fields["layout"].ep,
            layout.fields["layout"].tp,
            layout.fields["layout"].pp,
            layout.fields.get("sequence_parallel", False),
            layout.fields["zero_stage"],
        )
        for layout in layouts
        if layout.fields["strategy"].value == "engine"
    }


def test_the_search_offers_what_the_engine_runs():
    """Mixtral and Qwen3-MoE (a tp plan in the family registry): ep beside tp and pp, sequence parallelism on with
    tp, ZeRO-1 under pp, cp 1; DeepSeek-V3 (a plan that pipelines, not split over tp) ep beside pp; the MoE
    families without a plan (Qwen2-MoE) ep alone."""
    mixtral = _engine_expert_layouts("mixtral-8x7b")
    assert {(2, 2, 1, True, 1), (8, 2, 1, True, 0), (1, 8, 1, True, 1), (2, 1, 1, False, 3)} <= mixtral
    assert {(8, 1, 2, False, 0), (2, 2, 2, True, 1), (1, 1, 4, False, 1)} <= mixtral  # (ZeRO-0: edp is 1)
    assert all(sequence_parallel == (tp > 1) for _, tp, _, sequence_parallel, _ in mixtral)
    assert {stage for _, _, pp, _, stage in mixtral if pp > 1} == {0, 1}
    assert {(2, 2), (1, 4)} <= {(tp, pp) for _, tp, pp, _, _ in _engine_expert_layouts("qwen3-30b-a3b")}
    assert {tp for _, tp, _, _, _ in _engine_expert_layouts("deepseek-v3")} == {1}
    assert {(8, 2), (4, 4)} <= {(ep, pp) for ep, _, pp, _, _ in _engine_expert_layouts("deepseek-v3")}
    assert {(tp, pp) for _, tp, pp, _, _ in _engine_expert_layouts("qwen1.5-moe-a2.7b")} == {(1, 1)}


def test_an_moe_config_with_dense_mlp_layers_is_not_split_over_tp(tmp_path):
    """The engine's tp splits MoE blocks only (backends/expert_parallel/tensor_parallel.py refuses the rest): a
    Qwen3-MoE config whose mlp_only_layers keep dense MLPs gets ep and pp from the search, no tp, and --emit refuses
    a hand-made tp layout of it in one line before writing anything."""
    from backends.weights.model_factory import catalog_config
    from planner.contract.layout import ParallelDims
    from planner.errors import UserInputError
    from planner.hardware.cluster import make_cluster
    from planner.models.resolve import resolve_model
    from planner.rundir.write import emit_run_folder
    from planner.search import PlanRequest
    from planner.search.layouts import enumerate_layouts
    from tests.emit_plans import make_plan

    folder = tmp_path / "qwen3-moe-dense-first"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({**catalog_config("qwen3-30b-a3b"), "mlp_only_layers": [0]}))
    spec = resolve_model(str(folder))
    assert spec.dense_layers == 1
    layouts = enumerate_layouts(spec, make_cluster("H100-80GB", 8, 2), PlanRequest())
    engine = [layout.fields["layout"] for layout in layouts if layout.fields["strategy"].value == "engine"]
    assert {dims.tp for dims in engine} == {1} and {dims.pp for dims in engine} > {1}
    plan = make_plan(str(folder), gpus_per_node=8, strategy="engine", zero_stage=1, layout=ParallelDims(ep=2, tp=2))
    with pytest.raises(UserInputError, match="does not split an MoE model with 1 dense MLP layers over tp"):
        emit_run_folder(plan, tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_the_engine_routes_every_token_on_each_tp_rank_in_the_estimates():
    """Every tp rank of the engine routes and exchanges all the tokens (backends/expert_parallel/dispatch.py), where
    Megatron-LM's sends a tp-th: the ep all-to-all takes longer than under the tp-split preset, and each block keeps
    the routed hidden states whole on every tp rank, (tp - 1)/tp of k x hidden x (16-bit input + fp32 output) bytes
    per token more than when they split over tp."""
    import dataclasses

    from planner.contract.layout import ParallelDims
    from planner.hardware.cluster import make_cluster
    from planner.memory.activations import ActivationShape, activation_widths, block_bytes
    from planner.models.resolve import resolve_model
    from planner.throughput.estimate import estimate_throughput
    from planner.throughput.implementation import OUR_STRATEGIES
    from planner.training_config import TrainingConfig

    spec, cluster = resolve_model("mixtral-8x7b"), make_cluster("H100-80GB", 8, 2)
    config = TrainingConfig(
        strategy="engine", layout=ParallelDims(ep=2, tp=2), sequence_parallel=True, seq_len=4096, micro_batch=1
    )
    split = dataclasses.replace(OUR_STRATEGIES, expert_tokens_split_over_tp=True)
    ours, megatron_like = (
        estimate_throughput(spec, config, cluster, implementation=preset).breakdown.tensor_parallel_comm_s
        for preset in (OUR_STRATEGIES, split)
    )
    assert ours > megatron_like
    shape, widths = ActivationShape.of(config), activation_widths(config, native_mixed=False)
    assert shape.routes_every_token_per_tp_rank
    whole, shared = (
        block_bytes(spec, shape._replace(routes_every_token_per_tp_rank=flag), widths, kv_seq_len=4096)
        for flag in (True, False)
    )
    k, tp = spec.experts_per_token, 2
    assert whole - shared == pytest.approx(k * spec.hidden_size * (widths.compute + widths.experts) * (1 - 1 / tp))


def test_what_does_not_compose_is_one_line(tmp_path):
    """ep or pp with cp is refused by the layout check before any group is built, and by --emit before any file is
    written (a plan's layout may be edited by hand), as is tp on DeepSeek-V3; ep with pp and tp is what the engine
    runs."""
    from backends.parallel_dims import check_fits
    from planner.contract.layout import ParallelDims
    from planner.errors import UserInputError

    for dims in (ParallelDims(ep=2, cp=2, dp=2), ParallelDims(pp=2, cp=2, dp=1)):
        with pytest.raises(UserInputError, match="context parallelism runs with pp 1 and ep 1"):
            check_fits(dims, dims.world_size)
    check_fits(ParallelDims(ep=2, tp=2, dp=2), 4)  # what the engine runs
    check_fits(ParallelDims(ep=2, pp=2, tp=2, dp=2), 8)

    from planner.rundir.write import emit_run_folder
    from tests.emit_plans import make_plan

    plan = make_plan("mixtral-8x7b", gpus_per_node=8, strategy="engine", zero_stage=1, layout=ParallelDims(ep=2, cp=2))
    with pytest.raises(UserInputError, match="our engine splits sequences over cp with pp and ep 1"):
        emit_run_folder(plan, tmp_path / "run")
    plan = make_plan("deepseek-v3", gpus_per_node=8, strategy="engine", zero_stage=1, layout=ParallelDims(ep=2, tp=2))
    with pytest.raises(UserInputError, match="our engine does not split deepseek_v3 models over tp; plan with --tp 1"):
        emit_run_folder(plan, tmp_path / "run")
    assert not (tmp_path / "run").exists()

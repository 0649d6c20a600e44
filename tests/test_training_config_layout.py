"""Layout checks that tie a TrainingConfig to a model: each is a one-line, actionable error.

The pipeline rule mirrors torch.distributed.pipelining: its 1F1B schedule
refuses fewer micro-batches than stages, and the interleaved one runs them
in rounds of pp.
"""

from __future__ import annotations

import pytest

from planner.errors import UnknownKeywordError, UserInputError
from planner.models.catalog import find_model
from planner.training_config import TrainingConfig

LLAMA = find_model("llama-2-7b")  # 32 layers, 32 heads


@pytest.mark.parametrize(
    "fields, world_size, problem",
    [
        (dict(pipeline_parallel=2, grad_accum=1), 8, "--pp 2 needs at least 2 micro-batches per step"),
        (
            dict(pipeline_parallel=4, grad_accum=6, pipeline_schedule="interleaved-1f1b", virtual_stages=2),
            8,
            "make --grad-accum a multiple of 4",
        ),
        (dict(tensor_parallel=3), 6, "--tp 3 does not divide llama-2-7b's 32 attention heads"),
        (
            dict(layout={"pp": 5, "stage_layers": (6, 6, 6, 6, 6)}, grad_accum=5),
            10,
            "--pp-layers 6x5 sums to 30, but llama-2-7b has 32 layers",
        ),
        (dict(pipeline_parallel=40, grad_accum=40), 40, "40 pipeline chunks exceed llama-2-7b's 32 layers"),
    ],
)
def test_layouts_that_cannot_run_are_refused(fields, world_size, problem):
    config = TrainingConfig(strategy="engine", **fields)
    with pytest.raises(UserInputError, match=problem):
        config.check_against(LLAMA, world_size=world_size, gpus_per_node=8)


def test_a_pp_that_does_not_divide_the_layers_runs_the_default_uneven_map():
    config = TrainingConfig(strategy="engine", pipeline_parallel=5, grad_accum=5).with_stage_map(LLAMA)
    config.check_against(LLAMA, world_size=10, gpus_per_node=8)
    assert config.layout.stage_layers == (6, 6, 7, 7, 6)  # ceil(32/5) = 7, three off: both ends, then the second


def test_enough_micro_batches_pass():
    TrainingConfig(strategy="engine", pipeline_parallel=2, grad_accum=2).check_against(
        LLAMA, world_size=8, gpus_per_node=8
    )


def test_every_layout_property_is_also_a_keyword():
    """Each degree the config reads back (`config.context_parallel`) is taken under that name: ignored, a
    context-parallel degree planned a run without it."""
    engine = dict(strategy="engine", pipeline_schedule="interleaved-1f1b")
    config = TrainingConfig(
        **engine, tensor_parallel=2, pipeline_parallel=4, virtual_stages=2, expert_parallel=8, context_parallel=2
    )
    assert (config.tensor_parallel, config.pipeline_parallel, config.virtual_stages) == (2, 4, 2)
    assert (config.expert_parallel, config.context_parallel) == (8, 2)
    assert config == TrainingConfig(**engine, layout={"tp": 2, "pp": 4, "virtual_stages": 2, "ep": 8, "cp": 2})


@pytest.mark.parametrize(
    "fields, problem",
    [
        (dict(micro_batch_size=4), "no keyword 'micro_batch_size'; did you mean 'micro_batch'"),
        (dict(contextparallel=2), "no keyword 'contextparallel'; did you mean 'context_parallel'"),
        (dict(colour="blue"), "no keyword 'colour'; its keywords are strategy, zero_stage"),
    ],
)
def test_an_unknown_key_is_refused_with_the_field_meant(fields, problem):
    with pytest.raises(UnknownKeywordError, match=problem) as refused:  # a TypeError and a UserInputError
        TrainingConfig(**fields)
    assert "\n" not in str(refused.value)  # one line, not pydantic's ValidationError around it


def test_a_degree_given_twice_must_agree():
    with pytest.raises(ValueError, match="got context_parallel=2 and a layout with cp=4: give the degree once"):
        TrainingConfig(strategy="engine", layout={"cp": 4}, context_parallel=2)
    same = TrainingConfig(strategy="engine", layout={"cp": 2, "tp": 2}, context_parallel=2)
    assert (same.layout.cp, same.layout.tp) == (2, 2)

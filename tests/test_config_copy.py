"""The search's unvalidated config copies (planner/search/config_copy.py) equal validated configs."""

from __future__ import annotations

import pytest

from planner.contract.layout import ParallelDims
from planner.search.config_copy import with_batch, with_checkpointing
from planner.training_config import ActivationCheckpointing, Offload, PipelineSchedule, Strategy, TrainingConfig

FIELDS = [
    {"strategy": Strategy.DDP},
    {"strategy": Strategy.DEEPSPEED, "zero_stage": 3, "offload_optimizer": Offload.CPU, "offload_params": Offload.CPU},
    {
        "strategy": Strategy.ENGINE,
        "zero_stage": 1,
        "layout": ParallelDims(tp=2, pp=2, virtual_stages=2),
        "sequence_parallel": True,
        "pipeline_schedule": PipelineSchedule.INTERLEAVED,
    },
]


@pytest.mark.parametrize("fields", FIELDS)
@pytest.mark.parametrize("checkpointing", list(ActivationCheckpointing))
def test_copies_equal_validated_configs(fields: dict, checkpointing: ActivationCheckpointing) -> None:
    base = TrainingConfig(**fields, activation_checkpointing=ActivationCheckpointing.NONE, seq_len=4096)
    copy = with_batch(with_checkpointing(base, checkpointing), 4, 8)
    validated = TrainingConfig(
        **fields, activation_checkpointing=checkpointing, seq_len=4096, micro_batch=4, grad_accum=8
    )
    assert copy == validated
    assert copy.model_fields_set == validated.model_fields_set
    assert copy.model_dump() == validated.model_dump()

"""engine.json parsing (planner/contract/engine_config.py), the loss scaler against DeepSpeed's, DeepSpeed's LR schedules."""

from __future__ import annotations

import json
import re

import pytest

from backends.parts.mixed_precision import LossScaler
from planner.contract.engine_config import EngineConfig, load_engine_config
from planner.errors import UserInputError

CONTRACT_EXAMPLE = {
    "train_batch_size": 16,
    "train_micro_batch_size_per_gpu": 2,
    "gradient_accumulation_steps": 4,
    "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1}},
    "scheduler": {
        "type": "WarmupDecayLR",
        "params": {"warmup_min_lr": 0, "warmup_max_lr": 3e-4, "warmup_num_steps": 10, "total_num_steps": 100},
    },
    "zero_optimization": {
        "stage": 2,
        "offload_optimizer": {"device": "none"},
        "overlap_comm": True,
        "reduce_bucket_size": 5e8,
        "allgather_bucket_size": 5e8,
        "stage3_prefetch_bucket_size": 5e7,
    },
    "fp16": {
        "enabled": False,
        "loss_scale": 0,
        "initial_scale_power": 16,
        "loss_scale_window": 1000,
        "hysteresis": 2,
        "min_loss_scale": 1,
    },
    "bf16": {"enabled": True},
    "gradient_clipping": 1.0,
    "steps_per_print": 10,
    "hardware_selector": {
        "schema_version": 2,
        "model": {"name": "gpt2", "hf_config": {"model_type": "gpt2"}},
        "seq_len": 1024,
        "device": "cpu",
        "dist_backend": "gloo",
        "activation_checkpointing": "full",
        "layout": {"dp": 2, "tp": 1, "pp": 1, "virtual_stages": 1, "stage_layers": None},
        "sequence_parallel": False,
        "pipeline_schedule": "1f1b",
    },
}


def test_contract_example_parses_from_a_file(tmp_path):
    path = tmp_path / "engine.json"
    path.write_text(json.dumps(CONTRACT_EXAMPLE))
    config = load_engine_config(path)
    assert config.zero_optimization.stage == 2 and config.compute_dtype_name == "bf16"
    assert config.batch_sizes(2) == (16, 2, 4)
    assert config.hardware_selector.layout.world_size == 2


def test_the_same_file_is_a_valid_deepspeed_config(monkeypatch):
    from types import SimpleNamespace

    from deepspeed.runtime import config as ds_config

    monkeypatch.setattr(ds_config.dist, "get_rank", lambda: 0)
    ds = ds_config.DeepSpeedConfig(CONTRACT_EXAMPLE, mpu=SimpleNamespace(get_data_parallel_world_size=lambda: 2))
    assert (ds.train_batch_size, ds.gradient_accumulation_steps, ds.zero_optimization_stage) == (16, 4, 2)


@pytest.mark.parametrize(
    "bad, fragment",
    [
        (
            {"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}}},
            "zero_optimization.offload_param",
        ),
        ({"optimizer": {"type": "Lamb"}}, "optimizer.type"),
        ({"hardware_selector": {"layout": {"dp": 2, "experts": 2}}}, "hardware_selector.layout.experts"),
        ({"hardware_selector": {"schema_version": 1}}, "re-emit the run folder"),
        ({"fp16": {"enabled": True}, "bf16": {"enabled": True}}, "at most one"),
        ({"scheduler": {"type": "WarmupDecayLR", "params": {}}}, "total_num_steps"),
        ({"amp": {"enabled": True}}, "amp = {'enabled': True}"),
        ({"zero_optimization": {"stage": 2, "stage3_max_live_paramters": 1}}, "stage3_max_live_paramters"),
    ],
)
def test_unknown_or_unsupported_keys_are_one_line_errors(bad, fragment):
    with pytest.raises(UserInputError) as caught:
        load_engine_config(bad)
    assert fragment in str(caught.value) and "\n" not in str(caught.value)


def test_inconsistent_batch_keys_are_rejected():
    with pytest.raises(UserInputError, match="train_batch_size"):
        EngineConfig(train_batch_size=10, train_micro_batch_size_per_gpu=2, gradient_accumulation_steps=2).batch_sizes(
            2
        )


def test_missing_file_is_a_user_error(tmp_path):
    with pytest.raises(UserInputError, match="does not exist"):
        load_engine_config(tmp_path / "engine.json")


@pytest.mark.parametrize("hysteresis, consecutive", [(1, False), (2, False), (3, True)])
def test_loss_scale_sequence_matches_deepspeed(hysteresis, consecutive, monkeypatch):
    from deepspeed.runtime.fp16 import loss_scaler as ds_module

    monkeypatch.setattr(ds_module.dist, "get_rank", lambda: 0)  # DeepSpeed logs from rank 0 only
    ours = LossScaler(
        EngineConfig(
            fp16={
                "enabled": True,
                "initial_scale_power": 10,
                "loss_scale_window": 3,
                "hysteresis": hysteresis,
                "consecutive_hysteresis": consecutive,
                "min_loss_scale": 4,
            }
        )
    )
    theirs = ds_module.DynamicLossScaler(
        init_scale=2.0**10,
        scale_window=3,
        min_scale=4,
        delayed_shift=hysteresis,
        consecutive_hysteresis=consecutive,
        raise_error_at_min_scale=False,
    )
    pattern = [False] * 7 + [True, False, True, True] + [False] * 5 + [True] * 12 + [False] * 8
    for overflow in pattern:
        try:
            ours.update(overflow)
        except FloatingPointError:  # ours stops at min scale; DeepSpeed was told not to
            assert theirs.cur_scale == ours.min_scale
            ours.scale = ours.min_scale
            ours.iteration += 1
            ours.last_overflow_iteration = ours.iteration - 1
        theirs.update_scale(overflow)
        assert ours.scale == theirs.cur_scale


def test_static_loss_scale_never_changes():
    scaler = LossScaler(EngineConfig(fp16={"enabled": True, "loss_scale": 128}))
    for overflow in (True, False, True):
        scaler.update(overflow)
    assert scaler.scale == 128


def test_lr_schedules_match_deepspeed():
    import torch
    from deepspeed.runtime import lr_schedules

    from backends.parts.schedulers import WarmupSchedule
    from planner.contract.engine_config import SchedulerBlock

    cases = [
        ("WarmupLR", {"warmup_min_lr": 1e-5, "warmup_max_lr": 1e-3, "warmup_num_steps": 5, "warmup_type": "linear"}),
        ("WarmupDecayLR", {"warmup_max_lr": 1e-3, "warmup_num_steps": 4, "total_num_steps": 12}),
        ("WarmupCosineLR", {"warmup_num_steps": 4, "total_num_steps": 12, "warmup_type": "linear"}),
    ]
    for kind, params in cases:
        ours_opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1e-3)
        ds_opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1e-3)
        ours = WarmupSchedule(ours_opt, SchedulerBlock(type=kind, params=params))
        theirs = getattr(lr_schedules, kind)(ds_opt, **params)
        for _ in range(15):
            assert ours_opt.param_groups[0]["lr"] == pytest.approx(ds_opt.param_groups[0]["lr"], rel=1e-12, abs=1e-15)
            ours.step()
            theirs.step()


def test_a_stage_or_switch_given_as_a_string_is_one_line_not_coerced():
    """{"stage": "3"} and {"enabled": "yes"} would pass as 3 and True; a config means what it writes, so both are
    refused by name (bucket sizes written as 5e8, as DeepSpeed's examples do, still read)."""
    from planner.errors import UserInputError

    for document, name in (
        ({"zero_optimization": {"stage": "3"}}, "zero_optimization.stage"),
        ({"fp16": {"enabled": "yes"}}, "fp16.enabled"),
        ({"fp16": {"enabled": True, "initial_scale_power": 1000}}, "fp16.initial_scale_power"),
        # a batch, a rate or a switch of another type was coerced: true ran a batch of 1, "1e-3" a rate
        ({"train_batch_size": True}, "train_batch_size"),
        ({"train_batch_size": "8"}, "train_batch_size"),
        ({"train_micro_batch_size_per_gpu": 2.0}, "train_micro_batch_size_per_gpu"),
        ({"train_batch_size": 10**20}, "train_batch_size"),
        ({"optimizer": {"type": "AdamW", "params": {"lr": "1e-3"}}}, "optimizer.params.lr"),
        ({"optimizer": {"type": "AdamW", "params": {"betas": ["0.9", 0.99]}}}, "optimizer.params.betas.0"),
        ({"optimizer": {"type": "Adam", "params": {"adam_w_mode": "false"}}}, "optimizer.params.adam_w_mode"),
        ({"gradient_clipping": "1.0"}, "gradient_clipping"),
        ({"steps_per_print": "10"}, "steps_per_print"),
        ({"hardware_selector": {"sequence_parallel": 1}}, "hardware_selector.sequence_parallel"),
    ):
        with pytest.raises(UserInputError, match=re.escape(f"'{name}'")):
            load_engine_config(document)
    assert (
        load_engine_config({"zero_optimization": {"stage": 3, "reduce_bucket_size": 5e8}}).zero_optimization.stage == 3
    )
    assert load_engine_config({"gradient_clipping": 1, "optimizer": {"params": {"lr": 1}}}).gradient_clipping == 1.0

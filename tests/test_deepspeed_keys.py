"""A ds_config.json written for DeepSpeed drives our engine: every DeepSpeed training key has a fate.

References:
- DeepSpeed's own config classes (DeepSpeedZeroConfig, its offload and fp16 /
  bf16 configs), read from the installed package: each of their fields and
  aliases must be in our table (planner/contract/deepspeed_keys.py), so a
  DeepSpeed release that adds a key fails here until we decide its fate.
- DeepSpeed's config reference (its config-json page) for the top-level
  training keys below; each must be a key DeepSpeed's source really reads.
- DeepSpeed's own emitted files: every ds_config.json our emitter writes
  loads unchanged, and an engine built from it trains exactly as one built
  from the run folder's engine.json.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from planner.contract.deepspeed_keys import disposition
from planner.contract.engine_config import load_engine_config
from planner.errors import UserInputError
from planner.rundir.write import emit_run_folder
from tests.emit_plans import make_plan

DEEPSPEED_TRAINING_KEYS = [
    "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "optimizer",
    "scheduler", "communication_data_type", "prescale_gradients", "gradient_predivide_factor",
    "sparse_gradients", "fp16", "bf16", "bfloat16", "amp", "gradient_clipping", "zero_optimization",
    "zero_allow_untested_optimizer", "zero_force_ds_cpu_optimizer", "aio", "steps_per_print",
    "wall_clock_breakdown", "dump_state", "memory_breakdown", "flops_profiler", "activation_checkpointing",
    "sparse_attention", "data_efficiency", "curriculum_learning", "tensorboard", "wandb", "csv_monitor",
    "comet", "elasticity", "comms_logger", "compression_training", "checkpoint", "data_types", "autotuning",
    "pipeline", "dataloader_drop_last", "torch_autocast", "hybrid_engine", "nebula", "gradient_allreduce_op",
    "seq_parallel_communication_data_type", "disable_allgather", "tensor_parallel", "sequence_parallel_size",
    "expert_parallel", "use_data_before_expert_parallelism", "vocabulary_size", "log_level",
]  # fmt: skip

# A value that switches the feature on, where `true` / {"enabled": true} does not.
ON = {
    "gradient_allreduce_op": "sum",
    "data_types": {"grad_accum_dtype": "bf16"},
    "tensor_parallel": {"autotp_size": 2},
    "sequence_parallel_size": 2,
    "zero_optimization.offload_param": {"device": "cpu"},
    "zero_optimization.zero_hpz_partition_size": 2,
    "zero_optimization.offload_optimizer.ratio": 0.5,
}
OFF = {
    "gradient_allreduce_op": "mean",
    "data_types": {"grad_accum_dtype": "fp32"},
    "tensor_parallel": {"autotp_size": 1},
    "sequence_parallel_size": 1,
    "zero_optimization.offload_param": {"device": "none"},
    "zero_optimization.zero_hpz_partition_size": 1,
    "zero_optimization.offload_optimizer.ratio": 1.0,
}


def _deepspeed_fields(model) -> list[str]:
    return sorted({name for field_name, field in model.model_fields.items() for name in (field_name, field.alias)
                   if name})  # fmt: skip


def _deepspeed_keys() -> list[str]:
    from deepspeed.runtime.precision_config import DeepSpeedBF16Config, DeepSpeedFP16Config
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig
    from deepspeed.runtime.zero.offload_config import DeepSpeedZeroOffloadOptimizerConfig

    return [
        *DEEPSPEED_TRAINING_KEYS,
        *(f"zero_optimization.{key}" for key in _deepspeed_fields(DeepSpeedZeroConfig)),
        *(f"zero_optimization.offload_optimizer.{key}" for key in _deepspeed_fields(DeepSpeedZeroOffloadOptimizerConfig)),
        *(f"fp16.{key}" for key in _deepspeed_fields(DeepSpeedFP16Config)),
        *(f"bf16.{key}" for key in _deepspeed_fields(DeepSpeedBF16Config)),
    ]  # fmt: skip


def test_every_deepspeed_training_key_has_a_fate_and_is_a_real_deepspeed_key():
    import deepspeed

    source = "\n".join(p.read_text(errors="ignore") for p in Path(deepspeed.__file__).parent.rglob("*.py"))
    quoted = set(re.findall(r"[\"']([a-z0-9_]+)[\"']", source))
    keys = _deepspeed_keys()
    assert len(keys) > 100
    missing = [
        key
        for key in keys
        if disposition(key) is None and key.rpartition(".")[2] not in ("stage3_prefetch_bucket_size",)
    ]
    assert missing == [], f"DeepSpeed keys without a fate in planner/contract/deepspeed_keys.py: {missing}"
    invented = [key for key in DEEPSPEED_TRAINING_KEYS if key not in quoted]
    assert invented == []


def _document(path: str, value) -> dict:
    *parents, key = path.split(".")
    document: dict = {}
    holder = document
    for name in parents:
        holder = holder.setdefault(name, {})
    holder[key] = value
    return document


@pytest.mark.parametrize("path", _deepspeed_keys())
def test_a_deepspeed_key_acts_is_accepted_or_is_one_line_naming_it(path):
    fate = disposition(path)
    if fate == "refused-when-on":
        with pytest.raises(UserInputError) as refused:
            load_engine_config(_document(path, ON.get(path, {"enabled": True} if "." not in path else True)))
        message = str(refused.value)
        assert "\n" not in message and f"{path} = " in message and "our engine lacks" in message
        load_engine_config(_document(path, OFF.get(path, {"enabled": False} if "." not in path else False)))
    elif fate == "accepted":
        load_engine_config(_document(path, {} if "." not in path else 1))  # DeepSpeed's detail: dropped
    elif fate == "translated":
        assert load_engine_config(_document(path, {})).hardware_selector.activation_checkpointing == "full"
    else:
        assert fate == "acts"


def test_a_typo_is_still_one_line_not_dropped():
    with pytest.raises(UserInputError, match="zero_optimisation"):
        load_engine_config({"zero_optimisation": {"stage": 2}})
    with pytest.raises(UserInputError, match="reduce_bucket_sise"):
        load_engine_config({"zero_optimization": {"reduce_bucket_sise": 5}})


PLANS = {
    "zero-1": {"strategy": "deepspeed", "zero_stage": 1},
    "zero-2 offload": {"strategy": "deepspeed", "zero_stage": 2, "offload_optimizer": "cpu"},
    "zero-3 full ac": {"strategy": "deepspeed", "zero_stage": 3, "activation_checkpointing": "full"},
    "zero-2 bf16": {"strategy": "deepspeed", "zero_stage": 2, "gpu": "A100-80GB", "precision": "bf16-mixed"},
    "zero-1 fp16": {"strategy": "deepspeed", "zero_stage": 1, "gpu": "V100-32GB", "precision": "fp16-mixed"},
}


@pytest.mark.parametrize("name", PLANS)
def test_every_ds_config_we_emit_drives_our_engine_unchanged(name, tmp_path):
    fields = dict(PLANS[name])
    plan = make_plan(gpu=fields.pop("gpu", "cpu"), **fields)
    emit_run_folder(plan, tmp_path)
    ours = load_engine_config(tmp_path / "ds_config.json")
    assert ours.zero_optimization.stage == plan.config.zero_stage
    assert ours.compute_dtype_name == plan.config.precision.value.split("-")[0]
    assert (ours.zero_optimization.offload_optimizer.device == "cpu") == (name == "zero-2 offload")


def test_our_ds_config_trains_our_engine_as_its_engine_json_does(tmp_path):
    """The same plan as a DeepSpeed folder and as an engine folder: the engine trains the same losses."""
    import json

    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    import backends

    def losses(config: dict) -> list[float]:
        torch.manual_seed(0)
        model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=32))
        engine, *_ = backends.initialize(model=model, config=config)
        data = torch.randint(0, 64, (4, 2, 2, 16), generator=torch.Generator().manual_seed(1))  # step, accum, micro
        return [engine.train_batch(iter(list(batch.unbind(0)))) for batch in data]

    fields = {"zero_stage": 2, "grad_accum": 2, "micro_batch": 2, "gpus_per_node": 1}
    emit_run_folder(make_plan(strategy="deepspeed", **fields), tmp_path / "ds")
    emit_run_folder(make_plan(strategy="engine", **fields), tmp_path / "engine")
    engine_json = json.loads((tmp_path / "engine" / "engine.json").read_text())
    ds_config = json.loads((tmp_path / "ds" / "ds_config.json").read_text())
    # DeepSpeed-only keys the engine used to refuse: they are in the file, and the file trains.
    assert "wall_clock_breakdown" in ds_config and "allgather_partitions" in ds_config["zero_optimization"]
    # The learning rate is the runner's for DeepSpeed folders (docs/running.md): give both the same blocks.
    ds_config.update(optimizer=engine_json["optimizer"], scheduler=engine_json.get("scheduler"))
    ds_config = {key: value for key, value in ds_config.items() if value is not None}
    assert losses(ds_config) == pytest.approx(losses(engine_json), rel=1e-6)


def test_activation_checkpointing_becomes_ours_and_pipeline_or_cpu_checkpointing_is_one_line(capsys):
    """Nothing a user switched on is silently ignored: DeepSpeed's activation_checkpointing block turns our
    block recomputation on, and the engine's start-up line says what became of every DeepSpeed-only key."""
    import backends
    from planner.contract.engine_config import key_fates_line

    config = load_engine_config(
        {"activation_checkpointing": {"partition_activations": True}, "wall_clock_breakdown": True}
    )
    assert config.hardware_selector.activation_checkpointing == "full"
    assert key_fates_line(config) == (
        "Config keys: activation_checkpointing became hardware_selector.activation_checkpointing full; dropped "
        "(no effect on what is trained): wall_clock_breakdown (docs/engine.md, Configs from other libraries)"
    )
    kept = load_engine_config(
        {"activation_checkpointing": {}, "hardware_selector": {"activation_checkpointing": "selective"}}
    )
    assert kept.hardware_selector.activation_checkpointing == "selective"
    with pytest.raises(UserInputError, match="cpu_checkpointing = true is a DeepSpeed feature our engine lacks"):
        load_engine_config({"activation_checkpointing": {"cpu_checkpointing": True}})
    with pytest.raises(UserInputError, match="pipeline = \\{'stages': 2\\} is a DeepSpeed feature our engine lacks"):
        load_engine_config({"pipeline": {"stages": 2}})
    import torch

    backends.initialize(model=torch.nn.Linear(4, 1), config={"train_batch_size": 1, "wall_clock_breakdown": True})
    assert "Config keys: dropped (no effect on what is trained): wall_clock_breakdown" in capsys.readouterr().out

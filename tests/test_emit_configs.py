"""The emitted configs are accepted by their real clients: DeepSpeed's config classes, accelerate's
config loader, transformers' TrainingArguments, and our engine's EngineConfig."""

from __future__ import annotations

import json
import types

import pytest
from emit_plans import make_plan

from hardware_selector import emit_run_folder as public_emit_run_folder
from hardware_selector import training_arguments
from planner.contract.run_config import Hyperparameters
from planner.emit.deepspeed_json import deepspeed_config
from planner.emit.training_args import training_args_json_document
from planner.errors import UserInputError
from planner.memory.buffers import deepspeed_bucket_sizes
from planner.rundir.engine_for_run import engine_config_for_run
from planner.rundir.run_options import RunOptions
from planner.rundir.run_options import run_config as run_target
from planner.rundir.write import CLI_NAMES, emit_run_folder

DEEPSPEED_PLANS = [
    dict(strategy="deepspeed", zero_stage=0),
    dict(strategy="deepspeed", zero_stage=1),
    dict(strategy="deepspeed", zero_stage=2, offload_optimizer="cpu", activation_checkpointing="full"),
    dict(strategy="deepspeed", zero_stage=3, offload_optimizer="cpu", offload_params="cpu"),
    dict(strategy="deepspeed", zero_stage=3, offload_optimizer="nvme", offload_params="nvme"),
]


def _parsed_by_deepspeed(config: dict, data_parallel: int, monkeypatch):
    """DeepSpeed's own DeepSpeedConfig, told the data-parallel size the plan runs with."""
    import deepspeed.runtime.config as ds_config_module
    from deepspeed.runtime.config import DeepSpeedConfig

    fake_dist = types.SimpleNamespace(get_rank=lambda *a: 0, get_world_size=lambda *a: data_parallel)
    monkeypatch.setattr(ds_config_module, "dist", fake_dist)
    return DeepSpeedConfig(json.loads(json.dumps(config)))


@pytest.mark.parametrize("gpu", ["cpu", "a100-80gb"])
@pytest.mark.parametrize(
    "fields", DEEPSPEED_PLANS, ids=lambda f: f"zero{f['zero_stage']}-{f.get('offload_params', 'none')}"
)
def test_deepspeed_parses_both_flavours(gpu, fields, monkeypatch):
    precision = {"precision": "fp16-mixed"} if gpu != "cpu" and fields["zero_stage"] == 1 else {}
    plan = make_plan(
        "llama-2-7b" if gpu != "cpu" else "gpt2",
        gpu=gpu,
        gpus_per_node=4,
        nodes=2,
        micro_batch=2,
        grad_accum=3,
        **fields,
        **precision,
    )
    target = run_target(plan)
    dp = target.data_parallel
    plain = deepspeed_config(plan, engine_config_for_run(plan, target))
    parsed = _parsed_by_deepspeed(plain, dp, monkeypatch)
    assert parsed.train_batch_size == 2 * 3 * dp == plan.global_batch
    assert parsed.zero_optimization_stage == fields["zero_stage"]
    assert parsed.gradient_clipping == 1.0
    buckets = deepspeed_bucket_sizes(plan.model)
    if fields["zero_stage"] >= 1:
        assert parsed.zero_config.reduce_bucket_size == buckets.reduce_bucket_size
        assert parsed.zero_config.overlap_comm is True
    if fields["zero_stage"] == 3:
        assert parsed.zero_config.prefetch_bucket_size == buckets.stage3_prefetch_bucket_size
    assert parsed.bfloat16_config.enabled == (plan.config.precision.value == "bf16-mixed")
    assert parsed.float16_config.enabled == (plan.config.precision.value == "fp16-mixed")
    if parsed.float16_config.enabled:
        assert parsed.float16_config.loss_scale == 0  # dynamic
    offload = fields.get("offload_optimizer", "none")
    if offload != "none":
        device = parsed.zero_config.offload_optimizer.device
        assert getattr(device, "value", device) == offload

    # The Trainer flavour, after the Trainer fills its "auto" values, says the same.
    from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig, unset_hf_deepspeed_config

    kwargs = training_args_json_document(plan, target)
    args = types.SimpleNamespace(
        **kwargs,
        world_size=dp,
        fp16_full_eval=False,
        bf16_full_eval=False,
        save_on_each_node=False,
        get_warmup_steps=lambda steps: kwargs["warmup_steps"],
    )
    model = types.SimpleNamespace(config=types.SimpleNamespace(hidden_size=plan.model.hidden_size))
    trainer_config = HfTrainerDeepSpeedConfig(
        deepspeed_config(plan, engine_config_for_run(plan, target), trainer_flavour=True)
    )
    try:
        trainer_config.trainer_config_process(args)
        trainer_config.trainer_config_finalize(args, model, num_training_steps=1000)
        filled = trainer_config.config
    finally:
        unset_hf_deepspeed_config()
    assert "auto" not in json.dumps(filled)
    parsed_trainer = _parsed_by_deepspeed(filled, dp, monkeypatch)
    assert parsed_trainer.train_batch_size == parsed.train_batch_size
    assert parsed_trainer.gradient_accumulation_steps == parsed.gradient_accumulation_steps
    assert filled["zero_optimization"] == plain["zero_optimization"]
    assert filled["bf16"] == plain["bf16"] and filled["fp16"]["enabled"] == plain["fp16"]["enabled"]
    assert filled.get("optimizer") == plain.get("optimizer")


@pytest.mark.parametrize(
    "fields",
    [
        dict(strategy="fsdp"),
        dict(strategy="fsdp", fsdp_sharding="hybrid", offload_params="cpu"),
        dict(strategy="deepspeed", zero_stage=2),
        dict(strategy="ddp"),
    ],
    ids=["fsdp", "fsdp-hybrid-offload", "deepspeed", "ddp"],
)
def test_accelerate_loads_the_yaml(fields, tmp_path):
    from accelerate.commands.config.config_args import load_config_from_file

    plan = make_plan("llama-2-7b", gpu="a100-80gb", gpus_per_node=8, nodes=2, precision="bf16-mixed", **fields)
    emit_run_folder(plan, tmp_path / "run")
    loaded = load_config_from_file(str(tmp_path / "run" / "accelerate_config.yaml"))
    assert loaded.num_processes == 16 and loaded.num_machines == 2
    expected_type = {"fsdp": "FSDP", "deepspeed": "DEEPSPEED", "ddp": "MULTI_GPU"}[fields["strategy"]]
    assert getattr(loaded.distributed_type, "value", loaded.distributed_type) == expected_type
    if fields["strategy"] == "fsdp":
        assert str(loaded.mixed_precision) in ("bf16", "PrecisionType.BF16")
        assert loaded.fsdp_config["fsdp_transformer_layer_cls_to_wrap"] == "LlamaDecoderLayer"
        assert loaded.fsdp_config["fsdp_offload_params"] == ("offload_params" in fields)
        if fields.get("fsdp_sharding") == "hybrid":
            assert loaded.fsdp_config["fsdp_sharding_strategy"] == "HYBRID_SHARD"
        else:
            assert loaded.fsdp_config["fsdp_version"] == 2
    if fields["strategy"] == "deepspeed":
        assert loaded.deepspeed_config["deepspeed_config_file"] == "ds_config.json"


def test_training_arguments_builds_in_process():
    """The DDP flavour builds without a process group; the FSDP and DeepSpeed ones are built by
    the Trainer runs in test_emit_runs.py (they need torch.distributed)."""
    from hardware_selector import HardwareSelector, training_arguments

    plan = make_plan(strategy="ddp", activation_checkpointing="full", micro_batch=3, grad_accum=4)
    args = training_arguments(plan, "/tmp/unused-output", logging_steps=7)
    assert args.per_device_train_batch_size == 3 and args.gradient_accumulation_steps == 4
    assert args.activation_checkpointing is True and args.logging_steps == 7
    assert not args.bf16 and not args.fp16 and args.use_cpu
    same = HardwareSelector().training_arguments(plan, "/tmp/unused-output", logging_steps=7)
    assert same.to_dict() == args.to_dict()


def test_an_sgd_plan_trains_with_the_momentum_it_counts():
    """The plan counts SGD's momentum buffer and the run folder's SGD keeps one; the Trainer's "sgd" is torch's
    SGD at momentum 0 unless optim_args say otherwise. Reference: transformers' own optimizer choice."""
    from transformers import Trainer

    from hardware_selector import training_arguments
    from planner.contract.run_config import Hyperparameters
    from planner.rundir.hyperparameters import optimizer_block

    plan = make_plan(strategy="ddp", optimizer="sgd")
    optimizer_class, kwargs = Trainer.get_optimizer_cls_and_kwargs(training_arguments(plan, "/tmp/unused-output"))
    assert optimizer_class.__name__ == "SGD"
    assert kwargs["momentum"] == optimizer_block(Hyperparameters(), plan.config.optimizer).params.momentum == 0.9
    adamw = training_arguments(make_plan(strategy="ddp"), "/tmp/unused-output")
    assert not adamw.optim_args  # the AdamW plans' arguments are unchanged


def test_an_sgd_plans_trainer_deepspeed_config_fills_to_numbers(tmp_path):
    """ds_config_trainer.json through transformers' own filling (HfTrainerDeepSpeedConfig): the Trainer fills lr and
    weight decay; SGD's momentum must be a number already (an "auto" reached torch's SGD as a string). The filling
    arguments are the same plan's under DDP (the same hyperparameters; DeepSpeed's own need a process group)."""
    from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig

    plan = make_plan(gpu="a100-80gb", strategy="deepspeed", zero_stage=2, optimizer="sgd")  # a GPU's: its optimizer
    emit_run_folder(plan, tmp_path / "run")
    document = json.loads((tmp_path / "run" / "ds_config_trainer.json").read_text())
    filled = HfTrainerDeepSpeedConfig(document)
    same_hyperparameters = make_plan(strategy="ddp", optimizer="sgd")
    filled.trainer_config_process(training_arguments(same_hyperparameters, str(tmp_path / "out")))
    params = filled.config["optimizer"]["params"]
    assert "auto" not in params.values() and params["momentum"] == 0.9


@pytest.mark.parametrize("name", ["gradient_checkpointing", "activation_checkpointing"])
@pytest.mark.parametrize("recompute", [True, False])
def test_a_checkpointing_override_wins_under_either_of_its_names(name, recompute):
    # transformers 5 takes activation_checkpointing over its old name gradient_checkpointing when both are set, and
    # the plan sets the new one: an override under the old name was dropped.
    from hardware_selector import training_arguments

    plan = make_plan(strategy="ddp", activation_checkpointing="none" if recompute else "full")
    args = training_arguments(plan, "/tmp/unused-output", **{name: recompute})
    assert args.activation_checkpointing is recompute and args.gradient_checkpointing is recompute


@pytest.mark.parametrize("tp,pp,zero", [(2, 1, 1), (1, 2, 0), (2, 2, 1)])
def test_engine_json_is_accepted_by_the_engine(tp, pp, zero, tmp_path):
    from planner.contract.engine_config import load_engine_config

    plan = make_plan(
        "llama-2-7b",
        gpu="a100-80gb",
        gpus_per_node=8,
        nodes=1,
        strategy="engine",
        tensor_parallel=tp,
        pipeline_parallel=pp,
        zero_stage=zero,
        precision="bf16-mixed",
        activation_checkpointing="selective",
        sequence_parallel=tp > 1,
    )
    emit_run_folder(plan, tmp_path / "run")
    config = load_engine_config(tmp_path / "run" / "engine.json")
    block = config.hardware_selector
    assert (block.layout.dp, block.layout.tp, block.layout.pp) == (8 // (tp * pp), tp, pp)
    assert config.train_batch_size == plan.global_batch
    assert block.device == "cuda" and block.dist_backend == "nccl"
    assert block.model.hf_config["model_type"] == "llama"


def test_existing_folder_refused_unless_forced(tmp_path):
    run = tmp_path / "run"
    emit_run_folder(make_plan(strategy="deepspeed", zero_stage=2), run)
    with pytest.raises(UserInputError) as refused:
        emit_run_folder(make_plan(strategy="ddp"), run)
    # The Python API's caller reads its keyword, the command line its flag (CLI_NAMES).
    assert str(refused.value) == f"{run} already exists; pass force=True to overwrite it, or choose a new directory"
    with pytest.raises(UserInputError, match=r"already exists; pass --force to overwrite it, or choose"):
        emit_run_folder(make_plan(strategy="ddp"), run, names=CLI_NAMES)
    with pytest.raises(UserInputError, match=r"already exists; pass force=True to overwrite it, or choose"):
        public_emit_run_folder(make_plan(strategy="ddp"), run)
    written = emit_run_folder(make_plan(strategy="ddp"), run, force=True)
    names = sorted(path.name for path in run.iterdir())
    assert names == sorted(path.name for path in written)  # ds_config.json of the old plan is gone, no temp files
    assert "ds_config.json" not in names and json.loads((run / "plan.json").read_text())["config"]["strategy"] == "ddp"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"per_device_train_batch_size": -1}, "per_device_train_batch_size must be a finite number from 1 to"),
        ({"learning_rate": float("nan")}, "learning_rate must be a finite number from 1e-12 to 10, not nan"),
        ({"learning_rate": "x"}, "learning_rate must be a number, not str 'x'"),
        ({"gradient_accumulation_steps": 2.5}, "gradient_accumulation_steps must be a whole number, not 2.5"),
        ({"bogus_key": 1}, "training_arguments() takes no keyword 'bogus_key'; its other keywords are transformers"),
        ({"learning_rat": 1e-4}, "takes no keyword 'learning_rat'; did you mean 'learning_rate'? its other keywords"),
        ({"nproc_override": 0}, "nproc_override must be at least 1, not 0"),
    ],
)
def test_training_arguments_refuses_overrides_transformers_would_take_silently(tmp_path, overrides, message):
    from planner.errors import UserInputError
    from planner.rundir.training_arguments import training_arguments

    with pytest.raises(UserInputError) as refused:
        training_arguments(make_plan(strategy="fsdp"), tmp_path / "out", **overrides)
    assert message in str(refused.value) and "\n" not in str(refused.value)
    assert training_arguments(make_plan(strategy="fsdp"), tmp_path / "out", max_steps=-1, learning_rate=1e-4)


@pytest.mark.parametrize(("max_steps", "warmup"), [(10_000, None), (40, None), (10_000, 7)])
def test_training_args_warmup_is_the_runners(tmp_path, max_steps, warmup):
    """training_args.json's warmup_steps is the runner's warmup_for (the reference; its --trainer door sets the
    same), and TrainingArguments uses that many steps (0.05 was read as a ratio: 500 steps of a 10,000-step run,
    where the README and the runner say 100)."""
    optim = Hyperparameters(max_steps=max_steps, warmup_steps=warmup)
    run_dir = tmp_path / "run"
    emit_run_folder(make_plan(strategy="ddp"), run_dir, options=RunOptions(optim=optim))
    expected = optim.warmup_for(max_steps)
    assert json.loads((run_dir / "training_args.json").read_text())["warmup_steps"] == expected
    arguments = training_arguments(str(run_dir), str(tmp_path / "out"))
    assert arguments.get_warmup_steps(max_steps) == expected


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="needs a machine without CUDA")
def test_a_gpu_plans_bf16_without_cuda_names_the_plan_not_the_overrides(tmp_path):
    # transformers refuses bf16 without CUDA; the line blamed "the overrides" though none were passed.
    plan = make_plan(gpu="A100-80GB", precision="bf16", strategy="ddp")
    with pytest.raises(UserInputError) as refused:
        training_arguments(plan, tmp_path / "out")
    assert str(refused.value) == (
        "this plan is bf16 on A100-80GB and this machine has no CUDA: pass use_cpu=True for a trial run on the CPU, "
        "or plan again for the CPU (`plan --gpu cpu`, gpu='cpu' in the Python API)"
    )
    with pytest.raises(UserInputError, match=r"^bf16=True \(your override\) and this machine has no CUDA"):
        training_arguments(make_plan(gpu="A100-80GB", precision="fp32"), tmp_path / "out", bf16=True)
    assert training_arguments(plan, tmp_path / "out", use_cpu=True).use_cpu  # the trial run it suggests builds


def test_a_refusal_blames_the_overrides_only_when_there_were_some(tmp_path, monkeypatch):
    import transformers

    class Refusing(transformers.TrainingArguments):  # its fields, and a refusal whatever they hold
        def __post_init__(self) -> None:
            raise ValueError("a refusal of transformers'")

    monkeypatch.setattr(transformers, "TrainingArguments", Refusing)
    with pytest.raises(UserInputError, match="^transformers.TrainingArguments refused the plan's arguments: a ref"):
        training_arguments(make_plan(strategy="ddp"), tmp_path / "out")
    with pytest.raises(UserInputError, match="^transformers.TrainingArguments refused the overrides: a refusal"):
        training_arguments(make_plan(strategy="ddp"), tmp_path / "out", logging_steps=3)

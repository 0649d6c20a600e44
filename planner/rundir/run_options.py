"""The run a folder describes, computed once per emission: `run_config(plan, options)` -> RunConfig.

Every artifact reads its numbers from the RunConfig (planner/contract/run_config.py),
so batch sizes, precision, world size and hyperparameters cannot disagree
between files. It is stored in plan.json under "run" for the runner.
RunOptions carries what the user adds to a plan for a real run: data,
weights, tokenizer, hyperparameters, checkpoint and anomaly policies.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from planner.contract.run_config import (
    AnomalyPolicy,
    CheckpointPolicy,
    DataConfig,
    Hyperparameters,
    Init,
    Launcher,
    ModelSource,
    Predicted,
    RunConfig,
    Task,
)
from planner.contract.schema import describe_validation_error
from planner.emit.hf_model import DECODER_LAYER_CLASS, decoder_layer_class, hf_config_for
from planner.errors import UserInputError
from planner.plan import Plan
from planner.rundir.run_overrides import (
    has_tokenizer,
    has_weights,
    resolve_data_paths,
    tokenizer_folder,
)
from planner.training_config import Strategy

_LAUNCHER: dict[Strategy, Launcher] = {
    Strategy.DDP: "torchrun",
    Strategy.FSDP: "torchrun",
    Strategy.DEEPSPEED: "deepspeed",
    Strategy.ENGINE: "torchrun",
}

_TASK_BY_MODEL_TYPE: dict[str, Task] = {"bert": "masked-lm", "roberta": "masked-lm", "t5": "seq2seq-lm"}


class RunOptions(BaseModel):
    """What `plan --emit` (or `train`) adds to a plan for a real run; None keeps the default."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    data: DataConfig = DataConfig()
    optim: Hyperparameters = Hyperparameters()
    anomaly: AnomalyPolicy = AnomalyPolicy()
    checkpoint: CheckpointPolicy = CheckpointPolicy()
    init: Init | None = None  # None: pretrained when the model folder holds weights
    tokenizer: str | None = None  # None: the model folder's tokenizer, if it has one

    @classmethod
    def of_run(cls, run: RunConfig) -> RunOptions:
        """The options an emitted folder's run was written with (tune RUN_DIR and emit_run_folder of a folder)."""
        return cls(data=run.data, optim=run.optim, anomaly=run.anomaly, checkpoint=run.checkpoint,
                   init=run.model.init, tokenizer=run.model.tokenizer)  # fmt: skip


def model_folder(plan: Plan) -> Path | None:
    """The local HF folder the plan's model was read from (None for catalog models and dimensions)."""
    origin = plan.model.origin
    if origin in ("catalog", "dimensions", "parameter count"):
        return None
    path = Path(origin)
    folder = path if path.is_dir() else path.parent
    return folder.resolve() if folder.is_dir() else None


def model_source(plan: Plan, options: RunOptions) -> ModelSource:
    folder = model_folder(plan)
    init = options.init or ("pretrained" if has_weights(folder) else "random")
    if init == "pretrained" and not has_weights(folder):
        where = f"{folder} holds no model.safetensors" if folder else f"{plan.model.name} is not a local model folder"
        raise UserInputError(f"--init pretrained: {where}; pass --model DIR with an HF checkpoint, or --init random")
    tokenizer = tokenizer_folder(options.tokenizer) if options.tokenizer else None
    if options.data.train and tokenizer is None and not has_tokenizer(folder):
        where = f"{folder} holds no tokenizer" if folder else f"{plan.model.name} is not a local model folder"
        raise UserInputError(
            f"--data needs the model's tokenizer and {where}; pass --tokenizer DIR (a folder written "
            "by tokenizer.save_pretrained)"
        )
    block = (
        decoder_layer_class(plan.model)
        if plan.config.strategy is Strategy.FSDP
        else DECODER_LAYER_CLASS.get(plan.model.model_type)
    )
    return ModelSource(
        name=plan.model.name,
        hf_config=hf_config_for(plan.model),
        path=str(folder) if folder is not None else None,
        init=init,
        init_explicit=options.init is not None,
        tokenizer=tokenizer,
        task=_TASK_BY_MODEL_TYPE.get(plan.model.model_type, "causal-lm"),
        block_class=block,
    )


def predicted(plan: Plan) -> Predicted:
    speed, memory = plan.throughput, plan.memory
    fields: dict = {"peak_memory_bytes": memory.total, "memory_source": memory.peak_phase}
    if speed is not None and speed.mfu > 0:
        world = speed.world_size or plan.cluster.world_size
        step_flops = speed.tflops_per_gpu * 1e12 * speed.step_time_s * world
        fields.update(
            step_time_s=speed.step_time_s,
            formula_step_time_s=speed.formula_step_s,  # what its record fits on, not the calibrated step
            tokens_per_s=speed.tokens_per_s,
            model_flops_per_token=step_flops / (speed.global_batch * plan.config.seq_len) if step_flops else None,
            peak_flops_per_device=speed.tflops_per_gpu * 1e12 / speed.mfu,
            throughput_source=speed.sources.get("step_time_s", "throughput model"),
        )
    return Predicted(**fields)


def run_config(plan: Plan, nproc_override: int | None = None, options: RunOptions | None = None) -> RunConfig:
    options = options or RunOptions()
    config, cluster = plan.config, plan.cluster
    nproc = cluster.gpus_per_node if nproc_override is None else nproc_override
    if nproc < 1:
        raise UserInputError(f"--nproc must be at least 1, got {nproc}")
    try:
        layout = plan.layout.with_world_size(nproc * cluster.num_nodes)
    except ValueError as error:
        raise UserInputError(f"{error} (--nproc)") from None
    data = options.data.model_copy(
        update={
            "train": resolve_data_paths(options.data.train, "--data"),
            "eval": resolve_data_paths(options.data.eval, "--eval-data"),
        }
    )
    on_cpu = cluster.gpu.kind == "cpu"
    try:
        return RunConfig(
            device="cpu" if on_cpu else "cuda",
            dist_backend="gloo" if on_cpu else "nccl",
            nproc_per_node=nproc,
            num_nodes=cluster.num_nodes,
            nproc_overridden=nproc_override is not None and nproc_override != cluster.gpus_per_node,
            layout=layout,
            micro_batch=config.micro_batch,
            grad_accum=config.grad_accum,
            seq_len=config.seq_len,
            precision=config.precision,
            launcher=_LAUNCHER[config.strategy],
            model=model_source(plan, options),
            **({"search": plan.search} if plan.search is not None else {}),  # the search that found it
            data=data,
            optim=options.optim,
            anomaly=options.anomaly,
            checkpoint=options.checkpoint,
            predicted=predicted(plan),
        )
    except ValidationError as error:
        raise UserInputError(f"run config: {describe_validation_error(error, 'docs/running.md')}") from None

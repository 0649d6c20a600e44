"""README.md of a run folder: what was chosen and why, the estimates with their sources, and how to run it."""

from __future__ import annotations

from ..plan import Plan
from .target import RunTarget

GIB = 2**30

_FILE_PURPOSES = {
    "plan.json": "the full plan: inputs, layout, estimates and their sources (schema-versioned)",
    "ds_config.json": "DeepSpeed config (every value fixed)",
    "ds_config_trainer.json": "the same for the HF Trainer, with \"auto\" where the Trainer fills the value",
    "accelerate_config.yaml": "for `accelerate launch --config_file`",
    "training_args.json": "keyword arguments of transformers.TrainingArguments",
    "engine.json": "the config our engine (python -m backends.run) takes",
    "launch.sh": "the launch command, one node or several",
    "hostfile": "DeepSpeed launcher hostfile template (multi-node)",
    "slurm.sbatch": "SLURM batch script: srun + torchrun rendezvous on the first node",
    "README.md": "this file",
}


def run_readme(plan: Plan, target: RunTarget, files: list[str]) -> str:
    config, memory = plan.config, plan.memory
    lines = [
        f"# Run folder: {plan.model.name} with {_strategy_name(plan)}",
        "",
        f"Written by hardware-selector. {target.num_nodes} node(s) x {target.nproc_per_node} "
        f"{'CPU process' if target.device == 'cpu' else plan.cluster.gpu.name}(es) = {target.world_size}; "
        f"layout dp {target.data_parallel} x tp {target.tensor_parallel} x pp {target.pipeline_parallel}.",
    ]
    if target.nproc_overridden:
        lines.append(
            f"\nThe process count was overridden to {target.nproc_per_node} per node (the plan was made for "
            f"{plan.cluster.gpus_per_node}); the batch sizes below follow the override, the estimates do not."
        )
    lines += ["", "## What was chosen and why", ""]
    lines += [f"- {reason}" for reason in plan.reasons] or ["- (the plan gives no reasons)"]
    lines += [
        "",
        f"- batch: micro-batch {target.micro_batch} x gradient accumulation {target.grad_accum} x "
        f"data-parallel {target.data_parallel} = {target.global_batch} sequences of {target.seq_len} tokens per step",
        f"- precision {config.precision.value}, optimizer {config.optimizer.value}, "
        f"activation checkpointing {config.activation_checkpointing.value}",
        "",
        "## Estimates",
        "",
        "| quantity | value | source |",
        "|---|---|---|",
    ]
    for category, value in memory.per_gpu_bytes.items():
        lines.append(f"| memory: {category} | {value / GIB:.2f} GiB | {memory.sources.get(category, '')} |")
    lines.append(
        f"| fits in {memory.usable_bytes / GIB:.1f} GiB | {'yes' if memory.fits else 'NO'} | peak at {memory.peak_phase} |"
    )
    if plan.throughput is not None:
        speed = plan.throughput
        sources = speed.sources
        lines += [
            f"| step time | {speed.step_time_s:.3f} s | {sources.get('step_time_s', 'throughput estimator')} |",
            f"| tokens/s | {speed.tokens_per_s:,.0f} | {sources.get('tokens_per_s', 'throughput estimator')} |",
            f"| MFU | {speed.mfu:.1%} | {sources.get('mfu', 'throughput estimator')} |",
        ]
    else:
        lines.append("| throughput | not estimated | - |")
    if plan.calibration:
        lines.append(f"\nCalibration: {plan.calibration}")
    lines += ["", "## How to run", "", "```bash", "bash launch.sh                 # this node"]
    if target.num_nodes > 1:
        lines.append("NNODES=%d NODE_RANK=<i> MASTER_ADDR=<first node> bash launch.sh   # on every node" % target.num_nodes)
    lines += [
        "bash launch.sh --tiny --steps 3   # smoke test: a shrunken model, three steps",
        "sbatch slurm.sbatch            # on a SLURM cluster",
        "TRAIN_SCRIPT=my_train.py bash launch.sh   # your own script (it gets --plan <this folder>)",
        "```",
        "",
        f"The default script is `{'python -m backends.run' if target.train_mode == 'engine' else 'backends/train.py'}` "
        f"({target.launcher}); it trains a randomly initialised model on synthetic tokens.",
        "",
        "## Files",
        "",
    ]
    lines += [f"- `{name}`: {_FILE_PURPOSES.get(name, '')}" for name in files]
    return "\n".join(lines) + "\n"


def _strategy_name(plan: Plan) -> str:
    config = plan.config
    if config.strategy.value == "deepspeed":
        return f"DeepSpeed ZeRO-{config.zero_stage}"
    if config.strategy.value == "fsdp":
        return f"FSDP ({config.fsdp_sharding.value} sharding)"
    if config.strategy.value == "engine":
        return f"our engine (tp {config.tensor_parallel}, pp {config.pipeline_parallel}, ZeRO-{config.zero_stage})"
    return "DDP"

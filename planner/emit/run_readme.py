"""README.md of a run folder: what was chosen and why, the estimates with their sources, and how to run it."""

from __future__ import annotations

from planner.contract.run_config import RunConfig
from planner.emit.launch_guards import MPI_HOSTFILE
from planner.emit.launch_scripts import multi_node_start, one_node_start
from planner.gradient_compression import warmup_steps
from planner.plan import Plan
from planner.training_config import ActivationCheckpointing, GradientCompression, Strategy, TrainingConfig
from planner.units import counted

GIB = 2**30

_FILE_PURPOSES = {
    "plan.json": "the full plan: inputs, layout, estimates and their sources (schema-versioned)",
    "ds_config.json": "DeepSpeed config (every value fixed)",
    "ds_config_trainer.json": 'the same for the HF Trainer, with "auto" where the Trainer fills the value',
    "accelerate_config.yaml": "for `accelerate launch --config_file`",
    "training_args.json": "keyword arguments of transformers.TrainingArguments",
    "engine.json": "the config our engine takes (backends.initialize, or the runner for engine plans)",
    "launch.sh": "the launch command, one node or several",
    "hostfile": "DeepSpeed launcher hostfile template (multi-node)",
    "mpi_hostfile": "MPI hostfile template in MPICH's HOST:N format, for MPIEXEC_ARGS='-hostfile mpi_hostfile'",
    "slurm.sbatch": "SLURM batch script: srun + torchrun rendezvous on the first node",
    "pytorchjob.yaml": "Kubeflow PyTorchJob (Training Operator v1): torchrun in each pod",
    "skypilot.yaml": "SkyPilot task: torchrun over SKYPILOT_NODE_IPS on each node",
    "README.md": "this file",
}


def run_readme(plan: Plan, target: RunConfig, files: list[str], *, placeholder_image: bool = False) -> str:
    config, memory = plan.config, plan.memory
    lines = [
        f"# Run folder: {plan.model.name} with {_strategy_name(plan)}",
        "",
        f"Written by hardware-selector. {_processes(plan, target)}; layout {target.layout.describe()}.",
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
        f"data-parallel {target.layout.dp} = {target.global_batch} sequences of {target.seq_len} tokens per step",
        f"- precision {config.precision.value}, optimizer {config.optimizer.value}, "
        f"activation checkpointing {config.activation_checkpointing.value}",
        *_checkpointing_lines(config),
        *_data_parallel_traffic_lines(plan, target),
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
    for label, key, value in (  # an offloading plan needs this much of each node's host RAM or NVMe
        ("host memory per node", "cpu_per_node", memory.cpu_per_node_bytes),
        ("NVMe per node", "nvme_per_node", memory.nvme_per_node_bytes),
    ):
        if value:
            lines.append(f"| {label} | {value / GIB:.1f} GiB | {memory.sources.get(key, '')} |")
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
    lines += ["", "## What it trains", ""] + _training_lines(target)
    lines += ["", "## How to run", "", "```bash"]
    if target.num_nodes == 1:
        lines.append("bash launch.sh                 # this node")
    else:  # launch.sh alone would wait for the other nodes: it refuses without MASTER_ADDR and NODE_RANK
        command, where = multi_node_start(target)
        lines.append(f"{command}   # {where}")
    lines += [
        f"{one_node_start(target)} --tiny --steps 3   # smoke test"
        f"{' on this node alone' if target.num_nodes > 1 else ''}: a shrunken model, three steps",
        "sbatch slurm.sbatch            # on a SLURM cluster",
        (
            "LAUNCHER=mpirun bash launch.sh # MPI: mpiexec starts every rank"
            if target.num_nodes == 1
            else f"LAUNCHER=mpirun MPIEXEC_ARGS='-hostfile {MPI_HOSTFILE}' bash launch.sh   # MPI, on the first node: "
            "mpiexec starts every rank"
        ),
        *(
            [
                "kubectl create -f pytorchjob.yaml   # Kubernetes (create the claim"
                + (", and replace the placeholder image, first)" if placeholder_image else " first)")
            ]
            if "pytorchjob.yaml" in files
            else []
        ),
        *(["sky launch skypilot.yaml       # SkyPilot"] if "skypilot.yaml" in files else []),
        "hardware-selector watch .      # follow metrics.jsonl: loss, eval loss, tokens/s, ETA",
        "TRAIN_SCRIPT=my_train.py bash launch.sh   # your own script (it gets --plan <this folder>)"
        + ("" if target.num_nodes == 1 else "; on several nodes with the variables above"),
        "```",
        "",
        f"Every launcher ({target.launcher} by default) starts the runner, `python -m backends.run --plan <this folder>` "
        "(docs/running.md). It writes `metrics.jsonl`, `checkpoints/` and, at the end, `final/`: an HF folder "
        "that `AutoModelForCausalLM.from_pretrained` loads.",
        "",
        *_elsewhere_lines(target),
        "",
        "## Files",
        "",
    ]
    lines += [f"- `{name}`: {_FILE_PURPOSES.get(name, '')}" for name in files]
    return "\n".join(lines) + "\n"


def _elsewhere_lines(run: RunConfig) -> list[str]:
    """What another machine (a cluster, for a folder planned on a laptop) needs to run the folder."""
    reads = [*([run.model.path] if run.model.path else []), *run.data.train, *run.data.eval]
    return [
        "## On another machine",
        "",
        "Copy this folder anywhere: launch.sh and slurm.sbatch find it themselves (slurm.sbatch: submit it from "
        "the folder, or set RUN_DIR). The machine needs hardware-selector installed (`pip install -e .` in its "
        "source, with the `[mpi]` extra for LAUNCHER=mpirun). Both scripts run `PYTHON` when set, else the "
        "interpreter that planned the folder if that path exists there, else `python` on PATH."
        + (
            " plan.json names what the run reads by absolute path (the model, tokenizer and data): they must be at "
            "the same paths there."
            if reads
            else ""
        ),
    ]


def _processes(plan: Plan, run: RunConfig) -> str:
    """ "2 nodes x 8 H100-80GB GPUs = 16 processes", "1 node x 2 CPU processes = 2 processes"."""
    devices = (
        counted(run.nproc_per_node, "CPU process", "CPU processes")
        if run.device == "cpu"
        else counted(run.nproc_per_node, f"{plan.cluster.gpu.name} GPU")
    )
    return f"{counted(run.num_nodes, 'node')} x {devices} = {counted(run.world_size, 'process', 'processes')}"


def _checkpointing_lines(config: TrainingConfig) -> list[str]:
    """Selective and op-level checkpointing are our backends' (the HF Trainer and accelerate recompute whole blocks)."""
    if config.strategy is Strategy.ENGINE or config.activation_checkpointing not in (
        ActivationCheckpointing.SELECTIVE,
        ActivationCheckpointing.OP,
    ):
        return []
    mode = config.activation_checkpointing.value
    return [
        f"- {mode} checkpointing runs through our backends' wrapper (`hardware-selector train`, with or without "
        "`--trainer`, which then turns the Trainer's own off); training_args.json and accelerate_config.yaml alone "
        "recompute whole blocks (full): in your own script apply "
        f'`activation_checkpointing.apply(model, "{mode}")` (`from backends import activation_checkpointing`) and '
        "turn the Trainer's off (`gradient_checkpointing`, `activation_checkpointing` under transformers 5, "
        '`fsdp_config["activation_checkpointing"]` for FSDP, `fsdp_activation_checkpointing` in accelerate\'s file)'
    ]


def _data_parallel_traffic_lines(plan: Plan, target: RunConfig) -> list[str]:
    if plan.config.zeropp:
        return [
            "- ZeRO++ (ds_config.json: `zero_quantized_weights`, `zero_hpz_partition_size`, "
            "`zero_quantized_gradients`): int8 forward gathers, backward gathers inside the node, int4 gradients; "
            "its quantizer kernels are CUDA ops, so `train --tiny` cannot rehearse it on CPU (docs/search.md, ZeRO++)"
        ]
    compression = plan.config.compression
    if compression is GradientCompression.NONE:
        return []
    warmup = warmup_steps(compression, target.optim.max_steps)
    first = f"; its first {warmup} optimizer steps summed uncompressed (`compression_warmup_steps`)" if warmup else ""
    return [
        f"- data-parallel gradients compressed to {compression.value} with error feedback (engine.json "
        f"`hardware_selector.compression`){first}"
    ]


def _strategy_name(plan: Plan) -> str:
    config = plan.config
    if config.strategy is Strategy.DEEPSPEED and config.zeropp:
        return "DeepSpeed ZeRO++ (on ZeRO-3)"
    if config.strategy is Strategy.DEEPSPEED:
        return f"DeepSpeed ZeRO-{config.zero_stage}"
    if config.strategy is Strategy.FSDP:
        return f"FSDP ({config.fsdp_sharding.value} sharding)"
    if config.strategy is Strategy.ENGINE:
        return f"our engine (tp {config.tensor_parallel}, pp {config.pipeline_parallel}, ZeRO-{config.zero_stage})"
    return "DDP"


def _training_lines(run: RunConfig) -> list[str]:
    model, data, optim = run.model, run.data, run.optim
    weights = f"from the weights in `{model.path}`" if model.init == "pretrained" else "from random initialisation"
    lines = [f"- model: {model.name}, {weights}"]
    if data.synthetic:
        lines.append("- data: synthetic tokens (no --data given): a smoke test, not a training run")
    else:
        tokenizer = model.tokenizer_dir or "(none: pass --tokenizer)"
        lines.append(
            f"- data: {', '.join(data.train)}; tokenizer `{tokenizer}`; packed into {run.seq_len}-token blocks"
        )
        held_out = (
            ", ".join(data.eval)
            if data.eval
            else f"{data.eval_fraction:.1%} of the blocks (at most {data.eval_max_blocks})"
        )
        lines.append(
            f"- evaluation: {held_out}, every {data.eval_every or 'end of the'} step(s)".replace(
                "every end of the step(s)", "at the end"
            )
        )
    length = f"{optim.max_steps} steps" if optim.max_steps else f"{optim.epochs:g} epoch(s) of the data"
    warmup = (
        counted(optim.warmup_steps, "step") if optim.warmup_steps is not None else "5% of the run's steps (at most 100)"
    )
    lines.append(
        f"- length: {length}; lr {optim.learning_rate:g}, warmup {warmup}, "
        f"{optim.schedule} schedule, clipping {optim.gradient_clipping:g}"
    )
    return lines

"""Property: over many plans, every emitted file states the same batch sizes, precision and world size."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml
from emit_plans import make_plan
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from planner.contract.engine_config import load_engine_config
from planner.contract.layout import ParallelDims
from planner.errors import UserInputError
from planner.gradient_compression import warmup_steps
from planner.rundir.run_options import run_config as run_target
from planner.rundir.write import render_run_folder

PRECISION_FLAGS = {
    "fp32": (False, False),
    "fp16-mixed": (True, False),
    "bf16-mixed": (False, True),
    "bf16": (False, True),
}


@st.composite
def plans(draw):
    gpu = draw(st.sampled_from(["cpu", "a100-80gb", "h100-80gb"]))
    gpus_per_node = draw(st.sampled_from([1, 2, 4, 8]))
    nodes = draw(st.integers(1, 3))
    strategy = draw(st.sampled_from(["ddp", "fsdp", "deepspeed", "engine"]))
    fields = {
        "strategy": strategy,
        "micro_batch": draw(st.integers(1, 8)),
        "grad_accum": draw(st.integers(1, 8)),
        "precision": draw(st.sampled_from(["fp32", "bf16-mixed"] if gpu == "cpu" else list(PRECISION_FLAGS))),
        "activation_checkpointing": draw(st.sampled_from(["none", "selective", "full"])),
    }
    if strategy == "fsdp":
        fields["fsdp_sharding"] = draw(st.sampled_from(["full", "grad-op", "hybrid", "none"]))
    if strategy in ("deepspeed", "engine"):
        fields["zero_stage"] = draw(st.integers(0, 3 if strategy == "deepspeed" else 1))
    if strategy == "engine":
        fields["tensor_parallel"] = draw(st.sampled_from([t for t in (1, 2, 4) if t <= gpus_per_node]))
        fields["pipeline_parallel"] = draw(st.sampled_from([1, 2, 4]))
        fields["compression"] = draw(st.sampled_from(["none", "int8", "onebit"]))
    nproc = draw(st.sampled_from([None, None, 1, 2, 4]))
    try:
        plan = make_plan(
            draw(st.sampled_from(["gpt2", "llama-2-7b"])), gpu=gpu, gpus_per_node=gpus_per_node, nodes=nodes, **fields
        )
        target = run_target(plan, nproc)
    except (UserInputError, ValidationError):
        assume(False)
    return plan, target


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(plans())
def test_emitted_files_agree(plan_and_target):
    plan, target = plan_and_target
    files = render_run_folder(plan, Path("/runs/x"), target)
    world = target.nproc_per_node * plan.cluster.num_nodes
    dp = world // (plan.config.tensor_parallel * plan.config.pipeline_parallel)
    micro, accum = plan.config.micro_batch, plan.config.grad_accum
    fp16, bf16 = PRECISION_FLAGS[plan.config.precision.value]
    mixed = "fp16" if fp16 else "bf16" if bf16 else "no"
    strategy = plan.config.strategy.value

    document = json.loads(files["plan.json"])
    run = document["run"]
    # The layout is stored once: the config's split; the run block repeats it only for another process count.
    assert ("layout" in run) == (target.layout != plan.layout)
    assert document["config"]["layout"]["dp"] is None and "layout" not in {k for k in document if k != "config"}
    layout = run.get("layout") or plan.layout.model_dump(mode="json")
    assert (run["micro_batch"], run["grad_accum"], layout["dp"]) == (micro, accum, dp)
    assert run["nproc_per_node"] * run["num_nodes"] == world and run["precision"] == plan.config.precision.value
    on_cpu = plan.cluster.gpu.kind == "cpu"
    assert (run["device"], run["dist_backend"]) == (("cpu", "gloo") if on_cpu else ("cuda", "nccl"))
    assert ("DS_ACCELERATOR" in files["launch.sh"]) == on_cpu

    if strategy == "deepspeed":
        ds = json.loads(files["ds_config.json"])
        assert (ds["train_batch_size"], ds["train_micro_batch_size_per_gpu"], ds["gradient_accumulation_steps"]) == (
            micro * accum * dp,
            micro,
            accum,
        )
        assert (ds["fp16"]["enabled"], ds["bf16"]["enabled"]) == (fp16, bf16)
        assert ds["zero_optimization"]["stage"] == plan.config.zero_stage
        trainer = json.loads(files["ds_config_trainer.json"])
        assert trainer["train_batch_size"] == "auto" and trainer["zero_optimization"]["stage"] == plan.config.zero_stage
    else:
        assert "ds_config.json" not in files
    # launch.sh's deepspeed branch reads the hostfile on several nodes, whatever the strategy.
    if strategy == "deepspeed" or plan.cluster.num_nodes > 1:
        hosts = [line for line in files["hostfile"].splitlines() if not line.startswith("#")]
        assert hosts == [f"node-{i + 1} slots={target.nproc_per_node}" for i in range(plan.cluster.num_nodes)]
    else:
        assert "hostfile" not in files

    if strategy == "engine":
        engine = json.loads(files["engine.json"])
        load_engine_config(engine)  # the engine accepts every emitted engine.json (unknown keys are errors)
        layout = engine["hardware_selector"]["layout"]
        # the one ParallelDims value, as the run places it
        assert ParallelDims.model_validate(layout) == target.layout
        assert layout["dp"] * layout["tp"] * layout["pp"] == world
        assert (
            engine["train_batch_size"],
            engine["train_micro_batch_size_per_gpu"],
            engine["gradient_accumulation_steps"],
        ) == (micro * accum * dp, micro, accum)
        assert (engine["fp16"]["enabled"], engine["bf16"]["enabled"]) == (fp16, bf16)
        assert "training_args.json" not in files
        # The plan's compression, and onebit's warm-up computed once (planner/gradient_compression.py) for both
        # engine.json and the README.
        compression = plan.config.compression
        warmup = warmup_steps(compression, target.optim.max_steps)
        block = engine["hardware_selector"]
        assert (block["compression"], block["compression_warmup_steps"]) == (compression.value, warmup)
        assert document["config"].get("compression", "none") == compression.value
        assert (f"compressed to {compression.value} with error feedback" in files["README.md"]) == (
            compression.value != "none"
        )
        assert (f"its first {warmup} optimizer steps summed uncompressed" in files["README.md"]) == bool(warmup)
    else:
        accelerate = yaml.safe_load(files["accelerate_config.yaml"])
        assert (accelerate["num_processes"], accelerate["num_machines"]) == (world, plan.cluster.num_nodes)
        if strategy != "deepspeed":  # DeepSpeed's precision lives in ds_config.json
            assert accelerate["mixed_precision"] == mixed
        args = json.loads(files["training_args.json"])
        assert (args["per_device_train_batch_size"], args["gradient_accumulation_steps"]) == (micro, accum)
        assert (args["fp16"], args["bf16"]) == (fp16, bf16)

    launch = files["launch.sh"]
    assert f"NPROC_PER_NODE={target.nproc_per_node}\n" in launch
    assert f"NNODES=${{NNODES:-{plan.cluster.num_nodes}}}\n" in launch
    slurm = files["slurm.sbatch"]
    assert f"#SBATCH --nodes={plan.cluster.num_nodes}\n" in slurm
    assert f"export NPROC_PER_NODE={target.nproc_per_node}\n" in slurm
    assert ("--gpus-per-node" in slurm) == (plan.cluster.gpu.kind != "cpu")
    assert re.search(rf"= {micro * accum * dp} sequences of", files["README.md"])

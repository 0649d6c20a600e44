"""accelerate_config.yaml: what `accelerate launch --config_file` needs to run the plan.

FSDP plans carry an fsdp_config (FSDP2 for full and grad-op sharding; FSDP1
for hybrid and no sharding, which accelerate's FSDP2 path does not take),
DeepSpeed plans point at ds_config.json, DDP plans are plain multi-process.
With a deepspeed_config_file accelerate refuses mixed_precision in the YAML
(the JSON decides), so DeepSpeed plans leave it out.
"""

from __future__ import annotations

from typing import Any

from planner.contract.run_config import RunConfig
from planner.emit.launch_scripts import DEFAULT_MASTER_PORT
from planner.plan import Plan
from planner.training_config import ActivationCheckpointing, FsdpSharding, Offload, Strategy

DS_CONFIG_FILE = "ds_config.json"
MAIN_PROCESS_IP_PLACEHOLDER = "127.0.0.1"  # multi-node: the first node's address (launch.sh passes MASTER_ADDR)

_FSDP1_SHARDING = {
    FsdpSharding.FULL: "FULL_SHARD",
    FsdpSharding.GRAD_OP: "SHARD_GRAD_OP",
    FsdpSharding.HYBRID: "HYBRID_SHARD",
    FsdpSharding.NONE: "NO_SHARD",
}


def accelerate_config(plan: Plan, target: RunConfig) -> dict[str, Any] | None:
    """The YAML document as a dict. Our engine's plans get a plain multi-process config: accelerate
    only launches the runner for them."""
    strategy = plan.config.strategy
    config: dict[str, Any] = {
        "compute_environment": "LOCAL_MACHINE",
        "debug": False,
        "num_processes": target.world_size,
        "num_machines": target.num_nodes,
        "machine_rank": 0,  # launch.sh passes each node's rank
        "main_process_ip": MAIN_PROCESS_IP_PLACEHOLDER,
        "main_process_port": DEFAULT_MASTER_PORT,
        "rdzv_backend": "static",
        "same_network": True,
        "main_training_function": "main",
        "downcast_bf16": "no",
        # Not use_cpu, even on CPU plans: with it accelerate ignores FSDP and DeepSpeed
        # and launches MULTI_CPU runs through mpirun only. The script selects the CPU
        # (backends/cpu_distributed.py); DS_ACCELERATOR=cpu is set by launch.sh.
        "use_cpu": False,
    }
    if strategy in (Strategy.DDP, Strategy.ENGINE):
        # MULTI_GPU makes `accelerate launch` start torchrun, on CPU plans too.
        config["distributed_type"] = "MULTI_GPU"
        config["mixed_precision"] = target.mixed_precision
    elif strategy is Strategy.FSDP:
        config["distributed_type"] = "FSDP"
        config["mixed_precision"] = target.mixed_precision
        config["fsdp_config"] = fsdp_config(plan, target)
    else:
        config["distributed_type"] = "DEEPSPEED"
        config["deepspeed_config"] = {
            "deepspeed_config_file": DS_CONFIG_FILE,
            "deepspeed_multinode_launcher": "standard",
            # Lets a user's from_pretrained build ZeRO-3 models partitioned (our example
            # script builds its model before the Accelerator, so it is unaffected).
            "zero3_init_flag": plan.config.zero_stage == 3 and target.device == "cuda",
        }
    return config


def fsdp_config(plan: Plan, target: RunConfig) -> dict[str, Any]:
    config = plan.config
    sharding = config.fsdp_sharding
    offload = Offload.CPU in (config.offload_params, config.offload_optimizer)
    block: dict[str, Any] = {
        "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
        "fsdp_transformer_layer_cls_to_wrap": target.model.block_class,
        "fsdp_offload_params": offload,
        "fsdp_state_dict_type": "SHARDED_STATE_DICT",
        "fsdp_activation_checkpointing": config.activation_checkpointing is not ActivationCheckpointing.NONE,
        "fsdp_cpu_ram_efficient_loading": False,
    }
    if sharding.fsdp2:
        block["fsdp_version"] = 2
        block["fsdp_reshard_after_forward"] = sharding is FsdpSharding.FULL
    else:
        block["fsdp_version"] = 1
        block["fsdp_sharding_strategy"] = _FSDP1_SHARDING[sharding]
        block["fsdp_backward_prefetch"] = "BACKWARD_PRE"
        block["fsdp_forward_prefetch"] = False
        block["fsdp_sync_module_states"] = True
        block["fsdp_use_orig_params"] = True
    return block


def accelerate_yaml(plan: Plan, target: RunConfig) -> str | None:
    document = accelerate_config(plan, target)
    if document is None:
        return None
    import yaml

    header = (
        f"# accelerate config for {plan.model.name}, {plan.config.strategy.value}; written by hardware-selector.\n"
        "# Multi-node: launch.sh overrides machine_rank, main_process_ip and main_process_port per node.\n"
    )
    return header + yaml.safe_dump(document, sort_keys=True)

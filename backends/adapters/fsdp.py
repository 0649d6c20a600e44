"""Adapter: FSDP2 (`fully_shard`) on every transformer block and the root (torch_step.py has the step).

The plan's sharding picks the mesh and resharding: full (shard over all
ranks, reshard after forward), grad-op (keep gathered from forward to
backward), hybrid (shard inside a node, replicate across nodes: a 2-D mesh)
and none (replicate only). A pretrained run builds the model on the meta
device, shards it, and each rank reads only its rows of every tensor.
"""

from __future__ import annotations

from typing import Any

from backends.adapters.base import AdapterSetup
from backends.adapters.torch_step import TorchAdapter
from planner.contract.layout import ParallelDims
from planner.errors import UserInputError
from planner.training_config import FsdpSharding, Offload


def fsdp_mesh(sharding: FsdpSharding, world: int, gpus_per_node: int, device_type: str) -> Any:
    from torch.distributed.device_mesh import init_device_mesh

    if sharding is FsdpSharding.HYBRID:
        per_node = min(gpus_per_node, world) if world % min(gpus_per_node, world) == 0 else world
        return init_device_mesh(device_type, (world // per_node, per_node), mesh_dim_names=("replicate", "shard"))
    if sharding is FsdpSharding.NONE:
        return init_device_mesh(device_type, (world, 1), mesh_dim_names=("replicate", "shard"))
    return init_device_mesh(device_type, (world,), mesh_dim_names=("shard",))


class FsdpAdapter(TorchAdapter):
    name = "fsdp"

    def __init__(self, setup: AdapterSetup):
        import torch
        from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

        from backends.decoder_anatomy import repeated_blocks
        from backends.parallelize import ParallelizeConfig, parallelize

        super().__init__(setup)
        config = setup.engine_config
        if config.fp16.enabled:
            raise UserInputError("the FSDP adapter runs fp32 or bf16; use --precision bf16-mixed with FSDP")
        if not self.distributed:
            raise UserInputError(
                "FSDP needs torch.distributed; start the runner under torchrun (hardware-selector train)"
            )
        plan_config = setup.plan.config
        pretrained = setup.weights_folder is not None
        module = setup.make_model(empty=pretrained)
        if not pretrained:
            module = module.to(self.device)

        def shard(model: Any) -> Any:  # the last step of parallelize: FSDP2 per block, then the root
            mesh = fsdp_mesh(plan_config.fsdp_sharding, self.world, setup.run.nproc_per_node, self.device.type)
            policy = (
                MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
                if config.bf16.enabled
                else MixedPrecisionPolicy()
            )
            options: dict[str, Any] = {
                "mesh": mesh,
                "mp_policy": policy,
                "reshard_after_forward": plan_config.fsdp_sharding is not FsdpSharding.GRAD_OP,
            }
            offload = Offload.CPU in (plan_config.offload_params, plan_config.offload_optimizer)
            if offload and self.device.type == "cuda":
                options["offload_policy"] = CPUOffloadPolicy()
            for block in repeated_blocks(model):
                fully_shard(block, **options)
            return fully_shard(model, **options)

        replica = ParallelizeConfig.of_replica(plan_config, self.device.type)
        self.model = self.module = parallelize(module, ParallelDims(), replica, shard=shard).model
        if pretrained:
            self._load_shards(setup.weights_folder)
        self.finish_setup()

    def uses_autocast(self) -> bool:
        return False  # FSDP2's MixedPrecisionPolicy casts the parameters

    def _load_shards(self, folder: str) -> None:
        """Each rank reads, for every parameter, only the rows of its local shard."""
        import torch
        from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

        from backends.weights.model_init import fill_rows, materialize
        from backends.weights.source import source_for

        source = source_for(self.module, folder)
        for name, param in self.module.named_parameters():
            source.check_shape(name, tuple(param.shape))
        materialize(self.module, self.device)
        with torch.no_grad():
            for name, param in self.module.named_parameters():
                local = param.to_local()
                _, offset = compute_local_shape_and_global_offset(param.shape, param.device_mesh, param.placements)
                fill_rows(local, source, name, offset[0] if offset else 0)

    def sync_context(self, boundary: bool) -> Any:
        from contextlib import nullcontext

        self.model.set_requires_gradient_sync(boundary)  # no reduce-scatter between boundaries
        return nullcontext()

    def full_state_dict(self) -> dict[str, Any] | None:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        state = get_model_state_dict(self.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        return state if self.rank == 0 else None

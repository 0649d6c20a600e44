"""Expert parallelism: an MoE model's experts split over an `ep` group (docs/parallelism.md).

- dispatch.py: the experts module that holds this rank's experts and exchanges tokens with all_to_all;
- apply.py: swap it into an HF MoE model, build the groups, and reduce gradients across them;
- tensor_parallel.py: the MoE block under tensor parallelism (its input, output and router around it).
"""

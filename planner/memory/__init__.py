"""Per-GPU (and per-node CPU/NVMe) memory of a training step.

- zero_paper.py: the ZeRO paper's model-state formulas, verbatim.
- rank_params.py: how many parameters one rank holds after TP, PP and EP split.
- model_states.py: parameters, gradients and optimizer states, per framework.
- activations.py: saved activations and the loss temporaries.
- buffers.py: communication buffers and gathered parameters.
- estimate.py: the peak over the step, with a source for every number.
"""

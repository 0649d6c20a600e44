"""Per-GPU (and per-node CPU/NVMe) memory of a training step.

- zero_paper.py: the ZeRO paper's model-state formulas, verbatim.
- rank_params.py: how many parameters one rank holds after TP, PP and EP split.
- model_states.py: parameters, gradients and optimizer states, per framework.
- arch_traits.py: what an HF implementation keeps that dimensions do not say.
- activations.py: saved activations and the loss temporaries.
- buffers.py: communication buffers, gathered parameters, autocast weight copies.
- runtime.py: a CUDA step, or the CPU trace harness's (for validation).
- phases.py: the step's peak over five moments (the raw, fast computation).
- spec_cache.py: per-spec caches for the strategy search's inner loop.
- estimate.py: the typed MemoryEstimate, with a source for every number.
"""

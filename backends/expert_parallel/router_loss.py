"""The routers' load-balancing loss when the engine runs the model's layers itself (backends/parallelize.py).

transformers adds it to an MoE model's loss when the config sets output_router_logits: its
load_balancing_loss_func (Switch Transformer, eqs. 4-6) takes every MoE layer's router logits and returns

    E x sum over experts e of (assignments to e / rows) x (router probability of e summed / rows)

where rows counts every layer's tokens. Both per-expert sums add over layers, so they are all the loss needs:
RouterLoss keeps them as one (2, E) float32 tensor, the top-k assignments (no gradient) and the summed
probabilities (with the routers' gradient). Without pipelining the layers' sums are added at once; with it,
each stage adds its layers' sums to those it received and hands them on beside the hidden states, and the
last stage turns them into the loss, so the gradient reaches every stage's routers through the pipeline's
own backward (backends/pipeline_parallel/runner.py). The reference is transformers' function itself:
tests/test_expert_parallel_engine.py trains its losses under tp and pp.

Under tensor parallelism every tp rank holds the same logits, so each back-propagates a tp-th of the term and
the router's gradient, summed over tp (tensor_parallel.py), counts it once.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from backends.expert_parallel.tensor_parallel import moe_blocks


class RouterLoss:
    """Collects this rank's routers' logits during a forward and gives the load-balancing term of the loss."""

    def __init__(self, model: nn.Module, path: str, tp: int):
        config = model.config
        self.coefficient = float(getattr(config, "router_aux_loss_coef", 0.0))
        names = ("num_local_experts", "num_experts", "n_routed_experts")  # Mixtral, Qwen-MoE, DeepSeek
        self.experts = int(next(getattr(config, name) for name in names if getattr(config, name, None)))
        self.top_k = int(config.num_experts_per_tok)
        self.tp = tp
        # The families whose HF model adds this loss define the function beside the model class.
        defines_it = hasattr(sys.modules[type(model).__module__], "load_balancing_loss_func")
        self.enabled = bool(getattr(config, "output_router_logits", False)) and defines_it
        self.logits: list[torch.Tensor] = []
        self._collecting = False
        for block in moe_blocks(model, path):
            block.gate.register_forward_hook(self._record)

    def _record(self, module: nn.Module, args: Any, output: Any) -> None:
        if self._collecting:  # not during a checkpointed layer's recomputation in backward
            self.logits.append(output[0])

    @contextlib.contextmanager
    def collecting(self) -> Iterator[None]:
        self.logits, self._collecting = [], self.enabled
        try:
            yield
        finally:
            self._collecting = False

    def empty_sums(self, device: torch.device) -> torch.Tensor:
        return torch.zeros(2, self.experts, dtype=torch.float32, device=device)

    def add_layer_sums(self, sums: torch.Tensor) -> torch.Tensor:
        """`sums` plus the (assignments, probabilities) of the layers collected since `collecting` began."""
        for logits in self.logits:
            probabilities = torch.softmax(logits, dim=-1)
            chosen = torch.topk(probabilities, self.top_k, dim=-1).indices
            counts = torch.bincount(chosen.reshape(-1), minlength=self.experts).float()
            sums = sums + torch.stack([counts, probabilities.float().sum(dim=0)])
        self.logits = []
        return sums

    def term(self, sums: torch.Tensor) -> torch.Tensor | float:
        """coef x the loss of the summed statistics; its gradient is a tp-th of it on each tp rank (the value
        is the whole)."""
        if not self.enabled:
            return 0.0
        rows = sums[0].detach().sum() / self.top_k  # every row assigns top_k tokens
        if not rows:
            return 0.0
        balance = self.experts * torch.sum(sums[0].detach() / rows * (sums[1] / rows))
        whole = self.coefficient * balance
        share = whole / self.tp
        return share + (whole - share).detach()

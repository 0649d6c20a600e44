"""Cross-entropy over vocab-sharded logits, so the full [tokens, vocab] logits never exist on one rank.

Each rank holds logits for its slice of the vocabulary; three all-reduces
over the TP group (max, sum of exp, target logit) give the exact loss, and
the gradient softmax - onehot is formed from local pieces only.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

IGNORE_INDEX = -100


class _VocabParallelCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, targets, vocab_start, vocab_size, group):
        logits = logits.float()
        if vocab_start + logits.shape[-1] > vocab_size:  # padding rows of a vocabulary tp does not divide
            logits = logits.clone()
            logits[..., vocab_size - vocab_start :] = float("-inf")
        local_max = logits.max(dim=-1).values
        dist.all_reduce(local_max, op=dist.ReduceOp.MAX, group=group)
        shifted = logits - local_max.unsqueeze(-1)
        vocab_local = logits.shape[-1]
        outside = (targets < vocab_start) | (targets >= vocab_start + vocab_local)
        local_targets = (targets - vocab_start).masked_fill(outside, 0)
        target_logit = shifted.gather(-1, local_targets.unsqueeze(-1)).squeeze(-1).masked_fill(outside, 0.0)
        dist.all_reduce(target_logit, group=group)
        exp = shifted.exp()
        sum_exp = exp.sum(dim=-1)
        dist.all_reduce(sum_exp, group=group)
        loss = sum_exp.log() - target_logit
        softmax = exp / sum_exp.unsqueeze(-1)
        ctx.save_for_backward(softmax, local_targets, outside)
        return loss

    @staticmethod
    def backward(ctx, grad_loss):
        softmax, local_targets, outside = ctx.saved_tensors
        grad = softmax.clone()
        onehot = torch.zeros_like(grad).scatter_(-1, local_targets.unsqueeze(-1), 1.0)
        grad -= onehot * (~outside).unsqueeze(-1).to(grad.dtype)
        return grad * grad_loss.unsqueeze(-1), None, None, None, None


def vocab_parallel_loss_sum(
    local_logits: torch.Tensor, targets: torch.Tensor, vocab_start: int, group, vocab_size: int | None = None
) -> torch.Tensor:
    """Summed loss of logits[..., t, :] predicting targets[..., t] (-100 ignored), over vocab-sharded logits."""
    logits = local_logits.reshape(-1, local_logits.shape[-1])
    flat = targets.reshape(-1)
    valid = flat != IGNORE_INDEX
    vocab_size = vocab_size or vocab_start + local_logits.shape[-1]
    per_token = _VocabParallelCrossEntropy.apply(logits, flat.masked_fill(~valid, 0), vocab_start, vocab_size, group)
    return (per_token * valid.to(per_token.dtype)).sum()


def vocab_parallel_causal_lm_loss(
    local_logits: torch.Tensor, labels: torch.Tensor, vocab_start: int, group, vocab_size: int | None = None
) -> torch.Tensor:
    """Mean next-token loss like HF's ForCausalLMLoss: position t predicts labels[t+1], -100 ignored.
    Columns at or beyond `vocab_size` (padding) take no part."""
    targets = labels[:, 1:]
    summed = vocab_parallel_loss_sum(local_logits[:, :-1, :], targets, vocab_start, group, vocab_size)
    return summed / (targets != IGNORE_INDEX).sum().clamp(min=1)

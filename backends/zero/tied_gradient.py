"""A tied input embedding and output head: the shared weight's two gradients written into its .grad in place.

When the head (an nn.Linear) shares its weight with the input embedding (an
nn.Embedding), as GPT-2's does, backward makes two vocabulary-sized gradients
for that weight: the head's (grad_logits^T @ hidden), made first, and the
embedding's (zeros filled with index_add), made last. Autograd holds the first
in its input buffer all through backward, makes the second, sums them and adds
the sum into .grad, so at the very end of backward, where ZeRO's peak is
(the gradient buffers nearly full), two extra copies of the weight are
resident: 147 MiB each for GPT-2-small in fp32 (docs/performance.md, "Engine
vs peers").

A ZeRO stage that makes the weight's .grad a zero view of its gradient buffer
before backward (the first micro-step of an accumulation window) sets `fresh`;
the head's backward then writes its gradient straight into .grad (one mm with
out=), and the embedding's backward sums each distinct token's rows in a
scratch of (distinct tokens x hidden) and adds those sums to .grad, so no
vocabulary-sized temporary is made. The result is bit-identical to torch's:
each row gets head + (the token's gradients summed in input order), the order
torch's embedding backward and autograd's sum use. The embedding's backward
then gives autograd no gradient for the weight; autograd's AccumulateGrad node
still runs the weight's post-accumulate-grad hooks right after it, where the
stages count a bucket ready (tests/test_tied_gradient.py checks they run once
per backward, after both gradients are in). In every other case (later micro-steps of
a window, no view, a dtype or layout that differs) both backwards are torch's
own formulas, returned to autograd as usual.

Installed only where one nn.Embedding (no padding_idx, max_norm, sparse or
frequency scaling) and one bias-free nn.Linear are the weight's only users
among the model's modules; their forwards are replaced on the instances.
"""

from __future__ import annotations

from typing import Any


class TiedGradient:
    """The shared weight and the switch a ZeRO stage sets when its .grad is a zero view (see the module doc)."""

    def __init__(self, weight: Any, embedding: Any, head: Any):
        self.weight, self.embedding, self.head = weight, embedding, head
        self.fresh = False  # the stage's promise: weight.grad is zero and the head's backward comes first
        self.in_place = 0  # backwards that wrote both gradients in place (tests read it)
        self._pass: dict[str, bool] | None = None  # the current forward's: did its head write in place?

    def __getstate__(self) -> dict[str, Any]:
        """A copy (deepcopy, pickle) belongs to no ZeRO stage: never fresh, no forward pass in flight."""
        return {**self.__dict__, "fresh": False, "_pass": None}

    def _head_may_write(self, grad_output: Any) -> bool:
        grad = self.weight.grad
        return (
            self.fresh
            and grad is not None
            and grad.shape == self.weight.shape
            and grad.dtype == grad_output.dtype == self.weight.dtype
            and grad.device == grad_output.device
            and grad.is_contiguous()
        )


def _functions() -> tuple[Any, Any]:
    import torch
    from torch.autograd.function import once_differentiable

    class EmbeddingLookup(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, ids: Any, weight: Any, tied: TiedGradient, forward_pass: dict) -> Any:
            ctx.save_for_backward(ids)
            ctx.tied, ctx.forward_pass, ctx.rows = tied, forward_pass, weight.shape[0]
            return torch.nn.functional.embedding(ids, weight)

        @staticmethod
        @once_differentiable
        def backward(ctx: Any, grad_output: Any) -> tuple[Any, ...]:
            (ids,) = ctx.saved_tensors
            tied: TiedGradient = ctx.tied
            if not ctx.forward_pass.pop("head_wrote", False):
                grad = torch.ops.aten.embedding_backward(grad_output, ids, ctx.rows, -1, False, False)
                return None, grad, None, None
            weight = tied.weight
            rows, inverse = torch.unique(ids.reshape(-1), return_inverse=True)
            flat = grad_output.reshape(-1, grad_output.shape[-1])
            sums = flat.new_zeros(rows.numel(), flat.shape[1]).index_add_(0, inverse, flat)
            weight.grad.index_add_(0, rows, sums)  # each row once: head + (the token's rows, in input order)
            tied.in_place += 1
            return None, None, None, None  # autograd's AccumulateGrad still runs the weight's post-accumulate hooks

    class HeadLinear(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, hidden: Any, weight: Any, tied: TiedGradient, forward_pass: dict | None) -> Any:
            ctx.save_for_backward(hidden, weight)
            ctx.tied, ctx.forward_pass = tied, forward_pass
            return torch.nn.functional.linear(hidden, weight)

        @staticmethod
        @once_differentiable
        def backward(ctx: Any, grad_output: Any) -> tuple[Any, ...]:
            hidden, weight = ctx.saved_tensors
            tied: TiedGradient = ctx.tied
            flat = grad_output.reshape(-1, grad_output.shape[-1])
            flat_hidden = hidden.reshape(-1, hidden.shape[-1])
            grad_hidden = flat.mm(weight).view(hidden.shape) if ctx.needs_input_grad[0] else None
            # torch's own linear backward makes the weight's gradient as grad_output^T @ hidden (the same mm)
            if ctx.forward_pass is not None and tied._head_may_write(grad_output):
                tied.fresh = False  # written over: a second head backward in this window must add
                torch.mm(flat.t(), flat_hidden, out=tied.weight.grad)
                ctx.forward_pass["head_wrote"] = True
                return grad_hidden, None, None, None
            return grad_hidden, flat.t().mm(flat_hidden), None, None

    return EmbeddingLookup, HeadLinear


def install(model: Any) -> TiedGradient | None:
    """Replace the forwards of the model's tied embedding and head (see the module doc); None if it has none."""
    import torch

    users: dict[int, list[Any]] = {}
    for module in model.modules():
        for param in module._parameters.values():
            if param is not None:
                users.setdefault(id(param), []).append(module)
    for module in model.modules():
        if type(module) is not torch.nn.Embedding:
            continue
        weight = module.weight
        others = [user for user in users.get(id(weight), []) if user is not module]
        plain = (
            module.padding_idx is None
            and module.max_norm is None
            and not module.sparse
            and not module.scale_grad_by_freq
            and weight.requires_grad
        )
        if not plain or len(others) != 1:
            continue
        head = others[0]
        if type(head) is not torch.nn.Linear or head.bias is not None or head.weight is not weight:
            continue
        if list(head._parameters) != ["weight", "bias"] or list(module._parameters) != ["weight"]:
            continue
        tied = TiedGradient(weight, module, head)
        _replace_forwards(tied)
        return tied
    return None


def _replace_forwards(tied: TiedGradient) -> None:
    """Bound to the instances, with the state on the embedding: a deep copy of the model (an EMA copy, say) gets
    forwards bound to its own modules and a state holding its own weight, never the original's."""
    import types

    tied.embedding._tied_gradient = tied
    tied.head._tied_gradient = tied
    tied.embedding.forward = types.MethodType(_embedding_forward, tied.embedding)
    tied.head.forward = types.MethodType(_head_forward, tied.head)


_FUNCTIONS: tuple[Any, Any] | None = None


def _autograd_functions() -> tuple[Any, Any]:
    global _FUNCTIONS
    if _FUNCTIONS is None:
        _FUNCTIONS = _functions()
    return _FUNCTIONS


def _embedding_forward(module: Any, ids: Any) -> Any:
    import torch

    tied: TiedGradient = module._tied_gradient
    if not (torch.is_grad_enabled() and tied.weight.requires_grad):
        return torch.nn.functional.embedding(ids, tied.weight)
    tied._pass = {}
    return _autograd_functions()[0].apply(ids, tied.weight, tied, tied._pass)


def _head_forward(module: Any, hidden: Any) -> Any:
    import torch

    tied: TiedGradient = module._tied_gradient
    if not (torch.is_grad_enabled() and tied.weight.requires_grad):
        return torch.nn.functional.linear(hidden, tied.weight)
    forward_pass, tied._pass = tied._pass, None  # the embedding lookup this head's output comes from
    return _autograd_functions()[1].apply(hidden, tied.weight, tied, forward_pass)

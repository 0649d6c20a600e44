"""Adam / AdamW stepped chunk by chunk, in place, over the engine's flat fp32 shards (docs/performance.md,
"Engine vs peers").

torch's single-tensor Adam (what torch.optim.AdamW runs on CPU) makes full-size temporaries of the parameter
for every step: `exp_avg_sq.sqrt()`, its quotient by the bias correction, and, without decoupled weight decay,
`grad + weight_decay * param`. Over the ZeRO master shard (one flat tensor of this rank's slice of the model)
that is ~475 MiB at GPT-2 124M on two ranks, allocated and freed every step, at the top of the step's
resident set, and glibc keeps much of it afterwards. Here each of the flat tensors (parameter, gradient,
exp_avg, exp_avg_sq) is walked in fixed-size chunks, and every chunk goes through the same torch operations,
in the same order, with the same Python-float coefficients as torch's single-tensor Adam, so every element
sees exactly the same arithmetic: the result is bit-identical to torch.optim.AdamW(foreach=False) (and to
Adam for coupled decay), and the only temporaries are one or two chunk-sized scratch tensors kept across
steps. The state keeps torch's keys and types ('step' a CPU float tensor, 'exp_avg', 'exp_avg_sq', and
'max_exp_avg_sq' with amsgrad), so checkpoints written by either optimizer load into the other, and 1-bit
Adam's warm-up (backends/parts/onebit_adam.py) still matches an AdamW run to the last bit.
"""

from __future__ import annotations

from typing import Any

import torch

# Elements per chunk: at 1 Mi fp32 elements the four flat tensors' chunks and the scratch (20 MiB) stay in the
# measuring machine's 32 MiB L3 between the chunk's seven passes, while the Python around them (about a dozen
# calls a chunk, ~60 chunks over GPT-2's ZeRO-1 shard on two ranks) stays negligible; 256 Ki measured the same,
# 64 Ki and 4 Mi slower (docs/performance.md, "Engine vs peers").
CHUNK = 1 << 20


class ChunkedAdam(torch.optim.Adam):
    """torch.optim.Adam (decoupled_weight_decay=True: AdamW) whose step walks each parameter in chunks of
    `chunk` elements. Options torch's single-tensor path does not take on a CPU shard (capturable,
    differentiable, fused, tensor hyperparameters) are refused."""

    def __init__(
        self,
        params: Any,
        *,
        lr: float,
        betas: tuple[float, float],
        eps: float,
        weight_decay: float,
        decoupled_weight_decay: bool,
        amsgrad: bool = False,
        maximize: bool = False,
        chunk: int = CHUNK,
    ):
        if chunk < 1:
            raise ValueError(f"chunk must be at least one element, not {chunk}")
        super().__init__(
            params,
            lr=lr,
            betas=betas,
            eps=eps,
            weight_decay=weight_decay,
            amsgrad=amsgrad,
            maximize=maximize,
            foreach=False,
            decoupled_weight_decay=decoupled_weight_decay,
        )
        self.chunk = chunk
        # Chunk-sized scratch, kept across steps: allocating it per chunk would, at 4 MiB and above glibc's mmap
        # threshold, map and unmap fresh pages every chunk. Not optimizer state: a checkpoint does not hold it.
        self._scratch: dict[tuple[Any, Any, str], torch.Tensor] = {}

    def _buffer(self, like: torch.Tensor, use: str, size: int) -> torch.Tensor:
        key = (like.device, like.dtype, use)
        buffer = self._scratch.get(key)
        if buffer is None or buffer.numel() < size:
            buffer = torch.empty(size, dtype=like.dtype, device=like.device)
            self._scratch[key] = buffer
        return buffer[:size]

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for flag in ("capturable", "differentiable", "fused"):
                if group.get(flag):
                    raise ValueError(f"the chunked Adam step does not support {flag}=True")
            hyper = (group["lr"], *group["betas"])
            if any(isinstance(value, torch.Tensor) for value in hyper):
                raise ValueError("the chunked Adam step takes float lr and betas, not tensors")
            for param in group["params"]:
                if param.grad is not None:
                    self._step_param(group, param)
        return loss

    def _state(self, group: dict, param: torch.Tensor) -> dict:
        """Lazily created, with the keys, dtypes and devices torch's Adam gives them (Adam._init_group)."""
        state = self.state[param]
        if len(state) == 0:
            scalar = torch.float64 if torch.get_default_dtype() == torch.float64 else torch.float32
            state["step"] = torch.tensor(0.0, dtype=scalar)
            state["exp_avg"] = torch.zeros_like(param, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(param, memory_format=torch.preserve_format)
            if group["amsgrad"]:
                state["max_exp_avg_sq"] = torch.zeros_like(param, memory_format=torch.preserve_format)
        return state

    def _chunks(self, tensors: list[torch.Tensor]) -> Any:
        """The tensors' matching chunks, as flat views; a layout that cannot be walked flat is one chunk (torch's
        full-size arithmetic, with its temporaries)."""
        if not all(t.is_contiguous() and t.shape == tensors[0].shape for t in tensors):
            yield tensors
            return
        flats = [t.view(-1) for t in tensors]
        for start in range(0, flats[0].numel(), self.chunk):
            yield [t[start : start + self.chunk] for t in flats]

    def _step_param(self, group: dict, param: torch.Tensor) -> None:
        grad = param.grad
        if grad.is_sparse:
            raise RuntimeError("Adam does not support sparse gradients, please consider SparseAdam instead")
        if torch.is_complex(param):
            raise ValueError("the chunked Adam step takes real parameters, not complex ones")
        state = self._state(group, param)
        amsgrad, maximize = group["amsgrad"], group["maximize"]
        lr, (beta1, beta2), eps, decay = group["lr"], group["betas"], group["eps"], group["weight_decay"]
        decoupled = group["decoupled_weight_decay"]
        state["step"] += 1
        step = state["step"].item()
        # torch's non-capturable single-tensor Adam computes these once per parameter, as Python floats.
        bias_correction1 = 1 - beta1**step
        bias_correction2 = 1 - beta2**step
        step_size = lr / bias_correction1
        bias_correction2_sqrt = bias_correction2**0.5
        tensors = [param, grad, state["exp_avg"], state["exp_avg_sq"]]
        if amsgrad:
            tensors.append(state["max_exp_avg_sq"])
        for pieces in self._chunks(tensors):
            p, g, exp_avg, exp_avg_sq = pieces[:4]
            if maximize:
                g = torch.neg(g, out=self._buffer(p, "grad", p.numel()).view_as(p))
            if decay != 0:
                if decoupled:
                    p.mul_(1 - lr * decay)
                elif maximize:
                    g.add_(p, alpha=decay)
                else:
                    g = torch.add(g, p, alpha=decay, out=self._buffer(p, "grad", p.numel()).view_as(p))
            exp_avg.lerp_(g, 1 - beta1)
            exp_avg_sq.mul_(beta2).addcmul_(g, g, value=1 - beta2)
            if amsgrad:
                torch.maximum(pieces[4], exp_avg_sq, out=pieces[4])
                second = pieces[4]
            else:
                second = exp_avg_sq
            denom = torch.sqrt(second, out=self._buffer(p, "denom", p.numel()).view_as(p))
            denom.div_(bias_correction2_sqrt).add_(eps)
            p.addcdiv_(exp_avg, denom, value=-step_size)

"""What every chapter shares: a small GPT, its data, a step timer, and the planner's GPU prediction.

The model is nanoGPT-shaped and written out so each chapter can split it by
hand: token + position embeddings, `LAYERS` blocks (LayerNorm, causal
attention with separate q/k/v projections, LayerNorm, MLP), a final norm and
an LM head. It is GPT-2's architecture at toy size, so the planner's
prediction for the real GPT-2 (124M) on GPUs describes the same computation.
"""

from __future__ import annotations

import io
import json
import resource
import time
from contextlib import redirect_stdout

import torch
import torch.nn.functional as F
from torch import nn

VOCAB, WIDTH, HEADS, LAYERS, SEQ = 256, 64, 4, 4, 32
GLOBAL_BATCH, STEPS, LR = 8, 6, 3e-3


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.q, self.k, self.v = (nn.Linear(WIDTH, WIDTH) for _ in range(3))
        self.proj = nn.Linear(WIDTH, WIDTH)
        self.fc, self.out = nn.Linear(WIDTH, 4 * WIDTH), nn.Linear(4 * WIDTH, WIDTH)

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.shape
        # -1 heads: under tensor parallelism each rank holds HEADS / tp of them (chapter 8)
        q, k, v = (layer(x).view(batch, seq, -1, WIDTH // HEADS).transpose(1, 2) for layer in (self.q, self.k, self.v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(batch, seq, -1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.ln_1(x))
        return x + self.out(F.gelu(self.fc(self.ln_2(x))))


class Embed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tokens, self.positions = nn.Embedding(VOCAB, WIDTH), nn.Embedding(SEQ, WIDTH)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.tokens(ids) + self.positions(torch.arange(ids.shape[1], device=ids.device))


class Head(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln_f, self.lm_head = nn.LayerNorm(WIDTH), nn.Linear(WIDTH, VOCAB, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.ln_f(x))


class GPT(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed, self.blocks, self.head = Embed(), nn.ModuleList(Block() for _ in range(LAYERS)), Head()

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def build_model() -> GPT:
    torch.manual_seed(0)  # every chapter starts from the same weights
    return GPT()


def loss_of(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))


def batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    """STEPS global batches of (inputs, next tokens): sequences with a rule to learn (t+1 = 7 t + 3 mod VOCAB)."""
    start = torch.randint(0, VOCAB, (STEPS, GLOBAL_BATCH, 1), generator=torch.Generator().manual_seed(1))
    steps = torch.arange(SEQ + 1)
    tokens = start.clone()
    for _ in steps[1:]:
        tokens = torch.cat([tokens, (tokens[..., -1:] * 7 + 3) % VOCAB], dim=-1)
    return [(tokens[i, :, :-1], tokens[i, :, 1:]) for i in range(STEPS)]


class StepTimer:
    """Wall time per step (the first is warm-up and left out) and this process's peak RSS."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self._began = time.perf_counter()

    def lap(self) -> None:
        now = time.perf_counter()
        self.times.append(now - self._began)
        self._began = now

    def summary(self) -> str:
        steady = sorted(self.times[1:] or self.times)
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        return f"measured on this CPU: {steady[len(steady) // 2] * 1e3:.1f} ms/step, peak RSS {rss:.0f} MiB"


def planner_prediction(strategy: str, gpus: int, **flags: str) -> str:
    """What `hardware-selector estimate` predicts for the real GPT-2 (124M) on A100-80GB GPUs this way."""
    import hardware_selector

    argv = ["estimate", "-m", "gpt2", "--gpu", "A100-80GB", "--nodes", "1", "--gpus-per-node", str(gpus),
            "--strategy", strategy, "--seq-len", "1024", "--micro-batch", "8", "--json"]  # fmt: skip
    for flag, value in flags.items():
        argv += [f"--{flag.replace('_', '-')}", value]
    out = io.StringIO()
    with redirect_stdout(out):
        assert hardware_selector.main(argv) == 0
    estimate = json.loads(out.getvalue())
    memory = estimate["memory"]["per_gpu_bytes"]["total"] / 2**30
    step = estimate["throughput"]["step_time_s"]
    time_source = estimate["throughput"]["sources"]["step_time_s"].split(";")[1].strip()  # the calibration used
    return (
        f"the planner for GPT-2 124M, micro-batch 8 x 1024 tokens, {gpus} x A100-80GB ({strategy}): "
        f"{memory:.1f} GiB per GPU (formula: ZeRO and Korthikanti, docs/accuracy.md), "
        f"{step * 1e3:.0f} ms/step (formula; {time_source})"
    )


def say(line: str) -> None:
    """Rank 0 prints (each chapter's lines are what the tutorial shows and the test reads)."""
    if not torch.distributed.is_initialized() or torch.distributed.get_rank() == 0:
        print(line, flush=True)

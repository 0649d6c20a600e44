"""The single-process HF reference of a runner run: the same checkpoint, data order, schedule and update.

`hf_reference_losses(run_dir, steps)` trains `AutoModelForCausalLM.from_pretrained` on one process over the
same global batches the runner feeds a folder (the runner's own data preparation and order), with torch's
AdamW, the same learning rate at each step and the same clipping. Every rank of a data-parallel run computes
the mean loss of its micro-batches; blocks have equal lengths, so the mean over ranks and micro-batches is
the loss of the whole global batch, which is what the reference computes in one forward.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def runner_data(run_dir: Path) -> tuple[Any, Any]:
    """(run config, the RunData the runner trains on) for a run folder, without any process group."""
    from transformers import AutoConfig

    from backends.data import prepare_data
    from planner.rundir.plan_file import read_plan_file

    _, run = read_plan_file(run_dir)
    vocab = AutoConfig.from_pretrained(run.model.path).vocab_size
    data = prepare_data(
        run.data,
        run_dir=run_dir,
        tokenizer_dir=run.model.tokenizer_dir,
        model_name=run.model.name,
        seq_len=run.seq_len,
        vocab_size=vocab,
        global_batch=run.global_batch,
        local_rank=0,
        seed=run.data.seed,
    )
    return run, data


def hf_reference_losses(run_dir: Path, steps: int) -> list[float]:
    return hf_reference_run(run_dir, steps)[0]


def hf_reference_run(run_dir: Path, steps: int) -> tuple[list[float], dict[str, Any]]:
    """(per-step losses, the trained weights by HF name) of the single-process reference."""
    import torch
    from transformers import AutoModelForCausalLM

    from backends.data.stream import epoch_order
    from backends.parts.schedulers import lr_at
    from planner.rundir.hyperparameters import scheduler_block

    run, data = runner_data(run_dir)
    model = AutoModelForCausalLM.from_pretrained(run.model.path, dtype=torch.float32)
    optim = run.optim
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=optim.learning_rate, betas=optim.betas, eps=optim.eps, weight_decay=optim.weight_decay
    )
    block = scheduler_block(optim, optim.max_steps or steps)
    order = epoch_order(len(data.train), 0, run.data.seed, shuffle=True)
    batch = run.global_batch
    losses = []
    for step in range(steps):
        for group in optimizer.param_groups:
            group["lr"] = lr_at(block, optim.learning_rate, step + 1)
        ids = torch.stack([data.train[int(index)] for index in order[step * batch : (step + 1) * batch]])
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), optim.gradient_clipping)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses, {name: value.detach().clone() for name, value in model.state_dict().items()}


def eval_loss_of(model_dir: Path, run_dir: Path) -> float:
    """The mean token loss of a saved HF model over the run's held-out blocks, on one process."""
    import torch
    from transformers import AutoModelForCausalLM

    _, data = runner_data(run_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        losses = [
            model(input_ids=data.eval[i].unsqueeze(0), labels=data.eval[i].unsqueeze(0)).loss.item()
            for i in range(len(data.eval))
        ]
    return sum(losses) / len(losses)

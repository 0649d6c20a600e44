"""Turn a micro-batch of token blocks into the model's inputs, per training objective.

- causal-lm (decoders): the block is both input and label; the model shifts them itself.
- masked-lm (BERT, RoBERTa): BERT's recipe, 15% of the tokens chosen, 80% of them replaced by the mask
  token, 10% by a random token, 10% kept; only the chosen ones carry a label. The choice is seeded by the
  step and micro-batch, so every strategy sees the same masks.
- seq2seq-lm (T5): prefix language modelling, one of T5's objectives: the encoder reads the first half of
  the block and the decoder learns to continue with the second half.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from planner.errors import UserInputError

MASK_PROBABILITY = 0.15
IGNORE = -100


@dataclass(frozen=True)
class BatchMaker:
    task: str
    vocab_size: int
    mask_token_id: int | None = None
    seed: int = 0

    def __call__(self, blocks: Any, salt: int = 0) -> dict[str, Any]:
        if self.task == "causal-lm":
            return {"input_ids": blocks, "labels": blocks}
        if self.task == "seq2seq-lm":
            half = blocks.shape[1] // 2
            return {"input_ids": blocks[:, :half].contiguous(), "labels": blocks[:, half:].contiguous()}
        return self._masked(blocks, salt)

    def _masked(self, blocks: Any, salt: int) -> dict[str, Any]:
        import torch

        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + salt)
        chosen = torch.rand(blocks.shape, generator=generator) < MASK_PROBABILITY
        labels = blocks.masked_fill(~chosen, IGNORE)
        draw = torch.rand(blocks.shape, generator=generator)
        inputs = blocks.clone()
        inputs[chosen & (draw < 0.8)] = self.mask_token_id
        replace = chosen & (draw >= 0.8) & (draw < 0.9)
        inputs[replace] = torch.randint(0, self.vocab_size, blocks.shape, generator=generator)[replace]
        return {"input_ids": inputs, "labels": labels}


def batch_maker(task: str, *, vocab_size: int, tokenizer: Any, seed: int) -> BatchMaker:
    mask = None
    if task == "masked-lm":
        # Synthetic tokens have no tokenizer: the last id stands in for the mask token.
        mask = getattr(tokenizer, "mask_token_id", None) if tokenizer is not None else vocab_size - 1
        if mask is None:
            raise UserInputError(
                "masked-LM training needs a tokenizer with a mask token; set mask_token in its tokenizer_config.json"
            )
    return BatchMaker(task=task, vocab_size=vocab_size, mask_token_id=mask, seed=seed)

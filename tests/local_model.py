"""A user's own checkpoint and data, built locally: a small GPT-2-architecture model saved with its own tokenizer.

The tokenizer is trained with `tokenizers` on a corpus this module writes
(no hub access); the model is saved with save_pretrained (safetensors), so
the folder is exactly what a user fine-tunes. Dropout is 0 so that runs on
different strategies can be compared step by step.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

WORDS = ("the quick brown fox jumps over lazy dog model train data token gpu memory plan batch "
         "shard pipeline tensor rank step loss learning rate warmup cosine node cluster").split()
VOCAB = 320
SPECIALS = ["<|endoftext|>", "<mask>"]


def write_corpus(path: Path, paragraphs: int, *, seed: int = 0, words: tuple[int, int] = (5, 40)) -> Path:
    """Paragraphs of words with a little structure (a word tends to follow its predecessor), blank-line separated."""
    rng = random.Random(seed)
    lines = []
    for _ in range(paragraphs):
        current = rng.randrange(len(WORDS))
        text = []
        for _ in range(rng.randint(*words)):
            current = (current + rng.choice((1, 1, 1, 2, 3))) % len(WORDS)
            text.append(WORDS[current])
        lines.append(" ".join(text))
    path.write_text("\n\n".join(lines), encoding="utf-8")
    return path


def train_tokenizer(corpus: Path, folder: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE(unk_token=None))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train([str(corpus)], trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=SPECIALS,
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="<|endoftext|>", bos_token="<|endoftext|>",
                                   mask_token="<mask>")
    fast.save_pretrained(str(folder))


def make_local_gpt2(root: Path, *, layers: int = 4, hidden: int = 64, heads: int = 4) -> tuple[Path, Path]:
    """(model folder with config, safetensors and tokenizer; corpus file)."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    root.mkdir(parents=True, exist_ok=True)
    corpus = write_corpus(root / "corpus.txt", 3000)
    model_dir = root / "my-gpt2"
    train_tokenizer(corpus, model_dir)
    eos = json.loads((model_dir / "tokenizer.json").read_text())["added_tokens"][0]["id"]
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=VOCAB, n_positions=256, n_embd=hidden, n_layer=layers, n_head=heads,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=eos, eos_token_id=eos)
    GPT2LMHeadModel(config).save_pretrained(str(model_dir))
    return model_dir, corpus

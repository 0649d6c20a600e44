"""A checkpoint and a corpus to try the runner with, built here: a small GPT-2-architecture model and its tokenizer.

    python scripts/demo_checkpoint.py DIR     # DIR/my-gpt2 (config, safetensors, tokenizer) and DIR/corpus.txt

The tokenizer is trained with `tokenizers` on the corpus this script writes
(no hub access); the model is saved with save_pretrained (safetensors), so
the folder is exactly what a user fine-tunes: the README's quick start runs
on it, and the tests use the same builders (also for BERT and T5 siblings).
Dropout is 0 so that runs on different strategies compare step by step.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

WORDS = (
    "the quick brown fox jumps over lazy dog model train data token gpu memory plan batch "
    "shard pipeline tensor rank step loss learning rate warmup cosine node cluster"
).split()
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


def train_tokenizer(corpus: Path, folder: Path, *, vocab: int = VOCAB) -> None:
    """A byte-level BPE tokenizer trained on `corpus` (no hub access), saved as an HF tokenizer folder."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE(unk_token=None))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train(
        [str(corpus)],
        trainers.BpeTrainer(
            vocab_size=vocab, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        ),
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, eos_token="<|endoftext|>", bos_token="<|endoftext|>", mask_token="<mask>"
    )
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
    config = GPT2Config(
        vocab_size=VOCAB,
        n_positions=256,
        n_embd=hidden,
        n_layer=layers,
        n_head=heads,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=eos,
        eos_token_id=eos,
    )
    GPT2LMHeadModel(config).save_pretrained(str(model_dir))
    return model_dir, corpus


def make_local_opt(root: Path, *, layers: int = 2, hidden: int = 64, heads: int = 4) -> tuple[Path, Path]:
    """A small OPT (the selector examples' family) with its own tokenizer: (model folder, corpus file)."""
    import torch
    from transformers import OPTConfig, OPTForCausalLM

    root.mkdir(parents=True, exist_ok=True)
    corpus = write_corpus(root / "corpus.txt", 600)
    model_dir = root / "my-opt"
    train_tokenizer(corpus, model_dir)
    eos = json.loads((model_dir / "tokenizer.json").read_text())["added_tokens"][0]["id"]
    torch.manual_seed(0)
    config = OPTConfig(
        vocab_size=VOCAB,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        ffn_dim=4 * hidden,
        max_position_embeddings=128,
        word_embed_proj_dim=hidden,
        dropout=0.0,
        attention_dropout=0.0,
        bos_token_id=eos,
        eos_token_id=eos,
        pad_token_id=eos,
    )
    OPTForCausalLM(config).save_pretrained(str(model_dir))
    return model_dir, corpus


def make_local_encoder(root: Path, kind: str) -> Path:
    """A small BERT (masked LM) or T5 (encoder-decoder) checkpoint beside the GPT-2 one, sharing its tokenizer."""
    import shutil

    import torch
    from transformers import BertConfig, BertForMaskedLM, T5Config, T5ForConditionalGeneration

    tokenizer_dir = root / "my-gpt2"
    folder = root / f"my-{kind}"
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tokenizer_dir / name, folder / name)
    torch.manual_seed(0)
    if kind == "bert":
        config = BertConfig(
            vocab_size=VOCAB,
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=128,
            max_position_embeddings=256,
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
            pad_token_id=0,
        )
        BertForMaskedLM(config).save_pretrained(str(folder))
    else:
        config = T5Config(
            vocab_size=VOCAB,
            d_model=64,
            d_kv=16,
            d_ff=128,
            num_layers=2,
            num_heads=4,
            dropout_rate=0.0,
            pad_token_id=0,
            eos_token_id=0,
            decoder_start_token_id=0,
        )
        T5ForConditionalGeneration(config).save_pretrained(str(folder))
    return folder


def main() -> None:
    import sys

    if len(sys.argv) != 2 or sys.argv[1].startswith("-"):
        print("usage: python scripts/demo_checkpoint.py DIR", file=sys.stderr)
        raise SystemExit(2)
    model_dir, corpus = make_local_gpt2(Path(sys.argv[1]))
    print(f"wrote {model_dir} (a 4-layer GPT-2 with its tokenizer) and {corpus}")


if __name__ == "__main__":
    main()

"""Benchmark: does the data pipeline keep up with training? Tokens/s fed vs tokens/s a 124M model trains.

    python -m benchmarks.speed.data_pipeline [--corpus-mb 20] [--out benchmarks/results/data_pipeline.json]
    python -m benchmarks.speed.data_pipeline --smoke   # seconds: a small corpus, a tiny GPT-2, nothing kept

Measures, on this machine, with one process (OMP_NUM_THREADS=1, as a rank runs):
1. tokenizing: the runner's documents -> token file path (backends/data), from a generated
   corpus with a byte-level BPE tokenizer trained here (8k tokens, no hub), cold cache;
2. feeding: drawing shuffled micro-batches of blocks from the memory-mapped token file, as the
   runner's stream does every step;
3. training: forward + backward + AdamW of GPT-2 124M (the catalog config, random weights,
   fp32) at micro-batch 1 x 512 tokens, the median of a few steps.
The requirement (docs/running.md) is that both data rates are at least 10x the training rate, here and for a
7B model's step on a GPU: the JSON sets them beside Llama-2-7B's measured 7,500 tokens/s per H100 (PyTorch/IBM
blog, the row pytorch-blog-fsdp-llama2-7b-96-h100 of benchmarks/data/published_stack_runs.yaml), per GPU for
feeding (every rank draws its own micro-batches) and per node of 8 for tokenizing (once per node, cached).
`--threads N` tokenizes with the tokenizer's thread pool of N threads, as the runner does by default (all cores).
A benchmark, not a test: it measures and writes JSON; nothing asserts. --smoke runs the same three
measurements on a 0.05 MB corpus and a 2-layer GPT-2 and prints the JSON instead of writing --out.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from planner.files import write_json_atomic
from scripts.demo_checkpoint import train_tokenizer

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

SMOKE_CORPUS_MB = 0.05
GPU_7B_ROW = "pytorch-blog-fsdp-llama2-7b-96-h100"  # benchmarks/data/published_stack_runs.yaml
GPUS_PER_NODE = 8
SMOKE_MODEL = {"hidden": 64, "layers": 2, "heads": 2, "ffn": 256, "vocab_size": 50257, "positions": 128}


def write_corpus(path: Path, megabytes: float) -> None:
    import random

    rng = random.Random(0)
    syllables = [a + b for a in "bcdfghklmnprstvz" for b in "aeiou"]
    words = ["".join(rng.choice(syllables) for _ in range(rng.randint(1, 4))) for _ in range(20000)]
    with open(path, "w", encoding="utf-8") as out:
        while out.tell() < megabytes * 2**20:
            out.write(" ".join(rng.choice(words) for _ in range(rng.randint(20, 200))) + "\n\n")


def measure_tokenizing(corpus: Path, tokenizer_dir: Path, work: Path) -> dict:
    from backends.data import prepare_data
    from planner.contract.run_config import DataConfig

    began = time.perf_counter()
    data = prepare_data(
        DataConfig(train=[str(corpus)], eval_fraction=0.0),
        run_dir=work,
        model_name="bench",
        tokenizer_dir=str(tokenizer_dir),
        seq_len=512,
        vocab_size=50257,
        global_batch=8,
        local_rank=0,
        seed=0,
    )
    seconds = time.perf_counter() - began
    tokens = data.train_tokens
    return {
        "tokens": tokens,
        "seconds": seconds,
        "tokens_per_s": tokens / seconds,
        "blocks": len(data.train),
        "data": data,
    }


def measure_feeding(data, steps: int = 200) -> dict:
    from backends.data import micro_batches

    stream = micro_batches(data.train, micro_batch=8, rank=0, world=1, seed=0, global_batch=8)
    next(stream)
    began = time.perf_counter()
    for _ in range(steps):
        next(stream)
    seconds = time.perf_counter() - began
    tokens = steps * 8 * 512
    return {"tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds}


def measure_training(steps: int = 4, seq_len: int = 512, sizes: dict[str, int] | None = None) -> dict:
    """GPT-2 124M's training tokens/s, or a GPT-2 of `sizes` (tiny_config's keywords)."""
    import torch

    from backends.weights.model_factory import build_causal_lm, catalog_config, tiny_config

    torch.set_num_threads(1)
    config = catalog_config("gpt2")
    model = build_causal_lm(tiny_config(config, **sizes) if sizes else config, seed=0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, 50257, (1, seq_len))
    times = []
    for _ in range(steps + 1):
        began = time.perf_counter()
        model(input_ids=ids, labels=ids).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - began)
    median = statistics.median(times[1:])
    return {
        "params": sum(p.numel() for p in model.parameters()),
        "seq_len": seq_len,
        "median_step_s": median,
        "tokens_per_s": seq_len / median,
    }


def gpu_7b() -> dict:
    """A 7B model's training rate on a GPU, as measured and published (the row's own source)."""
    from benchmarks.accuracy.validate_published_runs import published_rows

    row = next(row for row in published_rows() if row["id"] == GPU_7B_ROW)
    per_gpu = row["published"]["tokens_per_s_per_gpu"]
    return {
        "row": GPU_7B_ROW,
        "source": row["source"],
        "gpu": row["gpu"],
        "tokens_per_s_per_gpu": per_gpu,
        "gpus_per_node": GPUS_PER_NODE,
        "tokens_per_s_per_node": per_gpu * GPUS_PER_NODE,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus-mb", type=float, default=20.0)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/data_pipeline.json"))
    parser.add_argument("--threads", type=int, default=1, help="the tokenizer's thread pool (the runner: all cores)")
    parser.add_argument("--smoke", action="store_true", help="a small corpus and a tiny model; the JSON is printed")
    args = parser.parse_args(argv)
    if args.corpus_mb <= 0:
        parser.error("--corpus-mb must be positive")
    if args.threads < 1:
        parser.error("--threads must be at least 1")
    if args.threads > 1:  # read when the tokenizer first encodes in parallel, after this
        os.environ["TOKENIZERS_PARALLELISM"] = "true"
        os.environ["RAYON_NUM_THREADS"] = str(args.threads)
    corpus_mb = SMOKE_CORPUS_MB if args.smoke else args.corpus_mb
    with tempfile.TemporaryDirectory(prefix="hs-data-bench-") as scratch:
        root = Path(scratch)
        write_corpus(root / "corpus.txt", corpus_mb)
        train_tokenizer(root / "corpus.txt", root / "tokenizer", vocab=8000)
        tokenizing = measure_tokenizing(root / "corpus.txt", root / "tokenizer", root / "run")
        feeding = measure_feeding(tokenizing.pop("data"), steps=10 if args.smoke else 200)
    training = measure_training(steps=1, seq_len=64, sizes=SMOKE_MODEL) if args.smoke else measure_training()
    gpu = gpu_7b()
    result = {
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "threads": args.threads,
        "corpus_mb": corpus_mb,
        "tokenizing": tokenizing,
        "feeding": feeding,
        "training_gpt2_124m": training,
        "tokenizing_over_training": tokenizing["tokens_per_s"] / training["tokens_per_s"],
        "feeding_over_training": feeding["tokens_per_s"] / training["tokens_per_s"],
        "gpu_7b": gpu,
        "tokenizing_over_gpu_7b_node": tokenizing["tokens_per_s"] / gpu["tokens_per_s_per_node"],
        "feeding_over_gpu_7b_gpu": feeding["tokens_per_s"] / gpu["tokens_per_s_per_gpu"],
    }
    if args.smoke:  # a tiny model's rate is no requirement to quote: the whole result is printed, not kept
        print(json.dumps(result, indent=1))
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(args.out, result, indent=1)
    print(json.dumps({key: value for key, value in result.items() if "_over_" in key}, indent=1))
    print(
        f"tokenizing {tokenizing['tokens_per_s']:,.0f} tokens/s, feeding {feeding['tokens_per_s']:,.0f} tokens/s, "
        f"training GPT-2 124M {training['tokens_per_s']:,.0f} tokens/s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

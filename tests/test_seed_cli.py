"""The replaced tool's command line still works through hardware_selector.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
SEED = [
    "--model-family",
    "text_generation",
    "--model-name",
    "llama-7b",
    "--batch-size",
    "16",
    "--mode",
    "training",
    "--distributed",
    "--gpu-count",
    "8",
    "--max-memory-gb",
    "24",
]


def _run(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "hardware_selector.py", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60
    )


def test_documented_seed_invocation_prints_the_recommendation():
    completed = _run(SEED)
    assert completed.returncode == 0, completed.stderr
    out = completed.stdout
    assert out.startswith("Recommended: ") and "on 8 x " in out
    # --batch-size is per GPU: 16 x 8 GPUs. When 16 per GPU do not fit, accumulation keeps the effective batch.
    assert "per-GPU batch" in out and "effective batch 128" in out and "memory per GPU" in out
    if "per-GPU batch 16," not in out:
        assert "note: 16 sequences per GPU do not fit" in out


def test_seed_json_matches_the_api_and_subcommands_still_work(capsys):
    from hardware_selector import main

    assert main([*SEED, "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert (
        document["effective_batch_size"] == 16 * 8 and document["plan"]["cluster"]["gpu"]["memory_bytes"] == 24 * 2**30
    )
    assert main(["models", "--search", "llama"]) == 0


def test_bad_seed_input_is_one_line_and_exit_2(capsys):
    from hardware_selector import main

    assert main([*SEED[:4], "--gpu-c", "1", "--batch-s", "1"]) == 0  # argparse's prefixes stay accepted
    capsys.readouterr()

    for args, message in (
        ([*SEED[:2], "--model-name", "llama-7b", "--gpu-count", "x"], "invalid int value"),
        (["--model-family", "text_generation"], "required"),
        # A misspelt flag was hidden behind the required one it missed: "the following arguments are required".
        (["--model-famly", "text_generation", "--model-name", "gpt2"], "unknown option --model-famly (did you mean "
                                                                       "--model-family?)"),
        ([*SEED[:4], "--gpu_count", "2"], "unknown option --gpu_count (did you mean --gpu-count?)"),
        ([*SEED[:4], "--bogus"], "unknown option --bogus; run "),
        ([*SEED[:4], "--mode", "serve"], "--mode must be training or inference"),
        ([*SEED[:4], "--gpu-count", "0"], "--gpu-count 0 needs --distributed"),  # was one GPU, silently
        ([*SEED[:4], "--distributed", "--gpu-count", "0"], "--gpu-count must be at least 1"),
        (
            [*SEED[:2], "--model-name", "llama-7b", "--batch-size", "0"],
            "--batch-size must be at least 1",
        ),
    ):  # fmt: skip
        assert main(args) == 2, args
        err = capsys.readouterr().err.strip()
        assert err.startswith("error:") and message in err and "\n" not in err, err


def test_seed_inference_mode_prints_a_serving_layout(capsys):
    from hardware_selector import main

    argv = [
        *SEED[:4],
        "--mode",
        "inference",
        "--batch-size",
        "8",
        "--distributed",
        "--gpu-count",
        "8",
        "--gpu",
        "H100-80GB",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.startswith("Recommended: ") and "time to first token" in out and "between tokens" in out


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["--model-family", "text_generation", "--model-name", "gpt2", "--batch-size", "1", "--mode", "training"], 141),
        (["plan", "-m", "gpt2", "--gpu", "cpu"], 1),  # rich's own quiet exit for a closed pipe (on_broken_pipe)
    ],
)
def test_a_reader_that_leaves_early_ends_the_cli_quietly(args, code):
    """`hardware-selector ... | head`: the pipe closes under the output; no BrokenPipeError traceback (the seed
    door exits as a tool SIGPIPE ended, 141)."""
    import os

    from tests.distributed import REPO_ROOT

    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader has already left
    try:
        completed = subprocess.run(
            [sys.executable, "hardware_selector.py", *args], stdout=write_end, stderr=subprocess.PIPE, cwd=REPO_ROOT,
            timeout=120,
        )  # fmt: skip
    finally:
        os.close(write_end)
    assert completed.returncode == code and completed.stderr.decode() == ""


def test_the_extreme_memory_example_gets_zero_infinity_once_the_node_has_nvme(capsys):
    """llama-2-70b on one 80 GB GPU: 16 bytes a parameter fit neither the GPU nor the node's host RAM, so nothing
    does until --nvme-gb (nvme_gb=) says the node has NVMe; then the answer offloads to it (ZeRO-Infinity), and
    its sources say the NVMe bandwidth is an assumed default, or the user's --nvme-gbps."""
    from hardware_selector import get_distributed_training_config, main

    extreme = ["--model-family", "text_generation", "--model-name", "llama-2-70b", "--batch-size", "1",
               "--gpu-count", "1", "--max-memory-gb", "80"]  # fmt: skip
    assert main(extreme) == 1
    out = capsys.readouterr().out
    assert out.startswith("No training setup fits 1 x ")
    # The way out is said (it was not: only 8 GPUs and a shorter --seq-len), and it fits as printed.
    (said,) = [line for line in out.splitlines() if "--nvme-gb" in line]
    assert said == "  - --nvme-gb 2048 (NVMe on each node) fits on 1 x H100-80GB: ZeRO-Infinity offloads to it"
    assert main([*extreme, "--nvme-gb", "2048"]) == 0 and capsys.readouterr().out.startswith("Recommended: ZeRO-Inf")
    assert main([*extreme, "--nvme-gb", "1024"]) == 1  # the smallest size tried that fits is the one said
    capsys.readouterr()
    answer = get_distributed_training_config(
        "text_generation", "llama-2-70b", gpu_count=1, batch_size=1, max_memory_gb=80
    )  # the Python API says it as its keyword
    assert any(line.startswith("nvme_gb=2048 (NVMe on each node) fits") for line in answer["suggestions"])
    assert main([*extreme, "--nvme-gb", "4000"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Recommended: ZeRO-Infinity (NVMe offload) (DeepSpeed)") and "an assumed default" in out

    config = get_distributed_training_config(
        "text_generation", "llama-2-70b", gpu_count=1, batch_size=1, max_memory_gb=80, nvme_gb=4000, nvme_gbps=25
    )
    assert config["deepspeed_config"]["offload_device"] == "nvme"
    assert 0 < config["estimated_memory"]["nvme_per_node_gb"] <= 4000
    assert "NVMe 25 GB/s per node (user" in config["estimated_throughput"]["sources"]["offload_s"]
    with pytest.raises(ValueError, match="^nvme_gbps is the bandwidth of the NVMe that nvme_gb gives"):
        get_distributed_training_config("text_generation", "gpt2", gpu_count=1, nvme_gbps=25)
    assert main([*extreme[:4], "--mode", "inference", "--nvme-gb", "100"]) == 2
    assert "--nvme-gb and --nvme-gbps plan training's offload" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--batch-size", "0"], "--batch-size must be at least 1, not 0"),
        (["--max-memory-gb", "nan"], "--max-memory-gb must be a finite number"),
        (["--seq-len", "0"], "--seq-len must be at least 1"),
        (["--nvme-gb", "-1"], "--nvme-gb must be at least 0"),
        (["--nvme-gbps", "5"], "--nvme-gbps is the bandwidth of the NVMe that --nvme-gb gives; add --nvme-gb"),
        (["--distributed", "--gpu-count", "0"], "--gpu-count must be at least 1"),
        (["--mode", "inference", "--seq-len", "0"], "--seq-len must be at least 1"),
        (["--mode", "inference", "--batch-size", "0"], "--batch-size must be at least 1"),
        # It said "(or pass a config.json path, or --params / the dimension flags)": `plan`'s flags, not the seed's.
        (["--model-name", "lama-7b"], "unknown model 'lama-7b'; did you mean 'llama-2-7b'"),
        (["--model-name", "gpt2", "--seq-len", "4096"], "--seq-len 4096 exceeds gpt2's 1024 learned positions; "
                                                        "pass --seq-len 1024 or less"),
    ],
)  # fmt: skip
def test_seed_errors_name_the_seed_commands_flags_not_the_apis_arguments(capsys, extra, message):
    """They said `batch_size must be at least 1` and `pass seq_len=1024`, the Python API's words; the reference
    for what the command's words are is its own parser's option strings."""
    import re

    from hardware_selector import main
    from hardware_selector_cli.seed_cli import _parser

    own = set(_parser()._option_string_actions)
    assert main(["--model-family", "text_generation", "--model-name", "llama-7b", *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and message in err and "\n" not in err, err
    assert set(re.findall(r"--[a-z][a-z-]*", err)) <= own and not re.search(r"\b[a-z]+_[a-z_]+\b", err), err


def test_what_would_fit_names_only_flags_the_seed_command_has(capsys):
    """The seed CLI's "No training setup fits" once suggested `--gpus-per-node 4 --nodes 1` and `--lora-rank`, which
    only `plan` has; every flag of its suggestions is now one of its own, and the suggested count, asked for as
    printed, fits."""
    import re

    from hardware_selector import main
    from hardware_selector_cli.seed_cli import _parser

    own = set(_parser()._option_string_actions)
    request = ["--model-family", "text_generation", "--model-name", "facebook/opt-30b", "--batch-size", "1",
               "--gpu", "V100-16GB"]  # fmt: skip
    assert main(request) == 1
    out = capsys.readouterr().out
    lines = [line.removeprefix("  - ") for line in out.splitlines()[1:]]
    assert out.startswith("No training setup fits 1 x V100-16GB") and lines, out
    flags = {flag for line in lines for flag in re.findall(r"--[a-z][a-z-]*", line)}
    assert flags and flags <= own, flags - own
    fewest = re.search(r"\((--distributed --gpu-count \d+)\) is the fewest that fits", out)
    assert fewest is not None, out
    assert main([*request, *fewest.group(1).split()]) == 0
    assert capsys.readouterr().out.startswith("Recommended: ")


def test_what_would_serve_names_only_flags_the_seed_command_has(capsys):
    """`--mode inference` once suggested `--weights int8`, `--gpus-per-node 2 --nodes 1` and `--batch`, which
    only `plan` has; its suggestions now name the seed command's own flags, and the count, asked for as printed,
    serves."""
    import re

    from hardware_selector import main
    from hardware_selector_cli.seed_cli import _parser

    own = set(_parser()._option_string_actions)
    request = ["--model-family", "text_generation", "--model-name", "llama-3-8b", "--mode", "inference",
               "--batch-size", "4", "--max-memory-gb", "16"]  # fmt: skip
    assert main(request) == 1
    out = capsys.readouterr().out
    assert out.startswith("Nothing serves this on 1 x "), out
    flags = set(re.findall(r"--[a-z][a-z-]*", out))
    assert "--batch-size" in flags and flags <= own, flags - own
    bigger = re.search(r"\((--distributed --gpu-count \d+)\) fits", out)
    assert bigger is not None, out
    assert main([*request, *bigger.group(1).split()]) == 0
    assert capsys.readouterr().out.startswith("Recommended: ")
    assert main([*request[:6], "--seq-len", "9000"]) == 2  # the seed's prompt length is --seq-len
    assert "shorten --seq-len" in capsys.readouterr().err

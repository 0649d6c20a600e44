"""Bad numbers get one line, never a traceback, a hang or a nonsense plan (docs/errors.md).

A bounded hypothesis campaign over the CLI's numeric options and the Python
API's arguments (planner/limits.py is the one place the bounds live). For
every generated input: exit 0 with a finite plan, or exit 2 with one
`error:` line naming what is wrong; the Python API returns a dict or raises
a ValueError / TypeError whose message names the argument. A guard (SIGALRM)
fails any call that does not return: the hang the issue reported
(`--global-batch 10**40`) must now be refused at once.
`HYPOTHESIS_PROFILE=long` runs a longer campaign on demand.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from hardware_selector_cli.app import main

settings.register_profile(
    "ci",
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
settings.register_profile(
    "long",
    max_examples=2000,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
PROFILE = settings.get_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
GUARD_S = 30  # far above any real call; only a hang reaches it

NASTY = st.sampled_from(
    ["nan", "inf", "-inf", "NaN", "0", "-1", "1e20", str(10**40), "1e-300", "2.5", "7", "64", "1000", "abc", ""]
)
PLAN_FLAGS = [
    "--gpus-per-node",
    "--nodes",
    "--global-batch",
    "--micro-batch",
    "--seq-len",
    "--price",
    "--cpu-ram-gb",
    "--headroom",
    "--tokens",
    "--top",
    "--nvme-gb",
    "--nvme-gbps",
]
ESTIMATE_FLAGS = [
    "--micro-batch",
    "--seq-len",
    "--grad-accum",
    "--tp",
    "--pp",
    "--overhead-gb",
    "--headroom",
    "--nodes",
    "--nvme-gb",
    "--nvme-gbps",
]
MODEL_FLAGS = ["--params", "--hidden", "--layers", "--heads", "--ffn", "--vocab"]


@contextlib.contextmanager
def guard(seconds: int = GUARD_S):
    def hung(*_):
        raise AssertionError(f"no answer within {seconds} s")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _finite(document: object) -> bool:
    if isinstance(document, float):
        return math.isfinite(document)
    if isinstance(document, dict):
        return all(_finite(value) for value in document.values())
    if isinstance(document, list):
        return all(_finite(value) for value in document)
    return True


def _check(capsys, argv: list[str]) -> None:
    with guard():
        code = main(argv)
    out, err = capsys.readouterr()
    if code == 0:
        assert _finite(json.loads(out)), argv  # a plan, and every number in it finite
    elif code == 1:  # nothing fits (--micro-batch 1000 on one GPU): an answer, not a mistake (docs/errors.md)
        nothing_fits = json.loads(out)["best"] is None if "--json" in argv else "nothing fits" in out
        assert nothing_fits, (argv, out[-2000:])
        assert "Traceback" not in err, (argv, err)
    else:
        assert code == 2, (argv, code, err[-2000:])
        assert err.startswith("error:") and err.strip().count("\n") == 0 and "Traceback" not in err, (argv, err)


@PROFILE
@given(pairs=st.lists(st.tuples(st.sampled_from(PLAN_FLAGS), NASTY), min_size=1, max_size=3))
@example(pairs=[("--micro-batch", "1000")])  # nothing fits: exit 1 with the answer (found by a run of this test)
def test_plan_numeric_options_are_planned_or_refused_in_one_line(capsys, pairs):
    argv = ["plan", "--model", "llama-2-7b", "--gpu", "A100-80GB", "--json"]
    for flag, value in pairs:
        argv += [flag, value]
    _check(capsys, argv)


@PROFILE
@given(pairs=st.lists(st.tuples(st.sampled_from(ESTIMATE_FLAGS), NASTY), min_size=1, max_size=3))
def test_estimate_numeric_options_are_estimated_or_refused_in_one_line(capsys, pairs):
    argv = ["estimate", "--model", "llama-2-7b", "--gpu", "A100-80GB", "--json"]
    for flag, value in pairs:
        argv += [flag, value]
    _check(capsys, argv)


# One flag each, beside every --strategy: what it cannot apply to must be refused, not dropped.
CONFLICT_FLAGS = [
    ("--zero-stage", "0"),
    ("--zero-stage", "2"),
    ("--zero-stage", "3"),
    ("--fsdp-sharding", "grad-op"),
    ("--fsdp-sharding", "hybrid"),
    ("--fsdp-sharding", "none"),
    ("--offload-optimizer", "cpu"),
    ("--offload-params", "cpu"),
    ("--offload-optimizer", "nvme"),
    ("--tp", "2"),
    ("--ep", "2"),
    ("--cp", "2"),
    ("--sp", None),
    ("--pp-schedule", "gpipe"),
    ("--pp-schedule", "interleaved-1f1b"),
    ("--virtual-stages", "2"),
    ("--expert-capacity", "1.5"),
    ("--expert-imbalance", "1.5"),
    ("--implementation", "megatron"),
    ("--implementation", "llm-foundry"),
    ("--implementation", "deepspeed"),
    ("--implementation", "torchtitan"),
    ("--lora-rank", "8"),
    ("--kernels", "compile"),
    ("--compression", "int8"),
    ("--compression", "onebit"),
    ("--compression", "auto"),
]
STRATEGY_NAMES = ["ddp", "fsdp", "zero0", "zero1", "zero2", "zero3", "engine"]


@PROFILE
@given(strategy=st.sampled_from(STRATEGY_NAMES), flag=st.sampled_from(CONFLICT_FLAGS))
def test_a_flag_beside_a_strategy_changes_the_estimate_or_is_refused(capsys, strategy, flag):
    """The reference is the same estimate without the flag. Taken, the flag either restates what the strategy
    runs anyway (the configuration is the same) or changes the estimate; a flag that changes the configuration
    but not one number was dropped, which is refused instead, in one line (the issue's `--strategy ddp
    --fsdp-sharding grad-op`, `--strategy engine --pp-schedule gpipe`)."""
    base = ["estimate", "--model", "mixtral-8x7b", "--gpu", "H100-80GB", "--gpus-per-node", "8", "--nodes", "2",
            "--json", "--strategy", strategy]  # fmt: skip
    name, value = flag
    with guard():
        code = main([*base, name, *([value] if value else [])])
    out, err = capsys.readouterr()
    if code != 0:
        assert code == 2 and err.startswith("error:") and err.strip().count("\n") == 0, (strategy, flag, err)
        return
    assert main(base) == 0, capsys.readouterr().err
    with_flag, without = json.loads(out), json.loads(capsys.readouterr().out)
    if with_flag["config"] == without["config"] and name != "--implementation":
        return  # restated: --zero-stage 3 beside zero3, say
    figures = ("memory", "throughput")
    assert any(with_flag[key] != without[key] for key in figures), f"{name} {value} beside {strategy} changed nothing"


@PROFILE
@given(flag=st.sampled_from(MODEL_FLAGS), value=NASTY)
def test_model_dimensions_are_planned_or_refused_in_one_line(capsys, flag, value):
    dims = {"--hidden": "1024", "--layers": "8", "--heads": "8", "--ffn": "4096", "--vocab": "32000"}
    base = (
        ["--params", value]
        if flag == "--params"
        else [part for key, val in {**dims, flag: value}.items() for part in (key, val)]
    )
    _check(capsys, ["plan", *base, "--gpu", "A100-80GB", "--json", "--top", "1"])


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--global-batch", str(10**40)], "--global-batch must be at most"),
        (["--gpus-per-node", str(10**40)], "must be at most"),
        (["--nodes", "100000000000"], "must be at most"),
        (["--seq-len", str(10**20)], "--seq-len must be at most"),
        (["--micro-batch", str(10**20)], "--micro-batch must be at most"),
        (["--price", "nan"], "--price (USD per GPU-hour) must be a finite number"),
        (["--cpu-ram-gb", "nan"], "--cpu-ram-gb (CPU RAM per node) must be a finite number"),
        (["--tokens", "inf"], "--tokens must be a finite number"),
    ],
)
def test_the_reported_hangs_and_nans_are_one_line(capsys, argv, message):
    with guard():
        assert main(["plan", "--model", "llama-2-7b", "--gpu", "A100-80GB", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err, err


CONFIG_VALUES = st.sampled_from([None, 0, -1, 1, 3, 7, 64, 4096, 10**8, 10**40, 2.5, float("nan"), "big", True, [], {}])
CONFIG_FIELDS = [
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "vocab_size",
    "num_key_value_heads",
    "max_position_embeddings",
]
LLAMA_SMALL = {
    "model_type": "llama",
    "hidden_size": 512,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 8,
    "intermediate_size": 1376,
    "vocab_size": 32000,
    "max_position_embeddings": 2048,
}


@pytest.mark.slow
@PROFILE
@given(edits=st.dictionaries(st.sampled_from(CONFIG_FIELDS), CONFIG_VALUES, min_size=1, max_size=3))
def test_config_json_contents_are_planned_or_refused_in_one_line(capsys, tmp_path_factory, edits):
    """A config.json with any value in its size fields: a plan, or one line naming the field (never a
    traceback, and never minutes building a model of 10**8 layers)."""
    folder = tmp_path_factory.mktemp("config")
    config = {**LLAMA_SMALL, **edits}
    (folder / "config.json").write_text(json.dumps(config))
    _check(capsys, ["plan", "--model", str(folder / "config.json"), "--gpu", "A100-80GB", "--json", "--top", "1"])


@pytest.mark.parametrize(
    "content, message",
    [(b"\xff\xfe\x00 not utf-8", "not UTF-8"), (b"{not json", "not valid JSON"), (b"[1, 2]", "expected a JSON object")],
)
def test_unreadable_config_files_are_one_line_naming_the_file(capsys, tmp_path, content, message):
    path = tmp_path / "config.json"
    path.write_bytes(content)
    assert main(["plan", "--model", str(path), "--gpu", "A100-80GB"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {path}") and message in err and "\n" not in err, err

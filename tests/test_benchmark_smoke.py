"""Every runnable benchmark runs: `python -m benchmarks.<kind>.<name> --smoke`, as docs/benchmarks.md says.

Nothing else runs the benchmarks, so a refactor once broke benchmarks/engine/engine_3d.py unseen. Each smoke
run takes the script's own code path on its smallest inputs, and its output must have the shape and the signs
its full run's has; the figures themselves are noise at these sizes and nothing here reads a time as a
verdict. No smoke run may touch what is committed: benchmarks/results/ and the tables of docs/accuracy.md are
the same bytes after it.
One run at a time: the torch-heavy ones are multi-rank, and the suite's other worker has the other core.
Each runs as `python -m` would run it, but in this process (its main() with the smoke arguments, the
environment, working directory and argv the subprocess had): a process of its own would import torch and
transformers again for every benchmark, seconds each; the torchrun ones still start their ranks apart, under
torchrun's own agent, forked from the suite's warm interpreter (tests/warm_launch.py, as the suite's other
multi-rank jobs start) unless launching is what the benchmark measures (COLD_LAUNCHES). What a benchmark changes
in this process (its environment, torch's threads and random state, the warning filters) is put back after it,
for the next benchmark and the worker's next test file.
"""

from __future__ import annotations

import ast
import importlib
import json
import os
import random
import re
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.distributed import REPO_ROOT, cpu_env, warm_harness_launcher

BENCHMARKS = REPO_ROOT / "benchmarks"
# What a full run writes and a smoke run must leave as it found it: the recorded results, and the doc whose
# tables compare_memory.py, published_runs_fit.py and per_stack_accuracy.py rewrite (--update-docs).
COMMITTED = [*sorted((BENCHMARKS / "results").glob("*.json")), REPO_ROOT / "docs" / "accuracy.md"]


def _committed_bytes() -> dict[str, bytes]:
    return {str(path.relative_to(REPO_ROOT)): path.read_bytes() for path in COMMITTED}


def _json(out: str) -> dict:
    """The JSON document a smoke run printed (a library may print a line before it)."""
    return json.loads(out[out.index("{") :])


def _compare_memory(out: str) -> None:
    assert "llm-foundry measured runs (MPT, FSDP, A100/H100)" in out
    assert "| config | kernel mirrored | ranks | trace GiB | estimate GiB |" in out
    within, total = (int(n) for n in re.search(r"(\d+) of (\d+) configurations within 10%", out).groups())
    assert 0 < within <= total
    _doc_table()(out)


def _memory_per_layer(out: str) -> None:
    assert "traced gpt2/fp32/sdpa/none" in out
    row = next(line for line in out.splitlines() if line.startswith("gpt2/fp32/sdpa/none "))
    traced, estimated = re.search(r"traced\s+(\d+) KiB\s+estimate\s+(\d+) KiB", row).groups()
    assert int(traced) > 0 and int(estimated) > 0
    assert "1 entries; largest error" in out


def _optimizer_step_transient(out: str) -> None:
    single = re.search(r"AdamW default \(single-tensor on CPU\): step transient = ([\d.]+) x", out)
    assert single and float(single.group(1)) > 1.0, out  # the step's temporaries: at least one parameter's bytes


def _run_memory_traces(out: str) -> None:
    row = next(line for line in out.splitlines() if line.startswith("tiny-gpt2-fp32-adamw "))
    cells = row.split()
    assert float(cells[2]) > 0  # peak GiB
    assert cells[3] in ("forward", "backward", "optimizer")
    assert cells[-2] == "sdpa-flash-equivalent"
    written = re.search(r"1 traced, 0 failed in [\d.]+ s -> (\S+)", out)
    assert written and not written.group(1).startswith(str(BENCHMARKS / "results"))


def _calibrate_throughput(out: str) -> None:
    assert "constants after 5 iterations (smoke: not a fit to keep):" in out
    fitted = re.findall(r"^\s+(\w+): float = (\S+)$", out, re.M)
    assert len(fitted) == 5 and all(float(value) > 0 for _, value in fitted)
    rows, median = re.search(r"rows: (\d+)\s+median \|error\|: ([\d.]+)%", out).groups()
    assert int(rows) > 0 and 0 <= float(median) < 100


def _doc_table(*lines: str) -> Callable[[str], None]:
    """A benchmark that writes a table into docs/accuracy.md: its lines printed, the table written into a copy."""

    def check(out: str) -> None:
        assert all(line in out for line in lines), lines
        assert "smoke: the table was written into a temporary copy of docs/accuracy.md" in out

    return check


def _megatron_deepspeed_microbatch_cost(out: str) -> None:  # the fit, then each row, fitted on or counted
    assert re.search(r"fitted on 12 sweep rows: a = 0\.\d+ .* c = [\d.]+ ms .*\n  mt-nlg-530b-280-nodes +counted", out)


def _attention_chain_traffic(out: str) -> None:
    """The trace's counts are the constants the megatron-2019 preset charges, against compute.py's two writes."""
    from planner.throughput.attention_chain import EXTRA_SCORE_WRITES
    from planner.throughput.kernel_stack import KernelStack

    document = _json(out)
    extra = document["extra_score_writes"]
    assert (extra["forward"], extra["backward"]) == EXTRA_SCORE_WRITES[KernelStack.MEGATRON_2019]
    assert document["traces"]["fused"]["forward"]["writes"] == 2  # the scores and the probabilities


def _megatron_deepspeed_attention_traffic(out: str) -> None:
    """The trace's counts are the constants the megatron-deepspeed kernel stacks charge."""
    from planner.throughput.attention_chain import EXTRA_SCORE_WRITES
    from planner.throughput.kernel_stack import KernelStack

    extra = _json(out)["extra_score_writes"]
    assert (extra["dropout"]["forward"], extra["dropout"]["backward"]) == EXTRA_SCORE_WRITES[
        KernelStack.MEGATRON_DEEPSPEED
    ]
    alibi = extra["alibi_dropout"]
    assert (alibi["forward"], alibi["backward"]) == EXTRA_SCORE_WRITES[KernelStack.MEGATRON_DEEPSPEED_ALIBI]


def _megatron_v115_attention_traffic(out: str) -> None:
    """The trace's count is the constant the megatron-v1.1.5 kernel stack charges; the masked_fill_ on a view (as
    the code has it) adds backward copies only, traced and not charged."""
    from planner.throughput.attention_chain import EXTRA_SCORE_WRITES
    from planner.throughput.kernel_stack import KernelStack

    extra = _json(out)["extra_score_writes"]
    assert (extra["v1.1.5"]["forward"], extra["v1.1.5"]["backward"]) == EXTRA_SCORE_WRITES[KernelStack.MEGATRON_V115]
    assert extra["v1.1.5_on_a_view"]["forward"] == extra["v1.1.5"]["forward"]
    assert extra["v1.1.5_on_a_view"]["backward"] > extra["v1.1.5"]["backward"]


def _transformers_attention_traffic(out: str) -> None:
    """The trace of transformers' own eager_attention_forward (under autocast, in pure bf16, in fp32) gives the counts
    the hf-eager kernel stack charges: GPT-2's chain for families without the fp32 softmax, Llama's for those with it."""
    from planner.throughput.attention_chain import HF_EAGER_SCORE_WRITES, SOFTCAP_SCORE_WRITES

    document = _json(out)
    extra = {name: (counts["forward"], counts["backward"]) for name, counts in document["extra_score_writes"].items()}
    chains = {
        (False, True): "gpt2",
        (False, False): "gpt2_no_dropout",
        (True, False): "llama",
        (True, True): "llama_dropout",
    }
    for (precision, softmax_fp32, dropout), charged in HF_EAGER_SCORE_WRITES.items():
        name = chains[softmax_fp32, dropout] + ("" if precision == "autocast" else f"@{precision}")
        assert extra[name] == charged, name
    assert extra["llama"] == extra["gpt2_no_dropout"] == (5, 5)  # autocast: the promoting mask makes them alike
    for suffix in ("", "@bf16", "@fp32"):  # Gemma-2's soft-capping: its chain less Llama's
        gemma2, llama = extra["gemma2" + suffix], extra["llama" + suffix]
        assert (gemma2[0] - llama[0], gemma2[1] - llama[1]) == SOFTCAP_SCORE_WRITES, suffix
    assert document["traces"]["fused"]["forward"]["values_written"] == 2  # the scores and the probabilities
    assert document["traces"]["fused@fp32"]["forward"]["values_written"] == 2
    assert document["traces"]["llama"]["forward"]["written_32bit"] == 2  # the promoted add and the fp32 softmax


def _transformers_activation_traffic(out: str) -> None:
    """The trace of transformers' own MLP activations (under CUDA autocast's pow policy, in pure bf16, in fp32) gives the
    bytes the hf-eager kernel stack charges, activation by activation; the one-kernel ones add nothing."""
    from planner.throughput.kernel_stack import ACTIVATION_EXTRA_BYTES

    extra = {
        name: (counts["forward"], counts["backward"]) for name, counts in _json(out)["extra_bytes_per_element"].items()
    }
    for (activation, precision), charged in ACTIVATION_EXTRA_BYTES.items():
        name = activation + ("" if precision == "autocast" else f"@{precision}")
        assert extra[name] == charged, name
    traced = {name.split("@")[0] for name in extra}
    charged_names = {activation for activation, _ in ACTIVATION_EXTRA_BYTES}
    for name in traced - charged_names:  # gelu, gelu_pytorch_tanh, silu, relu: one kernel each way, as the reference
        assert extra[name] == (0, 0), name
    assert extra["gelu_new"][0] > extra["gelu_new@bf16"][0]  # autocast's fp32 pow


def _validate_published_runs(out: str) -> None:
    summaries = re.findall(r"^(\d+) rows in the statistics: median \|error\| ([\d.]+)%", out, re.M)
    assert len(summaries) == 2 and summaries[0] == summaries[1]  # the plain table and the markdown one
    assert int(summaries[0][0]) > 0
    assert "| run | GPU | GPUs | layout |" in out


def _serving_cpu(out: str) -> None:
    document = _json(out)
    assert document["bandwidth_GBps"] > 0 and document["bf16_TFLOPs"] > 0
    assert [(row["batch"], row["context"]) for row in document["rows"]] == [(1, 16), (2, 32)]
    assert all(row["measured_ms"] > 0 and row["predicted_ms"] > 0 for row in document["rows"])


def _serving_published(out: str) -> None:
    assert "| output tokens/s | 31 |" in out and "saturated (queueing)" in out


def _measure_cpu(out: str) -> None:
    document = _json(out)
    assert document["script"] == "benchmarks/accuracy/measure_cpu.py --smoke"
    assert all(value > 0 for value in document["fp32_matmul_tflops"].values())
    assert all(value > 0 for value in document["copy_bandwidth_GBps"].values())
    gloo = document["gloo_2_ranks"]
    assert gloo["allreduce_bus_bandwidth_GBps"] > 0 and gloo["allreduce_latency_us"] > 0


def _memory_speed(out: str) -> None:
    lines = [line for line in out.splitlines() if " 100 calls: " in line]
    assert [line.split(" 100 calls")[0].strip() for line in lines] == [
        "estimate_memory_bytes, distinct",
        "estimate_memory_bytes, repeated",
        "estimate_memory (typed), distinct",
    ]
    assert all(float(re.search(r"\(\s*([\d.]+) us/call\)", line).group(1)) > 0 for line in lines)


def _planner_speed(out: str) -> None:
    document = _json(out)
    (search,) = document["searches"]
    assert search["scenario"].startswith("gpt2-xl, 8 x V100-32GB")
    assert search["candidates"] > 0 and search["memory_calls"] > 0 and search["best_ms"] > 0
    assert document["cli"]["best_s"] > 0 and document["cli"]["heavy_imports"] == []
    assert document["help"]["best_s"] > 0 and document["help"]["heavy_imports"] == []


def _throughput_speed(out: str) -> None:
    for label in ("cold stage cache", "warm stage cache"):
        each = re.search(rf"^90 estimates, {label}: ([\d.]+) µs each$", out, re.M)
        assert each and float(each.group(1)) > 0, label


def _data_pipeline(out: str) -> None:
    document = _json(out)
    assert document["corpus_mb"] == 0.05
    assert document["tokenizing"]["tokens"] > 0 and document["tokenizing"]["blocks"] > 0
    assert document["feeding"]["tokens_per_s"] > 0
    assert document["training_gpt2_124m"]["params"] > 0 and document["training_gpt2_124m"]["tokens_per_s"] > 0


def _engine_3d(out: str) -> None:
    document = _json(out)
    assert document["model"]["layers"] == 2
    rows = document["results"]
    assert [row["layout"] for row in rows] == ["dp2 tp1 pp1", "dp1 tp2 pp1", "dp1 tp1 pp2"]
    for row in rows:
        assert row["step_s"] > 0 and len(row["peak_rss_mib"]) == 2
        # The planner's parameters per rank: exact for dp, within the few replicated norms and biases otherwise.
        assert abs(row["measured_over_predicted"] - 1) < 0.1, row


def _engine_vs_peers(out: str) -> None:
    document = _json(out)
    (result,) = document["results"]
    assert (result["engine"], result["stage"], result["steps"], result["seq_len"]) == ("ours", 1, 1, 32)
    assert result["step_time_s"] > 0 and result["peak_rss_bytes"] > 0
    assert document["setup"]["model"].startswith("gpt2, shrunken")


def _rss_phases(out: str) -> None:
    document = _json(out)
    assert document["rank"] == 0 and document["units"] >= 1 and document["peak_after_warmup"] > 0
    phases = [row["phase"] for row in document["rows"] if row["step"] == 1]
    assert phases[0] == "start" and phases[-1] == "gathered" and "optimizer" in phases, phases
    assert all(row["hwm"] > 0 and row["rss"] > 0 and row["minor_faults"] > 0 for row in document["rows"])


def _tune_overhead(out: str) -> None:
    document = _json(out)
    for mode in ("one_launch", "a_launch_per_trial"):
        (trial,) = document[mode]
        assert trial["status"] == "ok" and trial["timed_steps"] >= 2
        assert trial["measured_window_s"] > 0 and trial["overhead_s"] > 0 and 0 < trial["overhead_share"] < 1


def _wire_bytes(out: str) -> None:
    # The bytes are exact, not noise: the planner's bytes per parameter (4, 2, and planner/gradient_compression.py's
    # int8 and onebit wire bytes) against the tensors the engine hands its collectives, within the padding of the
    # compressed chunks to whole blocks of 128.
    rows = [line.split("|")[1:-1] for line in out.splitlines() if re.match(r"\| [01] \| \w+ \|", line)]
    widths = {(int(row[0]), row[1].strip()): (float(row[2]), float(row[4])) for row in rows}
    assert sorted(widths) == [(0, "none"), (0, "onebit"), (1, "bf16"), (1, "fp16"), (1, "int8"), (1, "none")]
    assert widths[(1, "none")][0] == widths[(0, "none")][0] == 4 and widths[(1, "bf16")][0] == 2
    assert widths[(1, "int8")][0] == pytest.approx(1 + 4 / 128, rel=2e-3)
    assert widths[(0, "onebit")][0] == pytest.approx(1 / 8 + 4 / 128, rel=2e-3)
    assert all(abs(ratio - 1) < 2e-3 for _, ratio in widths.values()), widths


# module -> (arguments after --smoke, what its output must show)
SMOKES: dict[str, tuple[list[str], Callable[[str], None]]] = {
    "benchmarks.memory.compare_memory": ([], _compare_memory),
    "benchmarks.memory.memory_per_layer": ([], _memory_per_layer),
    "benchmarks.memory.run_memory_traces": ([], _run_memory_traces),
    "benchmarks.memory.optimizer_step_transient": ([], _optimizer_step_transient),
    "benchmarks.memory.published_runs_fit": ([], _doc_table("| stack | published runs |", "over their GPUs' memory")),
    "benchmarks.accuracy.calibrate_throughput": ([], _calibrate_throughput),
    "benchmarks.accuracy.per_stack_accuracy": ([], _doc_table("| what of ours runs it |", "| torch FSDP (full")),
    "benchmarks.accuracy.attention_chain_traffic": ([], _attention_chain_traffic),
    "benchmarks.accuracy.megatron_deepspeed_attention_traffic": ([], _megatron_deepspeed_attention_traffic),
    "benchmarks.accuracy.megatron_v115_attention_traffic": ([], _megatron_v115_attention_traffic),
    "benchmarks.accuracy.megatron_deepspeed_microbatch_cost": ([], _megatron_deepspeed_microbatch_cost),
    "benchmarks.accuracy.transformers_attention_traffic": ([], _transformers_attention_traffic),
    "benchmarks.accuracy.transformers_activation_traffic": ([], _transformers_activation_traffic),
    "benchmarks.accuracy.validate_published_runs": ([], _validate_published_runs),
    "benchmarks.accuracy.serving_cpu": (["--json"], _serving_cpu),
    "benchmarks.accuracy.serving_published": ([], _serving_published),
    "benchmarks.accuracy.measure_cpu": ([], _measure_cpu),
    "benchmarks.speed.memory_speed": ([], _memory_speed),
    "benchmarks.speed.planner_speed": ([], _planner_speed),
    "benchmarks.speed.throughput_speed": ([], _throughput_speed),
    "benchmarks.speed.data_pipeline": ([], _data_pipeline),
    "benchmarks.speed.tune_overhead": ([], _tune_overhead),
    "benchmarks.engine.engine_3d": (["--json"], _engine_3d),
    "benchmarks.engine.engine_vs_peers": (["--json"], _engine_vs_peers),
    "benchmarks.engine.rss_phases": ([], _rss_phases),
    "benchmarks.engine.wire_bytes": ([], _wire_bytes),
}
# Those that start torch in more than one process, or build a transformers model: seconds each, not tenths.
SLOW = {
    "benchmarks.memory.memory_per_layer",
    "benchmarks.memory.run_memory_traces",
    "benchmarks.accuracy.serving_cpu",
    "benchmarks.accuracy.measure_cpu",
    "benchmarks.speed.data_pipeline",
    "benchmarks.speed.tune_overhead",
    "benchmarks.engine.engine_3d",
    "benchmarks.engine.engine_vs_peers",
    "benchmarks.engine.rss_phases",
    "benchmarks.engine.wire_bytes",
}

# Those whose figures are their launches' start-up: their torchrun jobs start cold, as a user's would.
COLD_LAUNCHES = {"benchmarks.speed.tune_overhead"}


@pytest.mark.parametrize(
    "module",
    [pytest.param(module, marks=[pytest.mark.slow] if module in SLOW else []) for module in SMOKES],
    ids=[module.removeprefix("benchmarks.") for module in SMOKES],
)
def test_benchmark_runs_in_smoke_mode(module, capfd, monkeypatch):
    extra, check = SMOKES[module]
    before = _committed_bytes()
    code = _run_in_process(module, ["--smoke", *extra], monkeypatch)
    out, err = capfd.readouterr()
    assert code == 0, f"{module} --smoke exited {code}:\n{err[-6000:]}"
    check(out)
    changed = sorted(name for name, data in _committed_bytes().items() if before.get(name) != data)
    assert not changed, f"{module} --smoke changed committed files: {changed}"


def _run_in_process(module: str, args: list[str], monkeypatch: pytest.MonkeyPatch) -> int:
    """`python -m MODULE ARGS` as MODULE.main(ARGS) here, in the subprocess's environment (cpu_env), working
    directory and argv; its exit code. Everything it prints goes to the test's captured descriptors, its
    children's output too."""
    import torch  # before the environment changes: this process's threads stay its own

    for name, value in cpu_env().items():
        monkeypatch.setenv(name, value)
    if module not in COLD_LAUNCHES:
        from benchmarks.harness import processes

        monkeypatch.setattr(processes, "_run_launcher", warm_harness_launcher(processes._run_launcher))
    monkeypatch.chdir(REPO_ROOT)
    monkeypatch.setattr(sys, "argv", [module, *args])
    environment, threads, state = dict(os.environ), torch.get_num_threads(), random.getstate()
    try:
        with warnings.catch_warnings(), torch.random.fork_rng(devices=[]):
            try:
                return importlib.import_module(module).main(args)
            except SystemExit as stop:  # argparse's errors, and a main that exits instead of returning
                if isinstance(stop.code, str):
                    print(stop.code, file=sys.stderr)  # as the interpreter prints it
                return stop.code if isinstance(stop.code, int) else 0 if stop.code is None else 1
    finally:  # a module's import sets defaults in os.environ; a benchmark sets torch's threads
        os.environ.clear()
        os.environ.update(environment)
        torch.set_num_threads(threads)
        random.setstate(state)


def _runnable(path: Path) -> bool:
    """A file with an `if __name__ == "__main__":` block."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return any(
        isinstance(node, ast.If)
        and isinstance(node.test, ast.Compare)
        and isinstance(node.test.left, ast.Name)
        and node.test.left.id == "__name__"
        for node in tree.body
    )


def test_every_runnable_benchmark_has_a_smoke_run():
    """A new benchmark cannot land without a smoke run here: every file under benchmarks/ with a __main__
    block (they live in benchmarks/<kind>/) is in SMOKES, and SMOKES names no script that is gone."""
    runnable = {
        ".".join(path.relative_to(REPO_ROOT).with_suffix("").parts)
        for path in BENCHMARKS.rglob("*.py")
        if _runnable(path)
    }
    assert "benchmarks.engine.engine_3d" in runnable  # the walk found the scripts
    assert sorted(runnable - set(SMOKES)) == [], "benchmarks without a smoke run: add them to SMOKES"
    assert sorted(set(SMOKES) - runnable) == [], "SMOKES names modules that are not runnable benchmarks"

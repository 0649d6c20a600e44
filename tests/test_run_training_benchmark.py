"""run-training-benchmark: the documented invocations, bad input, and --run's recording and resuming."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

import run_training_benchmark
from benchmarks.harness.jobs import MeasureResult
from benchmarks.harness.launch import backends_run_launch
from benchmarks.harness.matrix import generate_matrix
from benchmarks.harness.processes import LaunchOutcome
from benchmarks.harness.runner import run_matrix
from benchmarks.harness.trials import TrialRun
from benchmarks_db.environment import current_environment
from benchmarks_db.store import BenchmarkStore
from planner.models.catalog import find_model


def test_list_models(capsys):
    assert run_training_benchmark.main(["--list-models"]) == 0
    names = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert {"bert-base-uncased", "t5-small", "gpt2", "llama-2-70b"} <= set(names)


def test_bert_matrix_is_written_atomically_with_predictions(tmp_path, capsys):
    out = tmp_path / "bert_benchmark.json"
    argv = ["--model", "bert-base-uncased", "--distributed", "--max-gpus", "4", "--output", str(out)]
    assert run_training_benchmark.main(argv) == 0
    (matrix,) = json.loads(out.read_text())["matrices"]
    assert matrix["gpu"] == "A100-80GB" and "no cuda GPU here" in matrix["gpu_note"]
    assert "no cuda GPU here: targeting A100-80GB" in " ".join(capsys.readouterr().err.split())
    assert {entry["world_size"] for entry in matrix["entries"]} == {1, 2, 4}
    strategies = {entry["strategy"] for entry in matrix["entries"]}
    assert strategies == {"ddp", "fsdp-full", "fsdp-grad-op", "zero1", "zero2", "zero3"}
    for entry in matrix["entries"]:
        assert entry["predicted"]["step_time_s"] > 0 and entry["predicted_memory_bytes"] < 80 * 2**30
    # 1 GPU: only DDP, with a reason for every sharded strategy left out
    assert all(entry["strategy"] == "ddp" for entry in matrix["entries"] if entry["world_size"] == 1)
    assert sum("sharding needs 2 or more GPUs" in p["reason"] for p in matrix["pruned"]) == 5 * 4 * 2
    assert not list(tmp_path.glob(".bert_benchmark.json.*"))  # no temp file left behind
    umask = int(subprocess.check_output(["sh", "-c", "umask"], text=True).strip(), 8)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask  # an ordinary file (0644 under umask 022), not mkstemp's 0600


def test_output_into_a_place_that_cannot_hold_it_is_one_line(tmp_path, capsys):
    (tmp_path / "file").write_text("not a folder")
    out = tmp_path / "file" / "matrix.json"
    assert run_training_benchmark.main(["--model", "gpt2", "--output", str(out)]) == 2
    error = capsys.readouterr().err.strip()  # one line: checked before the matrix is described
    assert error.startswith(f"error: cannot write {out}: {tmp_path / 'file'} is a file, not a folder"), error
    assert "\n" not in error


def test_t5_matrix_for_cuda_and_rocm_goes_to_stdout(capsys):
    argv = ["--model", "t5-small", "--hardware", "cuda", "rocm", "--distributed", "--max-gpus", "8"]
    assert run_training_benchmark.main(argv) == 0
    document = json.loads(capsys.readouterr().out)
    assert [m["gpu"] for m in document["matrices"]] == ["A100-80GB", "MI300X"]
    assert {e["world_size"] for e in document["matrices"][1]["entries"]} == {1, 2, 4, 8}


def test_memory_pruning_follows_the_planner():
    """Llama-2-70B cannot train on one or two 80 GiB GPUs with any strategy; ZeRO-3 on 8 can (ZeRO paper's 16 bytes/param
    = 1.1 TB over 8 GPUs is 140 GB each: too much; with 8 GPUs only... so the planner must prune it too)."""
    spec = find_model("llama-2-70b")
    matrix = generate_matrix(
        spec,
        hardware="cuda",
        gpu="A100-80GB",
        gpu_note="test",
        gpu_counts=[1, 2, 64],
        gpus_per_node=8,
        strategies=["ddp", "zero3"],
        micro_batches=[1],
        checkpointing=["full"],
        seq_len=1024,
        precision="bf16-mixed",
    )
    kept = {(e.strategy, e.world_size) for e in matrix.entries}
    assert kept == {("zero3", 64)}  # 16 bytes/param x 69e9 / 64 = 17 GB per GPU fits; nothing smaller does
    assert any("GiB per GPU" in p.reason and "x2" in p.label for p in matrix.pruned)


def test_engine_layouts_are_checked_by_the_planner():
    matrix = generate_matrix(
        find_model("gpt2"),
        hardware="cpu",
        gpu="cpu",
        gpu_note="test",
        gpu_counts=[1, 2, 4],
        gpus_per_node=4,
        strategies=["engine-tp2", "engine-pp2"],
        micro_batches=[1],
        checkpointing=["none"],
        seq_len=128,
        precision="fp32",
    )
    assert {(e.strategy, e.world_size) for e in matrix.entries} == {
        (family, world) for family in ("engine-tp2-pp1", "engine-tp1-pp2") for world in (2, 4)
    }
    assert {p.reason for p in matrix.pruned} == {
        "--tp 2 x --pp 1 = 2 does not divide the 1 GPUs",
        "--tp 1 x --pp 2 = 2 does not divide the 1 GPUs",
    }


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--model", "no-such-model"], "unknown model 'no-such-model'"),
        (["--model", "gpt2", "--hardware", "tpu"], "argument --hardware: invalid choice"),
        (["--model", "gpt2", "--strategies", "magic"], "unknown strategy 'magic'"),
        (
            ["--model", "gpt2", "--hardware", "cuda", "--run"],
            "--run measures this machine, which has no A100-80GB (cuda)",
        ),
        ([], "--model is required"),
        (["--model", "gpt2", "--steps", "0"], "argument --steps: 0 is outside 1.."),
        (["--model", "gpt2", "--seq-len", "0"], "argument --seq-len: 0 is outside 1.."),
        (["--model", "gpt2", "--warmup", "-1"], "argument --warmup: -1 is outside 0.."),
        (["--model", "gpt2", "--timeout", "nan"], "argument --timeout: nan is not a positive number of seconds"),
        (["--model", "gpt2", "--timeout", "-5"], "argument --timeout: -5 is not a positive number of seconds"),
        (["--model", "gpt2", "--max-gpus", "0"], "argument --max-gpus: 0 is outside 1.."),
        (["--model", "gpt2", "--micro-batches", "100000000"], "argument --micro-batches: 100000000 is outside 1.."),
        (["--model", "gpt2", "--micro-batches", "-1"], "argument --micro-batches: -1 is outside 1.."),
        (["--model", "gpt2", "--precision", "bogus"], "argument --precision: invalid choice: 'bogus'"),
        (["--model", "gpt2", "--gpus-per-node", "0"], "argument --gpus-per-node: 0 is outside 1.."),
        # a timeout past a week overflowed the runner's poll into a traceback
        (["--model", "gpt2", "--timeout", "1e20"], "argument --timeout: 1e20 seconds is more than a week"),
        # flags that could not apply were dropped without a word
        (["--model", "gpt2", "--steps", "3"], "--steps applies to measuring the matrix; add --run, or drop it"),
        (["--model", "gpt2", "--retry-failed", "--db", "x.duckdb"], "--retry-failed, --db apply to measuring"),
        (["--model", "gpt2", "--max-gpus", "4"], "--max-gpus shape the GPU counts of --distributed; add it"),
        (["--model", "gpt2", "--hardware", "cpu", "--distributed", "--gpus-per-node", "2"], "cpu ranks are processes"),
        # --gpu beside --hardware cpu was dropped, the matrix measured the CPU (an audit)
        (
            ["--model", "gpt2", "--hardware", "cpu", "--gpu", "A100-80GB"],
            "--gpu A100-80GB names a GPU, and --hardware cpu",
        ),
        (["--model", "gpt2", "--hardware", "cuda", "--gpu", "cpu"], "--gpu cpu is no GPU; pass --hardware cpu"),
        (["--model", "gpt2", "--hardware", "cpu", "--gpu", " "], "--gpu is empty; give it a value, or leave it out"),
        # a path written after the matrix was described: checked before it (stderr held two lines of it first)
        (["--model", "gpt2", "--output", ""], "cannot write .: it is a folder"),
        (["--model", "gpt2", "--output", "  "], "cannot write '  ': it names no file"),
        (["--model", "gpt2", "--hardware", "cpu", "--run", "--db", "/"], "--db / is a folder"),
        (["--model", "gpt2", "--hardware", "cpu", "--run", "--db", "/proc/self/status"], "is not a DuckDB database"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv, message, capsys):
    try:
        code = run_training_benchmark.main(argv)
    except SystemExit as exit_:  # argparse's own errors
        code = exit_.code
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err


def tiny_matrix(micro_batches, gpu_counts=(2,), strategies=("ddp",)):
    """Tiny GPT-2 on the `cpu` pseudo-GPU, at 32 tokens (what `backends.run --tiny` trains)."""
    spec = run_training_benchmark.model_spec("gpt2", tiny=True)
    return generate_matrix(
        spec,
        hardware="cpu",
        gpu="cpu",
        gpu_note="test",
        gpu_counts=list(gpu_counts),
        gpus_per_node=max(gpu_counts),
        strategies=list(strategies),
        micro_batches=micro_batches,
        checkpointing=["none"],
        seq_len=32,
        precision="fp32",
        tiny=True,
    )


def test_failures_are_recorded_and_an_interrupted_matrix_resumes(tmp_path):
    matrix = tiny_matrix([1, 2, 4])
    ok_key, oom_key, slow_key = (entry.key for entry in matrix.entries)
    calls: list[list[str]] = []

    def outcome(key: str, nproc: int) -> LaunchOutcome:
        if key == ok_key:
            result = MeasureResult(
                key=key, world_size=nproc, step_times_s=[0.2, 0.1, 0.3], peak_memory_per_rank_bytes=[10, 20]
            )
            return LaunchOutcome(returncode=0, results={key: result})
        if key == oom_key:
            return LaunchOutcome(returncode=1, stderr_tail="Traceback...\ntorch.OutOfMemoryError: CUDA out of memory.")
        return LaunchOutcome(returncode=None)  # killed at the timeout

    def fake_launch(jobs, nproc, timeout_s, **_):  # a stand-in launcher only returns each job's run
        calls.append([job.key for job in jobs])
        return [TrialRun(key=job.key, outcome=outcome(job.key, nproc), launches=1) for job in jobs]

    store = BenchmarkStore(tmp_path / "db.duckdb")
    summary = run_matrix(matrix, store, current_environment(), launcher=fake_launch, timeout_s=5)
    assert summary.recorded == {"ok": 1, "oom": 1, "timeout": 1}
    assert calls == [[ok_key, oom_key, slow_key]] and summary.launches == 1
    by_key = {record.matrix_key: record for record in store.runs()}
    ok = by_key[ok_key]
    assert ok.step_time_median_s == 0.2 and ok.step_time_spread_s == pytest.approx(0.2)  # quartiles of 3 points
    assert ok.tokens_per_s == pytest.approx(2 * 32 / 0.2) and ok.peak_memory_per_rank_bytes == [10, 20]
    assert ok.predicted_step_time_s == matrix.entries[0].predicted.step_time_s
    assert "CUDA out of memory" in by_key[oom_key].error and "5 s timeout" in by_key[slow_key].error

    calls.clear()
    again = run_matrix(matrix, store, current_environment(), launcher=fake_launch)
    assert calls == [] and again.skipped_done == 3
    retried = run_matrix(matrix, store, current_environment(), launcher=fake_launch, retry_failed=True)
    assert calls == [[oom_key, slow_key]] and retried.skipped_done == 1  # one world size: one launcher call


@pytest.mark.slow
def test_a_job_past_its_timeout_is_killed(tmp_path, monkeypatch):
    matrix = tiny_matrix([1])
    from benchmarks.harness.jobs import MeasureJob

    # The ranks inherit this mark: another test's runs (make test runs two at once) are not this job's.
    mark = f"timeout-test-{os.getpid()}"
    monkeypatch.setenv("HARDWARE_SELECTOR_TEST_MARK", mark)
    job = MeasureJob(key="slow", model="gpt2", tiny=True, config=matrix.entries[0].config, steps=100000)
    (run,) = backends_run_launch([job], nproc=1, timeout_s=8)
    assert run.outcome.returncode is None and run.outcome.results == {}
    assert _measuring_processes(mark) == set()  # the rank (in a session of its own) died with torchrun


def _measuring_processes(mark: str) -> set[int]:
    import psutil

    found = set()
    for process in psutil.process_iter(["pid", "cmdline"]):
        if "backends.run" not in " ".join(process.info["cmdline"] or []):
            continue
        try:
            if process.environ().get("HARDWARE_SELECTOR_TEST_MARK") == mark:
                found.add(process.info["pid"])
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


@pytest.mark.slow
def test_run_measures_through_backends_run_records_and_skips_on_rerun(tmp_path, capsys):
    db = tmp_path / "bench.duckdb"
    argv = [
        "--model",
        "gpt2",
        "--tiny",
        "--hardware",
        "cpu",
        "--distributed",
        "--max-gpus",
        "2",
        "--strategies",
        "fsdp",
        "--micro-batches",
        "2",
        "--checkpointing",
        "full",
        "--steps",
        "2",
        "--warmup",
        "1",
        "--run",
        "--db",
        str(db),
    ]
    assert run_training_benchmark.main(argv) == 0, capsys.readouterr().err
    assert "recorded 1 ok" in capsys.readouterr().err
    (record,) = BenchmarkStore(db).runs()
    assert (record.strategy, record.gpu_name, record.gpu_count, record.status.value) == ("fsdp-full", "cpu", 2, "ok")
    assert record.config.activation_checkpointing.value == "full" and record.steps_measured == 2
    assert record.seq_len == 32 and record.tokens_per_s == pytest.approx(2 * 2 * 32 / record.step_time_median_s)
    assert min(record.peak_memory_per_rank_bytes) > 50 * 2**20  # rank 0's RSS: torch alone is more
    assert record.torch_version and record.host == "" and record.runner == "backends.run"  # no host names kept
    assert run_training_benchmark.main(argv) == 0
    assert "1 configs, 1 already in" in capsys.readouterr().err and BenchmarkStore(db).count() == 1


def test_a_crash_is_recorded_with_the_ranks_exception_not_torchruns_summary():
    from benchmarks.harness.runner import classify_failure

    stderr = (
        'Traceback (most recent call last):\n  File "run.py", line 1\n'
        "[rank0]: ValueError: pipeline needs 2 stages\n"
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n"
        "traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html\n"
    )
    status, error = classify_failure(LaunchOutcome(returncode=1, stderr_tail=stderr), 5)
    assert (status.value, error) == ("error", "exit code 1: [rank0]: ValueError: pipeline needs 2 stages")
    status, error = classify_failure(LaunchOutcome(returncode=1, stderr_tail="Signal 9 (SIGKILL) received by PID 7"), 5)
    assert status.value == "oom" and "OOM killer" in error
    # The runner's own one-line error wins over torchrun's summary, whose link names "errors.html".
    one_line = "error: stage_split [0, 1, 0] must list 14 layer counts\n" + stderr.split("\n", 3)[3]
    status, error = classify_failure(LaunchOutcome(returncode=1, stderr_tail=one_line), 5)
    assert error == "exit code 1: error: stage_split [0, 1, 0] must list 14 layer counts"


def test_an_out_of_memory_trial_keeps_the_runners_reason_however_long_the_output_after_it():
    """Found by a new user's audit (2026-11-30): a trial over --memory-limit-gb was recorded as "oom (traceback :
    To enable traceback see: ...errors.html)": the runner's line came more than the 4,000 kept characters before the
    end of torchrun's output, and the memory guard's exception (MemoryLimitExceeded) was no "...Error" line."""
    from benchmarks.harness.runner import classify_failure
    from benchmarks.harness.trials import TAIL_CHARS, failure_output

    reason = "error: rank 0 failed: out of memory: rank 0 peaked at 0.504 GB resident, over --memory-limit-gb 0.1"
    summary = "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n" + "x" * TAIL_CHARS + "\n"
    summary += "traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html\n"
    stderr = "W1130 starting\n" + reason + "\n" + summary
    assert reason not in stderr[-TAIL_CHARS:]  # what the record kept before
    status, error = classify_failure(LaunchOutcome(returncode=1, stderr_tail=failure_output(stderr)), 5)
    assert (status.value, error) == ("oom", reason)
    assert failure_output("short\n" + reason) == "short\n" + reason  # a short output is kept as it is
    guard = "[rank0]: backends.monitoring.peak_memory.MemoryLimitExceeded: rank 0 peaked at 0.5 GB\n" + summary[-200:]
    status, error = classify_failure(LaunchOutcome(returncode=1, stderr_tail=guard), 5)
    assert status.value == "oom" and "MemoryLimitExceeded: rank 0 peaked" in error


def test_a_measurement_faster_than_the_catalog_peak_is_recorded_without_its_rate():
    """A new user's audit: on a core faster than the catalog's cpu entry the measured MFU passed 1, RunRecord refused
    it, and the matrix crashed recording nothing. As a `train` run's record does (benchmarks_db/record.py,
    measured_rates), the step time is stored and the rate is not; below the peak both are."""
    from benchmarks.harness.runner import build_record
    from benchmarks_db.record import RunStatus

    matrix = tiny_matrix([2]).model_copy(update={"tiny": False})  # a full model's FLOPs give a rate
    entry = matrix.entries[0]
    predicted = entry.predicted
    assert predicted is not None and predicted.mfu > 0

    def record_at(mfu: float):
        step = predicted.step_time_s * predicted.mfu / mfu
        result = MeasureResult(key=entry.key, world_size=2, step_times_s=[step] * 3)
        return build_record(entry, matrix, current_environment(), RunStatus.OK, result, None)

    fast = record_at(2.0)
    assert fast.mfu is None and fast.tflops_per_gpu is None and fast.step_time_median_s is not None
    slow = record_at(0.5)
    assert slow.mfu == pytest.approx(0.5) and slow.tflops_per_gpu == pytest.approx(
        predicted.tflops_per_gpu * 0.5 / predicted.mfu
    )

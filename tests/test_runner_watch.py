"""What a user watches during and after a run: metrics.jsonl rows, progress, TensorBoard, the summary, --record.

One single-process run of a local checkpoint on its own text provides the
files; the progress display is checked on a terminal (a rich bar with ETA)
and on a pipe (plain lines).
"""

from __future__ import annotations

import io
import json

import pytest

from backends.runner.progress import Progress
from planner.contract.run_config import DataConfig
from planner.evaluate import evaluate
from planner.rundir.write import RunOptions, emit_run_folder
from scripts.demo_checkpoint import make_local_gpt2
from tests.distributed import REPO_ROOT, cpu_env
from tests.emit_plans import make_plan
from tests.warm_process import run_python

TRAIN_KEYS = {
    "step",
    "loss",
    "lr",
    "grad_norm",
    "tokens_per_s",
    "peak_memory_bytes",
    "data_s",
    "forward_backward_s",
    "optimizer_s",
    "step_s",
}


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_is_a_bar_with_eta_on_a_terminal_and_plain_lines_on_a_pipe():
    pipe = io.StringIO()
    plain = Progress(enabled=True, total=20, start=0, every=10, stream=pipe)
    for step in range(1, 21):
        plain.update(step, f"loss {1 / step:.3f}")
    plain.close()
    lines = pipe.getvalue().splitlines()
    assert [line.split(":")[0] for line in lines] == ["step 10/20", "step 20/20"] and "ETA" in lines[0]

    terminal = Terminal()
    bar = Progress(enabled=True, total=5, start=0, stream=terminal)
    assert bar.bar is not None  # rich's live bar, not lines
    bar.close()
    assert Progress(enabled=False, total=5, start=0, stream=Terminal()).bar is None  # other ranks show nothing


CHAT_TEMPLATE = "{% for message in messages %}<{{ message['role'] }}>{{ message['content'] }}{% endfor %}"
GENERATION = {"do_sample": True, "temperature": 0.6, "eos_token_id": [0, 5]}


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("watch")
    model_dir, corpus = make_local_gpt2(root / "user")
    # A chat model's files beside its tokenizer and weights, which final/ keeps (an audit found both dropped).
    (model_dir / "chat_template.jinja").write_text(CHAT_TEMPLATE, encoding="utf-8")
    (model_dir / "generation_config.json").write_text(json.dumps(GENERATION), encoding="utf-8")
    plan = make_plan(str(model_dir), gpus_per_node=1, strategy="ddp", seq_len=64, micro_batch=4, grad_accum=1)
    speed = evaluate(plan.model, plan.config, plan.cluster).throughput  # a step time predicted, as plan's are
    plan = plan.model_copy(update={"throughput": speed})
    emit_run_folder(plan, root / "run", options=RunOptions(data=DataConfig(train=[str(corpus)], eval_every=3)))
    completed = run_python(
        [
            "-m",
            "backends.run",
            "--plan",
            str(root / "run"),
            "--steps",
            "6",
            "--export-every",
            "4",
            "--db",  # recording is the default: every real run calibrates
            str(root / "bench.duckdb"),
        ],
        cwd=REPO_ROOT,
        env={key: value for key, value in cpu_env().items() if key != "HARDWARE_SELECTOR_RECORD"},  # the default
        timeout=300,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    return root, completed


@pytest.mark.slow
def test_every_step_writes_a_full_row_and_every_evaluation_its_own(finished_run):
    root, _ = finished_run
    rows = [json.loads(line) for line in (root / "run" / "metrics.jsonl").read_text().splitlines()]
    train = [row for row in rows if row["kind"] == "train"]
    assert [row["step"] for row in train] == [1, 2, 3, 4, 5, 6]
    assert all(TRAIN_KEYS <= row.keys() for row in train)
    assert all("mfu" not in row for row in train)  # CPU processes: no GPU peak to compare with
    assert all(row["tokens_per_s"] > 0 and row["peak_memory_bytes"] > 0 for row in train)
    evals = [row for row in rows if row["kind"] == "eval"]
    assert [row["step"] for row in evals] == [3, 6]
    assert all(row["perplexity"] == pytest.approx(2.718281828 ** row["eval_loss"]) for row in evals)


@pytest.mark.slow
def test_tensorboard_events_are_written(finished_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    root, _ = finished_run
    events = EventAccumulator(str(root / "run" / "tensorboard"))
    events.Reload()
    assert [event.step for event in events.Scalars("train/loss")] == [1, 2, 3, 4, 5, 6]
    assert [event.step for event in events.Scalars("eval/eval_loss")] == [3, 6]


@pytest.mark.slow
def test_the_summary_sets_measured_beside_predicted_and_record_stores_it(finished_run):
    from benchmarks_db.store import BenchmarkStore

    root, completed = finished_run
    summary = json.loads((root / "run" / "run_summary.json").read_text())
    assert summary["median_step_time_s"] > 0 and summary["steps"] == 6
    assert any(line.startswith("step time: measured") for line in summary["lines"])
    assert "recorded run" in completed.stdout
    (record,) = BenchmarkStore(root / "bench.duckdb").runs()
    assert record.id == summary["record_id"] and record.runner == "backends.run"
    assert record.step_time_median_s == pytest.approx(summary["median_step_time_s"])
    assert record.global_batch == 4 and record.seq_len == 64 and record.steps_measured == 5
    assert record.host == ""  # the hardware and software, nothing about the user
    # Found by a new user's audit: a plan made for the `cpu` pseudo-GPU predicts these processes' step time, and
    # tune's trials on it record the pair; `train` printed and recorded the measurement alone, so its run never
    # entered the corrections of the next plan ("4 measured runs ... 3 used in corrections"). Its memory too: the
    # cpu device's estimate models a CPU rank (the CPU's kernels, the process baseline), RSS against RSS.
    predicted = summary["predicted_step_time_s"]
    assert summary["step_time_comparable"] and summary["comparable_to_prediction"]
    predicted_gib = summary["predicted_peak_memory_bytes"] / 2**30
    assert any(
        line.startswith("peak memory: measured") and f"vs predicted {predicted_gib:.2f} GiB" in line and "RSS" in line
        for line in summary["lines"]
    ), summary["lines"]
    assert f"vs predicted {predicted:.3g} s/step" in summary["lines"][0]
    assert record.predicted_step_time_s == pytest.approx(predicted)
    # ... and the predicted rate `db list` shows beside the measured one: the step's tokens over that time.
    assert record.predicted_tokens_per_s == pytest.approx(record.global_batch * record.seq_len / predicted)


@pytest.mark.slow
def test_the_next_plan_here_is_calibrated_by_the_run_and_names_its_record(finished_run):
    """A run records itself by default; `plan` on the same hardware then uses the measured step time of that
    config (or the correction fitted on it) and its calibration line names the record."""
    from tests.distributed import cli_in_process

    root, _ = finished_run
    summary = json.loads((root / "run" / "run_summary.json").read_text())
    result = cli_in_process(
        "plan", "--model", root / "user" / "my-gpt2", "--gpu", "cpu", "--gpus-per-node", "1", "--seq-len", "64",
        "--global-batch", "4", "--micro-batch", "4", "--strategies", "ddp", "--ac", "none",
        "--db", root / "bench.duckdb", "--json",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    best = json.loads(result.stdout)["best"]
    assert f"record {summary['record_id'][:8]}" in best["calibration"]
    assert best["throughput"]["step_time_s"] == pytest.approx(summary["median_step_time_s"])
    assert f"record {summary['record_id'][:8]}" in best["throughput"]["sources"]["step_time_s"]


@pytest.mark.slow
def test_a_run_on_another_process_count_than_the_plans_is_not_compared_with_its_prediction(tmp_path):
    """The plan predicts its own step (2 processes, accumulation 1); the same folder run on 1 process takes
    accumulation 2, a step the plan did not predict. The summary said "vs predicted" all the same and the record
    kept the pair, a wrong point for the next plan's correction; now the line says why it is not compared."""
    from benchmarks_db.store import BenchmarkStore

    model_dir, corpus = make_local_gpt2(tmp_path / "user")
    plan = make_plan(str(model_dir), gpus_per_node=2, strategy="ddp", seq_len=64, micro_batch=2, grad_accum=1)
    plan = plan.model_copy(update={"throughput": evaluate(plan.model, plan.config, plan.cluster).throughput})
    emit_run_folder(plan, tmp_path / "run", options=RunOptions(data=DataConfig(train=[str(corpus)])))
    completed = run_python(
        ["-m", "backends.run", "--plan", str(tmp_path / "run"), "--steps", "2", "--db", str(tmp_path / "b.duckdb")],
        cwd=REPO_ROOT,
        env={key: value for key, value in cpu_env().items() if key != "HARDWARE_SELECTOR_RECORD"},
        timeout=300,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    summary = json.loads((tmp_path / "run" / "run_summary.json").read_text())
    assert summary["world_size"] == 1 and not summary["step_time_comparable"]
    assert "vs predicted" not in summary["lines"][0]
    assert (
        "(not compared: run as 1 process x micro-batch 2 x accumulation 2, seq 64, the plan predicts 2 "
        in (summary["lines"][0])
    )
    (record,) = BenchmarkStore(tmp_path / "b.duckdb").runs()
    assert record.predicted_step_time_s is None


@pytest.mark.slow
def test_final_is_written_at_every_export_step_and_at_the_end(finished_run):
    root, completed = finished_run
    final = root / "run" / "final"
    assert "HF folder, step 4)" in completed.stdout and "HF folder, step 6)" in completed.stdout
    assert json.loads((final / "hardware_selector_export.json").read_text())["step"] == 6
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {path.name for path in final.iterdir()}
    from transformers import AutoTokenizer, GenerationConfig

    assert AutoTokenizer.from_pretrained(final).chat_template == CHAT_TEMPLATE
    generation = GenerationConfig.from_pretrained(final)
    assert (generation.do_sample, generation.temperature, generation.eos_token_id) == (True, 0.6, [0, 5])


def test_watch_follow_ends_when_no_process_holds_the_run_any_more(tmp_path):
    """A run whose processes are gone (killed, the machine down) still says "running" in run_status.json;
    watch tells it by the run lock nobody holds, and --follow ends instead of waiting forever."""
    from backends.runner.run_lock import hold_run_lock
    from backends.runner.status import RunStatus
    from tests.distributed import cli_in_process

    run_dir = tmp_path / "run"
    emit_run_folder(make_plan(strategy="ddp"), run_dir)
    RunStatus(run_dir, enabled=True, total_steps=10, strategy="ddp", model="gpt2").update(step=3)
    lock = hold_run_lock(run_dir)  # the run, alive
    live = json.loads(cli_in_process("watch", run_dir, "--json").stdout)
    assert live["state"] == "running"
    lock.close()  # its process is gone: the lock goes with it
    gone = cli_in_process("watch", run_dir, "--follow")
    assert gone.returncode == 0 and "gone" in gone.stdout and "ended without finishing" in gone.stdout
    assert json.loads(cli_in_process("watch", run_dir, "--json").stdout)["state"] == "gone"


def test_watch_reads_a_damaged_or_hand_edited_metrics_file_without_a_traceback(tmp_path):
    """A byte that is not UTF-8, a line that is no object and a loss that is no number (a new user's audit found
    each a traceback) spoil only their own line: the rows around them are read as written."""
    from tests.distributed import cli_in_process

    run_dir = tmp_path / "run"
    emit_run_folder(make_plan(strategy="ddp"), run_dir)
    good = [{"kind": "train", "step": step, "loss": 2.0 + step, "step_s": 0.5} for step in (1, 2)]
    lines = [json.dumps(good[0]).encode(), b'{"kind": "train", "step": 9, "loss": "\xcb\xcb"}', b"[1, 2]",
             b'{"kind": "train", "step": 9, "loss": "NaNx", "step_s": "slow"}', json.dumps(good[1]).encode()]  # fmt: skip
    (run_dir / "metrics.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    watched = cli_in_process("watch", run_dir, "--json")
    assert watched.returncode == 0, watched.stderr
    state = json.loads(watched.stdout)
    assert state["loss"] == 4.0 and state["loss_average"] == pytest.approx((3.0 + 4.0) / 2)


@pytest.mark.parametrize(
    "content, problem",
    [
        ("running", "not JSON"),
        ("[1, 2]", "a JSON list, not an object"),
        ('{"state": "banana", "step": 3}', "state 'banana' is none of running, finished, stopped, interrupted, failed"),
        ('{"state": "running", "step": 3, "total_steps": "ten"}', "total_steps 'ten' is not a whole number"),
        ('{"state": "finished", "model": 7}', "model 7 is not text"),
    ],
)
def test_watch_on_a_hand_edited_status_file_says_it_is_damaged_and_what_to_do(tmp_path, content, problem):
    from tests.distributed import cli_in_process

    run_dir = tmp_path / "run"
    emit_run_folder(make_plan(strategy="ddp"), run_dir)
    (run_dir / "run_status.json").write_text(content)
    for flags in ([], ["--json"], ["--follow"]):
        watched = cli_in_process("watch", run_dir, *flags)
        assert watched.returncode == 2, (watched.stdout, watched.stderr)
        assert watched.stderr.strip() == (
            f"error: {run_dir / 'run_status.json'} is damaged ({problem}): the runner did not write it so; delete "
            "it (the run's next start writes it again), and metrics.jsonl still holds every step"
        )


def test_watch_says_what_a_new_user_needs_before_and_during_a_run(tmp_path):
    """An emitted folder nobody trained read "run (?): not started" and "step 0"; it now names the plan's model
    and strategy (the reference: plan.json) and the command that starts it. The loss average said "last 20
    steps" after 2; it now counts the steps it averaged (the reference: the rows written here)."""
    from tests.distributed import cli_in_process

    run_dir = tmp_path / "run"
    emit_run_folder(make_plan(strategy="ddp"), run_dir)
    planned = json.loads((run_dir / "plan.json").read_text())
    fresh = " ".join(cli_in_process("watch", run_dir).stdout.split())
    assert f"{planned['run']['model']['name']} ({planned['config']['strategy']}): not started" in fresh
    assert "nothing trained here yet" in fresh and "starts it" in fresh and "(?)" not in fresh
    message = json.loads(cli_in_process("watch", run_dir, "--json").stdout)["message"]
    assert message.endswith(f"`hardware-selector train {run_dir}` starts it")  # the table may shorten the path
    rows = [{"kind": "train", "step": step, "loss": loss, "step_s": 0.5, "tokens_per_s": rate}
            for step, loss, rate in ((1, 3.0, 900.0), (2, 5.0, 1000.0), (3, 4.0, 1500.0))]  # fmt: skip
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows[:2]))
    watched = " ".join(cli_in_process("watch", run_dir).stdout.split())
    assert "5.0000 (mean of the last 2 steps: 4.0000)" in watched and "last 20" not in watched
    # The speed was the last step's alone, unsaid; the summary and the record count the median.
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    watched = " ".join(cli_in_process("watch", run_dir).stdout.split())
    assert "1,500 tokens/s (last step; median of the last 3 steps: 1,000)" in watched

"""The report page (docs/running.md, "Report"): its numbers are plan.json's, and it loads in a real browser.

- `plan --emit DIR --report FILE`: the page's embedded data equals plan.json's memory components and step-time
  parts and `plan --json`'s ranking; the parts add up to plan.json's step time.
- `report RUN_DIR` on a real single-process CPU run: the curves are metrics.jsonl's rows, the measured step time
  is run_summary.json's (and, without it, the same median taken from metrics.jsonl), the prediction is the
  run's own, and a tune block's trials are shown.
- In headless Chromium (Debian's package; the browser checks skip, saying so, only where none is found): no
  console error, no request leaves the file, the charts draw plan.json's numbers, the screenshot is not blank.
- Bad input is one line and exit 2, with nothing written.
"""

from __future__ import annotations

import io
import json
import re
import shlex
import shutil
import subprocess
import sys

import pytest

from tests.distributed import cli_in_process, run_torchrun

PLAN_ARGS = ["--model", "llama-3-8b", "--gpu", "H100-80GB", "--gpus-per-node", "8", "--nodes", "2"]
PLAN_ARGS += ["--global-batch", "512", "--seq-len", "4096", "--no-calibration"]
STEP_PARTS = ["compute_s", "recompute_s", "exposed_comm_s", "pipeline_bubble_s", "offload_s", "optimizer_step_s"]
GIB = 2**30


def page_data(path) -> dict:
    """The page's embedded data block, as the page holds it."""
    found = re.search(
        r'<script type="application/json" id="report-data">(.*?)</script>', path.read_text(encoding="utf-8"), re.S
    )
    assert found, f"{path} has no report-data block"
    return json.loads(found.group(1))


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    """A real plan's run folder, its page, and `plan --json`'s document of the same search."""
    root = tmp_path_factory.mktemp("report-plan")
    completed = cli_in_process("plan", *PLAN_ARGS, "--json", "--emit", root / "run", "--report", root / "plan.html")
    assert completed.returncode == 0, completed.stderr
    assert f"wrote the report page to {root / 'plan.html'}" in completed.stderr  # --json keeps stdout for JSON
    return root, json.loads(completed.stdout)


def test_the_page_holds_plan_json_numbers(planned):
    root, searched = planned
    data = page_data(root / "plan.html")
    plan = json.loads((root / "run" / "plan.json").read_text())
    best = data["candidates"][0]
    per_gpu = plan["memory"]["per_gpu_bytes"]
    assert best["memory_bytes"] == {name: value for name, value in per_gpu.items() if name != "total"}
    assert best["memory_total_bytes"] == per_gpu["total"] == sum(best["memory_bytes"].values())
    assert best["usable_bytes"] == int(plan["memory"]["gpu_capacity_bytes"] * (1 - plan["memory"]["headroom_fraction"]))
    breakdown = plan["throughput"]["breakdown"]
    assert best["step_time_parts_s"] == {name: breakdown[name] for name in STEP_PARTS}
    assert sum(best["step_time_parts_s"].values()) == pytest.approx(plan["throughput"]["step_time_s"], rel=1e-12)
    assert best["step_time_s"] == plan["throughput"]["step_time_s"] and best["reasons"] == plan["reasons"]
    # The ranking and the families' fates are the search's (`plan --json` of the same request).
    assert [(c["rank"], c["strategy"]) for c in data["candidates"]] == [
        (rank, c["strategy"]) for rank, c in enumerate(searched["candidates"], 1)
    ]
    assert [c["memory_bytes"]["activations"] for c in data["candidates"]] == [
        c["memory"]["per_gpu_bytes"]["activations"] for c in searched["candidates"]
    ]
    assert data["rejected"] == searched["rejected"] and len(data["candidates"]) > 1
    # Every memory source of the plan is on the page, held for the plan (#1).
    shown = {source["number"]: source for source in data["sources"] if 1 in source["ranks"]}
    for name, source in plan["estimate_sources"]["memory"].items():
        assert shown[f"memory: {name}"]["source"] == source
    assert data["calibration"] == plan["estimate_sources"]["calibration"]


def test_the_plan_page_holds_the_time_and_cost_plan_prints(planned):
    # Audit: the page had no cost or time-to-train though `plan`'s table has them. Reference: tokens / tokens/s
    # for the time, x 16 GPUs x the price per GPU-hour for the cost, the price and the token count with sources.
    root, searched = planned
    data = page_data(root / "plan.html")
    best = searched["best"]["to_train"]
    assert data["budget"] == {
        "tokens": best["tokens"],
        "tokens_source": best["tokens_source"],
        "price_usd_per_gpu_hour": best["price_usd_per_gpu_hour"],
        "price_source": data["budget"]["price_source"],
    }
    assert best["price_source"] in data["budget"]["price_source"]  # with its date: the catalog entry's own text
    for shown, plan in zip(data["candidates"], searched["candidates"], strict=True):
        hours = best["tokens"] / plan["throughput"]["tokens_per_s"] / 3600
        assert shown["time_to_train_s"] == pytest.approx(hours * 3600, rel=1e-12)
        assert shown["gpu_hours"] == pytest.approx(hours * 16, rel=1e-12)
        assert shown["cost_usd"] == pytest.approx(hours * 16 * best["price_usd_per_gpu_hour"], rel=1e-12)
        assert shown["cost_usd"] == plan["to_train"]["cost_usd"]
    text = " ".join((root / "plan.html").read_text(encoding="utf-8").split())
    assert f"days, GPU-hours and cost: to train {best['tokens']:.3g} tokens" in text
    assert "<th>cost</th>" in text


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A real run: a local GPT-2 trained 6 steps on one CPU rank (evaluating every 3), with a tune block
    added to its plan.json as `tune` writes one."""
    from benchmarks.harness.tune import Trial
    from planner.contract.run_config import DataConfig
    from planner.rundir.write import RunOptions, emit_run_folder
    from scripts.demo_checkpoint import make_local_gpt2
    from tests.emit_plans import make_plan

    root = tmp_path_factory.mktemp("report-run")
    model_dir, corpus = make_local_gpt2(root / "user")
    plan = make_plan(str(model_dir), gpus_per_node=1, strategy="ddp", seq_len=64, micro_batch=4, grad_accum=1)
    run = root / "run"
    emit_run_folder(plan, run, options=RunOptions(data=DataConfig(train=[str(corpus)], eval_every=3)))
    # One rank forked warm under torchrun's agent (tests/warm_launch.py): the page reads what the run wrote,
    # not how it was started, and a cold process was ~5 s more CPU for its imports.
    run_torchrun(["-m", "backends.run", "--plan", str(run), "--steps", "6", "--save-every", "0"], nproc=1)
    trials = [
        Trial(label="DDP", key="a", predicted_rank=1, predicted_step_s=0.5, measured_step_s=0.6, status="ok"),
        Trial(label="FSDP full-shard", key="b", predicted_rank=2, predicted_step_s=0.7, status="oom", error="OOM"),
    ]
    document = json.loads((run / "plan.json").read_text())
    document["tune"] = {"winner": "DDP", "trials": [trial.model_dump(mode="json") for trial in trials]}
    (run / "plan.json").write_text(json.dumps(document))
    written = cli_in_process("report", run)
    assert written.returncode == 0, written.stderr
    return run


@pytest.mark.slow
def test_the_run_page_holds_the_run_files_numbers(trained):
    data = page_data(trained / "report.html")
    rows = [json.loads(line) for line in (trained / "metrics.jsonl").read_text().splitlines()]
    train = [row for row in rows if row["kind"] == "train"]
    evals = [row for row in rows if row["kind"] == "eval"]
    assert data["curves"]["loss"] == {"steps": [r["step"] for r in train], "values": [r["loss"] for r in train]}
    assert data["curves"]["eval_loss"] == {"steps": [3, 6], "values": [r["eval_loss"] for r in evals]}
    assert data["curves"]["tokens_per_s"]["values"] == [r["tokens_per_s"] for r in train]
    assert "mfu" not in data["curves"]  # CPU processes log none
    summary = json.loads((trained / "run_summary.json").read_text())
    predicted = json.loads((trained / "plan.json").read_text())["run"]["predicted"]
    figures = {c["name"]: c for c in data["comparisons"]}
    assert figures["step_time_s"]["measured"] == summary["median_step_time_s"]
    assert figures["step_time_s"]["predicted"] == predicted["step_time_s"] == summary["predicted_step_time_s"]
    assert figures["peak_memory_bytes"]["measured"] == max(summary["peak_memory_per_rank_bytes"])
    # A plan made for the cpu pseudo-GPU predicts these processes' step time (the summary compares it too), and
    # their peak RSS: the cpu device's estimate models a CPU rank (docs/hardware.md).
    assert figures["step_time_s"]["comparable"] == summary["step_time_comparable"] is True
    assert figures["tokens_per_s"]["comparable"] and figures["peak_memory_bytes"]["comparable"]
    assert figures["peak_memory_bytes"]["predicted"] == predicted["peak_memory_bytes"]
    assert data["summary_lines"] == summary["lines"]
    # The run has no token budget: its candidates table has no days, GPU-hours or cost columns of "-" only.
    assert "<th>GPU-hours</th>" not in (trained / "report.html").read_text()
    assert data["tune"]["winner"] == "DDP" and [t["status"] for t in data["tune"]["trials"]] == ["ok", "oom"]


@pytest.mark.slow
def test_without_a_summary_the_step_time_is_the_same_median_of_metrics(trained, tmp_path):
    """A run still going has no run_summary.json: the page takes the runner's median from metrics.jsonl."""
    summary = json.loads((trained / "run_summary.json").read_text())
    copy = tmp_path / "going"
    shutil.copytree(trained, copy, ignore=shutil.ignore_patterns("run_summary.json", "checkpoints", "final"))
    assert cli_in_process("report", copy, "-o", tmp_path / "going.html").returncode == 0
    figures = {c["name"]: c for c in page_data(tmp_path / "going.html")["comparisons"]}
    assert figures["step_time_s"]["measured"] == pytest.approx(summary["median_step_time_s"], rel=1e-9)
    assert figures["step_time_s"]["measured_source"].startswith("metrics.jsonl")


def _launch_rows(world: int, resumed_at: int, steps: list[tuple[int, float, int]]) -> list[dict]:
    """A launch row and its train rows, as the runner writes them: (step, step_s, peak_memory_bytes) each."""
    trained = [
        {"kind": "train", "step": step, "loss": 5.0, "step_s": step_s, "tokens_per_s": 100 / step_s,
         "peak_memory_bytes": peak}
        for step, step_s, peak in steps
    ]  # fmt: skip
    return [{"kind": "launch", "step": resumed_at, "world_size": world, "resumed_from": None}, *trained]


@pytest.mark.slow
def test_a_resumed_run_is_measured_over_all_its_launches(trained, tmp_path):
    """After a resume (here on another --nproc) run_summary.json is the last launch's alone, and the page showed it
    as the run's. metrics.jsonl holds the whole run: the table's median step time is over every launch's steps
    past that launch's first, its peak the run's largest, and the page says where the run resumed.
    Reference, by hand: steady steps 1.0 2.0 3.0 (launch 1, past its 9.0) and 5.0 4.0 (launch 2, past its 8.0):
    median 3.0 (the last launch alone: 4.5; every step past the run's first: 3.5); tokens/s 100/3."""
    summary = json.loads((trained / "run_summary.json").read_text())
    big = 10 * max(summary["peak_memory_per_rank_bytes"])  # launch 1's rank 0 peaked above the last launch
    rows = _launch_rows(2, 0, [(1, 9.0, 1), (2, 1.0, big), (3, 2.0, 1), (4, 3.0, 1)])
    rows += _launch_rows(1, 4, [(5, 8.0, 1), (6, 5.0, 1), (7, 4.0, 2)])
    copy = tmp_path / "resumed"
    shutil.copytree(trained, copy, ignore=shutil.ignore_patterns("checkpoints", "final", "report.html"))
    (copy / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert cli_in_process("report", copy).returncode == 0
    data = page_data(copy / "report.html")
    figures = {c["name"]: c for c in data["comparisons"]}
    assert figures["step_time_s"]["measured"] == 3.0
    assert (
        figures["step_time_s"]["measured_source"]
        == "metrics.jsonl: median over the steps after the first of each launch"
    )
    assert figures["tokens_per_s"]["measured"] == pytest.approx(100 / 3.0, rel=1e-12)
    assert figures["peak_memory_bytes"]["measured"] == big
    # Launch 2 ran on 1 process, another layout than the plan's 2 (an elastic re-plan does so): the whole run is
    # not held against the plan's prediction (a new user's audit found an elastic run marked comparable, 2026-11-30).
    assert not any(figure["comparable"] for figure in figures.values())
    assert [(launch["resumed_at"], launch["first_step"], launch["last_step"], launch["world_size"])
            for launch in data["launches"]] == [(0, 1, 4, 2), (4, 5, 7, 1)]  # fmt: skip
    page = (copy / "report.html").read_text(encoding="utf-8")
    assert "launch 2 of 2: resumed at step 4, steps 5-7 on 1 process" in page
    assert data["summary_lines"][0] == "the last launch's (steps 5-7; the table above is the whole run's):"
    assert data["curves"]["step_s"]["steps"] == list(range(1, 8))  # the plot: the same whole run
    # Each figure marks the resume (an annotation per figure), where the table's launches split the steps.
    marks, run_figures = page.count('"text":"resumed at step 4"'), len(data["curves"]) - 1  # step_s: tabled, not drawn
    assert marks == run_figures >= 3, (marks, run_figures)


def test_a_diverged_runs_page_holds_valid_json(trained, tmp_path):
    """Found by a new user's audit (2026-11-30): a run whose loss went NaN (metrics.jsonl keeps the row) gave a page
    whose embedded data held NaN, which no strict JSON parser reads; it is null there now."""
    copy = tmp_path / "diverged"
    shutil.copytree(trained, copy, ignore=shutil.ignore_patterns("checkpoints", "final", "report.html"))
    rows = _launch_rows(2, 0, [(1, 1.0, 1), (2, 1.0, 1)])
    rows[2]["loss"] = float("nan")
    rows[1]["step_s"] = float("inf")
    (copy / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert cli_in_process("report", copy).returncode == 0
    found = re.search(r'id="report-data">(.*?)</script>', (copy / "report.html").read_text(encoding="utf-8"), re.S)
    assert found

    def refuse(constant: str) -> None:
        raise ValueError(constant)

    data = json.loads(found.group(1), parse_constant=refuse)
    assert data["curves"]["loss"]["values"] == [5.0, None]


@pytest.mark.slow
def test_a_tuned_folder_not_yet_trained_shows_its_trials(trained, tmp_path):
    """`tune` re-emits its winner with a tune block and no metrics yet: the page has the trials, no curves."""
    copy = tmp_path / "tuned"
    keep = shutil.ignore_patterns("metrics.jsonl", "run_summary.json", "checkpoints", "final", "report.html")
    shutil.copytree(trained, copy, ignore=keep)
    completed = cli_in_process("report", copy)
    assert completed.returncode == 0, completed.stderr
    data = page_data(copy / "report.html")
    assert data["curves"] == {} and [t["label"] for t in data["tune"]["trials"]] == ["DDP", "FSDP full-shard"]
    assert all(comparison["measured"] is None for comparison in data["comparisons"])


@pytest.fixture(scope="module")
def browser():
    executable = shutil.which("chromium") or shutil.which("chromium-browser")
    if executable is None:
        pytest.skip("no chromium on PATH; `make env` installs Debian's package when run as root (apt-get)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (the test extra)")
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable)
        yield launched
        launched.close()


def open_page(browser, url: str) -> tuple[list[str], list[str], bytes, list]:
    """Console errors and page errors, requests other than the file itself, a full-page screenshot, and each
    chart's drawn traces (name, x, y as plotly.js holds them)."""
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    errors: list[str] = []
    requests: list[str] = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("request", lambda request: requests.append(request.url) if request.url != url else None)
    page.goto(url, wait_until="load")
    traces = []
    if url != "about:blank":
        page.wait_for_function("document.querySelectorAll('.js-plotly-plot .main-svg').length > 0")
        traces = page.evaluate(
            "Array.from(document.querySelectorAll('.js-plotly-plot')).map(plot => plot._fullData.map("
            "trace => ({name: trace.name, x: Array.from(trace.x || []), y: Array.from(trace.y || [])})))"
        )
    shot = page.screenshot(full_page=True)
    page.close()
    return errors, requests, shot, traces


def distinct_colours(png: bytes) -> int:
    from PIL import Image

    colours = Image.open(io.BytesIO(png)).convert("RGB").getcolors(maxcolors=1 << 24)
    return len(colours or [])


def test_the_plan_page_draws_in_a_browser_offline(browser, planned):
    root, _ = planned
    plan = json.loads((root / "run" / "plan.json").read_text())
    errors, requests, shot, traces = open_page(browser, (root / "plan.html").as_uri())
    assert errors == [] and requests == []
    memory, step = traces[0], traces[1]
    activations = next(trace for trace in memory if trace["name"] == "activations")
    assert activations["y"][0] == pytest.approx(plan["memory"]["per_gpu_bytes"]["activations"] / GIB, rel=1e-12)
    usable = next(trace for trace in memory if trace["name"].startswith("usable"))
    usable_bytes = plan["memory"]["gpu_capacity_bytes"] * (1 - plan["memory"]["headroom_fraction"])
    assert usable["y"][0] == pytest.approx(usable_bytes / GIB, rel=1e-9)
    compute = next(trace for trace in step if trace["name"] == "compute")
    assert compute["y"][0] == pytest.approx(plan["throughput"]["breakdown"]["compute_s"], rel=1e-12)
    blank = distinct_colours(open_page(browser, "about:blank")[2])
    assert blank == 1 and distinct_colours(shot) > 50  # the counter tells a blank page from a drawn one


@pytest.mark.slow
def test_the_run_page_draws_in_a_browser_offline(browser, trained):
    errors, requests, shot, traces = open_page(browser, (trained / "report.html").as_uri())
    assert errors == [] and requests == []
    rows = [json.loads(line) for line in (trained / "metrics.jsonl").read_text().splitlines()]
    loss = next(trace for trace in traces[0] if trace["name"] == "train loss")
    assert loss["y"] == pytest.approx([row["loss"] for row in rows if row["kind"] == "train"], rel=1e-12)
    assert distinct_colours(shot) > 50


def one_line_exit_2(completed: subprocess.CompletedProcess) -> str:
    assert completed.returncode == 2, completed.stderr
    lines = completed.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in completed.stderr
    return lines[0]


def test_without_plotly_report_says_how_to_install_it_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "plotly", None)  # import plotly raises ImportError
    line = one_line_exit_2(
        cli_in_process("plan", *PLAN_ARGS, "--emit", tmp_path / "run", "--report", tmp_path / "plan.html")
    )
    assert "pip install 'hardware-selector[report]'" in line
    assert list(tmp_path.iterdir()) == []  # checked before the search: no run folder either
    (tmp_path / "run").mkdir()
    line = one_line_exit_2(cli_in_process("report", tmp_path / "run"))
    assert "pip install 'hardware-selector[report]'" in line


def test_when_nothing_fits_the_page_says_what_would(tmp_path):
    nothing = ["--model", "llama-3-70b", "--gpu", "T4", "--gpus-per-node", "1", "--no-calibration"]
    completed = cli_in_process("plan", *nothing, "--json", "--report", tmp_path / "none.html")
    assert completed.returncode == 1, completed.stderr  # nothing fits: exit code 1 (docs/errors.md), page written
    searched, data = json.loads(completed.stdout), page_data(tmp_path / "none.html")
    assert searched["best"] is None and data["candidates"] == []
    assert data["suggestions"] == searched["suggestions"] != [] and data["rejected"] == searched["rejected"]
    assert "Nothing fits." in (tmp_path / "none.html").read_text(encoding="utf-8")


def test_bad_report_input_is_one_line(tmp_path):
    assert "FILE.html" in one_line_exit_2(cli_in_process("plan", *PLAN_ARGS, "--report", tmp_path / "plan.png"))
    serving = cli_in_process(
        "plan", "--model", "gpt2", "--gpu", "A100-80GB", "--mode", "inference", "--report", "a.html"
    )
    assert "--report" in one_line_exit_2(serving)
    assert "no such run folder" in one_line_exit_2(cli_in_process("report", tmp_path / "missing"))
    (tmp_path / "empty").mkdir()
    assert "has no plan.json" in one_line_exit_2(cli_in_process("report", tmp_path / "empty"))
    assert cli_in_process("plan", *PLAN_ARGS, "--emit", tmp_path / "fresh").returncode == 0
    assert "no training metrics" in one_line_exit_2(cli_in_process("report", tmp_path / "fresh"))
    assert cli_in_process("plan", *PLAN_ARGS, "--emit", tmp_path / "run slurm").returncode == 0
    untrained = one_line_exit_2(cli_in_process("report", tmp_path / "run slurm"))  # pasted, it must train that one
    assert untrained.endswith(f"train it first: hardware-selector train '{tmp_path / 'run slurm'}'"), untrained
    assert shlex.split(untrained.rsplit(": ", 1)[1]) == ["hardware-selector", "train", str(tmp_path / "run slurm")]
    unwritable = cli_in_process("report", tmp_path / "fresh", "-o", "/proc/page.html")  # refused before reading
    assert "report -o: cannot write /proc/page.html" in one_line_exit_2(unwritable)
    # RUN_DIR is read first: a file or /proc was refused as where the page would go ("report -o: cannot write")
    (tmp_path / "notes.txt").write_text("mine")
    assert "notes.txt is a file, not a run folder" in one_line_exit_2(cli_in_process("report", tmp_path / "notes.txt"))
    assert "/proc has no plan.json" in one_line_exit_2(cli_in_process("report", "/proc"))
    assert "RUN_DIR is empty" in one_line_exit_2(cli_in_process("report", "  "))  # ": no such run folder" once
    assert not (tmp_path / "fresh" / "report.html").exists() and not (tmp_path / "empty" / "report.html").exists()

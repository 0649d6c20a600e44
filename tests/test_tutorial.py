"""docs/tutorial runs as written, and every parallel chapter trains exactly what chapter 1 trains.

Reference: chapter 1's single-device losses. DDP, model parallel by hand,
GPipe and 1F1B pipelines, FSDP, ZeRO 1-3 on our engine and tensor parallel
run on 2 gloo ranks from the same weights on the same batches, and must
print the same loss at every step (to float32 reduction-order noise). Each
chapter also prints its measured CPU step time and memory and the planner's
GPU prediction with its source; each chapter page embeds its script
verbatim. Chapter 3 runs as its page prints it, a torchrun job of its own;
the other torchrun chapters share one job (tests/tutorial_chapters.py).
"""

from __future__ import annotations

import re

import pytest

from tests.distributed import REPO_ROOT, cpu_env, run_torchrun
from tests.warm_process import run_python

TUTORIAL = REPO_ROOT / "docs" / "tutorial"
CODE = TUTORIAL / "code"
LOSS = re.compile(r"^step (\d+) loss ([\d.]+)$", re.M)


def test_each_chapter_page_embeds_its_script_verbatim():
    pages = sorted(TUTORIAL.glob("0*.md"))
    assert len(pages) == 9
    scripts = set()
    for page in pages:
        text = page.read_text(encoding="utf-8")
        name = re.search(r"<!-- code: (\S+) -->\n```python\n", text)
        assert name, page
        embedded = text[name.end() :].split("```\n", 1)[0]
        assert embedded == (CODE / name.group(1)).read_text(encoding="utf-8"), f"{page.name} is out of date"
        scripts.add(name.group(1))
    assert scripts == {path.name for path in CODE.glob("0*.py")}


def _single(script: str) -> str:
    completed = run_python([script], cwd=CODE, env=cpu_env(), timeout=300)
    assert completed.returncode == 0, completed.stderr[-3000:]
    return completed.stdout


def _losses(out: str) -> list[float]:
    found = LOSS.findall(out)
    assert [int(step) for step, _ in found] == list(range(1, 7)), out
    return [float(loss) for _, loss in found]


@pytest.fixture(scope="module")
def reference() -> list[float]:
    out = _single("01_single_device.py")
    assert "measured on this CPU" in out and "1 x A100-80GB (ddp)" in out
    assert _planner_line(out) in _quoted("01_single_device.py")
    return _losses(out)


CHAPTERS = [
    ("02_data_parallel.py", [], "2 x A100-80GB (ddp)"),
    ("03_ddp.py", [], "2 x A100-80GB (ddp)"),
    ("04_model_parallel.py", [], "2 x A100-80GB (engine)"),
    ("05_pipeline.py", ["gpipe"], "2 x A100-80GB (engine)"),
    ("05_pipeline.py", ["1f1b"], "2 x A100-80GB (engine)"),
    ("06_fsdp.py", [], "2 x A100-80GB (fsdp)"),
    ("07_zero_engine.py", ["1"], "2 x A100-80GB (engine)"),
    ("07_zero_engine.py", ["2"], "2 x A100-80GB (engine)"),
    ("07_zero_engine.py", ["3"], "2 x A100-80GB (engine)"),
    ("08_tensor_parallel.py", [], "2 x A100-80GB (engine)"),
]
OWN_LAUNCH = "03_ddp.py"  # started as its page prints it: `torchrun --nproc_per_node=2 03_ddp.py`


def _chapter(script: str, args: list[str]) -> str:
    return ":".join([script, *args])


@pytest.fixture(scope="module")
def shared_launch(tmp_path_factory) -> dict[str, str]:
    """The other torchrun chapters in one job (tests/tutorial_chapters.py): each chapter's output, every
    rank's lines joined as torchrun's output would hold them."""
    import json

    out = tmp_path_factory.mktemp("tutorial") / "chapters"
    shared = [_chapter(s, a) for s, a, _ in CHAPTERS if s not in (OWN_LAUNCH, "02_data_parallel.py")]
    run_torchrun(["tests/tutorial_chapters.py", str(out), *shared], nproc=2, timeout=600)
    by_rank = [json.loads(out.with_name(f"chapters.rank{rank}.json").read_text()) for rank in (0, 1)]
    return {chapter: by_rank[0][chapter] + by_rank[1][chapter] for chapter in shared}


@pytest.mark.slow
@pytest.mark.parametrize("script, args, planner", CHAPTERS)
def test_every_chapter_trains_what_chapter_one_trains(reference, shared_launch, script, args, planner):
    if script.startswith("02"):
        out = _single(script)
    elif script == OWN_LAUNCH:
        out = run_torchrun([script, *args], nproc=2, timeout=300, cwd=CODE, env=cpu_env()).stdout
    else:
        out = shared_launch[_chapter(script, args)]
    assert _losses(out) == pytest.approx(reference, rel=2e-5)
    assert "measured on this CPU:" in out and planner in out and "GiB per GPU (formula" in out
    if [other for other, _, _ in CHAPTERS if other == script] == [script] or args in QUOTED_VARIANTS:
        assert _planner_line(out) in _quoted(script), f"{script}'s page quotes another prediction than it prints"


# The one run a page with several variants shows (chapter 5's GPipe, chapter 7's stage 3).
QUOTED_VARIANTS = (["gpipe"], ["3"])


def _planner_line(out: str) -> str:
    return next(line for line in out.splitlines() if line.startswith("the planner for"))


def _quoted(script: str) -> list[str]:
    """The planner lines a chapter's page shows as its output: deterministic, so they must be what it prints now
    (an audit found every page's step time out of date while the test read only the losses)."""
    page = next(TUTORIAL.glob(f"{script[:2]}-*.md")).read_text(encoding="utf-8")
    return [line for line in page.splitlines() if line.startswith("the planner for")]


def test_the_planning_chapter_explains_its_choice():
    out = _single("09_plan.py")
    assert re.search(r"^best: \w+ dp \d+ x tp \d+ x pp \d+", out, re.M), out
    assert "why:" in out and "[memory: formula" in out and "the selector API agrees on the family:" in out
    memory = next(line for line in out.splitlines() if line.startswith("memory per GPU:"))
    assert "the above" not in memory and "parameters, gradients, optimizer states" in memory  # printed alone

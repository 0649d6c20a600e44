"""The runnable example in docs/parallelism.md runs as printed (2 ranks, tp2 + SP, ZeRO-1, 4 micro-batches)."""

from __future__ import annotations

import math
import re

import pytest

from tests.distributed import REPO_ROOT, run_torchrun


@pytest.mark.slow
def test_parallelism_doc_example_runs(tmp_path):
    text = (REPO_ROOT / "docs" / "parallelism.md").read_text(encoding="utf-8")
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    script = tmp_path / "tp2.py"
    script.write_text(code, encoding="utf-8")
    completed = run_torchrun([str(script)], nproc=2, timeout=240)
    losses = {
        (int(rank), int(step)): float(loss)
        for rank, step, loss in re.findall(r"rank (\d) step (\d) loss ([\d.]+)", completed.stdout)
    }
    assert sorted(losses) == [(rank, step) for rank in range(2) for step in range(3)]
    # Both TP ranks report the same loss, a freshly initialised model starts near ln(vocab), and it learns.
    assert all(losses[(0, step)] == losses[(1, step)] for step in range(3))
    assert losses[(0, 0)] == pytest.approx(math.log(512), abs=0.1)
    assert losses[(0, 2)] < losses[(0, 0)]

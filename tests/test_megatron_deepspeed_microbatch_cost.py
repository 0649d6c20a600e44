"""A cost per micro-batch in Megatron-DeepSpeed's runs (benchmarks/accuracy/megatron_deepspeed_microbatch_cost.py,
docs/accuracy.md "A cost per micro-batch"): fitted on BigScience's twelve 2022-02-21 sweep rows, it brings every
counted Megatron-DeepSpeed row (MT-NLG, BLOOM, GPT-NeoX-20B: not fitted on) within 10%, and breaks DeepSpeed's own
2023 V100 rows of the same preset. An analysis held by this test, not yet a charge of the estimate."""

from __future__ import annotations

import pytest

from benchmarks.accuracy.megatron_deepspeed_microbatch_cost import SWEEP_PREFIXES, fit, with_cost
from benchmarks.accuracy.validate_published_runs import published_rows


@pytest.fixture(scope="module")
def fitted() -> tuple[float, float]:
    return fit()


def test_the_fit_on_bigscience_sweeps(fitted):
    a, c = fitted
    assert 0.10 < a < 0.13 and 0.009 < c < 0.013  # 0.113 and 10.8 ms per micro-batch slot per layer today
    sweeps = [row for row in published_rows() if row["id"].startswith(SWEEP_PREFIXES)]
    assert len(sweeps) == 12 and not any(row["statistics"] for row in sweeps)
    assert all(abs(with_cost(row, a, c)[1]) < 0.06 for row in sweeps)


def test_held_out_counted_rows_come_within_ten_percent_and_the_v100_rows_do_not(fitted):
    a, c = fitted
    counted = [r for r in published_rows() if r.get("implementation") == "megatron-deepspeed" and r["statistics"]]
    assert {row["id"] for row in counted} == {
        "mt-nlg-530b-280-nodes", "mt-nlg-530b-350-nodes", "mt-nlg-530b-420-nodes", "bloom-176b", "gpt-neox-20b"
    }  # fmt: skip
    assert all(abs(with_cost(row, a, c)[1]) < 0.10 for row in counted)  # +32.9% .. +39.6% (MT-NLG) without it
    v100 = [r for r in published_rows() if r["id"].startswith("megatron-deepspeed-rebase-")]
    assert len(v100) == 2 and all(with_cost(row, a, c)[1] < -0.2 for row in v100)  # +4.6% and -6.0% without it

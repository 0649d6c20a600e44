"""Every catalog model gets an answer at realistic cluster sizes, 1 to 1024 GPUs (pure Python; ~10 s, so
marked slow: its file is scheduled with the other long ones, tests/conftest.py)."""

from __future__ import annotations

import pytest

from planner.hardware.cluster import make_cluster
from planner.models.catalog import load_catalog
from planner.search import PlanRequest, search_plans

SIZES = ((1, 1), (8, 1), (8, 8), (8, 128))  # (GPUs per node, nodes): 1, 8, 64, 1024 GPUs


@pytest.mark.slow
def test_plan_for_every_catalog_model_at_1_to_1024_gpus_gives_an_answer():
    problems = []
    for spec in load_catalog():
        seq_len = min(2048, spec.max_position_embeddings)
        for per_node, nodes in SIZES:
            cluster = make_cluster("H100-80GB", per_node, nodes)
            result = search_plans(spec, cluster, PlanRequest(seq_len=seq_len, top_k=3))
            where = f"{spec.name} on {cluster.world_size} GPUs"
            if result.best is None:
                if cluster.world_size == 1024 or not any("fewest that fits" in line for line in result.suggestions):
                    problems.append(f"{where}: nothing fits, suggestions {result.suggestions}")
                continue
            best = result.best
            speed = best.throughput
            if not (best.memory.fits and best.reasons and 0 < speed.mfu < 1 and speed.tokens_per_s > 0):
                problems.append(f"{where}: implausible best plan {best.reasons[:2]}")
            if best.global_batch != speed.global_batch or best.layout.world_size > cluster.world_size:
                problems.append(f"{where}: batch or layout inconsistent")
            if any("\n" in fate for fate in result.rejected.values()):
                problems.append(f"{where}: multi-line fate")
    assert not problems, "\n".join(problems[:10])

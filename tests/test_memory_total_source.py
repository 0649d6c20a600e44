"""The memory total's source names what it sums: it is printed alone (the tutorial's chapter 9 prints it on one
line, the report page's data carries it), where "sum of the above" had nothing above it. Reference: the
estimate's own per-GPU terms (per_gpu_bytes without the total), each of which the source must name."""

from __future__ import annotations

from planner.evaluate import memory_on
from planner.hardware.cluster import make_cluster
from planner.models.resolve import resolve_model
from planner.training_config import Strategy, TrainingConfig


def test_the_totals_source_names_every_term_it_sums() -> None:
    spec = resolve_model("gpt2")
    config = TrainingConfig(strategy=Strategy.FSDP, micro_batch=2, seq_len=512)
    memory = memory_on(spec, config, make_cluster("A100-80GB", gpus_per_node=8))
    source = memory.sources["total"]
    assert "the above" not in source
    terms = [name for name in memory.per_gpu_bytes if name != "total"]
    assert terms and sum(memory.per_gpu_bytes[name] for name in terms) == memory.per_gpu_bytes["total"]
    for name in terms:
        assert name.replace("_", " ") in source, name
    assert source.endswith(f"at the step's peak ({memory.peak_phase})")

"""A step peak found through its layout's shared parts is the peak computed from the candidate's own config.

The search asks the memory estimator about many candidates of one layout and checkpointing level that differ
only in the micro-batch and the accumulation (planner/memory/phases.py, peak_at): the layout's checks, model
states, buffers and activation terms are found once, from whichever candidate came first, and every other
candidate costs its batch's arithmetic. That is exact only while those parts read nothing of the batch (the
buffers under pipelining do: they are found per micro-batch) and the model states nothing of the checkpointing
level (they are shared across levels). This test compares every candidate's peak, field by field and float
for float, with one computed from its own config with every cache emptied, so a part that starts reading the
batch or the level fails it.
"""

from __future__ import annotations

import dataclasses

import pytest

from planner.hardware.cluster import make_cluster
from planner.memory import phases
from planner.memory.phases import BatchPeaks, batch_peaks, peak_at, step_peak
from planner.models.resolve import resolve_model
from planner.search.batching import batch_options, resolve_global_batch
from planner.search.candidates import precisions_for
from planner.search.checkpointing_modes import AC_ORDER, searched_checkpointing
from planner.search.layouts import enumerate_layouts
from planner.search.request import PlanRequest
from planner.training_config import TrainingConfig

CASES = [
    ("llama-2-7b", "H100-80GB", 8, 4, dict(global_batch=1024, seq_len=4096)),  # pipelines, ZeRO, FSDP, offload
    ("mixtral-8x7b", "H100-80GB", 8, 2, dict(global_batch=256, seq_len=2048)),  # experts, expert parallelism
    ("t5-3b", "A100-40GB", 4, 1, dict(seq_len=512)),  # encoder-decoder
    ("llava-1.5-7b", "A100-80GB", 8, 1, dict(seq_len=2048)),  # a vision tower
    ("gpt2-xl", "V100-32GB", 8, 1, dict(seq_len=1024, precision="fp32")),  # tied embeddings, fp32
]


@pytest.mark.parametrize("model, gpu, per_node, nodes, fields", CASES)
def test_peaks_through_the_shared_parts_equal_peaks_from_each_config(model, gpu, per_node, nodes, fields):
    spec = resolve_model(model)
    cluster = make_cluster(gpu, gpus_per_node=per_node, nodes=nodes)
    request = PlanRequest(**fields)
    request = request.model_copy(update={"global_batch": resolve_global_batch(request, cluster.world_size)[0]})
    world, per_node = cluster.world_size, cluster.gpus_per_node
    compared = pipelined = 0
    for layout in enumerate_layouts(spec, cluster, request):
        batches = batch_options(
            request,
            request.global_batch,
            world // layout.model_parallel,
            layout.pipeline_parallel,
            layout.micro_batch_rounds,
        )
        if not batches:
            continue
        # The search's order at its most varied: the largest batch first, then the rest, so the shared parts
        # are found from another candidate than most of those they serve.
        order = [batches[-1], *batches[:-1]]
        for precision in precisions_for(cluster, request):
            for ac in searched_checkpointing(spec, AC_ORDER):
                base = TrainingConfig(**layout.fields, seq_len=request.seq_len, precision=precision,
                                      activation_checkpointing=ac)  # fmt: skip
                phases._PEAKS.clear()
                shared = batch_peaks(spec, base, world_size=world, gpus_per_node=per_node)
                for micro, accum in order:
                    found = peak_at(spec, base, micro, accum, world, per_node, shared)
                    phases._PARTS.clear()
                    config = base.model_copy(update={"micro_batch": micro, "grad_accum": accum})
                    own = step_peak(spec, config, world_size=world, gpus_per_node=per_node, peaks=BatchPeaks())
                    assert dataclasses.asdict(found) == dataclasses.asdict(own), (layout.fields, ac, micro, accum)
                    compared += 1
                    pipelined += layout.pipeline_parallel > 1
    assert compared > 20
    if model == "llama-2-7b":
        assert pipelined  # the buffers' per-micro-batch parts were compared too

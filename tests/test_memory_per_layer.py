"""What one transformer block keeps, per HF family, against op-level traces.

Reference: benchmarks/results/memory_per_layer.json, recorded by
benchmarks/memory/memory_per_layer.py (3-layer minus 2-layer traces of tiny models, under
FakeTensorMode + MemTracker). Cheap: compares the recording, traces nothing.
"""

from __future__ import annotations

import json

import pytest

from benchmarks.memory.memory_per_layer import entries, estimated_per_layer, load
from benchmarks.memory.per_layer_models import CATALOG, model_config
from planner.models.hf_config import spec_from_hf_config

RECORDED = load()
TOLERANCE = 0.10


@pytest.mark.parametrize("entry", RECORDED, ids=[entry["label"] for entry in RECORDED])
def test_block_bytes_within_ten_percent_of_trace(entry):
    ours = estimated_per_layer(entry["label"])
    error = ours / entry["per_layer_bytes"] - 1
    assert abs(error) <= TOLERANCE, f"{entry['label']}: {ours:.0f} vs traced {entry['per_layer_bytes']} ({error:+.1%})"


def test_every_catalog_architecture_is_traced():
    catalog_types = {
        json.loads(path.read_text(encoding="utf-8"))["config"]["model_type"] for path in CATALOG.glob("*.json")
    }
    families = {entries()[entry["label"]][0] for entry in RECORDED}
    traced_types = {spec_from_hf_config(model_config(family, 2), name=family).model_type for family in families}
    assert catalog_types <= traced_types, sorted(catalog_types - traced_types)


OP_ENTRIES = [entry for entry in RECORDED if entry["label"].endswith("/op")]


@pytest.mark.parametrize("entry", OP_ENTRIES, ids=[entry["label"] for entry in OP_ENTRIES])
def test_op_level_checkpointing_keeps_what_the_trace_keeps_to_the_byte(entry):
    """Op-level checkpointing's count (planner/memory/op_checkpointing.py) is exact: the block's input, every second
    matmul's output and the attention kernel's, each a whole tensor (docs/accuracy.md, "Op-level checkpointing")."""
    assert estimated_per_layer(entry["label"]) == entry["per_layer_bytes"], entry["label"]


def test_op_level_entries_cover_fused_and_biased_projections():
    families = {entries()[entry["label"]][0] for entry in OP_ENTRIES}
    assert families == {"gpt2", "opt", "llama", "phi-3-mini", "qwen2.5-0.5b"} and len(OP_ENTRIES) == 16

"""The vision family: ViT planned for training end to end, its memory checked against traces.

References: the published sizes of ViT-B/16 (86.6M parameters) and ViT-L/16
(304.3M) (Dosovitskiy et al. 2021, Table 1, with the 1000-class head), which
the catalog's meta-device counts and the formula both reproduce exactly; the
memory estimate against MemTracker traces of transformers'
ViTForImageClassification (tests/test_memory_vs_trace.py rows vit-*,
docs/accuracy.md).
"""

from __future__ import annotations

import json

import pytest

from hardware_selector import get_distributed_training_config
from hardware_selector_cli.app import main
from planner.errors import UserInputError
from planner.models.resolve import resolve_model


@pytest.mark.parametrize("name, total", [("vit-base-patch16-224", 86_567_656), ("vit-large-patch16-224", 304_326_632)])
def test_vit_catalog_counts_are_the_published_sizes(name, total):
    spec = resolve_model(name)
    assert spec.params.total == total and spec.params.source == "meta-device"
    assert spec.max_position_embeddings == 197  # 14 x 14 patches and the CLS token
    assert spec.patch_values == 3 * 16 * 16 and spec.output_head is False


def test_plan_trains_a_vit_on_197_tokens_and_refuses_to_emit_a_text_run_folder(capsys, tmp_path):
    argv = ["plan", "--model", "vit-base-patch16-224", "--gpu", "A100-80GB", "--gpus-per-node", "4", "--json"]
    assert main([*argv, "--global-batch", "1024"]) == 0
    best = json.loads(capsys.readouterr().out)["best"]
    assert best["config"]["seq_len"] == 197 and best["strategy"] == "DDP"
    assert main([*argv[:-1], "--emit", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert "vision model" in err and "\n" not in err and not (tmp_path / "run").exists()


def test_the_selector_plans_vision_and_keeps_text_and_image_families_apart():
    config = get_distributed_training_config("vision", "google/vit-large-patch16-224", gpu_count=8, batch_size=64)
    assert config["fits"] and config["sequence_length"] == 197 and config["effective_batch_size"] == 512
    for family, model in (("vision", "bert-base-uncased"), ("text_classification", "vit-base-patch16-224")):
        with pytest.raises(UserInputError, match=f"not a '{family}' model"):
            get_distributed_training_config(family, model, gpu_count=1, batch_size=8)

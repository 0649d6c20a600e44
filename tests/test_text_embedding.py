"""The text_embedding family: bare BERT-style encoders trained for sentence embeddings (no vocabulary head).

References: the catalog counts are the meta-device counts of transformers'
BertModel for each published config (all-MiniLM-L6-v2 is 22.7M parameters,
bge-base 109.5M, bge-large and e5-large 335M, as their model cards state);
the memory estimate is checked against MemTracker traces of the real model
with an in-batch contrastive loss (tests/test_memory_vs_trace.py rows
*-embed-*, docs/accuracy.md).
"""

from __future__ import annotations

import pytest

from hardware_selector import get_distributed_training_config
from planner.errors import UserInputError
from planner.memory.estimate import estimate_memory
from planner.models.resolve import resolve_model
from planner.training_config import TrainingConfig


@pytest.mark.parametrize(
    "name, millions",
    [("all-minilm-l6-v2", 22.7), ("bge-base-en-v1.5", 109.5), ("bge-large-en-v1.5", 335.1), ("e5-large-v2", 335.1)],
)
def test_catalog_embedding_models_are_bare_encoders_of_their_published_size(name, millions):
    spec = resolve_model(name)
    assert spec.family.value == "encoder-only" and spec.transformers_class == "BertModel"
    assert spec.output_head is False and spec.params.source == "meta-device"
    assert spec.params.total / 1e6 == pytest.approx(millions, abs=0.1)


def test_an_embedding_encoder_keeps_no_logits_where_its_mlm_sibling_does():
    """bge-base and bert-base share every block; only the MLM head's logits over 30522 tokens differ."""
    config = TrainingConfig(strategy="ddp", micro_batch=32, seq_len=512)
    where = {"world_size": 1, "gpus_per_node": 1, "gpu_capacity_bytes": 80 * 2**30}
    embed = estimate_memory(resolve_model("bge-base-en-v1.5"), config, **where)
    mlm = estimate_memory(resolve_model("bert-base-uncased"), config, **where)
    logits_fp32 = 32 * 512 * 30522 * 4
    # At the peak the MLM step holds its fp32 logits (and more of the loss over them); the encoder does not.
    assert mlm.per_gpu_bytes["total"] - embed.per_gpu_bytes["total"] >= logits_fp32


def test_the_selector_plans_text_embedding_and_refuses_a_family_mismatch():
    config = get_distributed_training_config("text_embedding", "BAAI/bge-base-en-v1.5", gpu_count=4, batch_size=64)
    assert config["fits"] and config["distributed_strategy"] == "DDP"
    assert config["effective_batch_size"] == 256
    with pytest.raises(UserInputError, match="not a 'text_embedding' model") as error:
        get_distributed_training_config("text_embedding", "llama-2-7b", gpu_count=4, batch_size=1)
    assert "\n" not in str(error.value)

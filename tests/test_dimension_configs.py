"""The config.json a model typed as dimensions stands for (planner/models/dimension_configs.py), as transformers
builds it: every special-token id it ends up with lies inside the model's vocabulary.

The reference is transformers' own config class for each family (its defaults fill what the dict leaves out):
GPT-2's defaulted begin/end-of-text ids to 50256, past a 1,000-token embedding table, and the exported
final/config.json carried them.
"""

from __future__ import annotations

import pytest

from planner.models.dimension_configs import dimension_config

SPECIAL_IDS = ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id")


@pytest.mark.parametrize(
    ("mlp", "positions", "experts"),
    [("gated", "rope", 0), ("gated", "rope", 4), ("standard", "learned", 0), ("standard", "rope", 0),
     ("standard", "alibi", 0), ("standard", "none", 0)],
)  # fmt: skip
@pytest.mark.parametrize("vocab", [1000, 50257, 128256])
def test_special_token_ids_are_inside_the_vocabulary(mlp, positions, experts, vocab):
    from transformers import AutoConfig

    document = dimension_config(
        hidden=128, layers=2, heads=4, kv_heads=4, ffn=512, vocab=vocab, experts=experts,
        top_k=2 if experts else None, mlp=mlp, positions=positions, max_positions=2048,
    )  # fmt: skip
    fields = {key: value for key, value in document.items() if key != "model_type"}
    config = AutoConfig.for_model(document["model_type"], **fields)
    assert config.vocab_size == vocab
    for name in SPECIAL_IDS:
        ids = getattr(config, name, None)
        for token in ids if isinstance(ids, list) else [ids]:
            assert token is None or 0 <= token < vocab, (document["model_type"], name, token)

"""Expert parallelism's parameters per rank: the estimator against the real model (planner/memory/rank_params.py).

Reference: transformers' Mixtral on the meta device: every rank holds the
attention, router, norms and embeddings whole and 1/ep of the experts.
"""

from __future__ import annotations

import json

import pytest


@pytest.mark.parametrize("ep", [1, 2, 4, 8])
def test_each_rank_holds_its_share_of_the_experts_and_everything_else(tmp_path, ep):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from backends.weights.model_factory import catalog_config
    from planner.memory.rank_params import rank_params
    from planner.models.resolve import resolve_model
    from planner.training_config import TrainingConfig

    hf = {**catalog_config("mixtral-8x7b"), "num_hidden_layers": 4}
    (tmp_path / "config.json").write_text(json.dumps(hf))
    spec = resolve_model(str(tmp_path / "config.json"))
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**hf))
    total = sum(p.numel() for p in model.parameters())
    experts = sum(p.numel() for name, p in model.named_parameters() if ".experts." in name)
    config = TrainingConfig(strategy="engine", layout={"ep": ep}, seq_len=128)
    assert rank_params(spec, config).total == pytest.approx(total - experts * (1 - 1 / ep), rel=0.03)

"""What a config.json says about a model, before any parameter counting (planner/models/hf_config.py)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from planner.models.param_details import ParameterDetails
from planner.models.spec import ModelArchitecture


class ParsedConfig(BaseModel):
    """What a config.json says, before any parameter counting."""

    model_config = ConfigDict(frozen=True, defer_build=True)  # built on first use: a catalog model's plan makes none

    # Everything a ModelSpec holds but its name and counts (transformers class, dropouts, image tokens...).
    dims: ModelArchitecture
    details: ParameterDetails
    # LLaVA and CLIP: the vision tower's own config, with its own details; the LLM positions each image
    # fills and the projector's parameters are in dims (planner/models/multimodal_configs.py).
    vision_tower: ParsedConfig | None = None

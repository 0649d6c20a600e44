"""What a config.json says about a model, before any parameter counting (planner/models/hf_config.py)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from planner.models.architecture import ArchitectureDims
from planner.models.param_details import ParameterDetails


class ParsedConfig(BaseModel):
    """What a config.json says, before any parameter counting."""

    model_config = ConfigDict(frozen=True)

    dims: ArchitectureDims
    details: ParameterDetails
    transformers_class: str
    hidden_dropout: float = 0.0
    attention_dropout: float = 0.0
    output_head: bool = True
    # LLaVA-style models: the vision tower's own config, the LLM positions each image fills, and the
    # projector between them; CLIP: the vision tower and both projections (planner/models/multimodal_configs.py).
    vision_tower: ParsedConfig | None = None
    image_tokens: int = 0
    projector_params: int = 0

"""What a model is, for planning: its spec (spec.py) read from the catalog (catalog.py), an HF config.json
(hf_config.py, with exact parameter counts from param_count.py or formulas from param_formula.py), explicit
dimensions or a bare parameter count (resolve.py); the seed interface's old names (legacy_names.py); the
FLOPs of a training step (flops.py); and the per-model-type facts every part reads (families.py)."""

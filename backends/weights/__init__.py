"""A model's weights: build the model (`model_factory.py`, `model_init.py`), read a checkpoint's tensors or only
a rank's slices of them (`source.py`, `sliced_load.py`, `expert_checkpoints.py`), and gather a tp/pp-split model
back into HF-named tensors (`parallel_checkpoint.py`). Used from below by the engine, the adapters and the
runner (docs/architecture.md, "Floors"). Import the modules directly.
"""

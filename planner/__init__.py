"""The planner: model and hardware specs, memory and speed estimates, strategy search.

Nothing here imports torch.distributed; torch and transformers are imported
lazily, only by the functions that build real models.
"""

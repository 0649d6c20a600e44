"""Our engine (docs/engine.md): `initialize` builds it from a model and an engine config; `engine.py` runs
forward, backward and step over our ZeRO; `inputs.py` calls the model with a batch; `initialize_args.py` reads
deepspeed.initialize's arguments;
`setup_training.py` is the one call from a plan to a hand-written loop. Import the modules directly.
"""

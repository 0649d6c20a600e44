"""The one runner behind `python -m backends.run` (docs/running.md): the loop (loop.py), the folder and world it
runs in (folder.py, world.py), the model and its weights (model_init.py, weights.py, sliced_load.py), and what a
user watches and keeps (metrics.py, progress.py, anomaly.py, checkpoints.py, export.py, summary.py).

Nothing is imported here: `hardware-selector train` reads the options and the folder without loading torch."""

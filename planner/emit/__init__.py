"""Renderers: each file of a run folder as text, from the values planner/rundir/ derives once.

One file per artifact (docs/emitted-files.md): plan_json, deepspeed_json, accelerate_yaml, training_args,
engine_json, launch_scripts, slurm, run_readme; hf_model gives the model block they share. None of them
writes to disk or derives a number of its own: planner/rundir/write.py renders them all from one RunConfig and
writes the folder (tests/test_emit_consistency.py).
"""

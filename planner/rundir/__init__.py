"""The run folder: derive its RunConfig and engine config once, write it, read it back, override it, archive it.

Above planner/emit/ (whose renderers it calls) and below the CLI, the selector and the backends, which read a
run folder only through here (docs/architecture.md, "Floors"). Import the modules directly:
`planner.rundir.write.emit_run_folder`, `planner.rundir.plan_file.read_plan_file`, ...
"""

"""Lines `plan --emit` prints after its table: what a re-emission moved aside, what the run will say at its start
(random weights, a config's own modeling code that is not run), and an elastic folder's plan for each node count
(docs/running.md, "Elastic"). `tune` prints the moved-aside line too."""

from __future__ import annotations

from pathlib import Path


def start_notes(folder: Path) -> list[str]:
    """The lines saying the run starts from random weights, when its model folder holds none (or none it loads
    and --init random asked for that), and that a config's own modeling code is not run: what `train` says again
    at its start."""
    import json

    from planner.contract.run_config import ModelSource
    from planner.rundir.run_overrides import model_notes

    model = ModelSource.model_validate(json.loads((folder / "plan.json").read_text(encoding="utf-8"))["run"]["model"])
    return model_notes(model)


def moved_run_line(folder: Path, previous: list[str]) -> str:
    """What a re-emission over a trained folder moved aside (planner/rundir/previous_run.py), and where to."""
    kept = sorted((folder / "previous").iterdir())[-1]
    return f"moved the previous run's {', '.join(previous)} to {kept} (kept, not resumed)"


def elastic_lines(best, elastic) -> list[str]:
    """What an elastic folder falls back to on each node count (plan.json's "elastic" block)."""
    if elastic is None:
        return []
    from planner.contract.sources import prediction_source
    from planner.rundir.replan import layout_summary
    from planner.units import counted

    narrowed = elastic.narrowing()
    lines = [*([narrowed] if narrowed else [])]
    lines += [
        f"elastic over {elastic.node_range} nodes (launch.sh and slurm.sbatch restart up to {elastic.max_restarts} "
        f"times), the global batch kept at {best.global_batch}; step times, each with its source as in the table:"
    ]
    for entry in elastic.fallbacks:
        where = f"  {entry.num_nodes} node(s), {counted(entry.world_size, 'process', 'processes')}: "
        if not entry.fits:
            lines.append(where + f"nothing fits ({entry.why_not})")
            continue
        plan = entry.plan(best)
        speed = (  # a count's own record or calibration replaces the formula: said beside it (prediction_source)
            f", predicted {plan.throughput.step_time_s:.3g} s/step "
            f"({prediction_source(plan.throughput.sources.get('step_time_s', ''))})"
            if plan.throughput
            else ""
        )
        lines.append(
            where + f"{layout_summary(plan)}, micro-batch {plan.config.micro_batch} x accumulation "
            f"{plan.config.grad_accum}{speed}{' (the plan)' if entry.num_nodes == best.cluster.num_nodes else ''}"
        )
    return lines

"""`plan`: search every strategy for a model on a cluster and show the best that fit.

parse (the option groups) -> search (or plan serving) -> print, and emit the best plan's run folder. The
search (planner/search) is pure Python; nothing on this path imports torch, transformers or deepspeed, so
planning a catalog model is instant.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from planner.errors import UserInputError
from planner.launch_target import TARGETS, launch_target, placeholder_warning

from .cost_options import CostOptions, check_cost_flags, cost_options, run_cost_plan
from .given_flags import given_flags
from .model_options import ModelOptions, model_options
from .option_groups import option_group
from .plan_lines import elastic_lines, moved_run_line, start_notes
from .plan_table import print_plans, search_document
from .run_options import RunOptionValues, emit_folder, run_option_values
from .search_options import SearchOptions, search_options
from .serving import (
    ServingOptions,
    check_formats_on,
    print_serving,
    serving_options,
    serving_request,
    serving_title,
)
from .training_options import ClusterOptions, cluster_options, routing_options

# "Will it fit?" answered in the exit status too: 0 a plan fits, 1 nothing does (what would is printed), 2 a
# mistake in the request (docs/errors.md). Scripts and CI can gate on it, as the seed command always did.
NOTHING_FITS_EXIT = 1

if TYPE_CHECKING:
    from planner.expert_routing import ExpertRouting


def register(app: typer.Typer) -> None:
    @app.command("plan")
    @option_group("model", model_options)
    @option_group("cluster", cluster_options)
    @option_group("search", search_options)
    @option_group("run", run_option_values)
    @option_group("serving", serving_options)
    @option_group("routing", routing_options)
    @option_group("cost", cost_options)
    def plan_command(
        ctx: typer.Context,
        model: ModelOptions,
        cluster: ClusterOptions,
        search: SearchOptions,
        run: RunOptionValues,
        serving: ServingOptions,
        routing: ExpertRouting,
        cost: CostOptions,
        as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
        explain: bool = typer.Option(False, "--explain", help="Reasons and memory sources for every plan shown."),
        emit_dir: str | None = typer.Option(None, "--emit", help="Write the best plan's run folder here."),
        elastic: str | None = typer.Option(
            None,
            "--elastic",
            metavar="MIN:MAX",
            help="With --emit: run elastic over MIN to MAX nodes; plan.json holds each node count's layout, "
            "and a run restarted on the nodes that remain re-plans to it (docs/running.md, Elastic).",
        ),
        launcher: str | None = typer.Option(
            None,
            "--launcher",
            metavar="|".join(TARGETS),
            help="With --emit: where the folder runs. k8s adds pytorchjob.yaml, skypilot adds skypilot.yaml, mpi makes "
            "launch.sh start mpiexec; every target starts python -m backends.run (docs/running.md, Launchers).",
        ),
        image: str | None = typer.Option(
            None, "--image", help="With --launcher k8s or skypilot: the container image the pods or nodes run."
        ),
        force: bool = typer.Option(
            False,
            "--force",
            help="With --emit: overwrite an existing folder (a trained run's "
            "state is moved to previous/<time>/, never deleted or resumed).",
        ),
        db: Path | None = typer.Option(
            None, "--db", help="Benchmark database to calibrate with (default: $HARDWARE_SELECTOR_DB or the cache dir)."
        ),
        no_calibration: bool = typer.Option(
            False, "--no-calibration", help="Ignore benchmark records: analytical estimates only."
        ),
        report_file: str | None = typer.Option(
            None,
            "--report",
            metavar="FILE.html",
            help="Also write the candidates' memory and step time, why each family lost and the sources as one "
            # \\[ : rich would read "[report]" as a style tag and print the install line without it
            "self-contained HTML page (the report extra: pip install 'hardware-selector\\[report]').",
        ),
    ) -> None:
        """Find the fastest (or cheapest) way to train a model on a cluster, and explain it."""
        cluster.given = tuple(given_flags(ctx, cluster_options))  # a detected machine takes what is given
        emit = emit_folder(emit_dir)
        launch = launch_target(launcher, image, elastic=elastic is not None)
        if force and emit is None:  # whatever the mode: only an emitted folder has files to replace
            raise UserInputError("--force replaces the files of an emitted folder; add --emit DIR, or drop --force")
        # Serving first: its refusal of the training-only flags (--clouds among them) comes before
        # --clouds' own path, which would otherwise plan training and drop --mode inference.
        if serving.inference:
            training_only = search.training_flags_given(routing_default=routing.is_default, emitting=emit is not None)
            training_only += run.given() + (["--launcher"] if launch is not None else [])
            training_only += ["--elastic"] if elastic is not None else []
            training_only += [
                flag
                for flag, value in (("--nvme-gb", cluster.nvme_gb), ("--nvme-gbps", cluster.nvme_gbps))
                if value is not None
            ]  # offload is training's (fmt: skip)
            training_only += ["--report"] if report_file is not None else []  # the page draws training plans
            training_only += cost.given() + (["--clouds"] if cost.clouds is not None else [])
            if training_only:
                raise UserInputError(
                    f"{', '.join(training_only)}: training only, and --mode inference plans serving; drop "
                    f"{'it' if len(training_only) == 1 else 'them'} (or drop --mode inference to plan training)"
                )
            _plan_serving(model, cluster, search, serving, as_json, explain)
            return
        if emit is not None:  # a run flag out of range is a mistake before the search, never "no plan fits"
            from planner.rundir.override_ranges import check_override_ranges

            check_override_ranges(run.overrides())
        check_cost_flags(cost, search.objective, cluster)
        if cost.clouds is not None:
            if explain or search.top != 5:
                shown = ["--explain"] if explain else ["--top"]
                raise UserInputError(
                    f"{shown[0]} shapes the strategy table; --clouds prints its own table (each cloud's two cheapest): "
                    f"drop {shown[0]}"
                )
            if report_file is not None or launch is not None:
                flag = "--report" if report_file is not None else "--launcher"
                raise UserInputError(f"{flag} is for one cluster's plan; --clouds compares clouds: drop one of them")
            _plan_cost(model, cluster, search, routing, cost, run, emit, elastic, db, no_calibration, as_json)
            return
        if emit is None and (run.given() or elastic is not None or launch is not None):
            given = run.given() or ["--elastic" if elastic is not None else "--launcher"]
            verb = "describes" if len(given) == 1 else "describe"
            raise UserInputError(f"{', '.join(given)} {verb} the run of an emitted folder; add --emit DIR")
        overrides = run.overrides() if emit is not None else None
        search.check(emitting=emit is not None)
        if search.no_offload and cluster.nvme_gb:  # NVMe is there only to offload to
            raise UserInputError(
                f"--nvme-gb {cluster.nvme_gb:g} offers NVMe to offload to, and --no-offload leaves offload out; "
                "drop one of them"
            )
        report_target = _report_target(report_file)
        spec, target, request, result, calibration = _search(
            model,
            cluster,
            search,
            routing,
            db,
            no_calibration,
            steps=run.values.get("steps"),
            emitting=emit is not None,
        )
        if elastic is not None:  # a range without the asked node count is said before whether a plan fits there
            from planner.elastic_plan import parse_node_range

            parse_node_range(elastic, target.num_nodes)
        written = None
        if emit is not None and result.best is None:  # what would fit is printed below; exit 1 as without --emit
            print(f"wrote nothing to {emit}: no plan fits", file=sys.stderr)
        elif emit is not None:
            fallbacks = _fallbacks(elastic, spec, request, result, db, no_calibration)
            from planner.search.request import search_restrictions

            restrictions = search_restrictions(request)  # plan.json keeps them: `tune RUN_DIR` searches the same
            written = _emit(result, spec, target, emit, force, overrides, fallbacks, launch, restrictions)
        title = f"{spec.name} on {target.world_size} x {target.gpu.name}, seq {request.seq_len}"
        tokens_from = _tokens_from(search, request, run.values if emit is not None else None)
        if report_target is not None:
            from planner.report.page import write_page
            from planner.report.plan_data import plan_report
            from planner.throughput.to_train import tokens_source

            write_page(report_target, plan_report(result, title, tokens_source(tokens_from)))
            written = [*(written or []), f"wrote the report page to {report_target}"]
        if as_json:
            print(json.dumps(search_document(result, tokens_from), indent=2))
        else:
            print_plans(result, title, explain, tokens_from=tokens_from)
            from rich.console import Console

            # The best plan's own line: the records may have changed none of its figures (planner/calibration.py).
            said = result.best.calibration if result.best is not None else calibration
            Console().print(f"throughput {said}", markup=False, highlight=False, style="dim")
        if written is not None:
            stream = sys.stderr if as_json else sys.stdout
            for line in written:
                print(line, file=stream)
        if result.best is None:
            raise typer.Exit(NOTHING_FITS_EXIT)


def _report_target(report_file: str | None) -> Path | None:
    """--report's page, checked (an .html name, plotly installed) before any search is done."""
    if report_file is None:
        return None
    from planner.report.page import check_report_target

    return check_report_target(report_file, "--report")


def _plan_cost(model, cluster, search, routing, cost, run, emit, elastic, db, no_calibration, as_json) -> None:
    """--clouds: the cheapest cloud x GPU x count (cost_options.py); of the run's flags it reads --save-every."""
    others = [flag for flag in run.given() if flag != "--save-every"]
    if emit is not None or elastic is not None or others:
        given = (["--emit"] if emit is not None else []) + (["--elastic"] if elastic else []) + others
        raise UserInputError(
            f"{', '.join(given)}: --clouds compares clouds and emits nothing; plan the winner with --gpu and --nodes "
            "to emit it"
        )
    run_cost_plan(model, cluster, search, routing, cost, run.values.get("save_every"), db, no_calibration, as_json)


def _plan_serving(model: ModelOptions, cluster: ClusterOptions, search: SearchOptions, serving, as_json, explain):
    from planner.inference import plan_serving

    if not 0 <= search.headroom < 1:
        raise UserInputError(f"--headroom must be in [0, 1), not {search.headroom}")
    spec = model.resolve()
    target = cluster.target()
    request = serving_request(serving, search.objective, search.top, search.headroom, spec)
    check_formats_on(serving, target.gpu)
    result = plan_serving(spec, target, request)
    print_serving(result, serving_title(spec, target, request), as_json, explain)
    if result.best is None:
        raise typer.Exit(NOTHING_FITS_EXIT)


def _tokens_from(search: SearchOptions, request, run_values: dict | None) -> str | None:
    """Where the time and cost columns' token count came from: --tokens, the run's --steps, or the default.
    run_values: the emitted run's flags (None without --emit). An emitted run without --steps trains --epochs
    (default 1) over its data, whose tokens only `train` counts (tokenizing it all; planner/rundir/data_bound.py
    bounds it, no more): the default budget is then named as not the run's, never passed off as it."""
    steps = (run_values or {}).get("steps")
    if search.tokens is not None:
        return "--tokens"
    if request.train_tokens is not None:
        return f"--steps {steps} x global batch {request.global_batch} x seq {request.seq_len}"
    if run_values is not None and steps is None:
        from planner.search.request import CHINCHILLA_TOKENS_PER_PARAM

        epochs = run_values.get("epochs") or 1
        data = "--data" if run_values.get("data") else "the run's data"
        return (
            f"{CHINCHILLA_TOKENS_PER_PARAM} per parameter, Chinchilla, the default: NOT this run's, which trains {epochs:g} epoch(s) over {data}, whose tokens "
            "are counted only when `train` tokenizes it; give --tokens (the data's tokens x epochs) or --steps for "
            "the run's time and cost"
        )
    return None


def _search(
    model: ModelOptions,
    cluster: ClusterOptions,
    search: SearchOptions,
    routing,
    db,
    no_calibration,
    steps=None,
    emitting: bool = False,
):
    """The model, the cluster, the request, the search's result, and the calibration line. A run of --steps
    at a given --global-batch trains steps x batch x seq tokens: the time and cost columns count those, unless
    --tokens says otherwise (with the batch left to the search, each plan's own batch would differ)."""
    from dataclasses import replace

    from planner.search import search_plans
    from planner.search.request import default_seq_len
    from planner.search.suggest import PLAN_FLAGS

    spec = model.resolve()
    request = search.request(search.seq_len or default_seq_len(spec), routing)
    if steps and search.tokens is None and request.global_batch:
        request = request.model_copy(update={"train_tokens": float(steps * request.global_batch * request.seq_len)})
    target = cluster.target()
    from .calibration_hook import search_calibration

    adjust, calibration = search_calibration(spec, target, db=db, off=no_calibration)
    # A run folder trains every weight (--emit refuses LoRA): "nothing fits" does not suggest adapters to it.
    flags = replace(PLAN_FLAGS, lora=None) if emitting else PLAN_FLAGS
    result = search_plans(spec, target, request, adjust, calibration=calibration, flags=flags)
    return spec, target, request, result, calibration


def _fallbacks(elastic: str | None, spec, request, result, db, no_calibration):
    """The elastic table of `--elastic MIN:MAX` for the best plan (planner/search/elastic.py), or None; each node
    count's search calibrated as the plan's was, for its own cluster (calibration_hook.py)."""
    if elastic is None or result.best is None:
        return None
    from planner.elastic_plan import parse_node_range
    from planner.search.elastic import elastic_plan

    from .calibration_hook import cluster_calibration

    node_range = parse_node_range(elastic, result.best.cluster.num_nodes)
    calibrate = cluster_calibration(spec, db=db, off=no_calibration)
    return elastic_plan(spec, request, result.best, node_range, calibrate=calibrate)


# --force moves a trained run's state to previous/ and replaces plan.json: under a running job, its next write fails.
REEMIT_WHILE_TRAINING = "re-emitting the folder would move its checkpoints and metrics from under it"


def _emit(
    result, spec, target, emit: Path, force: bool, overrides, elastic=None, launch=None, search=None
) -> list[str]:
    """Write the best plan's run folder; the lines that say what was written and what was moved aside."""
    from planner.rundir.manifest import foreign_files
    from planner.rundir.previous_run import previous_run_state
    from planner.rundir.write import ARTIFACTS, CLI_NAMES, emit_run_folder
    from planner.search import require_best

    best = require_best(result, f"{spec.name} on {target.world_size} x {target.gpu.name}")
    folder = emit.expanduser().resolve()
    if force:
        from backends.runner.run_lock import refuse_if_held

        refuse_if_held(folder, REEMIT_WHILE_TRAINING)
    previous = previous_run_state(folder) if force and folder.is_dir() else []
    theirs = foreign_files(folder, ARTIFACTS, ARTIFACTS) if force and folder.is_dir() else []
    written = emit_run_folder(
        best, emit, force=force, overrides=overrides, elastic=elastic, launch=launch, search=search, names=CLI_NAMES
    )
    from planner.emit.skypilot_task import instance_shape_warning  # here: `--help` imports no emitter (pydantic)

    for warning in (
        placeholder_warning(launch),
        instance_shape_warning(launch, best.cluster.gpu.name, best.cluster.gpus_per_node),
    ):
        if warning:
            print(warning, file=sys.stderr)
    lines = []
    if theirs:  # files of the same names that hardware-selector did not write: moved with the run state, kept
        kept = sorted((folder / "previous").iterdir())[-1]
        lines.append(
            f"moved {', '.join(theirs)} (not written by hardware-selector) to {kept}; --force replaces only its own files"
        )
    if previous:
        lines.append(moved_run_line(folder, previous))
    return [*lines, f"wrote {len(written)} files to {emit}", *start_notes(folder), *elastic_lines(best, elastic)]

"""`tune`: measure the search's top plans on this machine for minutes, and re-rank them by what was measured.

    hardware-selector tune -m gpt2 --gpu cpu --gpus-per-node 2 --tiny --budget 3 --emit runs/best
    hardware-selector tune RUN_DIR        # the folder's model, cluster and batch; the winner is re-emitted there

parse -> search (planner/search) -> trials (benchmarks/harness/tune.py, one torchrun job of the one runner
each) -> the measured order, why it moved, and the winner's run folder, whose plan.json names its trials
(docs/running.md, "Tune"). The trials are records in the benchmark database, so they calibrate later plans;
a trial already recorded is read back (a stopped tune resumes), unless --remeasure asks for it again.
"""

from __future__ import annotations

import sys
from contextlib import ExitStack
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from planner.errors import UserInputError

from .given_flags import given_flags
from .interrupts import said_when_interrupted
from .model_options import ModelOptions, model_options
from .option_groups import option_group
from .search_options import SearchOptions, search_options
from .training_options import ClusterOptions, cluster_options, routing_options
from .tune_winner import refuse_while_training

if TYPE_CHECKING:
    from planner.expert_routing import ExpertRouting


def register(app: typer.Typer) -> None:
    @app.command("tune")
    @option_group("model", model_options)
    @option_group("cluster", cluster_options)
    @option_group("search", search_options)
    @option_group("routing", routing_options)
    def tune_command(
        ctx: typer.Context,
        model: ModelOptions,
        cluster: ClusterOptions,
        search: SearchOptions,
        routing: ExpertRouting,
        run_dir: Path | None = typer.Argument(None, help="A run folder to tune (default: plan from the flags)."),
        candidates: int = typer.Option(
            3, "--candidates", help="How many of the search's best strategy families to measure (K)."
        ),
        budget: float = typer.Option(10.0, "--budget", help="Minutes the whole tune may take."),
        steps: int = typer.Option(
            50, "--steps", help="Timed steps per trial at the most (fewer when the budget holds fewer)."
        ),
        tiny: bool = typer.Option(False, "--tiny", help="Measure the architecture shrunk (a smoke test, not a tune)."),
        synthetic: bool = typer.Option(
            False, "--synthetic", help="Time the model on synthetic tokens, not the run folder's data."
        ),
        memory_limit_gb: float | None = typer.Option(
            None,
            "--memory-limit-gb",
            help="Count a trial as out of memory when a rank's peak passes this (the GPU's capacity, say).",
        ),
        emit_dir: str | None = typer.Option(
            None, "--emit", help="Write the measured winner's run folder here (default: RUN_DIR itself)."
        ),
        launcher: str = typer.Option(
            "torchrun",
            "--launcher",
            metavar="NAME",
            help="torchrun, accelerate or deepspeed: what starts each trial's processes on this machine (not plan's "
            "--launcher, which says where a folder runs on a cluster).",
        ),
        remeasure: bool = typer.Option(
            False,
            "--remeasure",
            help="Measure every trial again (default: a trial the database already holds for this plan and "
            "hardware is read back, so a stopped tune resumes).",
        ),
        force: bool = typer.Option(
            False,
            "--force",
            help="Overwrite --emit's existing folder, or replace RUN_DIR's trained run by a winner of another plan "
            "(the trained run's state is moved to previous/<time>/, kept).",
        ),
        db: Path | None = typer.Option(None, "--db", help="Benchmark database (default: $HARDWARE_SELECTOR_DB)."),
        no_calibration: bool = typer.Option(
            False, "--no-calibration", help="Predict as the formula does, not calibrated by the database's records."
        ),
    ) -> None:
        """Run the search's top plans here for a measured window each and rank them by what was measured."""
        with said_when_interrupted(INTERRUPTED), ExitStack() as held:
            _tune(**locals())  # the parameters above, by name, and `held`: what tune holds until it ends


# Ctrl-C anywhere in a tune: the trials that ended were recorded, or their folders kept, and the winner's folder is
# written whole or not at all (planner/rundir/write.py), so running the same tune again picks up where it stopped.
INTERRUPTED = (
    "interrupted: {signal}; run the same `hardware-selector tune` again to resume: the trials that ended are read "
    "back, not measured again (--remeasure measures them anew)"
)


def _tune(
    ctx,
    model,
    cluster,
    search,
    routing,
    run_dir,
    candidates,
    budget,
    steps,
    tiny,
    synthetic,
    memory_limit_gb,
    emit_dir,
    launcher,
    remeasure,
    force,
    db,
    no_calibration,
    held: ExitStack,
) -> None:
    """tune_command's work (docs/running.md, "Tune")."""
    from .run_options import emit_folder

    emit = emit_folder(emit_dir)
    if candidates < 1:
        raise UserInputError(f"--candidates must be at least 1, not {candidates}")
    if not 0 < budget <= 24 * 60:
        raise UserInputError(f"--budget is minutes, more than 0 and at most a day, not {budget:g}")
    from benchmarks.harness.tune import MIN_TIMED_STEPS

    if steps < MIN_TIMED_STEPS:  # a trial's time is its timed steps' median
        raise UserInputError(f"--steps is the timed steps per trial, at least {MIN_TIMED_STEPS}, not {steps}")
    given = given_flags(ctx, search_options, routing_options)  # whatever their values: one at its default too
    if "--top" in given:
        raise UserInputError("tune measures the search's best --candidates K plans and shows them all; drop --top")
    ignored = given_flags(ctx, model_options, cluster_options) + [f for f in FOLDER_SEARCH_FLAGS if f in given]
    if run_dir is not None and ignored:
        raise UserInputError(f"tune RUN_DIR tunes the folder's own model and cluster; drop {', '.join(ignored)}")
    if run_dir is not None and emit is not None and emit.expanduser().resolve() == run_dir.expanduser().resolve():
        emit = None  # --emit RUN_DIR: the folder's own tune
    overriding = [flag for flag in given if flag in SEARCH_OVERRIDES]  # RUN_DIR's search, widened or narrowed
    searched = [flag for flag in given if flag not in (*SEARCH_OVERRIDES, *FOLDER_SEARCH_FLAGS)]
    if run_dir is not None and "--tokens" in searched:  # recorded in plan.json's search, not replaced here
        raise UserInputError(
            "tune RUN_DIR ranks by the training length its plan.json recorded (plan --tokens); drop --tokens, or "
            "plan with it first (plan --emit DIR --tokens N ...) and tune that folder"
        )
    if run_dir is not None and searched:
        raise UserInputError(
            f"tune RUN_DIR searches for the folder's own batch, length and precision; drop {', '.join(searched)}, "
            "or plan with them first (plan --emit DIR ...) and tune that folder"
        )
    if force and emit is None and run_dir is None:  # beside RUN_DIR: a trained run's state may be moved aside
        raise UserInputError("--force replaces the files of an --emit folder; add --emit DIR, or drop --force")
    if run_dir is not None and not run_dir.is_dir():  # as report says it, not "plan.json/plan.json: cannot read"
        from planner.rundir.plan_file import EMIT_HINT

        what = f"{run_dir} is a file, not a run folder" if run_dir.exists() else f"{run_dir}: no such run folder"
        raise UserInputError(f"{what}; {EMIT_HINT}")
    from backends.runner.output_paths import check_database
    from backends.runner.run_lock import TUNING, holding_run_lock
    from benchmarks_db.paths import db_origin, resolve_db_path

    check_database(resolve_db_path(db), db_origin(db))  # as train checks it: before the trials, not after them
    if run_dir is not None:
        run_dir = run_dir.expanduser().resolve()  # the trials run elsewhere: a relative path would not hold
        refuse_while_training(run_dir)  # before the trials, and again before the winner replaces the folder
        held.enter_context(holding_run_lock(run_dir, TUNING))  # no `train` or second tune beside the trials
    if emit is not None:
        from planner.rundir.write import CLI_NAMES, emit_target

        emit_target(emit, force=force, names=CLI_NAMES)  # before the trials, not after them
        if force:
            refuse_while_training(emit.expanduser().resolve())
    from .calibration_hook import search_calibration

    calibrate = partial(search_calibration, db=db, off=no_calibration)
    spec, target, plans, options, elastic, restrictions = _candidates(
        run_dir, model, cluster, search, routing, candidates, overriding, calibrate
    )
    if target.num_nodes > 1:
        # RUN_DIR's own cluster is tuned: --nodes 1 beside it would be ignored, so the line says what works.
        one_node = (
            "emit a one-node folder of it (plan ... --nodes 1 --emit DIR) and tune that"
            if run_dir is not None
            else "tune one node's layout here (--nodes 1)"
        )
        raise UserInputError(
            f"tune measures this machine, and the plan is for {target.num_nodes} nodes; {one_node}, or run the "
            "trials on the cluster with run-training-benchmark"
        )
    if not tiny and target.gpu.kind != "cpu":  # as `train` refuses it: not a launch and a record per trial
        from backends.cpu_distributed import runs_on_cpu_instead  # imports torch: only here

        runs_on_cpu_instead("cuda", tiny=False)
    from benchmarks.harness.tune import measured_order, order_changes, run_tune
    from benchmarks_db.store import BenchmarkStore

    store = BenchmarkStore(db)
    from benchmarks.harness.processes import LAUNCHERS, run_torchrun_command

    if launcher not in LAUNCHERS:
        raise UserInputError(f"--launcher must be one of {', '.join(LAUNCHERS)}, not '{launcher}'")
    if memory_limit_gb is not None and not 0 < memory_limit_gb < 1e6:
        raise UserInputError(f"--memory-limit-gb is more than 0 GB, not {memory_limit_gb:g}")
    if synthetic and options is not None:
        options = options.model_copy(update={"data": options.data.model_copy(update={"train": [], "eval": []})})
    outcome = run_tune(
        spec,
        target,
        plans,
        tiny=tiny,
        budget_s=budget * 60,
        store=store,
        options=options,
        memory_limit_gb=memory_limit_gb,
        token_cache=run_dir / "data" if run_dir is not None and not synthetic else None,
        run_command=partial(run_torchrun_command, launcher=launcher),
        remeasure=remeasure,
        most_steps=steps,
    )
    found = outcome.trials
    from .tune_table import print_trials

    print_trials(found, outcome, store.path, "cpu" if target.gpu.kind == "cpu" else "cuda")
    from .tune_calibration import measured_winner

    searched = plans[0].calibration or "not calibrated"  # said before the trials were records: what pred rests on
    recorded = calibrate(spec, target)  # the trials are records now (a fresh database is theirs)
    if tiny:
        print("--tiny measures the shrunken architecture: the order is what counts, not measured/predicted")
    if outcome.link_GBps:
        measured = ", ".join(f"{kind} {rate:.3g}" for kind, rate in outcome.link_GBps.items())
        print(
            f"links here (GB/s per rank, probed once per launch): {measured}; the plan assumed "
            f"{outcome.assumed_link_GBps:.3g} = {outcome.assumed_link_source}"
        )
    for line in order_changes(found, compare=not tiny, links=outcome.link_GBps, assumed_GBps=outcome.assumed_link_GBps):
        print(f"  - {line}")
    ranked = [trial for trial in measured_order(found) if trial.status == "ok"]
    if not ranked:
        _say_calibration(plans[0], searched, recorded)
        raise UserInputError("no trial ran to the end here; each one's reason is above")
    keys = [trial.key for trial in found]

    def plan_of(trial):
        """The trial's plan; timed by its trial, a record now (not --tiny: that measured the shrunken model)."""
        plan = plans[keys.index(trial.key)]
        return measured_winner(plan, recorded) if not tiny and not no_calibration else plan

    winner, best, fallbacks = ranked[0], plan_of(ranked[0]), None
    if elastic is not None:  # an elastic folder stays elastic: the fastest plan that keeps its node range
        from dataclasses import replace

        from .calibration_hook import cluster_calibration
        from .tune_elastic import elastic_winner

        # Its fallbacks calibrated as the ranking is, by the database as the trials left it; its own count: its trial.
        elastic = replace(elastic, calibrate=cluster_calibration(spec, db=db, off=no_calibration))
        winner, best, fallbacks = elastic_winner(ranked, plan_of, elastic)
    _say_calibration(best, searched, recorded)  # as `plan` says it of its best plan: here the winner
    folder = emit if emit is not None else run_dir
    if folder is not None:
        tune = {
            "winner": winner.label,
            "trials": [trial.model_dump(mode="json") for trial in found],
            "link_GBps": outcome.link_GBps,
            "assumed_link_GBps": outcome.assumed_link_GBps,
        }
        from .tune_winner import write_winner

        own = emit is None
        write_winner(
            best, winner.label, folder, own_folder=own, force=force, tune=tune, options=options, elastic=fallbacks,
            search=restrictions,
        )  # fmt: skip


def _say_calibration(best, searched: str, recorded) -> None:
    """The `throughput ...` line of the winner as the database holds it after the trials, and the search's line
    (what `pred` rests on) when that said otherwise (hardware_selector_cli/tune_calibration.py)."""
    from .tune_calibration import winner_line

    now = winner_line(best, recorded)
    if now != searched:
        print(f"pred was predicted before these trials were records: {searched}")
    print(f"throughput {now}")


def _candidates(run_dir, model, cluster, search, routing, top_k, overriding, calibrate):
    """The model, the cluster, the top K plans (best of each strategy family), the run's options, for an
    elastic folder how to make the winner's elastic table (its candidates are the families that reshard), and the
    search's restrictions (a folder's own, as plan.json records them, with the flags in `overriding` replacing
    theirs)."""
    from planner.search import PlanRequest, search_plans
    from planner.search.request import restricted_fields, search_restrictions

    if run_dir is None:
        from planner.search.request import default_seq_len

        spec = model.resolve()
        search.check(emitting=True)
        request = search.request(search.seq_len or default_seq_len(spec), routing)
        target = cluster.resolve()
        options = elastic = None
        restrictions = search_restrictions(request)
    else:
        from planner.rundir.plan_file import read_plan_file
        from planner.rundir.run_options import RunOptions
        from planner.rundir.run_overrides import RunOverrides, apply_overrides

        plan, run = read_plan_file(run_dir)
        apply_overrides(run, RunOverrides())  # its model folder and tokenizer, checked as `train` checks them
        spec, target, config = plan.model, plan.cluster, plan.config
        # int8 gradients: searched beside the uncompressed candidates, as auto found them; onebit only as asked.
        compression = {"none": "none", "int8": "auto", "onebit": "onebit"}[config.compression.value]
        restrictions = _overridden(run.search, search, config, overriding)
        fields = restricted_fields(restrictions)  # the plan's own search: its strategies, ac, offload, ...
        if compression == "onebit":
            fields["strategies"] = ("engine",)
        request = PlanRequest(
            seq_len=config.seq_len,
            global_batch=plan.global_batch,
            precision=config.precision,
            optimizer=config.optimizer,
            kernels=config.kernels,
            lora_rank=config.lora_rank,
            qlora=config.qlora,
            fp8=config.fp8,
            attention=config.attention,
            headroom_fraction=plan.memory.headroom_fraction,  # the plan's --headroom, not the default's
            routing=config.routing,
            compression=compression,
            **fields,
        )
        options = RunOptions.of_run(run)
        from .tune_elastic import elastic_range

        elastic = elastic_range(run_dir, spec, request)
        if elastic is not None:
            from dataclasses import replace

            from planner.contract.choices import STRATEGY_ALIASES
            from planner.elastic_plan import RESHARDABLE

            # Of the search's strategies, those whose checkpoints reshard (all of those when it named none).
            kept = tuple(name for name in request.strategies if STRATEGY_ALIASES[name]["strategy"] in RESHARDABLE)
            reshardable = tuple(s for f in RESHARDABLE.values() for s in f)
            if not kept and "--strategies" in overriding:  # not widened behind the user's back
                raise UserInputError(
                    f"{run_dir} is elastic, and none of --strategies {','.join(request.strategies)} reshards its "
                    f"checkpoints on another world size; name some of {', '.join(reshardable)}"
                )
            request = request.model_copy(update={"strategies": kept or reshardable})
            restrictions = restrictions.model_copy(update={"strategies": request.strategies})  # what was searched
            elastic = replace(elastic, request=request)
        if overriding:  # once the search is settled (an elastic folder's refusal comes first, alone)
            print(
                f"tune: {', '.join(overriding)} replace the search plan.json recorded (strategies "
                f"{','.join(run.search.strategies)}); the winner's plan.json records this one",
                file=sys.stderr,
            )
    adjust, calibration = calibrate(spec, target)
    request = request.model_copy(update={"top_k": max(top_k, request.top_k)})
    result = search_plans(spec, target, request, adjust, calibration=calibration)
    return spec, target, result.candidates[:top_k], options, elastic, restrictions


# The flags of the plan's search that `tune RUN_DIR` takes beside the folder: each replaces what plan.json recorded.
SEARCH_OVERRIDES = ("--strategies", "--fsdp-sharding", "--ac", "--no-offload", "--micro-batch", "--objective")
# Search flags a run folder answers itself, as its model and cluster: beside `tune RUN_DIR` they are refused.
FOLDER_SEARCH_FLAGS = ("--headroom", "--optimizer", "--implementation")


def _overridden(recorded, search, config, overriding):
    """The folder's search restrictions with those given beside `tune RUN_DIR` replacing theirs."""
    if not overriding:
        return recorded
    from planner.search.request import search_restrictions

    asked = search_restrictions(search.request(config.seq_len, config.routing))
    fields = {
        "--strategies": "strategies",
        "--fsdp-sharding": "strategies",
        "--ac": "activation_checkpointing",
        "--no-offload": "allow_offload",
        "--micro-batch": "micro_batch",
        "--objective": "objective",
    }
    return recorded.model_copy(update={fields[flag]: getattr(asked, fields[flag]) for flag in overriding})

"""The runner: `python -m backends.run --plan RUN_DIR [options]` trains a run folder, whatever its strategy.

launch.sh, slurm.sbatch, pytorchjob.yaml, skypilot.yaml, `hardware-selector
train` and the benchmark harness all start this module under their launcher
(torchrun, accelerate launch, the DeepSpeed launcher, srun, or mpiexec, whose
ranks take their numbers from MPI's environment: backends/mpi/). It reads the folder, trains on the
plan's data and weights with the strategy's adapter (our engine, DDP, FSDP2,
DeepSpeed, or the HF Trainer with --trainer), writes metrics.jsonl,
checkpoints/ and final/, and ends with the measured-vs-predicted summary
(docs/running.md). Rank 0 ends with one line `RUN_RESULT {json}`.

Bad input is one line on stderr and exit code 2; a run stopped by an
anomaly rule says why in one line and exits with 3; anything else (out of
memory, a full disk, a bug) is one line per failing rank with exit code 1,
its traceback kept in RUN_DIR/logs/ (backends/runner/failures.py).
"""

from __future__ import annotations

import gc
import json
import sys
import time

EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_STOPPED = 3
# The young generation's collection threshold for a rank's life (CPython's is 700 new objects). Importing torch,
# transformers and a model's module creates some 600,000 objects that live as long as the process, and walking
# them every 700 allocations cost each rank ~1.7 s of CPU before its first step (of ~5.5 s of imports:
# docs/performance.md, "Rank start-up"). Collections still happen, every 100,000 new objects: fewer pauses in
# the steps too, as Megatron-LM's manual GC seeks. The CLI does the same while a command runs
# (hardware_selector_cli/collector.py).
RANK_YOUNG_THRESHOLD = 100_000


def main(argv: list[str] | None = None) -> int:
    threshold = gc.get_threshold()
    if threshold[0]:  # 0: the collector is off, and stays off
        gc.set_threshold(max(threshold[0], RANK_YOUNG_THRESHOLD), *threshold[1:])
    from backends.mpi.environment import adopt_mpi_environment
    from backends.runner.anomaly import RunStopped
    from backends.runner.failures import describe_failure, die_with_the_launcher, lost_a_peer
    from backends.runner.launch_dir import enter_launch_dir
    from backends.runner.loop import train
    from backends.runner.options import parse_args
    from planner.errors import UserInputError

    try:
        adopt_mpi_environment()  # under mpiexec: RANK, WORLD_SIZE, ... before anything below reads them
        args = parse_args(argv)
        enter_launch_dir(args.launch_dir)  # relative --data, --resume-from, --db: from where launch.sh was run
    except UserInputError as error:  # an unknown option or a wrong value: one line, as for any bad input
        _say(f"error: {error}")
        return EXIT_BAD_INPUT
    die_with_the_launcher()
    from backends.runner.status import Interrupted, interrupt_on_stop_signals

    interrupt_on_stop_signals()  # the run records "interrupted" instead of staying "running" (runner/status.py)
    try:
        from backends.runner.output_paths import check_output_paths

        check_output_paths(args)
        if _rank() == 0:
            from backends.runner.run_lock import hold_run_lock

            lock = hold_run_lock(args.plan)  # noqa: F841 (held until the process ends)
        if args.trainer:
            from backends.runner.trainer import train_with_trainer

            result = train_with_trainer(args)
        else:
            result = train(args)
    except UserInputError as error:
        _say(f"error: {error}")
        return EXIT_BAD_INPUT
    except RunStopped as stopped:
        _say(f"stopped: {stopped}")
        return EXIT_STOPPED
    except Interrupted as interrupted:  # the status says so; the launcher that sent it needs no traceback
        return 128 + interrupted.signum
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as failure:  # a bug or the machine (memory, disk): one line, the traceback in the run's
        # logs (BaseException: DCP's CheckpointException is one)
        line = describe_failure(failure, args.plan, _rank())
        if (_rank() != 0 or lost_a_peer(failure)) and not _waited():  # see _say; a lost peer is never the cause
            return EXIT_FAILED
        print(line, file=sys.stderr, flush=True)
        return EXIT_FAILED
    if _rank() == 0:
        print("RUN_RESULT " + json.dumps(result, default=str), flush=True)
    return 0


def _rank() -> int:
    import os

    return int(os.environ.get("RANK", "0"))


RANK_0_FIRST_S = 2.0


def _say(line: str) -> None:
    """Rank 0 prints the one line at once; the others wait, then print it only if they are still alive.

    Every rank usually meets the same bad input (or the same full disk), and when one of them exits the
    launcher ends the rest. A rank that exited first without a word would leave the screen with only
    torchrun's "killed by SIGTERM", and every rank speaking would print the line N times; so the other
    ranks give rank 0 time to say it, and still say it themselves when the error is theirs alone."""
    if _rank() != 0 and not _waited():
        return
    print(line, file=sys.stderr, flush=True)


def _waited() -> bool:
    """Give rank 0 its time to speak first; False when the launcher ended this rank meanwhile (its stop signal,
    which the runner turns into Interrupted, came while it waited): rank 0 said the line, and a traceback of the
    interruption would follow it on the screen (launch.sh's plain torchrun, found on a fresh clone)."""
    from backends.runner.status import Interrupted

    try:
        time.sleep(RANK_0_FIRST_S)
    except Interrupted:
        return False
    return True


if __name__ == "__main__":
    from backends.distributed_init import exit_worker

    exit_worker(main())

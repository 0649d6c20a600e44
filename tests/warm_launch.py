"""torchrun's own agent, with ranks forked from a warm interpreter: how tests/distributed.py's run_torchrun
starts the test jobs whose subject is what the ranks do, not how a launcher starts them.

Why: a rank started by `torchrun` is a fresh interpreter that spends 4 to 6 s of CPU importing torch,
transformers (whose activations and masking utilities pull in torch._dynamo) and the process group's
modules before its first line of work, and a test job's work is often a second. Here the test process runs
the same elastic agent torchrun runs (torch.distributed.launcher.api.elastic_launch: c10d rendezvous, the
same RANK/WORLD_SIZE/MASTER_* and TORCHELASTIC_* variables, a failing rank ending its peers), with
start_method "forkserver": a server process imports those libraries once per test process and forks every
rank from there. Each rank then sets the environment the test gave it, changes to its directory and runs
the script or module as `__main__` with its command line, as `python SCRIPT ARGS` would.

What keeps it faithful:
- the server imports under the environment the tests give every job (tests.distributed.cpu_env); a job
  whose environment differs on a variable those libraries read at import (HF_*, TRANSFORMERS_*, TORCH*,
  DS_*, CUDA_*, ...) starts cold under torchrun instead, as does any job with torchrun options of its own;
- a rank ends as a torchrun worker does: its exit code is the process's (the runner's `os._exit` after its
  work is written, backends/distributed_init.exit_worker, becomes the worker's return);
- each rank leads a process group of its own, and the launch ends with every process left in those groups
  (a DataLoader's workers that a rank's `os._exit` left blocked on their queues were seen outliving a suite);
- `TESTS_COLD_LAUNCH=1` starts every job under `python -m torch.distributed.run`, as before.

The launchers themselves (launch.sh, the DeepSpeed launcher, accelerate, srun, mpiexec, torchrun's restarts
and elastic agents) are tested where they are the subject: tests/test_emit_runs.py, tests/test_elastic_agents.py,
tests/test_engine_checkpoint.py and the CLI's `train` and `tune` tests, which start real torchrun processes.
"""

from __future__ import annotations

import multiprocessing
import os
import runpy
import signal
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

# What the server imports once: the libraries every rank of the test jobs imports before its work.
WARM_MODULES = [
    "torch",
    "torch.distributed",
    "torch.distributed.tensor",
    "torch.distributed.fsdp",
    "torch._dynamo",
    "transformers",
    "transformers.models.gpt2.modeling_gpt2",
    "transformers.models.llama.modeling_llama",
    "deepspeed",
    "accelerate",
    # ... and ours: the engine, the runner, checkpoints and parallelize, whose pydantic contract models take a
    # fraction of a second per process to build. Not backends.run itself: runpy runs it as __main__.
    "backends.engine.initialize",
    "backends.runner.loop",
    "backends.checkpoint",
    "backends.parallelize",
]
# Our packages, preloaded above: a job whose path would find another copy of them starts cold.
OUR_PACKAGES = ("backends", "planner", "benchmarks_db")
# Variables read while those libraries import: a job that sets one differently starts cold.
IMPORT_TIME_PREFIXES = ("HF_", "HUGGINGFACE", "TRANSFORMERS_", "TORCH", "PYTORCH_", "DS_", "DEEPSPEED", "CUDA_",
                        "OMP_", "MKL_", "KMP_", "TOKENIZERS_", "ACCELERATE_", "PYTHON")  # fmt: skip
# ... except these, which the rank applies itself (sys.path and bytecode writing are set per rank below).
PER_RANK_VARIABLES = {"PYTHONPATH", "PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED"}
# What torch's LocalElasticAgent sets for each worker (kept when the rank takes the job's environment).
AGENT_VARIABLES = {"RANK", "LOCAL_RANK", "GROUP_RANK", "ROLE_RANK", "ROLE_NAME", "LOCAL_WORLD_SIZE", "WORLD_SIZE",
                   "GROUP_WORLD_SIZE", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}  # fmt: skip

_server_started = False


def _import_time_view(env: dict[str, str]) -> dict[str, str]:
    return {
        key: value
        for key, value in env.items()
        if key.startswith(IMPORT_TIME_PREFIXES)
        and key not in PER_RANK_VARIABLES
        and not key.startswith("TORCHELASTIC_")
    }


def can_start_warm(
    env: dict[str, str],
    base: dict[str, str],
    torchrun_args: list[str] | None,
    target: list[str] | None = None,
    cwd: Path | str = ".",
) -> bool:
    """A job starts warm unless it asks for torchrun options, or sets an import-time variable otherwise than
    the environment every job gets (`base`, the one the server imported under), or its path holds another
    copy of our packages than the server's, or the suite was asked to start every job cold. (Variables the
    libraries set in the test process later, such as inductor's cache folder, are in `base` too, so they
    count as no difference.)"""
    if os.environ.get("TESTS_COLD_LAUNCH") == "1" or torchrun_args:
        return False
    return _import_time_view(env) == _import_time_view(base) and not _another_copy_of_ours(env, target or [], cwd)


def _another_copy_of_ours(env: dict[str, str], target: list[str], cwd: Path | str) -> bool:
    """Whether the job's own path (its directory under -m, else its script's folder; then its PYTHONPATH)
    holds one of our packages other than the copy the server imported: a cold rank would import that copy."""
    ours = Path(__file__).resolve().parent.parent
    first = Path(cwd) if not target or target[0] == "-m" else Path(cwd, target[0]).resolve().parent
    own_path = [first, *(Path(entry) for entry in env.get("PYTHONPATH", "").split(os.pathsep) if entry)]
    return any(
        (folder / package).is_dir() and folder.resolve() != ours for folder in own_path for package in OUR_PACKAGES
    )


def _start_server(env: dict[str, str]) -> None:
    """The forkserver, started once per test process under the environment every job gets."""
    global _server_started
    if _server_started:
        return
    from multiprocessing import forkserver

    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(WARM_MODULES)
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        forkserver.ensure_running()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    _server_started = True


class _WorkerExit(BaseException):
    """`os._exit(code)` inside a warm rank: the job is done, and the agent gets the code as the process's."""


def _exit_after_the_work(code: int = 0) -> None:
    raise _WorkerExit(code)


def _forget_the_server() -> None:
    """A fresh interpreter's multiprocessing: the platform's start method (a DataLoader's workers fork, as they
    would under torchrun) and no forkserver of its own yet (the server's would be shared otherwise)."""
    from multiprocessing import forkserver

    multiprocessing.set_start_method(None, force=True)
    fresh = forkserver._forkserver = forkserver.ForkServer()
    for name in ("ensure_running", "get_inherited_fds", "connect_to_new_process", "set_forkserver_preload"):
        setattr(forkserver, name, getattr(fresh, name))  # the module's functions are the singleton's methods


def rank_main(target: list[str], cwd: str, env: dict[str, str], groups: str) -> None:
    """One rank: the job's environment (with the agent's rank variables), directory and command line, then
    the script or module as __main__. Runs in a process forked from the server, as the leader of a process
    group of its own (named by a file in `groups`), so that what it starts (a DataLoader's workers, a
    subprocess) ends with the launch even where the rank leaves it behind."""
    os.setpgid(0, 0)
    Path(groups, str(os.getpid())).touch()
    agent = {
        key: value for key, value in os.environ.items() if key in AGENT_VARIABLES or key.startswith("TORCHELASTIC_")
    }
    code = run_as_main(target, cwd, {**env, **agent})
    if code:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def run_as_main(target: list[str], cwd: str, env: dict[str, str]) -> int:
    """In a process forked from the server: `env` as the whole environment, `cwd` as the directory, then
    `python TARGET` (["-m", module, args...] or [script, args...]) as __main__; its exit code (an `os._exit`
    inside it, or SystemExit, ends the run here and gives the code). Other exceptions propagate."""
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    _forget_the_server()
    sys.dont_write_bytecode = bool(env.get("PYTHONDONTWRITEBYTECODE"))
    own_path = [entry for entry in env.get("PYTHONPATH", "").split(os.pathsep) if entry]
    if target[0] == "-m":
        module, *args = target[1:]
        sys.argv = [module, *args]
        sys.path[:0] = [cwd, *own_path]

        def run() -> None:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
    else:
        script = str(Path(cwd, target[0]).resolve())
        sys.argv = list(target)  # as Python gives it: the script as named
        sys.path[:0] = [str(Path(script).parent), *own_path]

        def run() -> None:  # as Python runs a script (runpy.run_path would make sys.argv[0] its full path)
            main = types.ModuleType("__main__")
            main.__file__ = script
            sys.modules["__main__"] = main
            exec(compile(Path(script).read_bytes(), script, "exec"), vars(main))

    real_exit = os._exit
    os._exit = _exit_after_the_work  # type: ignore[assignment]
    code = 0
    try:
        run()
    except _WorkerExit as done:
        code = int(done.args[0]) if done.args else 0
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
        if done.code is not None and not isinstance(done.code, int):  # sys.exit("message"), as Python says it
            print(done.code, file=sys.stderr)
    finally:
        os._exit = real_exit
    return code


def _end_groups(groups: Path) -> None:
    """SIGKILL every process still in a rank's group: a rank left behind by a timeout, or what a rank started."""
    for leader in groups.iterdir():
        try:
            os.killpg(int(leader.name), signal.SIGKILL)
        except ProcessLookupError:  # the group is empty: everything in it has ended
            pass


def _on_timeout(signum, frame):
    raise TimeoutError


def launch_warm(
    target: list[str], *, nproc: int, timeout: float, cwd: Path | str, env: dict[str, str], base: dict[str, str]
) -> subprocess.CompletedProcess:
    """elastic_launch of rank_main on `nproc` ranks forked from the server; the ranks' output, rank by
    rank, as one CompletedProcess (returncode 1 when a rank failed, as torchrun's)."""
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, Std
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    _start_server(base)
    with tempfile.TemporaryDirectory(prefix="warm-launch-") as logs:
        groups = Path(logs, "groups")
        groups.mkdir()
        config = LaunchConfig(
            min_nodes=1,
            max_nodes=1,
            nproc_per_node=nproc,
            run_id=f"warm-{os.getpid()}-{time.monotonic_ns()}",
            rdzv_backend="c10d",
            rdzv_endpoint="127.0.0.1:0",
            max_restarts=0,
            monitor_interval=0.1,
            start_method="forkserver",
            logs_specs=DefaultLogsSpecs(log_dir=logs, redirects=Std.ALL),
        )
        # The agent runs in this process: it installs signal handlers and sets TORCHELASTIC_* variables here,
        # which the test process's later jobs (cold ones too) must not inherit.
        handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGALRM)}
        environment = dict(os.environ)
        signal.signal(signal.SIGALRM, _on_timeout)
        signal.setitimer(signal.ITIMER_REAL, timeout)
        returncode, note = 0, ""
        try:
            elastic_launch(config, rank_main)(list(target), str(cwd), dict(env), str(groups))
        except ChildFailedError as failure:
            returncode, note = 1, str(failure)
        except TimeoutError:
            returncode, note = -signal.SIGKILL, f"timed out after {timeout:.0f} s"
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            _end_groups(groups)
            for sig, handler in handlers.items():
                signal.signal(sig, handler)
            os.environ.clear()
            os.environ.update(environment)
        stdout, stderr = [], [note] if note else []
        for rank in range(nproc):
            for name, sink in (("stdout.log", stdout), ("stderr.log", stderr)):
                found = sorted(Path(logs).rglob(f"{rank}/{name}"))
                sink.extend(path.read_text(errors="replace") for path in found)
    return subprocess.CompletedProcess(["warm-launch", *target], returncode, "".join(stdout), "".join(stderr))

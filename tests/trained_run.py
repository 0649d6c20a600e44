"""One trained run folder, shared by the test files that only need "a trained folder".

tests/test_runner_bad_input.py and tests/test_run_folder_faults.py each trained the same tiny GPT-2 for 2 steps
on 2 ranks, a cold `train` launch (torchrun and two fresh ranks: ~15 s of CPU) per file, and built its own
copy of the model. They now read one folder, trained once per pytest session by the runner with warm ranks
(what they test is what `train` does with a trained folder, not how it got trained). Under pytest-xdist the
workers share the session's base temporary folder: the first worker to ask trains it while holding a lock
there, the others wait for it and read it. Nobody writes in it: a test that continues, damages or re-emits
it works on a copy, and the refusals that read it in place stop before any rank starts.
"""

from __future__ import annotations

import fcntl
import os
from dataclasses import dataclass
from pathlib import Path

from scripts.demo_checkpoint import make_local_gpt2
from tests.distributed import cli_in_process as cli
from tests.distributed import run_torchrun

DONE = "trained.ok"  # written last: a folder without it is a build that failed, done again
TRAIN_STDOUT = "train-stdout.txt"


@dataclass(frozen=True)
class TrainedRun:
    model_dir: Path  # the user's model (scripts/demo_checkpoint.make_local_gpt2) the folder was emitted for
    corpus: Path  # its text, the folder's --data
    run_dir: Path  # plan.json of `plan --strategies ddp` on 2 CPU ranks, trained 2 steps, checkpoints at 1 and 2
    train_stdout: str  # what its ranks printed


def emit_args(model_dir: Path, corpus: Path, run_dir: Path) -> list[object]:
    """The plan both files emit for the model: ddp on 2 CPU ranks, 64-token blocks, global batch 8."""
    return ["plan", "-m", model_dir, "--gpu", "cpu", "--gpus-per-node", "2", "--seq-len", "64",
            "--global-batch", "8", "--strategies", "ddp", "--data", corpus, "--emit", run_dir]  # fmt: skip


def shared_trained_run(tmp_path_factory) -> TrainedRun:
    base = tmp_path_factory.getbasetemp()
    # An xdist worker's base is <session folder>/popen-gwN; the session folder is the workers' common one.
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    folder = root / "shared-trained-run"
    run = TrainedRun(folder / "user" / "my-gpt2", folder / "user" / "corpus.txt", folder / "trained", "")
    with open(root / "shared-trained-run.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also if this process dies
        if not (folder / DONE).is_file():
            _train(folder)
    return TrainedRun(run.model_dir, run.corpus, run.run_dir, (folder / TRAIN_STDOUT).read_text())


def _train(folder: Path) -> None:
    import shutil

    shutil.rmtree(folder, ignore_errors=True)
    model_dir, corpus = make_local_gpt2(folder / "user")
    emitted = cli(*emit_args(model_dir, corpus, folder / "trained"))
    assert emitted.returncode == 0, emitted.stderr[-3000:]
    # The runner as `train` starts it, its ranks forked warm (tests/warm_launch.py): the launch is not what the
    # readers test, and a cold one costs ~12 s more CPU. A checkpoint at each step: the corrupted-checkpoint test
    # needs two to fall back through.
    target = ["-m", "backends.run", "--plan", str(folder / "trained"), "--steps", "2", "--save-every", "1"]
    trained = run_torchrun(target, nproc=2)
    (folder / TRAIN_STDOUT).write_text(trained.stdout)
    (folder / DONE).write_text("")

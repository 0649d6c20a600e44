"""The CPU seconds (user + system) of a command and of every process it starts, orphans included.

Usage: python scripts/tree_cpu.py COMMAND [ARGS...]; prints `cpu=... user=... sys=... wall=... rc=...` on
stderr after the command's own output, and exits with the command's code.

Why not `/usr/bin/time`: it counts only descendants that were waited for up the chain. A warm test launch's
ranks (tests/warm_launch.py) are children of the multiprocessing forkserver, which outlives pytest and is
then reaped by init, so their CPU is lost; so is any rank whose launcher was killed. Here the command runs
under a child subreaper (Linux's PR_SET_CHILD_SUBREAPER): every orphan below it is reparented to it and
reaped as soon as it ends (as init would, so a test that waits for orphans to vanish still sees them go),
and RUSAGE_CHILDREN then holds the whole tree's CPU.
"""

from __future__ import annotations

import ctypes
import os
import resource
import subprocess
import sys
import time

PR_SET_CHILD_SUBREAPER = 36


def main(command: list[str]) -> int:
    if not command:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        print("tree_cpu: this kernel refuses a child subreaper; orphans' CPU would be missed", file=sys.stderr)
        return 2
    start = time.monotonic()
    child = subprocess.Popen(command)
    code = 1
    while True:  # every descendant, until none is left
        try:
            pid, status = os.wait()
        except ChildProcessError:
            break
        if pid == child.pid:
            code = child.returncode = os.waitstatus_to_exitcode(status)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(
        f"cpu={usage.ru_utime + usage.ru_stime:.1f} user={usage.ru_utime:.1f} sys={usage.ru_stime:.1f} "
        f"wall={time.monotonic() - start:.1f} rc={code}",
        file=sys.stderr,
    )
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

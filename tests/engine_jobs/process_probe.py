"""What a single process sees of its start, for tests/test_warm_process.py: `process_probe.py HOW [CODE]`.

Prints its command line, directory, `__name__` and two variables as JSON on stdout and a line on stderr,
then ends HOW: `exit CODE` (sys.exit), `os-exit CODE` (os._exit, as the runner ends), `message` (sys.exit
with a text), `raise` (an uncaught exception) or `leave` (a `sleep` left running, its pid printed first).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

if __name__ == "__main__":
    how, *rest = sys.argv[1:]
    if how == "leave":
        print(subprocess.Popen(["sleep", "60"]).pid, flush=True)
    seen = {
        "argv": sys.argv,
        "cwd": os.getcwd(),
        "main": __name__,
        "PROBE_VARIABLE": os.environ.get("PROBE_VARIABLE"),
        "HARDWARE_SELECTOR_RECORD": os.environ.get("HARDWARE_SELECTOR_RECORD", "unset"),
    }
    print(json.dumps(seen))
    print("the probe's line on stderr", file=sys.stderr)
    if how == "exit":
        sys.exit(int(rest[0]))
    if how == "os-exit":
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(int(rest[0]))
    if how == "message":
        sys.exit("the probe ends with a message")
    if how == "raise":
        raise RuntimeError("the probe fails on purpose")

"""run-training-benchmark: generate, run and record benchmark matrices.

The benchmark runner arrives with the benchmarks_db issue; until then this
entry point says so instead of pretending to work.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    print("error: run-training-benchmark is not implemented yet (see the benchmarks_db issue)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())

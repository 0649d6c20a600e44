"""The tutorial's parallel chapters, one after another in one torchrun job (`python tests/tutorial_chapters.py
OUT CHAPTER[:ARG] ...`), for tests/test_tutorial.py.

Each chapter script runs unchanged, as its own `__main__` with its own argv, in the chapters' folder; only the
launch and its process group are shared (tests/shared_scripts.py). One chapter keeps a launch of its own in
the test, the command its page prints, and so its own start and end of the group. Each rank writes its
chapters' printed lines to OUT.rankN.json (chapter -> output): a pipeline's last stage prints the losses,
so the test reads every rank's, as torchrun's output holds them.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tests.shared_scripts import run_cases  # the repository is on PYTHONPATH (tests/distributed.py cpu_env)

CODE = Path(__file__).resolve().parent.parent / "docs" / "tutorial" / "code"


def main() -> None:
    out, chapters = Path(sys.argv[1]), sys.argv[2:]
    cases = []
    for chapter in chapters:
        script, _, arg = chapter.partition(":")
        cases.append({"name": chapter, "script": str(CODE / script), "argv": [arg] if arg else []})
    run_cases(out, cases)


if __name__ == "__main__":
    main()

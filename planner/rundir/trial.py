"""A tune trial's two files in its run folder: what the harness asks of it, and what the launch says of it.

`hardware-selector tune` (docs/running.md, "Tune") writes one run folder per candidate plan, with trial.json
(TrialRequest) beside plan.json, and starts one launch for all of them (backends/runner/trials.py). Each trial
that ends leaves trial_done.json (TrialDone) with its wall time inside the launch, so the harness can say what
a trial cost beside its measured steps, and can launch again only the trials that have not run.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

REQUEST_FILE = "trial.json"
DONE_FILE = "trial_done.json"


class TrialRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    key: str  # the benchmark matrix key: the same plan on the same hardware is the same trial
    warmup: int = Field(ge=0)
    steps: int = Field(ge=1)  # timed steps, after the warm-up
    tiny: bool = False
    memory_limit_gb: float | None = Field(default=None, gt=0)

    def runner_args(self, folder: Path) -> list[str]:
        """`python -m backends.run` arguments: the steps timed, nothing saved or exported or recorded (the
        harness records the trial beside its prediction)."""
        args = ["--plan", str(folder), "--steps", str(self.warmup + self.steps), "--steps-only"]
        args += ["--save-every", "0", "--no-resume", "--no-record", "--metrics", str(folder / "metrics.jsonl")]
        if self.tiny:
            args.append("--tiny")
        if self.memory_limit_gb is not None:
            args += ["--memory-limit-gb", repr(self.memory_limit_gb)]
        return args


class TrialDone(BaseModel):
    key: str
    began: float  # time.time() when this trial began
    wall_s: float  # the trial inside the launch: the model built, the data read, every step
    link_GBps: dict[str, float] = Field(default_factory=dict)  # the launch's first trial: each collective's bus
    # bandwidth on its process group (backends/monitoring/link_probe.py), measured after the trial

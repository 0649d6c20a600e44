"""Where an emitted run folder is launched: `plan --emit DIR --launcher torchrun|slurm|k8s|skypilot|mpi`.

Every target starts the same runner, `python -m backends.run --plan DIR` (docs/running.md, "Launchers"). The
folder always holds launch.sh and slurm.sbatch; a target adds what it runs:

| target   | the process starter (RunConfig.launcher) | files it adds |
|----------|------------------------------------------|---------------|
| torchrun | torchrun                                 | -             |
| slurm    | torchrun (under srun)                    | -             |
| k8s      | torchrun (in each pod)                   | pytorchjob.yaml, a Kubeflow PyTorchJob |
| skypilot | torchrun (on each node)                  | skypilot.yaml, a SkyPilot task |
| mpi      | mpirun (mpiexec; launch.sh's default)    | -             |

Without --launcher the folder is launched as the plan's strategy prefers (launch.sh's LAUNCHER default).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, cast

from planner.errors import UserInputError

TargetName = Literal["torchrun", "slurm", "k8s", "skypilot", "mpi"]
TARGETS: tuple[str, ...] = ("torchrun", "slurm", "k8s", "skypilot", "mpi")
IMAGE_TARGETS = ("k8s", "skypilot")  # the targets that run a container image

# A placeholder no registry serves: a manifest applied unchanged fails at the image pull, saying which image.
PLACEHOLDER_IMAGE = "registry.example.com/replace-with-your-image:latest"

# An image reference: [registry[:port]/]path[:tag][@digest], lower-case path (the OCI distribution rules).
_IMAGE = re.compile(
    r"^[a-z0-9]+([._-][a-z0-9]+)*(:[0-9]+)?(/[a-z0-9]+([._-]+[a-z0-9]+)*)*(:[\w][\w.-]{0,127})?(@sha256:[0-9a-f]{64})?$"
)


@dataclass(frozen=True)
class LaunchTarget:
    """The target a folder is emitted for, and the container image the k8s and SkyPilot targets run.

    A dataclass, not a pydantic model: `plan` imports this module for --launcher's choices, and `--help` builds
    no pydantic model."""

    name: TargetName
    image: str | None = None  # None: the placeholder (k8s), the cloud's default machine image (SkyPilot)

    def __post_init__(self) -> None:
        if self.name not in TARGETS:
            raise ValueError(f"launch target must be one of {', '.join(TARGETS)}, not {self.name!r}")

    @property
    def launcher(self) -> Literal["torchrun", "mpirun"]:
        """What starts the ranks: mpiexec for MPI, torchrun everywhere else."""
        return "mpirun" if self.name == "mpi" else "torchrun"


def launch_target(name: str | None, image: str | None = None) -> LaunchTarget | None:
    """--launcher and --image as a LaunchTarget (None without --launcher); one line for a wrong value."""
    if name is None:
        if image is not None:
            raise UserInputError(f"--image names the container of --launcher {' or '.join(IMAGE_TARGETS)}; add one")
        return None
    if name not in TARGETS:
        raise UserInputError(f"--launcher must be one of {', '.join(TARGETS)}, not '{name}'")
    if image is not None:
        if name not in IMAGE_TARGETS:
            raise UserInputError(f"--image is for --launcher {' or '.join(IMAGE_TARGETS)}; --launcher {name} runs none")
        if not _IMAGE.match(image):
            raise UserInputError(
                f"--image '{image}' is not an image reference; give one like ghcr.io/you/train:1.0 (lower-case, "
                "no spaces)"
            )
    return LaunchTarget(name=cast(TargetName, name), image=image)  # checked against TARGETS above

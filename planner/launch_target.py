"""Where an emitted run folder is launched: `plan --emit DIR --launcher torchrun|slurm|k8s|skypilot|mpi`.

Every target starts the same runner, `python -m backends.run --plan DIR` (docs/running.md, "Launchers"). The
folder always holds launch.sh and slurm.sbatch; a target adds what it runs:

| target   | the process starter (RunConfig.launcher) | files it adds |
|----------|------------------------------------------|---------------|
| torchrun | torchrun                                 | -             |
| slurm    | torchrun (under srun)                    | -             |
| k8s      | torchrun (in each pod)                   | pytorchjob.yaml, a Kubeflow PyTorchJob |
| skypilot | torchrun (on each node)                  | skypilot.yaml, a SkyPilot task |
| mpi      | mpirun (mpiexec; launch.sh's default)    | mpi_hostfile  |

Without --launcher the folder is launched as the plan's strategy prefers (launch.sh's LAUNCHER default).
--elastic is refused with skypilot and mpi, which start a fixed number of nodes (ELASTIC_TARGETS).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, cast

from planner.errors import UserInputError

TargetName = Literal["torchrun", "slurm", "k8s", "skypilot", "mpi"]
TARGETS: tuple[str, ...] = ("torchrun", "slurm", "k8s", "skypilot", "mpi")
IMAGE_TARGETS = ("k8s", "skypilot")  # the targets that run a container image
# The targets whose files start torchrun over a node range with restarts (--elastic). SkyPilot's task runs a
# fixed number of nodes, and mpiexec a fixed number of ranks with no restarts: an elastic folder for them would
# say "elastic" and be static.
ELASTIC_TARGETS = ("torchrun", "slurm", "k8s")

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


def placeholder_warning(launch: LaunchTarget | None) -> str | None:
    """The warning `plan --emit` prints on stderr for a k8s manifest written without --image: it names a
    placeholder no registry serves (the folder is still written: the image can be edited in, as docs/running.md
    says), and a YAML comment alone went unseen."""
    if launch is None or launch.name != "k8s" or launch.image:
        return None
    return (
        f"warning: pytorchjob.yaml names the placeholder image {PLACEHOLDER_IMAGE}; re-emit with --image IMAGE "
        "(one with hardware-selector installed) or replace it in the file before kubectl create"
    )


# The GPUs per instance the clouds SkyPilot provisions rent (AWS p4d/p5: 8; GCP a2/a3: 1, 2, 4, 8, 16; Azure ND: 8;
# Lambda: 1, 2, 4, 8): a task asking for another count per node finds no instance to launch on.
INSTANCE_GPU_COUNTS = (1, 2, 4, 8, 16)


def check_elastic(name: str) -> None:
    """--elastic with --launcher `name`: one line unless the target starts torchrun over a node range."""
    if name not in ELASTIC_TARGETS:
        starts = "a fixed number of nodes" if name == "skypilot" else "a fixed number of ranks (mpiexec)"
        raise UserInputError(
            f"--elastic is for --launcher {', '.join(ELASTIC_TARGETS)} (torchrun over a node range, with restarts); "
            f"--launcher {name} starts {starts}: drop --elastic or pick one of those"
        )


def launch_target(name: str | None, image: str | None = None, *, elastic: bool = False) -> LaunchTarget | None:
    """--launcher and --image (and whether --elastic is given) as a LaunchTarget (None without --launcher); one
    line for a wrong value or combination."""
    if name is None:
        if image is not None:
            raise UserInputError(f"--image names the container of --launcher {' or '.join(IMAGE_TARGETS)}; add one")
        return None
    if name in ("deepspeed", "accelerate"):  # launch.sh's own launchers, not a target of its own
        raise UserInputError(
            f"--launcher must be one of {', '.join(TARGETS)}, not '{name}': launch.sh starts the {name} launcher "
            f"itself (`LAUNCHER={name} bash DIR/launch.sh`; a plan of its stack does by default), and --launcher "
            "names where the run is started instead"
        )
    if name not in TARGETS:
        raise UserInputError(f"--launcher must be one of {', '.join(TARGETS)}, not '{name}'")
    if elastic:
        check_elastic(name)
    if image is not None:
        if name not in IMAGE_TARGETS:
            raise UserInputError(f"--image is for --launcher {' or '.join(IMAGE_TARGETS)}; --launcher {name} runs none")
        if not _IMAGE.match(image):
            raise UserInputError(
                f"--image '{image}' is not an image reference; give one like ghcr.io/you/train:1.0 (lower-case, "
                "no spaces)"
            )
    return LaunchTarget(name=cast(TargetName, name), image=image)  # checked against TARGETS above

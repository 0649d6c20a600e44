"""launch.sh (single- and multi-node, for torchrun, accelerate, the DeepSpeed launcher or MPI's mpiexec) and the
DeepSpeed hostfile.

Every launcher starts the one runner, `python -m backends.run --plan RUN_DIR`
(docs/running.md), whatever the strategy; TRAIN_SCRIPT swaps in the user's
own script. Every value that comes from outside the script (paths, the
Python interpreter, the run id) is passed through shlex.quote, and every
variable is expanded inside double quotes, so a path with spaces, quotes or
`$` is taken literally. The script finds its own folder at run time, so the
folder can be moved or copied to another machine. Under LAUNCHER=mpirun, mpiexec starts every process
itself and each rank reads its number from MPI's environment (docs/running.md, "MPI"). An elastic plan (`--elastic MIN:MAX`)
starts torchrun over the node range with a c10d rendezvous and --max-restarts, so the
survivors of a lost node restart and re-plan (docs/running.md, "Elastic"). On several nodes each launcher's
branch first checks what it needs to find the other nodes (planner/emit/launch_guards.py), and the interpreter
is found when the script runs (planner/emit/script_paths.py).
"""

from __future__ import annotations

import re
import shlex

from planner.contract.run_config import RunConfig
from planner.elastic_plan import ElasticPlan
from planner.emit.launch_guards import (
    MPI_HOSTFILE,
    given_lines,
    mpi_nodes_lines,
    need_nodes_function,
    whole_number_lines,
)
from planner.emit.script_paths import python_lines
from planner.plan import Plan

DEFAULT_MASTER_PORT = 29500

HOSTFILE = "hostfile"
ACCELERATE_CONFIG_FILE = "accelerate_config.yaml"
RUNNER_MODULE = "backends.run"


def run_id(plan: Plan) -> str:
    """A rendezvous id: letters, digits and dashes only."""
    raw = f"hs-{plan.model.name}-{plan.config.strategy.value}"
    return "".join(ch if ch.isalnum() or ch == "-" else "-" for ch in raw)


def job_name(plan: Plan) -> str:
    """run_id as a DNS-1035 label (Kubernetes job and pod names, SkyPilot task names): "hs-" first, then lower-case
    ASCII letters, digits and single dashes, at most 40 characters so that a pod's name, <job>-worker-<index>, stays
    within a label's 63."""
    return re.sub(r"[^a-z0-9]+", "-", run_id(plan).lower())[:40].strip("-")  # ASCII: a model folder may be "modèle"


def multi_node_start(target: RunConfig) -> tuple[str, str]:
    """The command that starts several nodes under launch.sh's default LAUNCHER, and where to run it (launch.sh's
    header and README.md say the same; docs/emitted-files.md): the DeepSpeed launcher and mpiexec start every node
    from the first one, so running them on every node would start the job once per node; torchrun and accelerate
    run on every node, each with its NODE_RANK."""
    nodes = max(target.num_nodes, 2)
    if target.launcher == "deepspeed":
        return (
            f"NNODES={nodes} MASTER_ADDR=<first node> bash launch.sh",
            "on the first node only (it starts the others over ssh: list them in ./hostfile)",
        )
    if target.launcher == "mpirun":
        return (
            f"NNODES={nodes} MPIEXEC_ARGS='-hostfile {MPI_HOSTFILE}' bash launch.sh",
            f"on the first node only (mpiexec starts every rank; list the nodes in ./{MPI_HOSTFILE})",
        )
    return (
        f"NNODES={nodes} NODE_RANK=<i> MASTER_ADDR=<first node> bash launch.sh",
        "on every node, NODE_RANK=0 on the first",
    )


def one_node_start(target: RunConfig) -> str:
    """launch.sh on this node alone: a multi-node folder says NNODES=1, since without it launch.sh waits for (or,
    with MASTER_ADDR and NODE_RANK unset, refuses to start) the other nodes."""
    return "bash launch.sh" if target.num_nodes == 1 else "NNODES=1 bash launch.sh"


def launch_sh(plan: Plan, target: RunConfig, *, python: str | None = None, elastic: ElasticPlan | None = None) -> str:
    header = [
        "#!/usr/bin/env bash",
        f"# Launch {plan.model.name} ({plan.config.strategy.value}) as planned by hardware-selector; edit freely.",
        "#",
        f"# One node:       {one_node_start(target)} [runner options: --steps N, --data PATH, ...; see python -m backends.run -h]",
        f"# Several nodes:  {multi_node_start(target)[1]}:",
        f"#   {multi_node_start(target)[0]}",
        "# Your own script: TRAIN_SCRIPT=/path/to/train.py bash launch.sh  (it receives --plan RUN_DIR).",
        f"# Another launcher: LAUNCHER=torchrun|accelerate|deepspeed|mpirun (the plan's choice: {target.launcher}).",
        *(
            [
                "# The process count is part of the plan (batch sizes depend on it): to change it, run",
                "# hardware-selector train RUN_DIR --nproc N (the global batch is kept), or re-emit with --gpus-per-node.",
            ]
            if elastic is None
            else [
                f"# Elastic: torchrun runs on {elastic.min_nodes} to {elastic.max_nodes} nodes; the runner re-plans for "
                "the processes it gets.",
            ]
        ),
        "set -euo pipefail",
        "",
        'RUN_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)"',
        *python_lines("launch.sh", python),
        f"LAUNCHER=${{LAUNCHER:-{target.launcher}}}",
        f"NPROC_PER_NODE={target.nproc_per_node}",
        f"NNODES=${{NNODES:-{target.num_nodes}}}",
        *given_lines(),
        "NODE_RANK=${NODE_RANK:-0}",
        "MASTER_ADDR=${MASTER_ADDR:-127.0.0.1}",
        f"MASTER_PORT=${{MASTER_PORT:-{DEFAULT_MASTER_PORT}}}",
        *whole_number_lines(),
        *(
            []
            if elastic is None
            else [
                f"NNODES_RANGE=${{NNODES_RANGE:-{elastic.node_range}}}",
                f"MAX_RESTARTS=${{MAX_RESTARTS:-{elastic.max_restarts}}}",
            ]
        ),
        "# What each launcher starts: the runner module, or your script (a relative path: from where you ran this).",
        "# The launch runs in RUN_DIR; the runner reads relative paths you pass (--data, --resume-from, ...) from",
        "# where you ran this (--launch-dir).",
        'if [[ -n "${TRAIN_SCRIPT:-}" ]]; then',
        '  [[ "$TRAIN_SCRIPT" == /* ]] || TRAIN_SCRIPT="$PWD/$TRAIN_SCRIPT"',
        '  TRAIN=( "$TRAIN_SCRIPT" ); DS_TRAIN=( "$TRAIN_SCRIPT" ); ARGS=( --plan "$RUN_DIR" "$@" )',
        "else",
        f"  TRAIN=( -m {RUNNER_MODULE} ); DS_TRAIN=( --module {RUNNER_MODULE} )",
        '  ARGS=( --plan "$RUN_DIR" --launch-dir "$PWD" "$@" )',
        "fi",
        *need_nodes_function(),
    ]
    if target.device == "cpu":
        header += [
            "# CPU plan: gloo, and DeepSpeed's CPU accelerator.",
            "export DS_ACCELERATOR=${DS_ACCELERATOR:-cpu}",
        ]
    torchrun = _torchrun_lines(plan) if elastic is None else _elastic_torchrun_lines(plan)
    body = [
        'cd "$RUN_DIR"',
        "",
        'case "$LAUNCHER" in',
        "torchrun)",
        *torchrun,
        "accelerate)",
        "  # = accelerate launch --config_file accelerate_config.yaml ...; the runner sets up the strategy itself.",
        "  need_nodes rank",
        '  exec "$PYTHON" -m accelerate.commands.launch --config_file "$RUN_DIR/accelerate_config.yaml" \\',
        '    --num_processes "$((NPROC_PER_NODE * NNODES))" --num_machines "$NNODES" \\',
        '    --machine_rank "$NODE_RANK" --main_process_ip "$MASTER_ADDR" --main_process_port "$MASTER_PORT" \\',
        '    "${TRAIN[@]}" "${ARGS[@]}"',
        "  ;;",
        "deepspeed)",
        "  # = deepspeed [--hostfile hostfile] ...; with several nodes run it on the first node only:",
        "  # it starts the other nodes over ssh (list them in ./hostfile).",
        '  if [[ "$NNODES" == 1 ]]; then',
        '    exec "$PYTHON" -m deepspeed.launcher.runner --num_gpus "$NPROC_PER_NODE" \\',
        '      --master_port "$MASTER_PORT" "${DS_TRAIN[@]}" "${ARGS[@]}"',
        "  fi",
        *_hostfile_check_lines(target),
        "  # Node 0's address: the one given, else the launcher's own (the first host's `hostname -I`, over ssh);",
        "  # the one-node default 127.0.0.1 would send every other node to its own loopback.",
        '  MASTER=(); [[ -z "$MASTER_ADDR_GIVEN" ]] || MASTER=( --master_addr "$MASTER_ADDR" )',
        '  exec "$PYTHON" -m deepspeed.launcher.runner --hostfile "$RUN_DIR/hostfile" \\',
        '    --num_nodes "$NNODES" --num_gpus "$NPROC_PER_NODE" \\',
        '    ${MASTER[@]+"${MASTER[@]}"} --master_port "$MASTER_PORT" "${DS_TRAIN[@]}" "${ARGS[@]}"',
        "  ;;",
        *_mpirun_lines(),
        "*)",
        "  echo \"launch.sh: unknown LAUNCHER '$LAUNCHER'; use torchrun, accelerate, deepspeed or mpirun\" >&2",
        "  exit 2",
        "  ;;",
        "esac",
    ]
    return "\n".join(header + body) + "\n"


def _torchrun_lines(plan: Plan) -> list[str]:
    return [
        '  if [[ "$NNODES" == 1 ]]; then',
        '    exec "$PYTHON" -m torch.distributed.run --standalone --nproc-per-node="$NPROC_PER_NODE" \\',
        '      "${TRAIN[@]}" "${ARGS[@]}"',
        "  fi",
        "  need_nodes rank",
        '  exec "$PYTHON" -m torch.distributed.run --nnodes="$NNODES" --node-rank="$NODE_RANK" \\',
        '    --nproc-per-node="$NPROC_PER_NODE" --rdzv-backend=static \\',
        f'    --rdzv-id={shlex.quote(run_id(plan))} --rdzv-endpoint="$MASTER_ADDR:$MASTER_PORT" \\',
        '    "${TRAIN[@]}" "${ARGS[@]}"',
        "  ;;",
    ]


def _hostfile_check_lines(target: RunConfig) -> list[str]:
    """Several nodes under the DeepSpeed launcher need a hostfile listing at least NNODES hosts: without one the
    launcher fails with its own traceback, and with fewer it starts fewer nodes than asked. This script cannot
    know the hosts' names, so it refuses in one line, exit 2, as an elastic folder refuses an NNODES outside its
    range (docs/running.md, "Launchers")."""
    planned = f"{target.num_nodes} node{'s' if target.num_nodes != 1 else ''}"
    return [
        "  # Host lines: neither blank nor comments (the launcher skips both).",
        '  HOSTS=0; SAID="has no hostfile"',
        '  if [[ -f "$RUN_DIR/hostfile" ]]; then',
        '    HOSTS=$(grep -cvE \'^[[:space:]]*(#|$)\' "$RUN_DIR/hostfile" || true); SAID="its hostfile lists $HOSTS host(s)"',
        "  fi",
        "  if (( HOSTS < NNODES )); then",
        f'    echo "launch.sh: NNODES=$NNODES, but this folder was planned for {planned} and $SAID;" \\',
        '      "the DeepSpeed launcher needs one line per node: write $RUN_DIR/hostfile" \\',
        "      \"(one 'HOST slots=$NPROC_PER_NODE' line per node) or re-emit the plan with --nodes $NNODES\" >&2",
        "    exit 2",
        "  fi",
    ]


def _mpirun_lines() -> list[str]:
    """mpiexec starts all NNODES x NPROC_PER_NODE ranks from this node; the runner reads rank, world size and
    local rank from MPI's environment. MPIEXEC names another program (mpirun, srun --mpi=pmix), MPIEXEC_ARGS adds
    its options (a hostfile for several nodes, -x MASTER_ADDR for Open MPI), split on spaces."""
    return [
        "mpirun)",
        "  # = mpiexec -n <all processes>; run it on the first node only. Several nodes:",
        f"  # MPIEXEC_ARGS='-hostfile {MPI_HOSTFILE}' (each host NPROC_PER_NODE processes); rank 0's address comes",
        "  # from mpi4py, or give MASTER_ADDR.",
        "  # The mpiexec installed beside the interpreter (the [mpi] extra's MPICH, which its mpi4py was built for),",
        "  # else the one on PATH.",
        *mpi_nodes_lines(),
        '  if [[ -z "${MPIEXEC:-}" ]]; then',
        '    PYTHON_DIR="$(dirname -- "$(command -v -- "$PYTHON")")"  # PYTHON may be a name on PATH',
        '    if [[ -x "$PYTHON_DIR/mpiexec" ]]; then MPIEXEC="$PYTHON_DIR/mpiexec"; else MPIEXEC=mpiexec; fi',
        "  fi",
        '  read -r -a MPIEXEC_OPTIONS <<< "${MPIEXEC_ARGS:-}"',
        '  exec "$MPIEXEC" -n "$((NPROC_PER_NODE * NNODES))" "${MPIEXEC_OPTIONS[@]}" \\',
        '    "$PYTHON" "${TRAIN[@]}" "${ARGS[@]}"',
        "  ;;",
    ]


def _elastic_torchrun_lines(plan: Plan) -> list[str]:
    """torchrun over a node range: the same command on every node (the c10d rendezvous numbers them); when a node
    is lost, or one returns, torchrun restarts the workers and the runner re-plans for the new world size."""
    return [
        "  # NNODES (the nodes starting now) outside the range: torchrun would wait for nodes that never join, and",
        "  # fail with a traceback at its rendezvous timeout (600 s). Inside it, a start on fewer than MAX nodes",
        "  # waits torchrun's last call (30 s; PET_RDZV_CONF=last_call_timeout=S) for more before it trains.",
        "  if (( NNODES < ${NNODES_RANGE%%:*} || NNODES > ${NNODES_RANGE##*:} )); then",
        '    echo "launch.sh: NNODES=$NNODES is outside this folder\'s elastic range $NNODES_RANGE (nodes); start" \\',
        '      "${NNODES_RANGE%%:*} to ${NNODES_RANGE##*:} nodes, or re-emit the plan with an --elastic range that" \\',
        '      "holds $NNODES" >&2',
        "    exit 2",
        "  fi",
        "  # The same command on every node; MASTER_ADDR is the node that hosts the rendezvous.",
        "  need_nodes elastic",
        '  exec "$PYTHON" -m torch.distributed.run --nnodes="$NNODES_RANGE" --max-restarts="$MAX_RESTARTS" \\',
        '    --nproc-per-node="$NPROC_PER_NODE" --rdzv-backend=c10d \\',
        f'    --rdzv-id={shlex.quote(run_id(plan))} --rdzv-endpoint="$MASTER_ADDR:$MASTER_PORT" \\',
        '    "${TRAIN[@]}" "${ARGS[@]}"',
        "  ;;",
    ]


def hostfile(plan: Plan, target: RunConfig) -> str | None:
    """The DeepSpeed hostfile template: one line per node, `slots` = processes on it (docs/emitted-files.md).

    Written for a DeepSpeed-launched folder and for every multi-node folder: launch.sh offers LAUNCHER=deepspeed
    whatever its default, and that branch passes --hostfile on several nodes."""
    if target.launcher != "deepspeed" and target.num_nodes == 1:
        return None
    lines = [
        "# DeepSpeed hostfile: replace the names with your nodes' hostnames (reachable by ssh).",
        *(f"node-{index + 1} slots={target.nproc_per_node}" for index in range(target.num_nodes)),
    ]
    return "\n".join(lines) + "\n"

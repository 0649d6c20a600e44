"""launch.sh's checks before a launcher starts several nodes (NNODES > 1): one line and exit code 2 for a start
that would otherwise wait, silently, for nodes that never join, or put every node's processes on this one.

torchrun and accelerate meet at node 0's address (MASTER_ADDR), each node with its number (NODE_RANK). The
script's one-node defaults, the loopback and rank 0, on several machines make each its own node 0 waiting at its
own loopback: the folder's README said `bash launch.sh` and it hung with no output. So several nodes need both
given (an elastic torchrun numbers the nodes itself: MASTER_ADDR only), and once given, launch.sh says what it
waits for. mpiexec starts every rank from the first node on the hosts it is told of: without a hostfile, a
program of the user's (MPIEXEC) or a batch allocation it reads (SLURM, PBS), it starts them all here.
The DeepSpeed launcher's branch is not checked here (its hostfile names the nodes). mpi_hostfile, the hosts
file the mpiexec check points to, is rendered here too.
"""

from __future__ import annotations

from planner.contract.run_config import RunConfig

MPI_HOSTFILE = "mpi_hostfile"


def given_lines() -> list[str]:
    """Before the one-node defaults fill them in: whether the environment gave node 0's address and this rank."""
    return [
        "# Given, or launch.sh's one-node defaults below? Several nodes need them given (need_nodes).",
        "MASTER_ADDR_GIVEN=${MASTER_ADDR:+yes}",
        "NODE_RANK_GIVEN=${NODE_RANK:+yes}",
    ]


def whole_number_lines() -> list[str]:
    """Refuse a node variable that is no whole number (NNODES: at least 1) in one line, exit 2: bash's arithmetic
    reads `abc` as an unset variable's name ("abc: unbound variable", exit 1; a new user's audit, 2026-11-30) and
    `08` as a bad octal number, and `01` is not the string 1 the one-node tests compare with."""
    return [
        "for NAME in NNODES NODE_RANK MASTER_PORT; do",
        '  if ! [[ "${!NAME}" =~ ^(0|[1-9][0-9]{0,5})$ ]] || [[ "$NAME" == NNODES && "${!NAME}" == 0 ]] ||',
        '     [[ "$NAME" == MASTER_PORT && ( "${!NAME}" == 0 || "${!NAME}" -gt 65535 ) ]]; then',
        '    WHAT="a whole number below a million"; [[ "$NAME" != NNODES ]] || WHAT="a whole number of nodes, at least 1"',
        '    [[ "$NAME" != MASTER_PORT ]] || WHAT="a port, 1 to 65535"',
        "    echo \"launch.sh: $NAME must be $WHAT, not '${!NAME}'\" >&2",
        "    exit 2",
        "  fi",
        "done",
    ]


def need_nodes_function() -> list[str]:
    """need_nodes rank|elastic: refuse a multi-node start without MASTER_ADDR (and NODE_RANK for `rank`), else
    say what this node waits for. Nothing on one node."""
    return [
        "# Several nodes meet at node 0's MASTER_ADDR, each with its NODE_RANK (an elastic torchrun numbers them",
        "# itself). The one-node defaults would make every machine node 0 at its own loopback, each waiting",
        "# silently for nodes that never join: refused in one line instead.",
        "need_nodes() {",
        '  [[ "$NNODES" != 1 ]] || return 0',
        '  local missing="" settings="MASTER_ADDR=<node 0\'s address> "',
        '  [[ -n "$MASTER_ADDR_GIVEN" ]] || missing="MASTER_ADDR"',
        '  if [[ "$1" == rank ]]; then',
        '    settings+="NODE_RANK=<0..$((NNODES - 1))> "',
        '    [[ -n "$NODE_RANK_GIVEN" ]] || missing="${missing:+$missing and }NODE_RANK"',
        "  fi",
        '  if [[ -n "$missing" ]]; then',
        '    echo "launch.sh: NNODES=$NNODES needs $missing: run ${settings}bash launch.sh on each of the" \\',
        '      "$NNODES nodes, or NNODES=1 bash launch.sh to train on this node alone" >&2',
        "    exit 2",
        "  fi",
        '  if [[ "$1" == elastic ]]; then',
        '    echo "launch.sh: waiting for ${NNODES_RANGE%%:*} to ${NNODES_RANGE##*:} nodes at $MASTER_ADDR:$MASTER_PORT" >&2',
        "    return 0",
        "  fi",
        '  if ! [[ "$NODE_RANK" =~ ^[0-9]+$ ]] || (( NODE_RANK >= NNODES )); then',
        '    echo "launch.sh: NODE_RANK=$NODE_RANK is not a node of NNODES=$NNODES; give 0 to $((NNODES - 1))," \\',
        '      "0 on the node at MASTER_ADDR" >&2',
        "    exit 2",
        "  fi",
        '  echo "launch.sh: waiting for all $NNODES nodes at $MASTER_ADDR:$MASTER_PORT (this is node $NODE_RANK)" >&2',
        "}",
    ]


def mpi_nodes_lines() -> list[str]:
    """In the mpirun branch, before MPIEXEC is chosen: several nodes need mpiexec told where they are."""
    return [
        "  # Several nodes: mpiexec must be told the hosts (a hostfile, your own MPIEXEC, or the SLURM or PBS",
        "  # allocation it reads itself), or it starts every node's processes on this one.",
        '  if [[ "$NNODES" != 1 && -z "${MPIEXEC_ARGS:-}${MPIEXEC:-}${SLURM_JOB_NODELIST:-}${PBS_NODEFILE:-}" ]]; then',
        '    echo "launch.sh: NNODES=$NNODES needs mpiexec told your nodes, or it starts all'
        ' $((NPROC_PER_NODE * NNODES)) processes here:" \\',
        f"      \"on the first node run MPIEXEC_ARGS='-hostfile {MPI_HOSTFILE}' bash launch.sh with {MPI_HOSTFILE}"
        ' listing each node as HOST:$NPROC_PER_NODE" \\',
        '      "(Open MPI: HOST slots=$NPROC_PER_NODE), or NNODES=1 bash launch.sh for this node alone" >&2',
        "    exit 2",
        "  fi",
    ]


def mpi_hostfile(target: RunConfig) -> str | None:
    """The MPI hostfile template, in MPICH's `host:processes` format: launch.sh prefers the mpiexec beside the
    interpreter, the [mpi] extra's MPICH, which refuses ./hostfile's DeepSpeed `slots=` lines. Written where
    mpiexec may start several nodes: a multi-node folder, or one emitted with --launcher mpi."""
    if target.num_nodes == 1 and target.launcher != "mpirun":
        return None
    slots = target.nproc_per_node
    lines = [
        "# MPI hostfile for MPICH's mpiexec (launch.sh's default under LAUNCHER=mpirun; Intel MPI reads it too):",
        f"# one HOST:{slots} line per node. Replace the names with your nodes' hostnames, then on the first node:",
        f"#   MPIEXEC_ARGS='-hostfile {MPI_HOSTFILE}' bash launch.sh",
        f"# Open MPI's mpirun reads `HOST slots={slots}` lines instead.",
        *(f"node-{index + 1}:{slots}" for index in range(target.num_nodes)),
    ]
    return "\n".join(lines) + "\n"

#!/usr/bin/env bash
# Launch llama-2-70b (engine) as planned by hardware-selector; edit freely.
#
# One node:       NNODES=1 bash launch.sh [runner options: --steps N, --data PATH, ...; see python -m <MODULE> -h]
# Several nodes:  on every node, NODE_RANK=0 on the first:
#   NNODES=4 NODE_RANK=<i> MASTER_ADDR=<first node> bash launch.sh
# Your own script: TRAIN_SCRIPT=/path/to/train.py bash launch.sh  (it receives --plan RUN_DIR).
# Another launcher: LAUNCHER=torchrun|accelerate|deepspeed|mpirun (the plan's choice: torchrun).
# The process count is part of the plan (batch sizes depend on it): to change it, run
# hardware-selector train RUN_DIR --nproc N (the global batch is kept), or re-emit with --gpus-per-node.
set -euo pipefail

RUN_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)"
# The interpreter: PYTHON, else the one that planned this folder when this machine has it, else python on
# PATH. Another machine needs hardware-selector installed in it (README.md, "On another machine").
PLANNED_PYTHON=<PYTHON>
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x "$PLANNED_PYTHON" ]]; then PYTHON="$PLANNED_PYTHON"; else PYTHON=python; fi
fi
if ! command -v -- "$PYTHON" >/dev/null; then
  echo "launch.sh: no Python interpreter '$PYTHON' on this machine; set PYTHON=/path/to/python, one with" \
    "hardware-selector installed" >&2
  exit 2
fi
LAUNCHER=${LAUNCHER:-torchrun}
NPROC_PER_NODE=8
NNODES=${NNODES:-4}
# Given, or launch.sh's one-node defaults below? Several nodes need them given (need_nodes).
MASTER_ADDR_GIVEN=${MASTER_ADDR:+yes}
NODE_RANK_GIVEN=${NODE_RANK:+yes}
NODE_RANK=${NODE_RANK:-0}
MASTER_ADDR=${MASTER_ADDR:-127.0.0.1}
MASTER_PORT=${MASTER_PORT:-29500}
for NAME in NNODES NODE_RANK MASTER_PORT; do
  if ! [[ "${!NAME}" =~ ^(0|[1-9][0-9]{0,5})$ ]] || [[ "$NAME" == NNODES && "${!NAME}" == 0 ]] ||
     [[ "$NAME" == MASTER_PORT && ( "${!NAME}" == 0 || "${!NAME}" -gt 65535 ) ]]; then
    WHAT="a whole number below a million"; [[ "$NAME" != NNODES ]] || WHAT="a whole number of nodes, at least 1"
    [[ "$NAME" != MASTER_PORT ]] || WHAT="a port, 1 to 65535"
    echo "launch.sh: $NAME must be $WHAT, not '${!NAME}'" >&2
    exit 2
  fi
done
# What each launcher starts: the runner module, or your script (a relative path: from where you ran this).
# The launch runs in RUN_DIR; the runner reads relative paths you pass (--data, --resume-from, ...) from
# where you ran this (--launch-dir).
if [[ -n "${TRAIN_SCRIPT:-}" ]]; then
  [[ "$TRAIN_SCRIPT" == /* ]] || TRAIN_SCRIPT="$PWD/$TRAIN_SCRIPT"
  TRAIN=( "$TRAIN_SCRIPT" ); DS_TRAIN=( "$TRAIN_SCRIPT" ); ARGS=( --plan "$RUN_DIR" "$@" )
else
  TRAIN=( -m <MODULE> ); DS_TRAIN=( --module <MODULE> )
  ARGS=( --plan "$RUN_DIR" --launch-dir "$PWD" "$@" )
fi
# Several nodes meet at node 0's MASTER_ADDR, each with its NODE_RANK (an elastic torchrun numbers them
# itself). The one-node defaults would make every machine node 0 at its own loopback, each waiting
# silently for nodes that never join: refused in one line instead.
need_nodes() {
  [[ "$NNODES" != 1 ]] || return 0
  local missing="" settings="MASTER_ADDR=<node 0's address> "
  [[ -n "$MASTER_ADDR_GIVEN" ]] || missing="MASTER_ADDR"
  if [[ "$1" == rank ]]; then
    settings+="NODE_RANK=<0..$((NNODES - 1))> "
    [[ -n "$NODE_RANK_GIVEN" ]] || missing="${missing:+$missing and }NODE_RANK"
  fi
  if [[ -n "$missing" ]]; then
    echo "launch.sh: NNODES=$NNODES needs $missing: run ${settings}bash launch.sh on each of the" \
      "$NNODES nodes, or NNODES=1 bash launch.sh to train on this node alone" >&2
    exit 2
  fi
  if [[ "$1" == elastic ]]; then
    echo "launch.sh: waiting for ${NNODES_RANGE%%:*} to ${NNODES_RANGE##*:} nodes at $MASTER_ADDR:$MASTER_PORT" >&2
    return 0
  fi
  if ! [[ "$NODE_RANK" =~ ^[0-9]+$ ]] || (( NODE_RANK >= NNODES )); then
    echo "launch.sh: NODE_RANK=$NODE_RANK is not a node of NNODES=$NNODES; give 0 to $((NNODES - 1))," \
      "0 on the node at MASTER_ADDR" >&2
    exit 2
  fi
  echo "launch.sh: waiting for all $NNODES nodes at $MASTER_ADDR:$MASTER_PORT (this is node $NODE_RANK)" >&2
}
cd "$RUN_DIR"

case "$LAUNCHER" in
torchrun)
  if [[ "$NNODES" == 1 ]]; then
    exec "$PYTHON" -m torch.distributed.run --standalone --nproc-per-node="$NPROC_PER_NODE" \
      "${TRAIN[@]}" "${ARGS[@]}"
  fi
  need_nodes rank
  exec "$PYTHON" -m torch.distributed.run --nnodes="$NNODES" --node-rank="$NODE_RANK" \
    --nproc-per-node="$NPROC_PER_NODE" --rdzv-backend=static \
    --rdzv-id=hs-llama-2-70b-engine --rdzv-endpoint="$MASTER_ADDR:$MASTER_PORT" \
    "${TRAIN[@]}" "${ARGS[@]}"
  ;;
accelerate)
  # = accelerate launch --config_file accelerate_config.yaml ...; the runner sets up the strategy itself.
  need_nodes rank
  exec "$PYTHON" -m accelerate.commands.launch --config_file "$RUN_DIR/accelerate_config.yaml" \
    --num_processes "$((NPROC_PER_NODE * NNODES))" --num_machines "$NNODES" \
    --machine_rank "$NODE_RANK" --main_process_ip "$MASTER_ADDR" --main_process_port "$MASTER_PORT" \
    "${TRAIN[@]}" "${ARGS[@]}"
  ;;
deepspeed)
  # = deepspeed [--hostfile hostfile] ...; with several nodes run it on the first node only:
  # it starts the other nodes over ssh (list them in ./hostfile).
  if [[ "$NNODES" == 1 ]]; then
    exec "$PYTHON" -m deepspeed.launcher.runner --num_gpus "$NPROC_PER_NODE" \
      --master_port "$MASTER_PORT" "${DS_TRAIN[@]}" "${ARGS[@]}"
  fi
  # Host lines: neither blank nor comments (the launcher skips both).
  HOSTS=0; SAID="has no hostfile"
  if [[ -f "$RUN_DIR/hostfile" ]]; then
    HOSTS=$(grep -cvE '^[[:space:]]*(#|$)' "$RUN_DIR/hostfile" || true); SAID="its hostfile lists $HOSTS host(s)"
  fi
  if (( HOSTS < NNODES )); then
    echo "launch.sh: NNODES=$NNODES, but this folder was planned for 4 nodes and $SAID;" \
      "the DeepSpeed launcher needs one line per node: write $RUN_DIR/hostfile" \
      "(one 'HOST slots=$NPROC_PER_NODE' line per node) or re-emit the plan with --nodes $NNODES" >&2
    exit 2
  fi
  # Node 0's address: the one given, else the launcher's own (the first host's `hostname -I`, over ssh);
  # the one-node default 127.0.0.1 would send every other node to its own loopback.
  MASTER=(); [[ -z "$MASTER_ADDR_GIVEN" ]] || MASTER=( --master_addr "$MASTER_ADDR" )
  exec "$PYTHON" -m deepspeed.launcher.runner --hostfile "$RUN_DIR/hostfile" \
    --num_nodes "$NNODES" --num_gpus "$NPROC_PER_NODE" \
    ${MASTER[@]+"${MASTER[@]}"} --master_port "$MASTER_PORT" "${DS_TRAIN[@]}" "${ARGS[@]}"
  ;;
mpirun)
  # = mpiexec -n <all processes>; run it on the first node only. Several nodes:
  # MPIEXEC_ARGS='-hostfile mpi_hostfile' (each host NPROC_PER_NODE processes); rank 0's address comes
  # from mpi4py, or give MASTER_ADDR.
  # The mpiexec installed beside the interpreter (the [mpi] extra's MPICH, which its mpi4py was built for),
  # else the one on PATH.
  # Several nodes: mpiexec must be told the hosts (a hostfile, your own MPIEXEC, or the SLURM or PBS
  # allocation it reads itself), or it starts every node's processes on this one.
  if [[ "$NNODES" != 1 && -z "${MPIEXEC_ARGS:-}${MPIEXEC:-}${SLURM_JOB_NODELIST:-}${PBS_NODEFILE:-}" ]]; then
    echo "launch.sh: NNODES=$NNODES needs mpiexec told your nodes, or it starts all $((NPROC_PER_NODE * NNODES)) processes here:" \
      "on the first node run MPIEXEC_ARGS='-hostfile mpi_hostfile' bash launch.sh with mpi_hostfile listing each node as HOST:$NPROC_PER_NODE" \
      "(Open MPI: HOST slots=$NPROC_PER_NODE), or NNODES=1 bash launch.sh for this node alone" >&2
    exit 2
  fi
  if [[ -z "${MPIEXEC:-}" ]]; then
    PYTHON_DIR="$(dirname -- "$(command -v -- "$PYTHON")")"  # PYTHON may be a name on PATH
    if [[ -x "$PYTHON_DIR/mpiexec" ]]; then MPIEXEC="$PYTHON_DIR/mpiexec"; else MPIEXEC=mpiexec; fi
  fi
  read -r -a MPIEXEC_OPTIONS <<< "${MPIEXEC_ARGS:-}"
  exec "$MPIEXEC" -n "$((NPROC_PER_NODE * NNODES))" "${MPIEXEC_OPTIONS[@]}" \
    "$PYTHON" "${TRAIN[@]}" "${ARGS[@]}"
  ;;
*)
  echo "launch.sh: unknown LAUNCHER '$LAUNCHER'; use torchrun, accelerate, deepspeed or mpirun" >&2
  exit 2
  ;;
esac

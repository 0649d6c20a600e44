#!/usr/bin/env bash
# Launch llama-3-8b (fsdp) as planned by hardware-selector; edit freely.
#
# One node:       bash launch.sh [runner options: --steps N, --data PATH, ...; see python -m <MODULE> -h]
# Several nodes:  on every node, NODE_RANK=0 on the first:
#   NNODES=2 NODE_RANK=<i> MASTER_ADDR=<first node> bash launch.sh
# Your own script: TRAIN_SCRIPT=/path/to/train.py bash launch.sh  (it receives --plan RUN_DIR).
# Another launcher: LAUNCHER=torchrun|accelerate|deepspeed|mpirun (the plan's choice: torchrun).
# The process count is part of the plan (batch sizes depend on it): to change it, run
# hardware-selector train RUN_DIR --nproc N (the global batch is kept), or re-emit with --gpus-per-node.
set -euo pipefail

RUN_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)"
DEFAULT_PYTHON=<PYTHON>
PYTHON=${PYTHON:-$DEFAULT_PYTHON}
LAUNCHER=${LAUNCHER:-torchrun}
NPROC_PER_NODE=1
NNODES=${NNODES:-1}
NODE_RANK=${NODE_RANK:-0}
MASTER_ADDR=${MASTER_ADDR:-127.0.0.1}
MASTER_PORT=${MASTER_PORT:-29500}
# What each launcher starts: the runner module, or your script.
if [[ -n "${TRAIN_SCRIPT:-}" ]]; then
  TRAIN=( "$TRAIN_SCRIPT" ); DS_TRAIN=( "$TRAIN_SCRIPT" )
else
  TRAIN=( -m <MODULE> ); DS_TRAIN=( --module <MODULE> )
fi
ARGS=( --plan "$RUN_DIR" "$@" )
cd "$RUN_DIR"

case "$LAUNCHER" in
torchrun)
  if [[ "$NNODES" == 1 ]]; then
    exec "$PYTHON" -m torch.distributed.run --standalone --nproc-per-node="$NPROC_PER_NODE" \
      "${TRAIN[@]}" "${ARGS[@]}"
  fi
  exec "$PYTHON" -m torch.distributed.run --nnodes="$NNODES" --node-rank="$NODE_RANK" \
    --nproc-per-node="$NPROC_PER_NODE" --rdzv-backend=static \
    --rdzv-id=hs-llama-3-8b-fsdp --rdzv-endpoint="$MASTER_ADDR:$MASTER_PORT" \
    "${TRAIN[@]}" "${ARGS[@]}"
  ;;
accelerate)
  # = accelerate launch --config_file accelerate_config.yaml ...; the runner sets up the strategy itself.
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
    echo "launch.sh: NNODES=$NNODES, but this folder was planned for 1 node and $SAID;" \
      "the DeepSpeed launcher needs one line per node: write $RUN_DIR/hostfile" \
      "(one 'HOST slots=$NPROC_PER_NODE' line per node) or re-emit the plan with --nodes $NNODES" >&2
    exit 2
  fi
  exec "$PYTHON" -m deepspeed.launcher.runner --hostfile "$RUN_DIR/hostfile" \
    --num_nodes "$NNODES" --num_gpus "$NPROC_PER_NODE" \
    --master_addr "$MASTER_ADDR" --master_port "$MASTER_PORT" "${DS_TRAIN[@]}" "${ARGS[@]}"
  ;;
mpirun)
  # = mpiexec -n <all processes>; run it on the first node only. Several nodes: MPIEXEC_ARGS='-hostfile FILE'
  # (each host NPROC_PER_NODE slots); rank 0's address comes from mpi4py, or give MASTER_ADDR.
  # The mpiexec installed beside the interpreter (the [mpi] extra's MPICH, which its mpi4py was built for),
  # else the one on PATH.
  if [[ -z "${MPIEXEC:-}" ]]; then
    if [[ -x "$(dirname -- "$PYTHON")/mpiexec" ]]; then MPIEXEC="$(dirname -- "$PYTHON")/mpiexec"; else MPIEXEC=mpiexec; fi
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

"""slurm.sbatch: one task per node under srun, torchrun's rendezvous on the job's first node.

FSDP plans start `accelerate launch` per node instead (it needs the node's
rank, read from SLURM_NODEID inside each task). Paths are fixed at emission
time (SLURM runs a copy of the script from its spool directory), quoted with
shlex.quote and expanded inside double quotes.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from ..plan import Plan
from .launch_scripts import ACCELERATE_CONFIG_FILE, default_train_command, run_id
from .target import DEFAULT_MASTER_PORT, RunTarget


def slurm_sbatch(plan: Plan, target: RunTarget, run_dir: Path, *, python: str | None = None) -> str:
    q = shlex.quote
    gpus = [] if target.device == "cpu" else [f"#SBATCH --gpus-per-node={target.nproc_per_node}"]
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name={run_id(plan)}",
        f"#SBATCH --nodes={target.num_nodes}",
        "#SBATCH --ntasks-per-node=1",
        *gpus,
        "#SBATCH --exclusive",
        "#SBATCH --output=slurm-%j.out",
        f"# {plan.model.name}, {plan.config.strategy.value}: {target.num_nodes} node(s) x "
        f"{target.nproc_per_node} process(es); submit with `sbatch slurm.sbatch`. Written by hardware-selector.",
        "set -euo pipefail",
        "",
        f"export RUN_DIR={q(str(run_dir))}",
        f"export PYTHON={q(python or sys.executable)}",
        f"TRAIN=( {' '.join(q(word) for word in default_train_command(target))} )",
        f"export NPROC_PER_NODE={target.nproc_per_node}",
        f"export MASTER_PORT={DEFAULT_MASTER_PORT}",
        "",
        "# Rendezvous on the first node of the allocation.",
        'mapfile -t NODES < <(scontrol show hostnames "$SLURM_JOB_NODELIST")',
        'HEAD_NODE="${NODES[0]}"',
        'export HEAD_NODE_IP="$(srun --nodes=1 --ntasks=1 -w "$HEAD_NODE" hostname --ip-address | awk \'{print $1}\')"',
        'export MASTER_ADDR="$HEAD_NODE_IP"',
    ]
    if target.device == "cpu":
        lines.append("export DS_ACCELERATOR=cpu")
    lines.append('cd "$RUN_DIR"')
    lines.append("")
    if target.launcher == "accelerate":
        lines += [
            f"export ACCELERATE_CONFIG={q(ACCELERATE_CONFIG_FILE)}",
            'export TRAIN_TARGET="${TRAIN[*]}"',
            "# Single quotes: each task expands its own SLURM_NODEID.",
            "srun --ntasks-per-node=1 --kill-on-bad-exit=1 bash -c '"
            'exec "$PYTHON" -m accelerate.commands.launch --config_file "$RUN_DIR/$ACCELERATE_CONFIG" '
            '--num_processes "$((NPROC_PER_NODE * SLURM_JOB_NUM_NODES))" --num_machines "$SLURM_JOB_NUM_NODES" '
            '--machine_rank "$SLURM_NODEID" --main_process_ip "$HEAD_NODE_IP" --main_process_port "$MASTER_PORT" '
            '"$TRAIN_TARGET" --plan "$RUN_DIR"\'',
        ]
    else:
        lines += [
            "srun --ntasks-per-node=1 --kill-on-bad-exit=1 \\",
            '  "$PYTHON" -m torch.distributed.run --nnodes="$SLURM_JOB_NUM_NODES" --nproc-per-node="$NPROC_PER_NODE" \\',
            '  --rdzv-id="$SLURM_JOB_ID" --rdzv-backend=c10d --rdzv-endpoint="$HEAD_NODE_IP:$MASTER_PORT" \\',
            '  "${TRAIN[@]}" --plan "$RUN_DIR"',
        ]
    return "\n".join(lines) + "\n"

"""slurm.sbatch: one task per node under srun, torchrun's rendezvous on the job's first node.

Every strategy runs the one runner (`-m backends.run`); extra arguments to
`sbatch slurm.sbatch ARGS` reach it. Paths are fixed at emission time (SLURM
runs a copy of the script from its spool directory), quoted with shlex.quote
and expanded inside double quotes. An elastic plan asks for MIN-MAX nodes, keeps the job alive
when a node fails (--no-kill) and lets torchrun restart the survivors, which re-plan (docs/running.md,
"Elastic").
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from planner.contract.run_config import RunConfig
from planner.elastic_plan import ElasticPlan
from planner.emit.launch_scripts import DEFAULT_MASTER_PORT, RUNNER_MODULE, run_id
from planner.plan import Plan


def slurm_sbatch(
    plan: Plan, target: RunConfig, run_dir: Path, *, python: str | None = None, elastic: ElasticPlan | None = None
) -> str:
    q = shlex.quote
    gpus = [] if target.device == "cpu" else [f"#SBATCH --gpus-per-node={target.nproc_per_node}"]
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name={run_id(plan)}",
        f"#SBATCH --nodes={target.num_nodes if elastic is None else f'{elastic.min_nodes}-{elastic.max_nodes}'}",
        *([] if elastic is None else ["#SBATCH --no-kill"]),
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
        f"TRAIN=( -m {RUNNER_MODULE} )",
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
    nodes = (
        '"$SLURM_JOB_NUM_NODES"' if elastic is None else f"{elastic.node_range} --max-restarts={elastic.max_restarts}"
    )
    lines += [
        "srun --ntasks-per-node=1 --kill-on-bad-exit=1 \\" if elastic is None else "srun --ntasks-per-node=1 \\",
        f'  "$PYTHON" -m torch.distributed.run --nnodes={nodes} --nproc-per-node="$NPROC_PER_NODE" \\',
        '  --rdzv-id="$SLURM_JOB_ID" --rdzv-backend=c10d --rdzv-endpoint="$HEAD_NODE_IP:$MASTER_PORT" \\',
        '  "${TRAIN[@]}" --plan "$RUN_DIR" "$@"',
    ]
    return "\n".join(lines) + "\n"

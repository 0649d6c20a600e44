"""slurm.sbatch: one task per node under srun, torchrun's rendezvous on the job's first node.

Every strategy runs the one runner (`-m backends.run`); extra arguments to
`sbatch slurm.sbatch ARGS` reach it. The run folder and the interpreter are
found when the job runs (planner/emit/script_paths.py: SLURM runs a copy of the
script from its spool directory), so the folder can be planned on one machine
and submitted on another; values are expanded inside double quotes. An elastic plan asks for MIN-MAX nodes, keeps the job alive
when a node fails (--no-kill) and lets torchrun restart the survivors, which re-plan (docs/running.md,
"Elastic").
"""

from __future__ import annotations

from planner.contract.run_config import RunConfig
from planner.elastic_plan import ElasticPlan
from planner.emit.launch_scripts import DEFAULT_MASTER_PORT, RUNNER_MODULE, run_id
from planner.emit.script_paths import python_lines, sbatch_run_dir_lines
from planner.plan import Plan


def slurm_sbatch(
    plan: Plan, target: RunConfig, *, python: str | None = None, elastic: ElasticPlan | None = None
) -> str:
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
        *sbatch_run_dir_lines(),
        *python_lines("slurm.sbatch", python),
        "export PYTHON",
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
    # The launch runs in RUN_DIR; relative paths passed to the runner are read from the submit folder.
    lines.append('LAUNCH_DIR="${SLURM_SUBMIT_DIR:-$PWD}"')
    lines.append('cd "$RUN_DIR"')
    lines.append("")
    nodes = (
        '"$SLURM_JOB_NUM_NODES"' if elastic is None else f"{elastic.node_range} --max-restarts={elastic.max_restarts}"
    )
    lines += [
        "srun --ntasks-per-node=1 --kill-on-bad-exit=1 \\" if elastic is None else "srun --ntasks-per-node=1 \\",
        f'  "$PYTHON" -m torch.distributed.run --nnodes={nodes} --nproc-per-node="$NPROC_PER_NODE" \\',
        '  --rdzv-id="$SLURM_JOB_ID" --rdzv-backend=c10d --rdzv-endpoint="$HEAD_NODE_IP:$MASTER_PORT" \\',
        '  "${TRAIN[@]}" --plan "$RUN_DIR" --launch-dir "$LAUNCH_DIR" "$@"',
    ]
    return "\n".join(lines) + "\n"

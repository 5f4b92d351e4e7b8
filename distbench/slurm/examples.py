"""The example scripts in slurm/, rendered from job.sh.j2 so they cannot drift from it.

python -m distbench.slurm.examples [FOLDER]      (make slurm-examples; FOLDER defaults to ./slurm)
"""

from __future__ import annotations

import sys
from pathlib import Path

from distbench.run.commandline import Shell
from distbench.slurm.plan import SlurmSettings
from distbench.slurm.render import render

PYTHON = Shell("$(command -v python)")
RECORDS = Shell("${SLURM_SUBMIT_DIR:-$PWD}/distbench-records")
COMMON = [
    "Rank 0 writes one result record into RECORDS (shared storage), also when the point fails, times out",
    "or is cancelled (then with its log tail). Merge them with `distbench collect RECORDS`.",
]


def _multinode(job_name: str, strategy: str, strategy_why: str, tasks_why: str, header: list[str]) -> dict:
    return {
        "mode": "point",
        "job_name": job_name,
        "strategy": strategy,
        "strategy_why": strategy_why,
        "shape": {"nodes": 2, "tasks": 1, "tasks_why": tasks_why, "gpus": 8},
        "header": header + COMMON,
        "time": "01:00:00",
    }


EXAMPLES = {
    "multinode-ddp.sbatch": _multinode(
        "distbench-ddp",
        "ddp",
        "a strategy that spans nodes",
        "one torchrun agent per node",
        [
            "distbench over several nodes: DistributedDataParallel with torchrun's c10d rendezvous.",
            "",
            "  sbatch --nodes=2 slurm/multinode-ddp.sbatch",
            "  sbatch --nodes=4 --gres=gpu:4 --export=ALL,GPUS=4,MODEL=resnet152 slurm/multinode-ddp.sbatch",
            "",
            "srun starts one torchrun agent per node; the agents meet at the rendezvous on the first node",
            "(head_node:MASTER_PORT), which assigns the ranks, and each agent starts one worker per GPU.",
        ],
    ),
    "multinode-horovod.sbatch": _multinode(
        "distbench-horovod",
        "horovod-torch",
        "or horovod-tf",
        "horovodrun itself starts the ranks",
        [
            "distbench over several nodes: Horovod (PyTorch or TensorFlow) with horovodrun and Gloo.",
            "",
            "  sbatch --nodes=2 slurm/multinode-horovod.sbatch",
            "  sbatch --nodes=2 --gres=gpu:4 --export=ALL,STRATEGY=horovod-tf,GPUS=4 slurm/multinode-horovod.sbatch",
            "",
            "One horovodrun on the first node starts GPUS ranks on every node of the allocation",
            "(-H node1:GPUS,node2:GPUS, from `scontrol show hostnames`), over ssh to the other nodes, with",
            "Gloo as the controller.",
        ],
    ),
    "multinode-tf.sbatch": _multinode(
        "distbench-tf",
        "mirrored",
        "MultiWorkerMirroredStrategy",
        "one TF worker per node",
        [
            "distbench over several nodes: TensorFlow MultiWorkerMirroredStrategy (the multi-node `mirrored`).",
            "",
            "  sbatch --nodes=2 slurm/multinode-tf.sbatch",
            "  sbatch --nodes=2 --gres=gpu:4 --export=ALL,GPUS=4 slurm/multinode-tf.sbatch",
            "",
            "srun starts one TF worker per node (one per CPU worker with DEVICE=cpu: then submit with",
            "--ntasks-per-node=GPUS); each worker builds the cluster from the Slurm step it runs in",
            "(SLURM_STEP_NODELIST, SLURM_NODEID, SLURM_LOCALID; ports from MASTER_PORT up) and replicates",
            "over its node's GPUs; gradients are all-reduced with NCCL (gRPC ring on CPU).",
        ],
    ),
    "single-node-sweep.sbatch": {
        "mode": "scale",
        "job_name": "distbench-sweep",
        "gpus": "1,2,4,8",
        "strategies": "ddp,horovod-torch,mirrored,horovod-tf,dp",
        "shape": {"nodes": 1, "tasks": 1, "tasks_why": "distbench starts the ranks", "gpus": 8},
        "time": "04:00:00",
        "header": [
            "distbench on one multi-GPU node: the whole `distbench scale` sweep inside one allocation.",
            "",
            "  sbatch slurm/single-node-sweep.sbatch",
            "  GPUS=1,2,4 MODEL=resnet152 sbatch --gres=gpu:4 slurm/single-node-sweep.sbatch",
            "",
            "Every point runs in a fresh process tree launched the way users launch it (torchrun --standalone,",
            "horovodrun, one process), one after the other, on this node's GPUs. Each finished point's record",
            "goes to RECORDS (shared storage); merge them anywhere with `distbench collect RECORDS`.",
            "For one job per point, and points over several nodes, use `distbench slurm` (docs/slurm.md).",
        ],
    },
}


def render_examples() -> dict[str, str]:
    out = {}
    for name, example in EXAMPLES.items():
        context = dict(example)
        settings = SlurmSettings(
            script=Path(name),
            records_dir=Path("distbench-records"),
            time=context.pop("time"),
            job_name=context.pop("job_name"),
        )
        out[name] = render(s=settings, python=PYTHON, records=RECORDS, **context)
    return out


def main(argv: list[str]) -> None:
    folder = Path(argv[0] if argv else "slurm")
    for name, text in render_examples().items():
        (folder / name).write_text(text)
        print(f"wrote {folder / name}")


if __name__ == "__main__":
    main(sys.argv[1:])

"""Worker-side code: one module per strategy, run inside the worker process(es).

Each module runs the same workload (distbench.workers.common) and emits one result record through
distbench.results.record. One entry point runs any of them (distbench/workers/__main__.py), the same under torchrun,
horovodrun, srun or by hand, e.g.:

    torchrun --standalone --nproc_per_node=2 -m distbench.workers torch_ddp --config cfg.json --out r.json
    horovodrun -np 2 -H localhost:2 --gloo python -m distbench.workers horovod_torch --config cfg.json --out r.json

What they share with the parent side (free_port, tf_config, ...) is in distbench.workers.runtime: no worker
imports launch, launchers, plan or strategies.
"""

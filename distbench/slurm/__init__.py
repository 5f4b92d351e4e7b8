"""Sweeps as Slurm jobs: plan (which jobs), render (the sbatch script from job.sh.j2), submit (one job
array per resource shape), job (the hidden `distbench slurm-job` the scripts call). Every point is its own
job, launched with its strategy's engine, and leaves one record on shared storage, also when it fails, times
out or is cancelled (then with the log tail); `distbench collect` (distbench/kinds/collect.py) brings them back.
"""

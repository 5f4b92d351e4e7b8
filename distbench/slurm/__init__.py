"""Sweeps as Slurm jobs, one module per job:

  plan      which jobs: the points (strategy, total GPUs, nodes), their resource shapes, name checks
  render    the sbatch script from the one template job.sh.j2 (also the examples in slurm/: examples.py)
  submit    sbatch, one job array per resource shape (the tasks of an array share one resource request)
  job       the hidden `distbench slurm-job` command the scripts call inside the job
  collect   `distbench collect`: merge the jobs' records into the results store

Every point is its own Slurm job in a fresh allocation, launched with the engine its strategy names
(distbench.engines: Launcher.sbatch_step), and leaves one result record (distbench.record schema) on
shared storage, also when it fails, times out or is cancelled (the script traps the signal and runs
`slurm-job finish`, which writes a failed record with the log tail).
"""

"""distbench: compare distributed-training strategies (DP, DDP, MirroredStrategy, Horovod) side by side."""

__version__ = "0.1.0"

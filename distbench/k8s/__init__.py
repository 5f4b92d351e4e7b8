"""Kubernetes sweeps: `distbench k8s` writes one Kubeflow job per point (Trainer v2 TrainJob, or the
PyTorchJob / MPIJob of the older operators), `distbench k8s-job run` runs a point inside its pod and
publishes its record, and `distbench collect` reads the records back (volume folder or `kubectl logs`)."""

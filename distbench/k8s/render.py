"""A Kubernetes sweep's files: one YAML file per point (its job, and for a Horovod TrainJob its runtime),
the shared objects (the results volume's claim) in their own file, applied first."""

from __future__ import annotations

from pathlib import Path

import yaml

from distbench.core.errors import BadInput
from distbench.k8s.manifests import PointObjects
from distbench.k8s.settings import K8sSettings

SHARED_FILE = "00-shared.yaml"


def comment(text: str) -> str:
    """Text for a `#` comment line: control characters escaped, so nothing can end the comment."""
    return "".join(c if ord(c) >= 32 and ord(c) != 127 else repr(c)[1:-1] for c in str(text))


class _Dumper(yaml.SafeDumper):
    """Plain YAML: a value used twice is written twice (no &anchors / *aliases)."""

    def ignore_aliases(self, data) -> bool:
        return True


def to_yaml(objects: list[dict], header: list[str] = ()) -> str:
    lines = "".join(f"# {comment(line)}\n" for line in header)
    body = yaml.dump_all(objects, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=4096)
    return lines + body


def point_file(index: int, po: PointObjects, count: int) -> str:
    """NN-<job>.yaml, numbered from 01 in sweep order, wide enough that the names sort in that order."""
    return f"{index + 1:0{max(2, len(str(count)))}d}-{po.name}.yaml"


def write_manifests(out: Path, shared: list[dict], points: list[PointObjects], settings: K8sSettings) -> list[Path]:
    """Write the sweep's YAML files into `out` (created); the files, shared first."""
    by = [f"by: {settings.command}"] if settings.command else []
    files: list[tuple[Path, str]] = []
    if shared:
        files.append((out / SHARED_FILE, to_yaml(shared, [f"distbench sweep {settings.name}: apply first", *by])))
    for i, po in enumerate(points):
        cfg = po.point.config
        header = [
            f"distbench sweep {settings.name}, point {po.point.key}: {po.point.strategy.name}, {cfg.world_size} "
            f"{'GPU' if cfg.device == 'cuda' else 'CPU worker'}(s) on {po.point.nodes} node(s), "
            f"{po.point.launcher.name}, {po.job['kind']}",
            f"record: {settings.records}/{po.name}.json on PVC {settings.pvc} (and in the pod's log)",
            *by,
        ]
        files.append((out / point_file(i, po, len(points)), to_yaml(po.objects, header)))
    try:
        out.mkdir(parents=True, exist_ok=True)
        for path, text in files:
            path.write_text(text)
    except OSError as exc:
        raise BadInput(f"--out: cannot write the manifests: {exc.strerror}: {exc.filename}") from None
    return [path for path, _ in files]

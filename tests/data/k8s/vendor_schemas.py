"""Re-create the vendored CRD schemas from the published CRD files (run by hand, not by the tests).

    python tests/data/k8s/vendor_schemas.py TRAINER_CRD PYTORCHJOB_CRD MPIJOB_CRD TRAININGRUNTIME_CRD

Each CRD's spec.versions[<served version>].schema.openAPIV3Schema is written as JSON with every
`description` key removed (documentation only: it changes no validation); nothing else is changed.
Sources (repository, path, commit) are in README.md here.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

HERE = Path(__file__).parent
OUTPUT = {  # CRD kind -> (version, file written here)
    "TrainJob": ("v1alpha1", "trainjob.v1alpha1.schema.json"),
    "TrainingRuntime": ("v1alpha1", "trainingruntime.v1alpha1.schema.json"),
    "PyTorchJob": ("v1", "pytorchjob.v1.schema.json"),
    "MPIJob": ("v2beta1", "mpijob.v2beta1.schema.json"),
}


def strip_descriptions(node):
    if isinstance(node, dict):
        return {k: strip_descriptions(v) for k, v in node.items() if not (k == "description" and isinstance(v, str))}
    if isinstance(node, list):
        return [strip_descriptions(v) for v in node]
    return node


def main(paths: list[str]) -> None:
    for path in paths:
        for crd in yaml.safe_load_all(Path(path).read_text()):
            if not crd or crd.get("kind") != "CustomResourceDefinition":
                continue
            kind = crd["spec"]["names"]["kind"]
            if kind not in OUTPUT:
                continue
            version, name = OUTPUT[kind]
            (found,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
            schema = strip_descriptions(found["schema"]["openAPIV3Schema"])
            (HERE / name).write_text(json.dumps(schema, indent=None, sort_keys=True, separators=(",", ":")) + "\n")
            print(f"{path}: {kind} {version} -> {name}")


if __name__ == "__main__":
    main(sys.argv[1:])

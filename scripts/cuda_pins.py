"""Before any download: the exact torch CUDA wheel the index offers, its NCCL pin, and whether
tensorflow[and-cuda] can share one environment with it (issue 22, item 5). Used by scripts/install.sh.

    python scripts/cuda_pins.py TORCH_SPEC TORCH_INDEX_URL TF_SPEC

Asks pip to resolve each spec without installing anything (`pip install --dry-run --no-deps --report`;
pip reads the wheel's metadata from the index, PEP 658, or from the wheel where the index has none) and
compares the two nvidia-nccl-cu12 requirements. Prints one line per finding; exit status 0: they can
share one environment, 3: they cannot (the fallback is printed), 4: unknown (an index did not answer).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

try:
    from packaging.requirements import Requirement
    from packaging.version import Version
except ImportError:  # a bare interpreter: the copy pip carries
    from pip._vendor.packaging.requirements import Requirement
    from pip._vendor.packaging.version import Version

NCCL = "nvidia-nccl-cu12"
SHARE, SPLIT, UNKNOWN = 0, 3, 4


def unreachable(index_url: str) -> str | None:
    """Why `index_url` cannot be asked (None: it answers). pip itself only says it found no such version."""
    if not index_url.startswith(("http://", "https://")):
        return None
    try:
        with urllib.request.urlopen(index_url.rstrip("/") + "/", timeout=15):
            return None
    except urllib.error.HTTPError:
        return None  # it answered (a simple index may not list its root)
    except (OSError, ValueError) as exc:
        return f"{index_url} could not be reached: {getattr(exc, 'reason', exc)}"


def resolve(spec: str, index_url: str | None) -> tuple[dict | None, str]:
    """(pip's dry-run report item for `spec`: its metadata and where it came from; or None, and why)."""
    if index_url and (why := unreachable(index_url)):
        return None, why
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        argv = [sys.executable, "-m", "pip", "install", "--dry-run", "--no-deps", "--ignore-installed", "--quiet"]
        argv += ["--disable-pip-version-check", "--retries", "0", "--timeout", "15", "--report", str(report)]
        argv += ["--extra-index-url", index_url] if index_url else []
        try:
            done = subprocess.run([*argv, spec], capture_output=True, text=True, timeout=300)
        except subprocess.TimeoutExpired:
            return None, "pip did not answer within 300 s"
        if done.returncode == 0 and report.exists():
            items = json.loads(report.read_text()).get("install") or []
            if items:
                return items[0], ""
        if "ResolutionImpossible" in done.stderr or "No matching distribution" in done.stderr:
            return None, "no such wheel on the index" + (f" {index_url}" if index_url else "")
        errors = [ln for ln in done.stderr.splitlines() if ln.startswith("ERROR")] or ["pip gave no answer"]
        return None, errors[-1][:200]


def nccl_requirement(item: dict, extras: set[str]) -> Requirement | None:
    """The item's nvidia-nccl-cu12 requirement on Linux x86_64 with `extras` asked for."""
    for text in item["metadata"].get("requires_dist") or []:
        req = Requirement(text)
        if req.name != NCCL:
            continue
        env = {"extra": next(iter(extras), ""), "platform_system": "Linux", "sys_platform": "linux"}
        env["platform_machine"] = "x86_64"
        if req.marker is None or any(req.marker.evaluate(dict(env, extra=e)) for e in extras or {""}):
            return req
    return None


def _text(req: Requirement | None) -> str:
    return f"{req.name}{req.specifier}" if req else "no NCCL"


def can_share(torch_req: Requirement | None, tf_req: Requirement | None) -> bool:
    """Whether one nvidia-nccl-cu12 version meets both: each bound either names is tried against both."""
    if torch_req is None or tf_req is None:
        return True  # one of them does not pin NCCL: no conflict on it
    candidates = {Version(s.version) for req in (torch_req, tf_req) for s in req.specifier if "*" not in s.version}
    return any(torch_req.specifier.contains(v) and tf_req.specifier.contains(v) for v in candidates)


def decide(torch: tuple[dict | None, str], tf: tuple[dict | None, str], torch_spec: str, tf_spec: str):
    """(exit status, lines to print) from the two dry-run answers (item or None, and why)."""
    lines = []
    torch_item, tf_item = torch[0], tf[0]
    torch_req = tf_req = None
    if torch_item is None:
        lines.append(f"{torch_spec}: not checked ({torch[1]}); its NCCL pin is unknown")
    else:
        torch_req = nccl_requirement(torch_item, set())
        url = (torch_item.get("download_info") or {}).get("url", "")
        wheel = urllib.parse.unquote(url.rsplit("/", 1)[-1] or url)
        lines.append(f"torch {torch_item['metadata']['version']} is on the index ({wheel}); it pins {_text(torch_req)}")
    extras = set(Requirement(tf_spec).extras)
    if tf_item is None:
        lines.append(f"{tf_spec}: not checked ({tf[1]})")
    else:
        tf_req = nccl_requirement(tf_item, extras)
        lines.append(f"tensorflow {tf_item['metadata']['version']} needs {_text(tf_req)}")
    if torch_item is None or tf_item is None:
        lines.append("one environment: unknown until both indexes answer (the install goes on and pip decides)")
        return UNKNOWN, lines
    if can_share(torch_req, tf_req):
        lines.append("one environment: yes, both frameworks (and Horovod) can use one NCCL")
        return SHARE, lines
    lines.append(
        f"one environment: no, no {NCCL} meets both ({torch_req.specifier} and {tf_req.specifier}); "
        "fallback: TF_SPEC=none installs torch and horovod-torch alone in this venv (the TF strategies are then "
        "skipped), and the TF strategies run from a second venv (VENV=.venv-tf) with a torch whose NCCL fits "
        "TF's (TORCH_CUDA_TAG, or TORCH_SPEC and TORCH_INDEX_URL)"
    )
    return SPLIT, lines


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: python scripts/cuda_pins.py TORCH_SPEC TORCH_INDEX_URL TF_SPEC", file=sys.stderr)
        return 2
    torch_spec, index_url, tf_spec = argv
    status, lines = decide(resolve(torch_spec, index_url), resolve(tf_spec, None), torch_spec, tf_spec)
    print("\n".join(lines))
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

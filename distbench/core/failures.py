"""What broke a point: the root cause from how each rank ended, named in one line.

From each rank's `exit-<rank>.json` (distbench.core.rankguard) and, if it raised, `error-<rank>.json` (its
exception line): the root cause is the first rank to fail with an error of its own (a peer going away
and the launcher's teardown are consequences); `oom` only on an allocator's own message or a SIGKILL
while this cgroup's OOM-kill counter went up. When only consequences are on record and some rank left no
report (its rank guard itself was killed), the cause is unknown: that rank is named with how its launcher
saw it end (torchrun's failure summary, horovodrun's exit lines), never a survivor's consequence.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from distbench.core.rankguard import signal_name

OOM_MARKERS = (
    "out of memory",
    "OutOfMemoryError",
    "ResourceExhaustedError",
    "ResourceExhausted",
    "OOM when allocating",
    "std::bad_alloc",
    "MemoryError",
    "can't allocate memory",
    "Cannot allocate memory",
)
"""Texts that only running out of memory prints."""

SECONDARY_MARKERS = (
    "Connection reset by peer",
    "Connection closed by peer",
    "Broken pipe",
    "has been shut down",
    "Connection refused",
    "communicator was aborted",
    "Socket Timeout",
    "Timed out waiting",
    "Exit code: ",
    "ECONNRESET",
    "Read error",
    "Gloo connectFullMesh failed",
    "terminate called after",
)
"""Errors a surviving rank prints because another rank went away first: never the root cause."""

TEARDOWN_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP", "SIGUSR1")
"""How launchers stop the surviving ranks once one has failed."""

CGROUP_EVENTS = (Path("/sys/fs/cgroup/memory.events"), Path("/sys/fs/cgroup/memory/memory.oom_control"))  # v2, v1


def is_oom_text(text: str | None) -> bool:
    return bool(text) and any(m in text for m in OOM_MARKERS)


def is_secondary(text: str | None) -> bool:
    return bool(text) and any(m in text for m in SECONDARY_MARKERS)


def oom_kills() -> int | None:
    """The kernel OOM killer's kill count for this process's memory cgroup (None: not readable)."""
    for path in CGROUP_EVENTS:
        try:
            text = path.read_text()
        except OSError:
            continue
        m = re.search(r"^oom_kill (\d+)$", text, re.MULTILINE)
        if m:
            return int(m.group(1))
    return None


def _read(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def rank_reports(rank_dir: str | Path | None) -> list[dict]:
    """Each ended rank's report (rank, returncode, signal, ended, and its own `error`), in order of ending."""
    if not rank_dir or not Path(rank_dir).is_dir():
        return []
    folder = Path(rank_dir)
    reports = []
    for path in folder.glob("exit-*.json"):
        report = _read(path)
        if report is None or not isinstance(report.get("rank"), int):
            continue
        error = _read(folder / f"error-{report['rank']}.json")
        report["error"] = (error or {}).get("error")
        reports.append(report)
    return sorted(reports, key=lambda r: r.get("ended") or 0.0)


def failed(report: dict) -> bool:
    return report.get("returncode") not in (0, None)


def first_failure(rank_dir: str | Path | None) -> dict | None:
    """The first rank that ended with a non-zero status, as soon as there is one (the parent polls)."""
    return next((r for r in rank_reports(rank_dir) if failed(r)), None)


def _consequence(r: dict, first: dict) -> bool:
    """Whether a failed rank's end only follows another's: a peer-went-away error, or (after the first
    failure) the launcher's teardown signal."""
    if r is first:
        return is_secondary(r.get("error"))
    return is_secondary(r.get("error")) or r.get("signal") in TEARDOWN_SIGNALS


def root_cause(reports: list[dict]) -> dict | None:
    """The rank whose failure caused the others': the first to fail on its own account."""
    bad = [r for r in reports if failed(r)]
    if not bad:
        return None
    primary = [r for r in bad if not _consequence(r, bad[0])]
    return (primary or bad)[0]


def only_consequences(reports: list[dict], log: str = "") -> bool:
    """Every failed rank on record failed because another went away, or was stopped by the launcher's
    teardown signal (the first too: asked where some rank left no report, the launcher tore the survivors
    down after that rank ended): the cause is not on record. A rank that aborted (SIGABRT) without an
    exception of its own counts as a consequence when the point's log shows a peer-went-away error: a
    collective library aborts the process when it loses a peer (Horovod's background thread:
    'terminate called after throwing an instance of gloo::IoException')."""
    bad = [r for r in reports if failed(r)]

    def aborted_on_a_lost_peer(r: dict) -> bool:
        return r.get("signal") == "SIGABRT" and not r.get("error") and is_secondary(log)

    return bool(bad) and all(
        _consequence(r, bad[0]) or r.get("signal") in TEARDOWN_SIGNALS or aborted_on_a_lost_peer(r) for r in bad
    )


def silent_ranks(reports: list[dict], world_size: int) -> list[int]:
    """Ranks 0..world_size-1 that left no exit report (their rank guard itself was killed, or never ran)."""
    seen = {r.get("rank") for r in reports}
    return [rank for rank in range(world_size) if rank not in seen]


_TORCHRUN_FAILURE = re.compile(r"rank\s*:\s*(\d+)\s*\(local_rank:\s*(\d+)\)\s*\n\s*exitcode\s*:\s*(-?\d+)")
"""A rank in torchrun's ChildFailedError summary ('rank : 1 (local_rank: 1)' then 'exitcode : -9 (pid: ...)')."""
_HOROVODRUN_FAILURE = re.compile(r"Process (\d+) exit with status code (-?\d+)\.")
"""horovodrun's (Gloo) line for each process that ended with a non-zero status; the number is the rank."""


def _ended(code: int) -> tuple[str, str | None]:
    """('killed by SIGKILL', 'SIGKILL') for -9 or a shell's 137 (128 + 9), else ('exit status N', None)."""
    if code < 0:
        return f"killed by {signal_name(code)}", signal_name(code)
    if 128 < code < 128 + 65:
        return f"exit status {code} (128 + {signal_name(128 - code)})", signal_name(128 - code)
    return f"exit status {code}", None


def launcher_exits(text: str) -> dict[int, tuple[str, str | None]]:
    """{rank: (how its launcher saw it end, the signal if one)}, from torchrun's failure summary or
    horovodrun's exit lines."""
    seen: dict[int, tuple[str, str | None]] = {}
    for m in _TORCHRUN_FAILURE.finditer(text or ""):
        how, sig = _ended(int(m.group(3)))
        seen.setdefault(int(m.group(1)), (f"torchrun saw local rank {m.group(2)} end: {how}", sig))
    for m in _HOROVODRUN_FAILURE.finditer(text or ""):
        how, sig = _ended(int(m.group(2)))
        seen.setdefault(int(m.group(1)), (f"horovodrun saw process {m.group(1)} end: {how}", sig))
    return seen


def unknown_cause(reports: list[dict], silent: list[int], launcher_text: str) -> tuple[str, str | None]:
    """(reason, a signal the launcher saw a silent rank end by) when only consequences are on record and
    ranks left no report: the cause is unknown; name those ranks, how their launcher saw them end, and
    what is on record."""
    seen = launcher_exits(launcher_text)
    unknown = ("its launcher's exit summary does not say how it ended", None)
    parts = [f"rank {rank} left no report ({seen.get(rank, unknown)[0]})" for rank in silent]
    bad = [r for r in reports if failed(r)]
    reason = f"cause unknown: {'; '.join(parts)}; on record only a consequence: {describe(bad[0])[:200]}"
    return reason, next((seen[r][1] for r in silent if r in seen and seen[r][1]), None)


def describe(report: dict) -> str:
    """'rank 1 killed (SIGKILL)' / 'rank 0 exited with status 1: RuntimeError: ...'."""
    rank = report.get("rank")
    sig = report.get("signal")
    what = f"killed ({sig})" if sig else f"exited with status {report.get('returncode')}"
    error = report.get("error")
    return f"rank {rank} {what}: {error}" if error else f"rank {rank} {what}"


def classify(
    report: dict | None,
    *,
    oom_before: int | None = None,
    oom_after: int | None = None,
    stderr_tail: str = "",
    returncode: int | None = None,
) -> tuple[str, str | None]:
    """(status, note) of a failed point: 'oom' only on evidence. With a rank report only that rank's own
    error counts; without one (the launcher died first, or Slurm), the stderr tail's messages do."""
    text = report.get("error") if report else stderr_tail
    if is_oom_text(text):
        return "oom", None
    sig = report.get("signal") if report else (signal_name(returncode) if returncode is not None else None)
    if sig == "SIGKILL" and oom_before is not None and oom_after is not None and oom_after > oom_before:
        return "oom", (
            f"possibly the kernel OOM killer: this cgroup's oom_kill count rose from "
            f"{oom_before} to {oom_after} during the point"
        )
    return "failed", None


_EXC_LINE = re.compile(
    r"^(?:\[\d+\]<std(?:err|out)>:|\[rank\d+\]:)?\s*((?:[\w.]+\.)?\w*(?:Error|Exception|Interrupt)\b:?.*)$"
)
_LAUNCHER_NOISE = (
    "Horovod detected that one or more processes exited",
    "ChildFailedError",
    "torch.distributed.elastic",
)


def failure_summary(stderr_tail: str) -> str | None:
    """The worker's own exception line, not the launcher's wrapper error (horovodrun, torchrun)."""
    found = []
    for line in stderr_tail.splitlines():
        m = _EXC_LINE.match(line.strip())
        if m and not any(noise in line for noise in _LAUNCHER_NOISE):
            found.append(m.group(1).strip())
    return found[-1][:300] if found else None

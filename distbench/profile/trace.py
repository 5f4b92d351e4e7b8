"""Trace files: Chrome trace-event JSON (what Perfetto, chrome://tracing and HTA open), TF's XSpace protobuf
converted to it, the checks that a file is one, and where a results store keeps its traces."""

from __future__ import annotations

import gzip
import json
import os
import tempfile
from pathlib import Path

from distbench.core.errors import BadInput

_NUMBER = (int, float)


def trace_problems(doc) -> list[str]:
    """Why `doc` is not trace-event JSON (empty: it is): a 'traceEvents' array (or a bare array) whose complete
    events ('X') carry a name, a numeric ts and dur >= 0, and a pid and tid."""
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        return ["no traceEvents array"]
    problems = []
    for i, e in enumerate(events):
        if not isinstance(e, dict) or "ph" not in e:
            problems.append(f"event {i} is not an object with a 'ph'")
        elif e["ph"] == "X":
            if not isinstance(e.get("name"), str):
                problems.append(f"event {i} has no name")
            if not isinstance(e.get("ts"), _NUMBER) or not isinstance(e.get("dur"), _NUMBER) or e["dur"] < 0:
                problems.append(f"event {i} ({e.get('name')!r}) has no numeric ts/dur")
            if "pid" not in e or "tid" not in e:
                problems.append(f"event {i} ({e.get('name')!r}) has no pid/tid")
        if len(problems) >= 5:
            break
    return problems


def load_trace(path: str | os.PathLike) -> dict:
    """A trace-event JSON file (gzipped when it ends in .gz); ValueError when it is not one."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as fh:
        doc = json.load(fh)
    problems = trace_problems(doc)
    if problems:
        raise ValueError(f"{path}: not trace-event JSON: {'; '.join(problems)}")
    return doc if isinstance(doc, dict) else {"traceEvents": doc}


def write_trace(doc: dict, path: str | os.PathLike) -> str:
    """Write a trace atomically (a reader never sees half a file); returns its path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".trace-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(doc, fh)
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)  # readable as any file the user writes (mkstemp's is 0600)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return str(path)


def xspace_to_trace(data: bytes) -> dict:
    """TF's profile (an XSpace protobuf, the `.xplane.pb` that tf.profiler writes) as trace-event JSON: one
    process per plane (the host, each GPU), one thread per line, every event with a duration as an 'X' event
    in microseconds, its stats as args. GPU planes keep their stream lines only (their kernels, cat 'kernel';
    the derived 'TensorFlow Ops' lines repeat the same time) so the breakdown sees the device's work once."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    space.ParseFromString(data)
    events: list[dict] = []
    for pid, plane in enumerate(space.planes):
        on_device = plane.name.startswith("/device:")
        if not plane.lines:
            continue
        events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": plane.name}})
        stat_names = {k: v.name for k, v in plane.stat_metadata.items()}
        for line in plane.lines:
            line_name = line.display_name or line.name
            if on_device and not line_name.lower().startswith("stream"):
                continue
            tid = line.id & 0x7FFFFFFF
            events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": line_name}})
            for ev in line.events:
                if ev.duration_ps <= 0:
                    continue
                meta = plane.event_metadata[ev.metadata_id]
                args = {}
                for st in ev.stats:
                    value = st.str_value or st.int64_value or st.uint64_value or st.double_value
                    if st.ref_value:
                        value = stat_names.get(st.ref_value, st.ref_value)
                    args[stat_names.get(st.metadata_id, str(st.metadata_id))] = value
                out = {
                    "ph": "X",
                    "name": meta.name or meta.display_name,
                    "pid": pid,
                    "tid": tid,
                    "ts": (line.timestamp_ns * 1000 + ev.offset_ps) / 1e6,
                    "dur": ev.duration_ps / 1e6,
                    "cat": "kernel" if on_device else "tf_op",
                }
                if args:
                    out["args"] = args
                events.append(out)
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": {"source": "tf.profiler XSpace"}}


def trace_folder(results: str | os.PathLike) -> Path:
    """Where the traces of a results store are kept: beside it, '<store>-traces/'."""
    results = Path(results)
    return results.with_name(results.name + "-traces")


def check_trace_folder(path: str | os.PathLike, flag: str = "--trace-dir") -> Path:
    """The folder made if missing and proven writable (a file written and removed); BadInput naming `flag`."""
    path = Path(path).expanduser()
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=path, prefix=".probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise BadInput(f"{flag}: cannot write traces into {path}: {exc.strerror or exc}") from None
    return path.resolve()

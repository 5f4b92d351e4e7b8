"""`distbench predict` on published scaling tables (tests/data/predict_sources.csv names each table, its source,
and its role): every constant is chosen on the TUNING sources (role `tune`); the scores are reported only on the
SCORED sources (role `score`), split by source, each distinct held-out target counted once. The tables in
docs/prediction.md are exactly what this file computes (`python -m tests.test_predict_validation` prints them),
and the tests below assert it, so the doc's numbers are reproduced by the suite (pure computation, fast tier).

Two protocols, one check per distinct target (table, workload, N):
  * extrapolate: fitted on the two smallest distinct N, every larger N predicted;
  * one node to several: fitted on every N within one node (one N alone: nothing fitted), every N beyond it
    predicted, the inter-node link from its profile."""

from __future__ import annotations

import csv
import math
from contextlib import contextmanager
from functools import cache

import pytest

from distbench import predict as pr
from distbench.predict import model as pm
from distbench.predict import single as sg
from distbench.predict.validate import NO_WORSE_MARGIN, calibrate
from tests.conftest import ROOT

DATA = ROOT / "tests" / "data"
DOC = ROOT / "docs" / "prediction.md"
COLUMNS = [
    "tables",
    "targets",
    "median |error|",
    "max",
    "naive median",
    "naive max",
    "95% PI covers",
    "median half-width",
    "no worse than naive + 2 pts",
    "beats naive (by >= 0.5 pts)",
    "median margin over naive (pts)",
]


def sources() -> list[dict]:
    with open(DATA / "predict_sources.csv", newline="") as fh:
        return list(csv.DictReader(fh))


def setup(src: dict) -> tuple[dict, float | None, list]:
    """A source's links (its profiles), bucket size (its `bucket_mb`, else the strategy's default) and series."""
    links = pr.explicit_links([x for x in (src["intra"], src["inter"]) if x], [], [], int(src["nics_per_node"]))
    bucket = float(src["bucket_mb"]) * 2**20 if src.get("bucket_mb") else None
    rows = pr.read_csv(DATA / src["file"])
    return links, bucket, pr.series_from_records(rows, from_csv=True, per_node=int(src["gpus_per_node"]))


def checks_for(src: dict, mode: str, constants: tuple[float, ...] | None = None) -> list[dict]:
    """Held-out checks of one table; mode 'extrapolate' or 'one node'; `constants`: the interval constants (error
    and bias per doubling, crossing sd and bias) instead of the shipped ones (the point predictions do not use them)."""
    links, bucket, series = setup(src)
    kw = dict(zip(("model_error", "model_bias", "crossing_sd", "crossing_bias"), constants or ()))
    out = []
    for s in series:
        ns = sorted({p.n for p in s.points})
        keep = 2 if mode == "extrapolate" else sum(n <= s.per_node for n in ns)
        if keep == 0 or keep >= len(ns):
            continue
        found = pr.holdout(s, links.get("intra"), links.get("inter"), keep=keep, bucket_bytes=bucket, **kw)
        out += [
            dict(ch, file=src["file"], workload=f"{s.strategy}: {s.workload}", source=src["source"]) for ch in found
        ]
    return out


@cache
def results(mode: str, constants: tuple[float, ...] | None = None) -> dict[str, list[dict]]:
    return {s["file"]: checks_for(s, mode, constants) for s in sources()}


def role_checks(role: str, mode: str, constants: tuple[float, ...] | None = None) -> list[dict]:
    return [c for s in sources() if s["role"] == role for c in results(mode, constants)[s["file"]]]


def tuned_constants() -> tuple[float, float, float, float]:
    """(error per doubling, bias per doubling, crossing sd, crossing bias) calibrated on the tuning sources only."""
    return calibrate(role_checks("tune", "extrapolate"), role_checks("tune", "one node"))


def _pct(x) -> str:
    return "n/a" if x is None else f"{x:.1%}"


def _row(name: str, tables: int, s: dict) -> str:
    cells = [
        str(tables),
        str(s["points"]),
        _pct(s["median_error"]),
        _pct(s["max_error"]),
        _pct(s["naive_median_error"]),
        _pct(s["naive_max_error"]),
        _pct(s["coverage"]),
        _pct(s["median_half_width"]),
        f"{s['no_worse_than_naive']:.0%}",
        f"{s['beats_naive']:.0%}",
        f"{100 * s['median_margin']:+.2f}",
    ]
    return f"| {name} | " + " | ".join(cells) + " |"


def table_lines(role: str, mode: str) -> list[str]:
    """Per source (one README or page), then all of the role's sources together."""
    lines = ["| source | " + " | ".join(COLUMNS) + " |", "|---" * (len(COLUMNS) + 1) + "|"]
    by_source: dict[str, list[dict]] = {}
    for src in sources():
        if src["role"] == role and results(mode)[src["file"]]:
            by_source.setdefault(src["source"], []).append(src)
    every = []
    for name, srcs in by_source.items():
        cs = [c for s in srcs for c in results(mode)[s["file"]]]
        every += cs
        lines.append(_row(name, len(srcs), pr.score(cs)))
    lines.append(_row("**all**", sum(len(v) for v in by_source.values()), pr.score(every)))
    return lines


def detail_lines(mode: str) -> list[str]:
    lines = [
        "| table | strategy: workload | fitted on N | target N | error | naive error | 95% PI (vs measured) | covered |",
        "|---" * 8 + "|",
    ]
    for c in role_checks("score", mode):
        lo, hi = c["low"] / c["measured"] - 1, c["high"] / c["measured"] - 1
        lines.append(
            f"| {c['file']} | {c['workload']} | {', '.join(map(str, c['fitted_on']))} | {c['n']}"
            + (" (crosses)" if c["crosses_nodes"] else "")
            + f" | {c['error']:+.1%} | {c['naive_error']:+.1%} | {lo:+.1%} .. {hi:+.1%} | "
            + ("yes" if c["covered"] else "**no**")
            + " |"
        )
    return lines


def fit_lines() -> list[str]:
    """How the fits of the scored sources use their data: the intra-node achieved bandwidth identified in the
    interior of its range, pinned at a bound, or not constrained (the value closest to the naive guess)."""
    fits = interior = pinned = free = 0
    for src in sources():
        if src["role"] != "score":
            continue
        links, bucket, series = setup(src)
        for s in series:
            ns = sorted({p.n for p in s.points})
            for keep in {2, sum(n <= s.per_node for n in ns)}:
                if keep < 2 or keep >= len(ns):
                    continue
                train = [p for p in s.points if p.n in ns[:keep]]
                m = pr.build_model(s, links.get("intra"), links.get("inter"), points=train, bucket_bytes=bucket)
                t = m.tiers["intra"]
                fits += 1
                interior += t.fitted and not t.at_bound
                pinned += t.fitted and t.at_bound
                free += not t.fitted
    return [
        f"Of the {fits} fits on the scored sources, the intra-node achieved bandwidth is identified inside its "
        f"plausible range in {interior}, pinned at a bound in {pinned} (a WARNING; the interval spans the whole "
        f"range) and not constrained by the data in {free} (taken at the value closest to the naive guess)."
    ]


SENSITIVITY_LOW = (0.125, 0.25, 0.5)


def sensitivity_lines() -> list[str]:
    """The scored totals with another lower bound on a nominal link's achieved share (NOMINAL_EFFICIENCY[0]): a
    physical assumption, not calibrated, so the doc shows how much the scores depend on it."""
    lines = [
        "| achieved share lower bound | extrapolate: median, coverage, half-width | one node to several: median, "
        "coverage, half-width |",
        "|---|---|---|",
    ]
    shipped = pm.NOMINAL_EFFICIENCY
    try:
        for lo in SENSITIVITY_LOW:
            pm.NOMINAL_EFFICIENCY = (lo, shipped[1])
            results.cache_clear()
            cells = []
            for mode in ("extrapolate", "one node"):
                s = pr.score(role_checks("score", mode))
                cells.append(f"{_pct(s['median_error'])}, {_pct(s['coverage'])}, {_pct(s['median_half_width'])}")
            name = f"**{lo:g}** (shipped)" if lo == shipped[0] else f"{lo:g}"
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    finally:
        pm.NOMINAL_EFFICIENCY = shipped
        results.cache_clear()
    return lines


def all_doc_lines() -> list[str]:
    return (
        table_lines("score", "extrapolate")
        + table_lines("score", "one node")
        + table_lines("tune", "extrapolate")
        + table_lines("tune", "one node")
        + detail_lines("extrapolate")
        + detail_lines("one node")
    )


def test_sources_are_cited_and_counted_by_publisher():
    """Counted by publisher, not by README URL: NVIDIA (DeepLearningExamples), TensorFlow (its Benchmarks page),
    Lambda, OneFlow (DLPerf) and Baidu (PaddlePaddle FleetX), at least the 4 sources issue 29 asks for."""
    srcs = sources()
    urls = {s["url"] for s in srcs}
    publishers = {s["publisher"] for s in srcs}
    assert len(srcs) >= 8 and len(urls) >= 4 and len(publishers) >= 4
    assert f"{len(srcs)} published tables from {len(publishers)} publishers" in " ".join(DOC.read_text().split())
    assert {s["role"] for s in srcs} == {"tune", "score"}
    for role in ("tune", "score"):
        assert len({s["url"] for s in srcs if s["role"] == role}) >= 2
    for url in urls:  # a source is tuned on or scored on, never both
        assert len({s["role"] for s in srcs if s["url"] == url}) == 1
    described = (DATA / "README.md").read_text() + (DATA / "predict_sources.md").read_text()
    for s in srcs:
        assert s["url"].startswith("https://") and s["table"] and (DATA / s["file"]).exists()
        assert s["file"] in described, f"{s['file']} not described in tests/data/README.md or predict_sources.md"


def test_shipped_constants_are_the_calibration_on_the_tuning_sources_only():
    e, bias, c_sd, c_bias = tuned_constants()
    assert pr.MODEL_ERROR_PER_DOUBLING == pytest.approx(round(e, 3), abs=1e-9)
    assert pr.MODEL_BIAS_PER_DOUBLING == pytest.approx(round(bias, 3), abs=1e-9)
    assert pm.CROSSING_SD == pytest.approx(round(c_sd, 3), abs=1e-9)
    assert pm.CROSSING_BIAS == pytest.approx(round(c_bias, 3), abs=1e-9)
    # the scored sources would move them: they are not in the calibration
    everything = calibrate(
        role_checks("tune", "extrapolate") + role_checks("score", "extrapolate"),
        role_checks("tune", "one node") + role_checks("score", "one node"),
    )
    assert everything != pytest.approx(tuned_constants())


def test_no_per_table_bucket_on_a_scored_source():
    """Review finding 1: a per-table bucket size on a scored table decided a done-when number. Scored tables take
    the strategy registry's bucket, or (a strategy it does not know) the bucket RANGE carried in the interval."""
    for src in sources():
        if src["role"] == "score":
            assert not src["bucket_mb"], src["file"]
    links, bucket, series = setup(next(s for s in sources() if s["file"].startswith("tfb_dgx1")))
    m = pr.build_model(series[0], links.get("intra"), links.get("inter"), bucket_bytes=bucket)
    assert bucket is None and m.bucket_span[0] == 1 and m.bucket_span[1] == m.buckets > 1


def test_each_target_is_scored_once():
    for mode in ("extrapolate", "one node"):
        keys = [(c["file"], c["workload"], c["n"]) for cs in results(mode).values() for c in cs]
        assert keys and len(keys) == len(set(keys))


def test_docs_tables_are_what_the_suite_computes():
    doc = DOC.read_text()
    for line in all_doc_lines():
        assert line in doc, f"docs/prediction.md lacks (or has other numbers than): {line}"


def test_docs_say_how_the_fits_use_their_data():
    doc = " ".join(DOC.read_text().split())
    for line in fit_lines():
        assert line in doc, f"docs/prediction.md lacks (or has other numbers than): {line}"


@pytest.mark.slow  # refits the scored validation once per bound
def test_docs_sensitivity_to_the_bound_is_what_the_suite_computes():
    doc = DOC.read_text()
    for line in sensitivity_lines():
        assert line in doc, f"docs/prediction.md lacks (or has other numbers than): {line}"


SEVERAL_MODES = {"extrapolate": "extrapolate", "one node": "one node to several"}


def _covered(checks: list[dict]) -> int:
    return sum(c["covered"] for c in checks)


def _coverage_side(coverage: float) -> str:
    if coverage > 0.97:
        return "; above the upper end: too wide, not too narrow"
    return "; below the lower end: too narrow" if coverage < 0.90 else ""


def _said(parts: list[tuple[bool, str]]) -> str:
    return "; ".join(f"{text}: {'met' if ok else '**missed**'}" for ok, text in parts)


def several_target_parts(mode: str, checks: list[dict]) -> list[tuple[bool, str]]:
    """The several-points targets for one protocol, each (met, what was found against what was asked): median
    |error| <= 5% (from one node to several <= 10% and <= the naive guess's), no worse than naive + 2 points on
    >= 90%, coverage 90-97%, median half-width <= 20%."""
    s, n = pr.score(checks), len(checks)
    most = 0.05 if mode == "extrapolate" else 0.10
    median_ok = s["median_error"] <= most and (mode == "extrapolate" or s["median_error"] <= s["naive_median_error"])
    asked = f"at most {most:.0%}" + ("" if mode == "extrapolate" else " and at most the naive guess's")
    no_worse = round(s["no_worse_than_naive"] * n)
    cov = s["coverage"]
    return [
        (
            median_ok,
            f"median |error| {_pct(s['median_error'])} against the naive guess's {_pct(s['naive_median_error'])} "
            f"({asked} asked)",
        ),
        (
            s["no_worse_than_naive"] >= 0.90,
            f"no worse than naive + 2 points on {no_worse} of {n} (at least 90% asked)",
        ),
        (
            0.90 <= cov <= 0.97,
            f"95% intervals cover {_pct(cov)} ({_covered(checks)} of {n}; 90-97% asked{_coverage_side(cov)})",
        ),
        (s["median_half_width"] <= 0.20, f"median half-width {_pct(s['median_half_width'])} (at most 20% asked)"),
    ]


def several_target_lines(files: set[str] | None = None) -> list[str]:
    """The targets said met or missed from the scored figures (of `files` only, where given), one line a protocol."""
    lines = []
    for mode, name in SEVERAL_MODES.items():
        checks = [c for c in role_checks("score", mode) if files is None or c["file"] in files]
        lines.append(f"* {name}, {len(checks)} targets: {_said(several_target_parts(mode, checks))}.")
    return lines


LAST_ADDED = {"Lambda", "OneFlow", "Baidu (PaddlePaddle)"}
"""Publishers whose tables were added after every range, link profile and bucket default was fixed
(predict_sources.md); the calibrated constants changed once after they were first scored."""

EARLIER_TUNING = {
    "NVIDIA DeepLearningExamples BERT TensorFlow (Horovod)",
    "NVIDIA DeepLearningExamples BERT PyTorch (DDP)",
}
"""The tuning sources before the 18 tables with a point at N = 1 were added: the BERT TensorFlow 1 and PyTorch
READMEs. The earlier scorings' constants are their calibration, by the same procedure."""


def earlier_interval_constants() -> tuple[float, ...]:
    """The several-points interval constants calibrated on the earlier tuning set, rounded as the shipped ones."""
    ext = [c for c in role_checks("tune", "extrapolate") if c["source"] in EARLIER_TUNING]
    one = [c for c in role_checks("tune", "one node") if c["source"] in EARLIER_TUNING]
    return tuple(round(x, 3) for x in calibrate(ext, one))


def earlier_interval_line() -> str:
    """The scored coverage with the earlier tuning set's interval constants (the point predictions are the same)."""
    consts = earlier_interval_constants()
    tables = len({s["file"] for s in sources() if s["source"] in EARLIER_TUNING})
    parts = []
    for mode in SEVERAL_MODES:
        cs = role_checks("score", mode, consts)
        s = pr.score(cs)
        parts.append(f"{_pct(s['coverage'])} ({_covered(cs)} of {len(cs)}, half-width {_pct(s['median_half_width'])})")
    e, mu, c, c_mu = consts
    return (
        f"With the interval constants calibrated by the same procedure on the {tables} BERT tuning tables alone (the "
        f"tuning set before the one-device tables were added: e = {e:g}, mu = {mu:g}, c = {c:g}, c_mu = {c_mu:g}) "
        f"the same point predictions' intervals cover {parts[0]} extrapolating and {parts[1]} from one node to "
        "several."
    )


def constants_moved_line() -> str:
    """How the tuning tables added for the one-device constants moved the four interval constants."""
    shipped = (pr.MODEL_ERROR_PER_DOUBLING, pr.MODEL_BIAS_PER_DOUBLING, pm.CROSSING_SD, pm.CROSSING_BIAS)
    pairs = zip(("e", "mu", "c", "c_mu"), earlier_interval_constants(), shipped)
    return ", ".join(f"{name} from {old:g} to {new:g}" for name, old, new in pairs)


def outside_line() -> str:
    """Which scored targets lie outside their intervals, on which side, and how many of them were measured above
    the naive guess (better than linear from the fitted points); how many targets are over-predicted."""
    parts, over = [], []
    for mode, name in SEVERAL_MODES.items():
        cs = role_checks("score", mode)
        sides = []
        for side, outside in (
            ("below the lower bound", [c for c in cs if c["measured"] < c["low"]]),
            ("above the upper bound", [c for c in cs if c["measured"] > c["high"]]),
        ):
            if outside:
                where = ", ".join(
                    f"{f} {sum(c['file'] == f for c in outside)}" for f in sorted({c["file"] for c in outside})
                )
                above_naive = sum(c["naive_error"] < 0 for c in outside)
                sides.append(f"{len(outside)} {side}: {where}; measured above the naive guess: {above_naive}")
        parts.append(f"{len(cs) - _covered(cs)} of {len(cs)} {name} ({'; '.join(sides) or 'none'})")
        over.append(f"{sum(c['error'] > 0 for c in cs)} of {len(cs)} {name}")
    return f"Targets outside their intervals: {', '.join(parts)}. Over-predicted: {' and '.join(over)}."


def construction_line() -> str:
    """How many scored point predictions lie within 2 points of the naive guess (where "no worse than naive + 2
    points" holds by the triangle inequality, not by skill)."""
    parts = []
    for mode, name in SEVERAL_MODES.items():
        cs = role_checks("score", mode)
        near = sum(abs(c["error"] - c["naive_error"]) <= NO_WORSE_MARGIN for c in cs)
        parts.append(f"{near} of {len(cs)} {name} targets")
    return (
        f"On the scored sources the point prediction lies within 2 points of the naive guess on {' and '.join(parts)}"
    )


def test_targets_on_the_scored_sources():
    """The docs say each several-points target met or missed exactly as computed here (a later change that meets a
    missed target changes the generated line, not this test); the targets met now are asserted as well, so a
    regression fails here."""
    doc = " ".join(DOC.read_text().split())
    lines = several_target_lines() + [earlier_interval_line(), outside_line(), construction_line()]
    for line in lines + [constants_moved_line()]:
        assert line in doc, f"docs/prediction.md lacks (or has other numbers than): {line}"
    s = pr.score(role_checks("score", "extrapolate"))
    assert s["median_error"] <= 0.05 and s["no_worse_than_naive"] >= 0.90
    assert 0.90 <= s["coverage"] <= 0.97 and s["median_half_width"] <= 0.20
    one = pr.score(role_checks("score", "one node"))
    assert one["median_error"] <= 0.10 and one["median_error"] <= one["naive_median_error"]
    assert one["median_half_width"] <= 0.20 and one["no_worse_than_naive"] >= 0.90


def test_targets_on_the_last_added_sources_alone():
    """The targets on the tables added last, met or missed as the docs say; the ones met now asserted."""
    last = {s["file"] for s in sources() if s["publisher"] in LAST_ADDED}
    assert last and all(s["role"] == "score" for s in sources() if s["file"] in last)
    doc = " ".join(DOC.read_text().split())
    for line in several_target_lines(last):
        assert line in doc, f"docs/prediction.md lacks (or has other numbers than): {line}"
    ext = pr.score([c for c in role_checks("score", "extrapolate") if c["file"] in last])
    one = pr.score([c for c in role_checks("score", "one node") if c["file"] in last])
    assert ext["median_error"] <= 0.05 and 0.90 <= ext["coverage"] <= 0.97 and ext["median_half_width"] <= 0.20
    assert one["median_error"] <= 0.10 and one["median_error"] <= one["naive_median_error"]
    assert one["median_half_width"] <= 0.20
    assert ext["no_worse_than_naive"] >= 0.90 and one["no_worse_than_naive"] >= 0.90


def test_one_node_to_several_crosses_nodes():
    crossing = role_checks("score", "one node")
    assert crossing and all(c["crosses_nodes"] for c in crossing)
    assert len({c["source"] for c in crossing}) >= 2


# -- from one device: the N=1 point and the links, nothing fitted (distbench/predict/single.py)
SINGLE_COLUMNS = ["tables", "targets", "median |error|", "max", "linear median", "linear max", "median / linear"]
SINGLE_COLUMNS += ["95% PI covers", "median half-width"]


@cache
def single_results(role: str, zero: bool = False, loss: float | None = None, error: float | None = None) -> list[dict]:
    """One-device checks of every table of `role` with a point at N=1 (zero: no loss and no spread, the
    calibration's input; loss / error: another host loss or error per doubling, for the sensitivity table)."""
    kw = {"loss": 0.0, "loss_crossing": 0.0, "error": 0.0, "crossing_sd": 0.0} if zero else {}
    kw.update({k: v for k, v in (("loss", loss), ("error", error)) if v is not None})
    out = []
    for src in sources():
        if src["role"] != role:
            continue
        links, bucket, series = setup(src)
        for s in series:
            found = sg.holdout_single(s, links.get("intra"), links.get("inter"), bucket_bytes=bucket, **kw)
            out += [
                dict(c, file=src["file"], workload=f"{s.strategy}: {s.workload}", source=src["source"]) for c in found
            ]
    return out


def single_scores(role: str, **kw) -> dict[str, dict]:
    checks = single_results(role, **kw)
    return {
        "within a node": pr.score([c for c in checks if not c["crosses_nodes"]]),
        "across nodes": pr.score([c for c in checks if c["crosses_nodes"]]),
    }


def single_table_lines(role: str) -> list[str]:
    lines = ["| from one device | " + " | ".join(SINGLE_COLUMNS) + " |", "|---" * (len(SINGLE_COLUMNS) + 1) + "|"]
    checks = single_results(role)
    for name, s in single_scores(role).items():
        if not s["points"]:
            continue
        tables = len({c["file"] for c in checks if c["crosses_nodes"] == (name == "across nodes")})
        ratio = s["median_error"] / s["naive_median_error"]
        cells = [str(tables), str(s["points"]), _pct(s["median_error"]), _pct(s["max_error"])]
        cells += [_pct(s["naive_median_error"]), _pct(s["naive_max_error"]), f"{ratio:.2f}"]
        cells += [_pct(s["coverage"]), _pct(s["median_half_width"])]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


SINGLE_SENSITIVITY = (("loss", (0.0, 0.01, 0.02, 0.03)), ("error", (0.012, 0.024, 0.036)))
"""Other values of the two within-node constants, each alone (the other shipped): how far the scored one-device
figures are from the targets, and what the tuning sources say at the same values. Shown, never chosen from."""


def single_sensitivity_lines() -> list[str]:
    lines = [
        "| host loss per doubling | error per doubling | scored within a node: median / linear, coverage, "
        "half-width | scored across nodes: median / linear, coverage, half-width | tuning within a node: median / "
        "linear, coverage |",
        "|---|---|---|---|---|",
    ]
    rows = [(sg.HOST_LOSS_PER_DOUBLING, sg.SINGLE_ERROR_PER_DOUBLING, True)]
    rows += [(x, sg.SINGLE_ERROR_PER_DOUBLING, False) for x in SINGLE_SENSITIVITY[0][1] if x != rows[0][0]]
    rows += [(sg.HOST_LOSS_PER_DOUBLING, x, False) for x in SINGLE_SENSITIVITY[1][1] if x != rows[0][1]]
    for loss, error, shipped in rows:
        kw = {} if shipped else {"loss": loss, "error": error}
        cells = []
        for role, tier in (("score", "within a node"), ("score", "across nodes"), ("tune", "within a node")):
            s = single_scores(role, **kw)[tier]
            cell = f"{s['median_error'] / s['naive_median_error']:.2f}, {_pct(s['coverage'])}"
            cells.append(cell + (f", {_pct(s['median_half_width'])}" if role == "score" else ""))
        name = [f"{loss:g}", f"{error:g}"]
        if shipped:
            name = [f"**{x}** (shipped)" for x in name]
        lines.append("| " + " | ".join(name + cells) + " |")
    return lines


def tuning_within_lines() -> list[str]:
    """The tuning sources' within-node one-device checks (no loss, no spread): what the constants are made of."""
    checks = [c for c in single_results("tune", zero=True) if not c["crosses_nodes"]]
    per = sorted(f"{math.log(1 + c['error']) / c['doublings']:+.3f}" for c in checks)
    return [
        f"The tuning sources' {len(checks)} within-node one-device checks ({len({c['workload'] for c in checks})} "
        f"workloads) lose, in log throughput per doubling: {', '.join(per)}."
    ]


SINGLE_TARGETS = {"within a node": 0.75, "across nodes": 0.5}
"""The largest median |error| from one device, as a share of the linear guess's, the issue asks for."""


def single_target_parts(tier: str, t: dict) -> list[tuple[bool, str]]:
    """The one-device targets of one tier, each (met, what was found against what was asked)."""
    most = SINGLE_TARGETS[tier]
    ratio = t["median_error"] / t["naive_median_error"]
    return [
        (
            ratio <= most,
            f"median |error| {_pct(t['median_error'])} against the linear guess's "
            f"{_pct(t['naive_median_error'])} ({ratio:.2f} of it; at most {most:g} asked)",
        ),
        (0.90 <= t["coverage"] <= 0.97, f"95% intervals cover {_pct(t['coverage'])} (90-97% asked)"),
        (t["median_half_width"] <= 0.20, f"median half-width {_pct(t['median_half_width'])} (at most 20% asked)"),
    ]


def single_target_lines() -> list[str]:
    """The one-device targets, each said met or missed from the scored figures, and beside them the coverage of
    the same intervals on the tuning sources themselves (in-sample for the constants)."""
    lines = [f"* {tier}: {_said(single_target_parts(tier, single_scores('score')[tier]))}." for tier in SINGLE_TARGETS]
    tune = single_scores("tune")
    return lines + [
        f"On the tuning sources themselves the same intervals cover only {_pct(tune['within a node']['coverage'])} "
        f"within a node and {_pct(tune['across nodes']['coverage'])} across nodes."
    ]


EARLIER_ONE_DEVICE = {"first": False, "second": True}
"""The two earlier one-device scorings, both with constants calibrated on the earlier tuning set (EARLIER_TUNING):
the first version's host terms counted all N's doublings and stacked its interval's parts (one_device False); the
second counted the devices sharing a host and added them in quadrature (one_device True, as today)."""


@contextmanager
def _single_built_as(one_device: bool, constants: dict | None = None):
    """build_single as an earlier version: its host-term counting and, where given, its constants."""
    real = sg.build_single

    def earlier(*args, **kw):
        kw.update(constants or {})
        m = real(*args, **kw)
        m.one_device = one_device
        return m

    sg.build_single = earlier
    try:
        yield
    finally:
        sg.build_single = real


@cache
def earlier_single_constants(which: str) -> dict[str, float]:
    """An earlier scoring's one-device constants: the unchanged calibration on the earlier tuning set's checks,
    made as that version made them, rounded as the shipped ones."""
    with _single_built_as(EARLIER_ONE_DEVICE[which]):
        checks = single_results.__wrapped__("tune", zero=True)
    found = sg.calibrate_single([c for c in checks if c["source"] in EARLIER_TUNING])
    return dict(zip(("loss", "loss_crossing", "error", "crossing_sd"), (round(x, 3) for x in found)))


def single_constants_moved_line() -> str:
    """How the enlarged tuning set moved the one-device constants from the second scoring's."""
    c = earlier_single_constants("second")
    shipped = (sg.HOST_LOSS_PER_DOUBLING, sg.HOST_LOSS_CROSSING, sg.SINGLE_ERROR_PER_DOUBLING, sg.SINGLE_CROSSING_SD)
    before = ", ".join(f"{c[k]:g}" for k in ("loss", "loss_crossing", "error", "crossing_sd"))
    return f"moved the constants from {before} to {', '.join(f'{x:g}' for x in shipped)}."


def earlier_scoring_line(which: str) -> str:
    """The scored one-device figures of an earlier scoring, rebuilt from today's code with its constants, and how
    many of the six targets it missed, so the doc's sentence about it is checked, not remembered."""
    c = earlier_single_constants(which)
    with _single_built_as(EARLIER_ONE_DEVICE[which], c):
        checks = single_results.__wrapped__("score")
    scores = {
        "within a node": pr.score([x for x in checks if not x["crosses_nodes"]]),
        "across nodes": pr.score([x for x in checks if x["crosses_nodes"]]),
    }
    parts = [ok for tier in SINGLE_TARGETS for ok, _ in single_target_parts(tier, scores[tier])]
    part = lambda t: (  # noqa: E731
        f"{_pct(t['median_error'])} against {_pct(t['naive_median_error'])} "
        f"({t['median_error'] / t['naive_median_error']:.2f}), coverage {_pct(t['coverage'])}, half-width "
        f"{_pct(t['median_half_width'])}"
    )
    return (
        f"{which} scoring (host loss {c['loss']:g}, crossing loss {c['loss_crossing']:g}, error {c['error']:g}, "
        f"crossing sd {c['crossing_sd']:g} per doubling): within a node median {part(scores['within a node'])}; "
        f"across nodes {part(scores['across nodes'])}; {parts.count(False)} of the {len(parts)} targets missed."
    )


def test_single_device_targets_and_sensitivity_in_the_docs():
    doc = " ".join(DOC.read_text().split())
    for line in (
        single_target_lines()
        + tuning_within_lines()
        + single_sensitivity_lines()
        + [earlier_scoring_line(w) for w in EARLIER_ONE_DEVICE]
        + [single_constants_moved_line()]
    ):
        assert line in doc, f"docs/prediction.md lacks (or has other numbers than): {line}"


ANOMALOUS = "predict_dle_effnet_pyt_dgx1_32g.csv"
"""The tuning table whose one-device points run at under half its 16GB twin's (predict_sources.md)."""


def without_anomalous_line() -> str:
    """The one-device constants calibrated without the anomalous table: how much that one table moves them."""
    checks = [c for c in single_results("tune", zero=True) if c["file"] != ANOMALOUS]
    found = sg.calibrate_single(checks)
    shipped = (sg.HOST_LOSS_PER_DOUBLING, sg.HOST_LOSS_CROSSING, sg.SINGLE_ERROR_PER_DOUBLING, sg.SINGLE_CROSSING_SD)
    names = ("host loss per doubling", "crossing loss", "error per doubling", "crossing sd")
    moved = ", ".join(f"{name} {old:.3f} -> {new:.3f}" for name, old, new in zip(names, shipped, found))
    return f"Calibrated without `{ANOMALOUS}` (the procedure unchanged): {moved}."


def test_the_anomalous_tables_weight_is_stated():
    text = " ".join((DATA / "predict_sources.md").read_text().split())
    line = without_anomalous_line()
    assert line in text, f"tests/data/predict_sources.md lacks (or has other numbers than): {line}"


def test_single_constants_are_the_calibration_on_the_tuning_sources_only():
    loss, c_loss, e, c_sd = sg.calibrate_single(single_results("tune", zero=True))
    assert sg.HOST_LOSS_PER_DOUBLING == pytest.approx(round(loss, 3), abs=1e-9)
    assert sg.HOST_LOSS_CROSSING == pytest.approx(round(c_loss, 3), abs=1e-9)
    assert sg.SINGLE_ERROR_PER_DOUBLING == pytest.approx(round(e, 3), abs=1e-9)
    assert sg.SINGLE_CROSSING_SD == pytest.approx(round(c_sd, 3), abs=1e-9)
    assert 0 <= sg.HOST_LOSS_PER_DOUBLING <= sg.MAX_HOST_LOSS and 0 <= sg.HOST_LOSS_CROSSING <= sg.MAX_HOST_LOSS


def test_single_device_tables_in_the_docs_are_what_the_suite_computes():
    doc = DOC.read_text()
    for line in single_table_lines("score") + single_table_lines("tune"):
        assert line in doc, f"docs/prediction.md lacks (or has other numbers than): {line}"


def test_single_device_targets_on_the_scored_sources():
    """The targets, scored once with the constants fixed on the enlarged tuning set: from one device the median
    |error| is at most 3/4 of the linear guess's within a node and at most half of it across nodes, the 95%
    intervals cover 90-97% and the median half-width is at most 20%, on both."""
    s = single_scores("score")
    within, across = s["within a node"], s["across nodes"]
    assert within["points"] >= 100 and across["points"] >= 40
    for tier, most in SINGLE_TARGETS.items():
        t = s[tier]
        assert t["median_error"] <= most * t["naive_median_error"], tier
        assert 0.90 <= t["coverage"] <= 0.97 and t["median_half_width"] <= 0.20, tier
    assert len({c["source"] for c in single_results("score") if c["crosses_nodes"]}) >= 2


if __name__ == "__main__":  # print the docs' tables
    print("tuned on the tuning sources: error, bias per doubling, crossing sd, crossing bias:", tuned_constants())
    for role, mode in (("score", "extrapolate"), ("score", "one node"), ("tune", "extrapolate"), ("tune", "one node")):
        print(f"\n{role} / {mode}\n" + "\n".join(table_lines(role, mode)))
    for mode in ("extrapolate", "one node"):
        print(f"\nevery scored target, {mode}\n" + "\n".join(detail_lines(mode)))
    print("\n" + "\n".join(fit_lines()))
    print("\n" + "\n".join(sensitivity_lines()))
    print("one device, tuning calibration:", sg.calibrate_single(single_results("tune", zero=True)))
    for role in ("score", "tune"):
        print(f"\nfrom one device, {role}\n" + "\n".join(single_table_lines(role)))
    print("\n" + "\n".join(single_target_lines() + tuning_within_lines() + [""] + single_sensitivity_lines()))
    print("\n" + "\n".join(earlier_scoring_line(w) for w in EARLIER_ONE_DEVICE))
    print("\n" + without_anomalous_line())
    print("\n" + "\n".join(several_target_lines() + [earlier_interval_line(), outside_line(), construction_line()]))
    print("\n" + "\n".join(several_target_lines({s["file"] for s in sources() if s["publisher"] in LAST_ADDED})))

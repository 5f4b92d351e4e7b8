"""`distbench predict` on published scaling tables (tests/data/predict_sources.csv names each table and its
source): fit on the smallest counts, predict every larger one, score against the naive guess. The tables in
docs/prediction.md are exactly what this file computes (`python -m tests.test_predict_validation` prints
them), and the tests below assert it, so the doc's numbers are reproduced by the suite.

The interval constants (MODEL_ERROR_PER_DOUBLING, CROSSING_SD) are calibrated on these held-out points;
coverage is scored leave-one-source-out: each table's intervals use constants calibrated on the tables of the
other sources (READMEs), never on its own points or its sibling tables'."""

from __future__ import annotations

import csv
from functools import cache

import pytest

from distbench import predict as pr
from distbench.predict.validate import calibrate
from tests.conftest import ROOT

DATA = ROOT / "tests" / "data"
DOC = ROOT / "docs" / "prediction.md"
COLUMNS = ["points", "median |error|", "max", "median / max at >= 4x", "naive median", "beats naive", "coverage"]


def sources() -> list[dict]:
    with open(DATA / "predict_sources.csv", newline="") as fh:
        return list(csv.DictReader(fh))


def setup(src: dict) -> tuple[dict, float | None, list]:
    """A source's links (its profiles), bucket size (its `bucket_mb`, else the strategy's default) and series."""
    links = pr.explicit_links([x for x in (src["intra"], src["inter"]) if x], [], [], int(src["nics_per_node"]))
    bucket = float(src["bucket_mb"]) * 2**20 if src.get("bucket_mb") else None
    rows = pr.read_csv(DATA / src["file"])
    return links, bucket, pr.series_from_records(rows, from_csv=True, per_node=int(src["gpus_per_node"]))


def checks_for(
    src: dict, e: float = pr.MODEL_ERROR_PER_DOUBLING, c: float = pr.CROSSING_SD, single: bool = False
) -> list[dict]:
    """Held-out checks of one source: fitted on the smallest k >= 2 distinct N; `single`: from the smallest N
    alone (k = 1: nothing fitted, every tier spans its plausible range), only where that N is one whole node."""
    links, bucket, series = setup(src)
    out = []
    for s in series:
        ns = sorted({p.n for p in s.points})
        if single and ns[0] != s.per_node:
            continue
        for keep in [1] if single else range(2, len(ns)):
            found = pr.holdout(
                s, links.get("intra"), links.get("inter"), keep=keep, model_error=e, crossing_sd=c, bucket_bytes=bucket
            )
            out += [dict(ch, file=src["file"], workload=s.workload) for ch in found]
    return out


@cache
def pooled() -> dict[str, list[dict]]:
    """Per source file: its held-out checks with the shipped constants (their errors do not depend on them)."""
    return {s["file"]: checks_for(s) for s in sources()}


@cache
def held_out_constants() -> dict[str, tuple[float, float]]:
    """Per table: (model error per doubling, node-crossing sd) calibrated on the held-out checks of the OTHER
    sources. A source is a README (its URL), not a file: tables of one README share runs (the DGX-2 16-GPU row
    is in two of them) and a campaign, so a sibling table would leak the left-out one into its calibration."""
    allsrc = sources()
    url = {s["file"]: s["url"] for s in allsrc}
    out = {}
    for s in allsrc:
        others = [c for f, cs in pooled().items() if url[f] != s["url"] for c in cs]
        out[s["file"]] = calibrate(others)
    return out


@cache
def validation() -> dict[str, list[dict]]:
    """Per source file: its held-out checks, intervals from constants calibrated on the other sources."""
    consts = held_out_constants()
    return {s["file"]: checks_for(s, *consts[s["file"]]) for s in sources()}


@cache
def single_node_only() -> dict[str, list[dict]]:
    """One measured node, nothing else: the prediction for several nodes from the link figures alone, with the
    constants calibrated on the other sources (the shipped ones were calibrated on these very measurements)."""
    consts = held_out_constants()
    return {s["file"]: cs for s in sources() if (cs := checks_for(s, *consts[s["file"]], single=True))}


def single_lines() -> list[str]:
    lines = ["| table | " + " | ".join(COLUMNS) + " |", "|---" * (len(COLUMNS) + 1) + "|"]
    results = single_node_only()
    for f, cs in results.items():
        lines.append(_row(f, pr.score(cs)))
    lines.append(_row("**all**", pr.score([c for cs in results.values() for c in cs])))
    return lines


def _pct(x) -> str:
    return "n/a" if x is None else f"{x:.1%}"


def table_lines() -> list[str]:
    lines = ["| table | " + " | ".join(COLUMNS) + " |", "|---" * (len(COLUMNS) + 1) + "|"]
    results = validation()
    for src in sources():
        lines.append(_row(src["file"], pr.score(results[src["file"]])))
    lines.append(_row("**all**", pr.score([c for cs in results.values() for c in cs])))
    return lines


def _row(name: str, s: dict) -> str:
    far = f"{_pct(s['median_error_4x'])} / {_pct(s['max_error_4x'])} ({s['points_4x']})"
    cells = [
        str(s["points"]),
        _pct(s["median_error"]),
        _pct(s["max_error"]),
        far,
        _pct(s["naive_median_error"]),
        f"{s['beats_naive']:.0%}",
        f"{s['coverage']:.0%}",
    ]
    return f"| {name} | " + " | ".join(cells) + " |"


def detail_lines() -> list[str]:
    lines = ["| table | workload | fitted on N | held out N | error | naive error | in 95% PI |", "|---" * 7 + "|"]
    for f, cs in validation().items():
        for c in cs:
            lines.append(
                f"| {f} | {c['workload']} | {', '.join(map(str, c['fitted_on']))} | {c['n']}"
                + (" (crosses)" if c["crosses_nodes"] else "")
                + f" | {c['error']:+.1%} | {c['naive_error']:+.1%} | {'yes' if c['covered'] else '**no**'} |"
            )
    return lines


def fit_lines() -> list[str]:
    """Where the fitted exposed shares land in their bounds (every fit of the validation), and how many held-out
    points the model and the naive guess predict within 0.1 percentage point of each other."""
    fits = upper = lower = 0
    for src in sources():
        links, bucket, series = setup(src)
        for s in series:
            ns = sorted({p.n for p in s.points})
            for keep in range(2, len(ns)):
                train = [p for p in s.points if p.n in ns[:keep]]
                m = pr.build_model(s, links.get("intra"), links.get("inter"), points=train, bucket_bytes=bucket)
                t = m.tiers["intra"]
                fits += 1
                upper += t.x >= t.hi * (1 - 1e-6)
                lower += t.x <= t.lo * (1 + 1e-6)
    checks = [c for cs in validation().values() for c in cs]
    close = sum(abs(abs(c["error"]) - abs(c["naive_error"])) < 0.001 for c in checks)
    return [
        f"Of the {fits} fits above, the intra-node exposed share sits at its upper bound (x = 4, 4x the nominal time) in {upper} and "
        f"at its lower bound in {lower};",
        f"on {close} of the {len(checks)} held-out points the model and the naive guess differ by less than 0.1",
    ]


SENSITIVITY_F = (1.5, 2.0, 4.0, 8.0)


def sensitivity_lines() -> list[str]:
    """The validation's totals with another upper bound on a nominal link's slowdown (NOMINAL_F[1]): the bound
    is a physical assumption, not calibrated, so the doc shows how much the scores depend on it."""
    from distbench.predict import model as pm

    lines = [
        "| f upper bound | median |error| | max at >= 4x | beats naive | coverage | one node alone: coverage |",
        "|---|---|---|---|---|---|",
    ]
    shipped = pm.NOMINAL_F
    try:
        for hi in SENSITIVITY_F:
            pm.NOMINAL_F = (shipped[0], hi)
            for fn in (pooled, held_out_constants, validation, single_node_only):
                fn.cache_clear()
            s = pr.score([c for cs in validation().values() for c in cs])
            one = pr.score([c for cs in single_node_only().values() for c in cs])
            name = f"**{hi:g}** (shipped)" if hi == shipped[1] else f"{hi:g}"
            lines.append(
                f"| {name} | {_pct(s['median_error'])} | {_pct(s['max_error_4x'])} | {s['beats_naive']:.0%} | "
                f"{s['coverage']:.0%} | {one['coverage']:.0%} |"
            )
    finally:
        pm.NOMINAL_F = shipped
        for fn in (pooled, held_out_constants, validation, single_node_only):
            fn.cache_clear()
    return lines


def test_sources_are_cited_and_enough():
    srcs = sources()
    assert len(srcs) >= 5 and sum(s["multi_node"] == "yes" for s in srcs) >= 3
    for s in srcs:
        assert s["url"].startswith("https://") and s["table"] and (DATA / s["file"]).exists()
        described = (DATA / "README.md").read_text() + (DATA / "predict_sources.md").read_text()
        assert s["file"] in described, f"{s['file']} not described in tests/data/README.md or predict_sources.md"


def test_shipped_constants_are_the_calibration_on_all_sources():
    e, c = calibrate([ch for cs in pooled().values() for ch in cs])
    assert pr.MODEL_ERROR_PER_DOUBLING == pytest.approx(round(e, 3), abs=1e-9)
    assert pr.CROSSING_SD == pytest.approx(round(c, 3), abs=1e-9)


def test_held_out_constants_never_see_their_own_source():
    """Leave-one-source-out: a table's interval constants come from the tables of the other READMEs only."""
    consts = held_out_constants()
    by_url: dict[str, list[str]] = {}
    for s in sources():
        by_url.setdefault(s["url"], []).append(s["file"])
    assert len(by_url) >= 3 and any(len(files) > 1 for files in by_url.values())
    everything = calibrate([ch for cs in pooled().values() for ch in cs])
    for url, files in by_url.items():
        own = calibrate([ch for s in sources() if s["url"] != url for ch in pooled()[s["file"]]])
        assert all(consts[f] == pytest.approx(own) for f in files)
        assert consts[files[0]] != pytest.approx(everything)  # leaving the source out changes the constants


def test_docs_tables_are_what_the_suite_computes():
    doc = DOC.read_text()
    for line in table_lines() + detail_lines() + single_lines():
        assert line in doc, f"docs/prediction.md lacks (or has other numbers than): {line}"


def test_docs_say_where_the_fits_sit_in_their_bounds():
    doc = " ".join(DOC.read_text().split())
    for line in fit_lines():
        assert line in doc, f"docs/prediction.md lacks (or has other numbers than): {line}"


@pytest.mark.slow  # refits the whole validation once per bound (about half a minute)
def test_docs_sensitivity_to_the_bound_is_what_the_suite_computes():
    doc = DOC.read_text()
    for line in sensitivity_lines():
        assert line in doc, f"docs/prediction.md lacks (or has other numbers than): {line}"


def test_targets_met_or_documented():
    """The issue's targets, over all held-out points. Where one is missed the doc shows the row and explains
    it; this asserts what the doc says."""
    s = pr.score([c for cs in validation().values() for c in cs])
    assert s["median_error"] <= 0.05 and s["median_error_4x"] <= 0.05
    assert s["beats_naive"] >= 0.80 and s["median_error"] < s["naive_median_error"]
    assert s["coverage"] >= 0.90
    # documented miss: the worst point at >= 4x extrapolation is above 15% (docs/prediction.md, "Misses")
    assert 0.15 < s["max_error_4x"] < 0.20


def test_one_node_to_many_nodes_given_the_link():
    crossing = [c for cs in validation().values() for c in cs if c["crosses_nodes"]]
    assert crossing, "some held-out point must cross from one node to several"
    assert all(c["covered"] for c in crossing)
    assert max(abs(c["error"]) for c in crossing) < 0.15


if __name__ == "__main__":  # print the docs' tables
    e, c = calibrate([ch for s in sources() for ch in checks_for(s)])
    print(f"calibrated on all sources: model error per doubling {e:.4f}, node-crossing sd {c:.4f}\n")
    print("\n".join(table_lines()))
    print()
    print("\n".join(detail_lines()))
    print(f"\n{sum(len(cs) for cs in validation().values())} held-out points\n")
    print("\n".join(single_lines()))
    print()
    print("\n".join(fit_lines()))
    print()
    print("\n".join(sensitivity_lines()))

"""The report's wrappers section (issue 13): each wrapper/sharded strategy's throughput against plain torch
at 1 device and against ddp at every N, with 95% CIs from analysis.throughput_ratio_ci; peak memory next
to ddp's; skipped points with their reasons; the answer to "do the wrappers cost speed?" in words.

Fixture numbers (test_report.point: batch 4, mean step exactly step_s, 1% jitter unless said):
torch 40 samples/s; ddp 38 (N=1), 72 (N=2); accelerate 36 (N=1, 0.900x torch), 70.4 (N=2, 0.978x ddp);
lightning 39.6 (N=1, 0.990x torch) with 20% jitter, so its CI includes 1.0; fsdp 34 (N=1), 68 (N=2)
with 1.1 GB against ddp's 2.0 GB peak memory at N=2 (0.55x).
"""

from __future__ import annotations

import html
import re
from dataclasses import replace

import pytest

from distbench import analysis as an
from distbench.analysis import load_sweep
from distbench.core.strategies import STRATEGIES
from distbench.report import build_report, make_plots, md, render_html, render_markdown, write_report
from distbench.report.blocks import Bullets, Table, Text
from distbench.report.sections import wrappers_section
from distbench.results.store import Store
from tests.builders import add_sweep, point, scaling_records

TIMING = "wrapper callback at step boundaries: the wrapper's own loop pauses at its end-of-step hook"
COMPOSER = "composer 0.30 requires torch<2.8; the pinned torch is 2.13.0"


@pytest.fixture(autouse=True)
def fsdp_registered(monkeypatch):
    """fsdp in the 'sharded' group: the registry's own entry where it has one, else one for this test."""
    if "fsdp" not in STRATEGIES:
        monkeypatch.setitem(STRATEGIES, "fsdp", replace(STRATEGIES["ddp"], name="fsdp", group="sharded"))
    assert STRATEGIES["fsdp"].group == "sharded" and STRATEGIES["accelerate"].group == "wrappers"


def wrapper_records() -> list[dict]:
    return [
        point("torch", 1, 0.1),
        point("ddp", 1, 0.1 / 0.95, peak_memory_bytes=1_000_000_000),
        point("ddp", 2, 0.1 / 0.90, peak_memory_bytes=2_000_000_000),
        point("accelerate", 1, 0.1 / 0.90, peak_memory_bytes=1_000_000_000),
        point("accelerate", 2, 0.1 / 0.88, peak_memory_bytes=2_000_000_000),
        point("lightning", 1, 0.1 / 0.99, jitter=0.2, timing=TIMING),
        point("fsdp", 1, 0.1 / 0.85, peak_memory_bytes=900_000_000),
        point("fsdp", 2, 0.1 / 0.85, peak_memory_bytes=1_100_000_000),
        point("composer", 1, status="skipped", reason=COMPOSER),
    ]


@pytest.fixture
def sweep(tmp_path):
    with Store(tmp_path / "r.db") as store:
        return load_sweep(store, add_sweep(store, wrapper_records()))


def section_of(sweep):
    return next(s for s in build_report(sweep, []).sections if s.id == "wrappers")


def ci_of(cell: str) -> tuple[float, float, float]:
    m = re.fullmatch(r"([\d.]+)x \(([\d.]+)-([\d.]+)\)", cell)
    assert m, cell
    return float(m[1]), float(m[2]), float(m[3])


def test_table_gives_ratios_with_cis_and_memory_next_to_ddp(sweep):
    table = next(b for b in section_of(sweep).blocks if isinstance(b, Table))
    assert table.headers == [
        "strategy",
        "N",
        "throughput (samples/s)",
        "vs torch at N=1 (95% CI)",
        "vs ddp at the same N (95% CI)",
        "peak memory per device",
        "ddp's peak memory",
        "memory vs ddp",
    ]
    rows = {(r[0], r[1]): r for r in table.rows}
    assert list(rows) == [("accelerate", "1"), ("accelerate", "2"), ("lightning", "1"), ("fsdp", "1"), ("fsdp", "2")]
    acc1, acc2, light, fsdp1, fsdp2 = rows.values()
    assert acc1[2] == "36.00" and acc2[2] == "70.40" and fsdp2[2] == "68.00"
    value, lo, hi = ci_of(acc1[3])
    assert value == 0.900 and lo < 0.9 < hi < 1.0
    # the same CI analysis.throughput_ratio_ci gives (no second bootstrap in the report)
    by = {(r["strategy"], r["world_size"]): r for r in sweep.points}
    ci, how = an.throughput_ratio_ci(sweep, by[("torch", 1)], sweep, by[("accelerate", 1)])
    assert how == "batch means" and (lo, hi) == (round(ci[0], 3), round(ci[1], 3))
    assert ci_of(acc1[4])[0] == round(0.90 / 0.95, 3)
    assert acc2[3] == "-" and ci_of(acc2[4])[0] == round(0.88 / 0.90, 3) and ci_of(acc2[4])[2] < 1
    value, lo, hi = ci_of(light[3])
    assert value == 0.990 and lo < 1.0 < hi  # 20% jitter: a 1% cost is not resolved
    assert light[5:] == ["-", "954 MiB", "-"]  # lightning recorded no peak memory; ddp did
    assert fsdp2[5:] == ["1.02 GiB", "1.86 GiB", "0.55x"] and fsdp1[7] == "0.90x"


def test_words_answer_the_question_from_the_cis(sweep):
    blocks = section_of(sweep).blocks
    answer = next(b for b in blocks if isinstance(b, Text) and b.lead)
    light_ci = next(b for b in blocks if isinstance(b, Table)).rows[2][3][8:-1]  # "0.990x (lo-hi)" -> "lo-hi"
    assert answer.lead == "Do the wrappers cost speed?"
    assert answer.text == (
        "At 1 device, measurably slower than plain torch (95% CI below 1.0): accelerate (10.0% slower), "
        "fsdp (15.0% slower); within noise of plain torch (95% CI includes 1.0): lightning (0.990x, 95% CI "
        f"{light_ci}); not measured: composer (see below)."
    )
    words = blocks[blocks.index(answer) + 2]
    assert isinstance(words, Bullets)
    fsdp = next(line for line in words.items if line.startswith("fsdp at N=2:"))
    assert fsdp.startswith("fsdp at N=2: 0.944x ddp's throughput (95% CI ") and fsdp.endswith(
        "): slower; peak memory 0.55x ddp's."
    )
    light = next(line for line in words.items if line.startswith("lightning at N=1:"))
    assert f"0.990x plain torch's throughput (95% CI {light_ci}): within noise; 1.042x ddp's" in light
    timing = [line for b in blocks if isinstance(b, Bullets) for line in b.items if "timing" in line]
    assert timing == [
        f"lightning: timing, as its records say: {TIMING}.",
        "The other strategies' records carry no timing note: distbench's own step function, timed like ddp's.",
    ]
    note = next(b for b in blocks if isinstance(b, Text) and b.style == "muted")
    assert "The CIs cover: within-run noise (batch means over the point's stored step times)." in note.text
    skipped = blocks[-1]
    assert isinstance(skipped, Table) and skipped.rows == [["composer", "1", "skipped", COMPOSER]]


def test_ci_scope_comes_from_the_records(tmp_path):
    scope = "run-to-run (t over 3 repeats)"
    recs = [
        point("torch", 1, 0.1, throughput_ci_low=39.0, throughput_ci_high=41.0, ci_scope=scope),
        point("accelerate", 1, 0.1 / 0.99, throughput_ci_low=38.0, throughput_ci_high=41.2, ci_scope=scope),
    ]
    with Store(tmp_path / "r.db") as store:
        sweep = load_sweep(store, add_sweep(store, recs))
    blocks = section_of(sweep).blocks
    # by hand: se = ln(41/39)/3.92 and ln(41.2/38)/3.92 combined, 0.99 * exp(+-1.96 * 0.02425) = 0.944, 1.038
    assert blocks[0].text == (
        "At 1 device, within noise of plain torch (95% CI includes 1.0): accelerate (0.990x, 95% CI 0.944-1.038)."
    )
    assert blocks[1].rows[0][4] == "no 'ddp' point at N=1"
    assert f"The CIs cover: {scope}." in blocks[-1].text
    assert not any("timing" in line for b in blocks if isinstance(b, Bullets) for line in b.items)


def test_few_steps_give_no_verdict_and_no_wrappers_no_section(tmp_path):
    recs = [point("torch", 1, 0.1, steps=3), point("fabric", 1, 0.12, steps=3)]
    with Store(tmp_path / "r.db") as store:
        sweep = load_sweep(store, add_sweep(store, recs))
    blocks = section_of(sweep).blocks
    assert blocks[0].text == "At 1 device, without a CI, so not settled: fabric (0.833x)."
    assert blocks[1].rows[0][3] == "0.833x (no CI)"
    assert blocks[2].items == ["fabric at N=1: 0.833x plain torch's throughput: no CI (too few steps (3 < 150))."]
    with Store(tmp_path / "plain.db") as store:
        plain = load_sweep(store, add_sweep(store, scaling_records()))
    assert wrappers_section is not None and "wrappers" not in [s.id for s in build_report(plain, []).sections]


def test_only_skipped_wrappers_are_listed_with_their_reasons(tmp_path):
    recs = [point("torch", 1, 0.1), point("composer", 1, status="skipped", reason=COMPOSER)]
    with Store(tmp_path / "r.db") as store:
        sweep = load_sweep(store, add_sweep(store, recs))
    blocks = section_of(sweep).blocks
    assert blocks[0].text == "At 1 device, not measured: composer (see below)."
    assert blocks[-1].rows == [["composer", "1", "skipped", COMPOSER]]


def test_html_and_markdown_both_carry_the_section(sweep, tmp_path):
    report = build_report(sweep, make_plots(sweep))
    ids = [s.id for s in report.sections]
    assert ids.index("wrappers") == ids.index("communication") + 1
    page = html.unescape(render_html(report))
    text = render_markdown(report, images={p.name: f"{p.name}.png" for p in report.plots}, csv_name="p.csv")
    assert '<section id="wrappers"><h2>Wrapper and sharded strategies</h2>' in page
    assert '<a href="#wrappers">Wrappers</a>' in page and "\n## Wrapper and sharded strategies\n" in text
    for s in ("measurably slower than plain torch (95% CI below 1.0): accelerate", "0.55x", COMPOSER):
        assert s in page and md(s) in text, s
    assert re.search(r"\| fsdp \| 2 \| 68\.00 \| - \| 0\.944x \(", text)
    assert "<p><strong>Do the wrappers cost speed?</strong> " in page and "**Do the wrappers cost speed?** " in text
    files = write_report(sweep, tmp_path / "w.html")
    assert "## Wrapper and sharded strategies" in files.markdown.read_text()

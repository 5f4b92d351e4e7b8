"""`--what-if link=[TIER=]PROFILE`: the same workload onto another network, through the same bucket pipeline.

The measured compute, spreads, bucket timeline and backward share carry over; the named tier's link is replaced.
Its achieved bandwidth: where the measured points identified the old tier's achieved share of its figure
(fitted inside its range; one pinned at a bound says the loss is not all communication), the same share of the
new figure (clipped to the new link's plausible range); from one device, the
middle of the new range; otherwise the value of the new range closest to the naive guess, as for any tier the
points do not constrain. The new link's whole plausible range enters the interval. The compute per sample stays
the one anchored on the measured link (it is not re-anchored per corner: the measured points ran on the old
link)."""

from __future__ import annotations

import copy
import math
from typing import Sequence

from distbench.core.errors import BadInput
from distbench.predict.links import Link, explicit_links
from distbench.predict.model import StepTimeModel, bandwidth_range

PREFIX = "link="


def parse(items: Sequence[str], nics_per_node: int) -> tuple[list[str], list[tuple[str, str, Link]]]:
    """Split --what-if items into strategies and (label, tier, link) link what-ifs."""
    strategies, links = [], []
    for item in items:
        if not item.lower().startswith(PREFIX):
            strategies.append(item)
            continue
        value = item[len(PREFIX) :].strip()
        if not value:
            raise BadInput("--what-if link=: name a link profile, e.g. --what-if link=inter=25gbe")
        try:
            found = explicit_links([value], [], [], nics_per_node)
        except BadInput as exc:
            raise BadInput(f"--what-if {item}: {str(exc).removeprefix('--link: ')}") from None
        ((tier, link),) = found.items()
        links.append((item, tier, link))
    return strategies, links


def link_model(model: StepTimeModel, tier: str, link: Link) -> StepTimeModel:
    """A copy of `model` with `tier` on `link` (see the module's docstring)."""
    m = copy.copy(model)
    m.tiers = {k: copy.copy(v) for k, v in model.tiers.items()}
    m.ref_points, m.base, m.warnings = [], None, []
    old, t = model.tiers[tier], m.tiers[tier]
    size = model.series.grad_bytes or 0.0
    lo, hi = bandwidth_range(link, size * model.traffic / max(1, model.buckets) if size else None)
    t.link, t.nominal_bw, t.lo, t.hi, t.span = link, link.bandwidth, lo, hi, (lo, hi)
    t.exercised = t.identified = t.at_bound = False
    t.wanted = None
    if old.fitted and not old.at_bound and old.link is not None and math.isfinite(old.nominal_bw):
        t.bw = min(hi, max(lo, link.bandwidth * old.bw / old.nominal_bw))
        t.source = "what-if: the achieved share fitted on the measured link"
    elif "from one device" in old.source:
        t.bw, t.source = math.sqrt(lo * hi), "what-if from one device: the middle of its plausible range"
    else:
        t.bw, t.source = hi, "what-if: not constrained (the value closest to the naive guess)"
    return m


def link_what_ifs(model: StepTimeModel, items: Sequence[tuple[str, str, Link]], ns: Sequence[int]) -> list[dict]:
    out = []
    for label, tier, link in items:
        if tier == "inter" and not any(n > model.series.per_node for n in ns):
            raise BadInput(f"--what-if {label}: no predicted N spans several nodes (--gpus, --gpus-per-node)")
        m = link_model(model, tier, link)
        rows = []
        for n in ns:
            thr, lo, hi = m.interval(n)
            rows.append({"n": n, "throughput": thr, "throughput_low": lo, "throughput_high": hi})
        t = m.tiers[tier]
        out.append(
            {
                "strategy": label,
                "traffic": f"{tier}-node link {link.describe()}, achieved {t.bw / 1e9:.3g} GB/s "
                f"(range {t.lo / 1e9:.3g}..{t.hi / 1e9:.3g})",
                "assumes": f"the measured compute, spreads, buckets and backward share carry over; {t.source}",
                "buckets": m.buckets,
                "predicted": rows,
                "at_measured_n": {str(p.n): m.throughput(p.n) for p in model.series.points},
            }
        )
    return out

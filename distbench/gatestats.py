"""The statistics of the regression gate (`distbench compare`): run-to-run variance of log throughput,
Welch's t with Welch-Satterthwaite degrees of freedom, and Holm's correction across the points of one
comparison. Everything works on numpy arrays (one comparison, or many simulated ones at once:
tests/cisim.py proves the gate's false-alarm rate and power with these same functions).

Run-to-run variances from R = 2 or 3 repeats have 1 or 2 degrees of freedom each: a t-test on them alone
has almost no power once corrected for 20 points. The variances of the points of one sweep are therefore
moderated (empirical Bayes, Smyth 2004, "Linear models and empirical Bayes methods for assessing
differential expression in microarray experiments", Stat. Appl. Genet. Mol. Biol. 3(1), section 6): each
point's variance is shrunk towards a prior s0^2 that counts as d0 degrees of freedom, both estimated from
the spread of the sweep's own variances. Points with equal noise get d0 large (their variances pooled);
points whose noise differs widely get d0 small (each keeps most of its own). The moderated degrees of freedom
are capped at the sweep's total, as in limma. It assumes the points of a sweep share one noise level (up to
sampling): one point much noisier than the rest does not move d0 much, so its variance is shrunk towards the
others' and its t comes out too large. At R = 3 per side the family false alarm stays <= 5% with one point
5x noisier; at R = 2, or one run on a noise floor, it is 10-12% (cisim.gate_sweeps, docs/benchmarks.md), and
compare says so beside its verdict (compare.MODERATION_CAVEAT).
"""

from __future__ import annotations


import numpy as np

from distbench import stats

ALPHA = 0.05
"""Family-wise error rate of one comparison (Holm)."""
DF_MAX = 1000
"""Degrees of freedom are clipped to this (the t distribution is then the normal to 1e-3)."""


def two_sided_p(t, df):
    """Two-sided p-value of t with df degrees of freedom (Welch's df are floored, a conservative rounding,
    and clipped to [1, DF_MAX]; NaN df counts as 1) by stats.t_cdf, the project's one t CDF."""
    df = np.clip(np.floor(np.nan_to_num(np.asarray(df, dtype=float), nan=1.0) + 1e-9), 1, DF_MAX)
    c = stats.t_cdf(t, df)
    return 2 * np.minimum(c, 1 - c)


def digamma(x):
    x = np.maximum(np.asarray(x, dtype=float), 1e-9)
    shift = np.zeros(x.shape)
    for _ in range(6):  # recurrence up to x >= 6, then the asymptotic series
        small = x < 6
        shift = shift - np.where(small, 1 / x, 0.0)
        x = np.where(small, x + 1, x)
    f = 1 / (x * x)
    return shift + np.log(x) - 0.5 / x - f * (1 / 12 - f * (1 / 120 - f * (1 / 252 - f * (1 / 240 - f / 132))))


def trigamma(x):
    x = np.maximum(np.asarray(x, dtype=float), 1e-9)
    shift = np.zeros(x.shape)
    for _ in range(6):
        small = x < 6
        shift = shift + np.where(small, 1 / (x * x), 0.0)
        x = np.where(small, x + 1, x)
    f = 1 / (x * x)
    return shift + 1 / x + f / 2 + f / x * (1 / 6 - f * (1 / 30 - f * (1 / 42 - f / 30)))


def trigamma_inverse(y):
    """x with trigamma(x) = y (Newton's method from 0.5 + 1/y, as limma's trigammaInverse)."""
    y = np.asarray(y, dtype=float)
    x = 0.5 + 1 / y
    for _ in range(60):
        tri = trigamma(x)
        slope = (trigamma(x * (1 + 1e-6)) - trigamma(x * (1 - 1e-6))) / (2e-6 * x)
        x = np.maximum(x + tri * (1 - tri / y) / slope, x / 10)
    return x


def moderate(var, df):
    """Moderated variances over the last axis: (var_post, df_post, s0^2, d0), each point's variance shrunk
    towards the prior s0^2 (d0 degrees of freedom) fitted to the spread of log variances (Smyth 2004); d0 is
    infinite (all pooled) when the variances spread no more than sampling alone would make them. Fewer than
    3 points: no moderation (d0 = 0, each its own). df_post is capped at the total of df."""
    var = np.maximum(np.asarray(var, dtype=float), 1e-12)
    df = np.broadcast_to(np.asarray(df, dtype=float), var.shape)
    m = var.shape[-1]
    total = df.sum(axis=-1, keepdims=True)
    if m < 3:
        return var, df, np.full(var.shape[:-1] + (1,), np.nan), np.zeros(var.shape[:-1] + (1,))
    e = np.log(var) - digamma(df / 2) + np.log(df / 2)
    e_mean = e.mean(axis=-1, keepdims=True)
    spread = ((e - e_mean) ** 2).sum(axis=-1, keepdims=True) / (m - 1) - trigamma(df / 2).mean(axis=-1, keepdims=True)
    d0 = np.where(spread > 0, 2 * trigamma_inverse(np.maximum(spread, 1e-12)), np.inf)
    d0_finite = np.minimum(d0, 1e8)
    s0 = np.exp(e_mean + np.where(np.isfinite(d0), digamma(d0_finite / 2) - np.log(d0_finite / 2), 0.0))
    var_post = (d0_finite * s0 + df * var) / (d0_finite + df)
    df_post = np.minimum(d0_finite + df, total)
    return var_post, df_post, s0, d0


def welch(mean_a, var_a, n_a, df_a, mean_b, var_b, n_b, df_b, *, shared: bool = False):
    """(difference b - a, its standard error, Welch-Satterthwaite df) of two means of n_a and n_b runs whose
    per-run variances var_a, var_b are estimated with df_a, df_b degrees of freedom. `shared`: both sides
    use one and the same estimate (the noise floor): se^2 = var_a (1/n_a + 1/n_b) with df_a (two independent
    estimates would double it)."""
    if shared:
        return np.asarray(mean_b) - np.asarray(mean_a), np.sqrt(np.asarray(var_a) * (1 / n_a + 1 / n_b)), df_a
    qa, qb = np.asarray(var_a) / n_a, np.asarray(var_b) / n_b
    se2 = qa + qb
    df = se2**2 / (qa**2 / df_a + qb**2 / df_b)
    return np.asarray(mean_b) - np.asarray(mean_a), np.sqrt(se2), df


def holm_adjusted(p):
    """Holm-adjusted p-values over the last axis (NaN: not tested, stays NaN; m counts the tested ones):
    a point is rejected at family-wise level alpha where its adjusted p is at most alpha."""
    p = np.asarray(p, dtype=float)
    filled = np.where(np.isnan(p), np.inf, p)
    m = np.isfinite(filled).sum(axis=-1, keepdims=True)
    order = np.argsort(filled, axis=-1)
    ranked = np.take_along_axis(filled, order, axis=-1)
    with np.errstate(invalid="ignore"):
        scaled = np.maximum(m - np.arange(p.shape[-1]), 1) * ranked
    adj = np.minimum(1.0, np.maximum.accumulate(scaled, axis=-1))
    out = np.empty_like(adj)
    np.put_along_axis(out, order, adj, axis=-1)
    return np.where(np.isnan(p), np.nan, out)


def verdict_codes(d, se, df, threshold: float, alpha: float = ALPHA):
    """For log ratios d (B over A) with standard errors se and df: (p, Holm-adjusted p, code) over the last
    axis; code 0 within noise, -1 regression, +1 improvement, 2 beyond the noise but within the threshold,
    NaN not tested (se NaN). A change is beyond the noise where Holm rejects ratio 1 at `alpha` for the
    family, and a regression or improvement only where the ratio also moves by more than `threshold`."""
    d, se = np.asarray(d, dtype=float), np.asarray(se, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        p = np.where(np.isnan(se), np.nan, two_sided_p(np.where(se > 0, d / np.where(se > 0, se, 1), np.inf), df))
    adj = holm_adjusted(p)
    beyond = adj <= alpha
    change = np.expm1(d)
    code = np.where(beyond, np.where(change < -threshold, -1, np.where(change > threshold, 1, 2)), 0).astype(float)
    return p, adj, np.where(np.isnan(p), np.nan, code)

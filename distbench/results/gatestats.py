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
are capped at the sweep's total, as in limma. The plain estimate assumes the points of a sweep share one noise
level (up to sampling): a noisy point's variance is then shrunk towards the others' and its t comes out too
large (with Gaussian noise and 5 of 20 points 3x noisier the family false alarm was 9% at R = 3). So the
moderation is robust (limma's robust=TRUE, Phipson et al. 2016: an outlying variance keeps more of its own)
and, where every point has 2 df or more, d0 is capped at D0_MAX: at R = 3 the family false alarm stays <= 5%
under Gaussian, t(4) and lognormal noise whether the points' noise spreads 3x, one point is 5x noisier or 5 of
20 are 3x noisier (cisim.gate_sweeps, docs/benchmarks.md). At R = 2, or one run on a noise floor, it exceeds
5% where the points' noise differs, and compare says so beside its verdict (compare.MODERATION_CAVEAT).
"""

from __future__ import annotations

import math

import numpy as np

from distbench.results import stats

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


def log_gamma(x):
    """log Gamma(x) for x > 0, elementwise: the recurrence up to x >= 8, then Stirling's series (to ~1e-13)."""
    x = np.maximum(np.asarray(x, dtype=float), 1e-300)
    shift = np.zeros(x.shape)
    for _ in range(8):
        small = x < 8
        shift = shift - np.where(small, np.log(x), 0.0)
        x = np.where(small, x + 1, x)
    f = 1 / (x * x)
    series = (1 / 12 - f * (1 / 360 - f * (1 / 1260 - f / 1680))) / x
    return shift + (x - 0.5) * np.log(x) - x + 0.5 * math.log(2 * math.pi) + series


def betainc(a, b, x):
    """The regularized incomplete beta function I_x(a, b), elementwise: the continued fraction of Numerical
    Recipes (section 6.4, modified Lentz), on the side of x where it converges fast."""
    a, b, x = np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in (a, b, x)))
    flip = x > (a + 1) / (a + b + 2)
    a, b, x = np.where(flip, b, a), np.where(flip, a, b), np.where(flip, 1 - x, x)
    x = np.clip(x, 0.0, 1.0)
    tiny = 1e-300
    with np.errstate(divide="ignore"):
        front = np.exp(log_gamma(a + b) - log_gamma(a) - log_gamma(b) + a * np.log(x) + b * np.log1p(-x)) / a
    c, d = np.ones(x.shape), 1 - (a + b) * x / (a + 1)
    d = 1 / np.where(np.abs(d) < tiny, tiny, d)
    f = d.copy()
    for m in range(1, 300):
        for num in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1 + num * d
            d = 1 / np.where(np.abs(d) < tiny, tiny, d)
            c = 1 + num / c
            c = np.where(np.abs(c) < tiny, tiny, c)
            f = f * c * d
        if np.all(np.abs(c * d - 1) < 1e-13):
            break
    out = front * f
    return np.where(flip, 1 - out, out)


def f_upper_tail(f, df1, df2):
    """P(F > f) for F with (df1, df2) degrees of freedom (df2 may be fractional)."""
    f, df1, df2 = np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in (f, df1, df2)))
    return betainc(df2 / 2, df1 / 2, df2 / (df2 + df1 * np.maximum(f, 0.0)))


D0_MAX = 4.0
"""The prior degrees of freedom are capped here: a point's own variance (2 df at R = 3) then always weighs at
least a third. The moment estimate of d0 from 20 points' log variances at 1-2 df each is noisy (the spread of
log variances that sampling alone gives, 1.6 at 2 df, dwarfs a 3x spread of the points' noise, 0.4), so it
often comes out large where the noise differs; uncapped, the family false alarm with Gaussian noise and 5 of 20
points 3x noisier is 7-9% (cisim.gate_sweeps, docs/benchmarks.md). Applied where every point has 2 df or more
(R >= 3): with 1 df (R = 2, or one run on a noise floor) a point's own variance alone gives almost no power, so
there d0 is left as estimated (compare.MODERATION_CAVEAT says what that costs)."""


def moderate(var, df):
    """Moderated variances over the last axis, robust to noisy points: (var_post, df_post, s0^2, d0). Each
    point's variance is shrunk towards the prior s0^2, fitted to the spread of log variances (Smyth 2004) with
    d0 capped at D0_MAX (infinite, all pooled, when the variances spread no more than sampling alone would make
    them). Robust (limma's robust=TRUE, Phipson et al. 2016, "Robust hyperparameter estimation protects against
    hypervariable genes and improves power to detect differential expression", Ann. Appl. Stat. 10(2)): a point
    whose variance is further in the upper tail of F(df, d0) than its rank among the points makes likely is
    given less prior weight, d0_i = P(not outlier) d0 + P(outlier) d0_out, where d0_out puts the largest
    variance at the median of F(df, d0_out); d0_i does not increase with the variance. Fewer than 3 points: no
    moderation (d0 = 0, each its own). df_post = d0_i + df, capped at the total of df. The fourth value is the
    sweep's d0 (before the per-point outlier weighting)."""
    var = np.maximum(np.asarray(var, dtype=float), 1e-12)
    df = np.broadcast_to(np.asarray(df, dtype=float), var.shape)
    m = var.shape[-1]
    total = df.sum(axis=-1, keepdims=True)
    if m < 3:
        return var, df, np.full(var.shape[:-1] + (1,), np.nan), np.zeros(var.shape[:-1] + (1,))
    e = np.log(var) - digamma(df / 2) + np.log(df / 2)
    e_mean = e.mean(axis=-1, keepdims=True)
    spread = ((e - e_mean) ** 2).sum(axis=-1, keepdims=True) / (m - 1) - trigamma(df / 2).mean(axis=-1, keepdims=True)
    cap = D0_MAX if df.min() >= 2 else 1e8  # 1 df per point (R = 2, a noise floor): not capped (D0_MAX)
    d0 = np.where(spread > 0, np.minimum(2 * trigamma_inverse(np.maximum(spread, 1e-12)), cap), cap)
    s0 = np.exp(e_mean + digamma(d0 / 2) - np.log(d0 / 2))
    d0_i = _robust_prior_df(var / s0, df, d0)
    var_post = (d0_i * s0 + df * var) / (d0_i + df)
    df_post = np.minimum(d0_i + df, total)
    return var_post, df_post, s0, d0


def _robust_prior_df(ratio, df, d0):
    """Per point prior df (Phipson et al. 2016, limma's fitFDistRobustly): ratio = var / s0^2."""
    m = ratio.shape[-1]
    tail = f_upper_tail(ratio, df, d0)
    rank = ratio.argsort(axis=-1).argsort(axis=-1)  # 0 = the smallest variance
    empirical = (m - rank - 0.5) / m  # the share of points above it, as limma counts it
    not_outlier = np.minimum(tail / empirical, 1.0)
    top = np.take_along_axis(ratio, ratio.argmax(axis=-1)[..., None], axis=-1)
    df_top = np.take_along_axis(np.broadcast_to(df, ratio.shape), ratio.argmax(axis=-1)[..., None], axis=-1)
    lo, hi = np.full(top.shape, 1e-3), np.broadcast_to(d0, top.shape).copy()
    for _ in range(40):  # d0_out: the largest ratio at the median of F(df, d0_out), by bisection in log d0
        mid = np.sqrt(lo * hi)
        below = f_upper_tail(top, df_top, mid) >= 0.5
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    d0_out = np.where(f_upper_tail(top, df_top, d0) >= 0.5, d0, lo)
    d0_i = not_outlier * d0 + (1 - not_outlier) * d0_out
    order = ratio.argsort(axis=-1)  # non-increasing in the variance
    ordered = np.minimum.accumulate(np.take_along_axis(d0_i, order, axis=-1), axis=-1)
    out = np.empty_like(ordered)
    np.put_along_axis(out, order, ordered, axis=-1)
    return out


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

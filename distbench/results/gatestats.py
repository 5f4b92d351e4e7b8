"""The statistics of the regression gate (`distbench compare`): run-to-run variance of log throughput, the t of
the difference of two sweeps' mean log throughputs, and Holm's correction across the points of one comparison,
one-sided for regressions. Everything works on numpy arrays (one comparison, or many simulated ones at once:
tests/cisim.py and benchmarks/gate_power.py measure the gate's false alarm and power with these same functions).

With repeats on both sides a point's run-to-run variance is pooled over A's and B's repeats (`pooled`: 4 df at
R = 3), as limma pools a two-group fit's residuals. Those few df alone give almost no power once corrected for
20 points, so the variances of one comparison's points are moderated (empirical Bayes, Smyth 2004, "Linear
models and empirical Bayes methods for assessing differential expression in microarray experiments", Stat.
Appl. Genet. Mol. Biol. 3(1), section 6): each is shrunk towards a prior s0^2 that counts as d0 degrees of
freedom, both estimated from the spread of the points' own variances. The moment estimate of d0 is noisy (20
points' log variances at 4 df spread by sampling alone about as much as a 10x spread of the points' noise adds),
and where it comes out large although the points' noise differs, a noisy point's variance is shrunk towards the
others' and it is falsely flagged. So d0 is taken at a lower confidence bound (SPREAD_MARGIN), capped per point
(D0_MAX), and the moderation is robust (limma's robust=TRUE, Phipson et al. 2016: an outlying variance keeps
more of its own). Heavy-tailed or skewed run-to-run noise spreads sample variances wider than chi-square
sampling does, which the moment estimate would take for differences between the points: that part of the spread
is measured on each point's A/B split, where the points' differences cannot enter (`sampling_excess`), and left
out of the prior's. The false alarm and power per noise law, heterogeneity, R and point count:
docs/benchmarks.md. On a noise floor (one run per side, 1 df per point) the false alarm exceeds 5% where one
point is much noisier or the noise is skewed, and compare says so beside its verdict (compare.MODERATION_CAVEAT).
The pooled t assumes A and B share each point's variance; `noise_ratio_p` and `noise_ratio` test that across the
points (Wilcoxon's signed-rank test of their log variance ratios, exact under A/A for any noise law) and say by
how much B's sd differs, for the note of distbench.analysis.gatenotes.
"""

from __future__ import annotations

import functools
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


D0_MAX = 16.0
"""The prior's df of a point with 2 df or more are capped here: its own variance (4 df at R = 3, pooled over both
sweeps) then always weighs at least a fifth. The cap is per point: a point with 1 df (one run per side on a
noise floor) keeps the prior df as estimated (its own variance alone gives almost no power;
compare.MODERATION_CAVEAT says what that costs), and the other points of its comparison stay capped. The prior's
scale s0^2 is fitted at the capped d0 wherever a point is capped."""
SPREAD_MARGIN = 0.5
"""d0 is fitted to the spread of the points' log variances at its upper confidence bound: the sample variance
times (m - 1) / chi2 quantile of m - 1 df at SPREAD_MARGIN standard normal deviates below the median
(Wilson-Hilferty), about a 69% one-sided bound. A smaller prior df where the spread is uncertain (few points):
with the point estimate (and a cap of 20) the family false alarm at R = 3 and Gaussian noise reached 5.4-6.5%
(2000 comparisons a cell) where the points' variances spread 10x; with the bound it stays <= 5% in every simulated cell (docs/benchmarks.md)."""


EXCESS_MARGIN: float | None = 0.0
"""The sampling spread of the points' log variances is the normal law's, or wider where the points' A/B splits
show it wider (`sampling_excess`: its moment estimate less EXCESS_MARGIN standard errors; 0: the estimate, as
d0's own is a moment estimate). None: the normal law's alone. Without it the moderation took the wider spread of
heavy-tailed or skewed noise's sample variances for real differences between the points and pooled less: a 10%
slowdown at R = 3, 20 points, lognormal noise was caught in 77.9% of comparisons, 80.8% with it, the family false
alarm <= 5% in every cell either way (16000 comparisons a cell, docs/benchmarks.md)."""
EXCESS_MAX = 2.0
"""sampling_excess is at most this (twice the normal law's spread; t(4) and lognormal noise make 1.25x and 1.33x at
2 df a side, 1.49x and 1.59x at the pooled 4 df): a robustness bound, not a property of any noise law. The estimate
is a mean of squares, and one point whose variance came out (near) zero on one side would otherwise decide the
pooling of the whole comparison. Under the normal law it is reached in about 2% of comparisons of 20 points and 6%
of 10 (sampling_excess's own noise)."""
EXCESS_FLOOR: float | None = 1.0
"""sampling_excess is at least this (None: not floored): an estimate below the normal law's spread is taken for
the estimate's own sampling noise, not for noise lighter-tailed than the normal law (a modelling choice; with
equal Gaussian noise at 20 points, crediting it cost 2 points of power: docs/benchmarks.md, the alternatives).
Estimates above 1 are kept, so under the normal law the floored estimate averages 1.15 rather than 1: the
moderation pools somewhat more than the normal law's spread alone would let it."""


def sampling_excess(var_a, df_a, var_b, df_b, margin: float = 0.0):
    """How much wider than under the normal law the sampling spread of log variances is (1: as wide), estimated
    from each point's two sides: under no change A and B share a point's variance (as `pooled` assumes), so log
    var_a - log var_b holds none of the points' differences in noise, only sampling, whose variance is 2
    trigamma(df / 2) under the normal law at df a side. Over the last axis, the points with equal df >= 2 on both
    sides (at least 3 of them, else 1): the variance of log var_a - log var_b about its mean over those points, in
    units of 2 trigamma(df / 2) (the m - 1 divisor; centred, so a change of noise common to all of B's points, a
    busier machine, which shifts every point's log ratio alike, is not read as sampling), less `margin` of its
    standard errors, at least EXCESS_FLOOR and at most EXCESS_MAX. Heavy-tailed or skewed run-to-run noise spreads
    sample variances wider than chi-square sampling does: 1.25x for t(4) and 1.33x for the lognormal of
    tests/cisim.run_noise at 2 df a side (by simulation). `moderate` applies it to the pooled variances' 4 df (R = 3),
    where the same laws make 1.49x and 1.59x: the ratio grows with the df, so the 2-df estimate under-corrects
    there (less pooling, the conservative side). From 20 points its standard error under the normal law is about
    0.41 (0.59 from 10), larger than the excess it measures; floored at 1, its mean under the normal law is 1.15
    (1.19 from 10 points), not 1."""
    va, vb = (np.maximum(np.asarray(v, dtype=float), 1e-12) for v in (var_a, var_b))
    dfa = np.broadcast_to(np.asarray(df_a, dtype=float), va.shape)
    dfb = np.broadcast_to(np.asarray(df_b, dtype=float), vb.shape)
    ok = (dfa == dfb) & (dfa >= 2) & np.isfinite(va) & np.isfinite(vb)
    m = ok.sum(axis=-1, keepdims=True)
    x = np.where(ok, np.log(va) - np.log(vb), 0.0)
    centre = x.sum(axis=-1, keepdims=True) / np.maximum(m, 1)
    u = np.where(ok, (x - centre) ** 2 / (2 * trigamma(np.where(ok, dfa, 2.0) / 2)), 0.0)
    mean = u.sum(axis=-1, keepdims=True) / np.maximum(m - 1, 1)
    sd = np.sqrt(np.where(ok, (u * m / np.maximum(m - 1, 1) - mean) ** 2, 0.0).sum(axis=-1, keepdims=True))
    sd = sd / np.sqrt(np.maximum(m - 1, 1))
    est = mean - margin * sd / np.sqrt(np.maximum(m, 1))
    est = np.minimum(est if EXCESS_FLOOR is None else np.maximum(est, EXCESS_FLOOR), EXCESS_MAX)
    return np.where(m >= 3, est, 1.0)


def moderate(var, df, excess=1.0):
    """Moderated variances over the last axis, robust to noisy points: (var_post, df_post, s0^2, d0). Each
    point's variance is shrunk towards the prior s0^2, fitted to the spread of log variances (Smyth 2004) with
    d0 at a lower confidence bound (SPREAD_MARGIN), capped at D0_MAX for points with 2 df or more (infinite, all
    pooled, when the variances spread no more than sampling alone would make them). Robust (limma's robust=TRUE, Phipson et al. 2016, "Robust hyperparameter estimation protects against
    hypervariable genes and improves power to detect differential expression", Ann. Appl. Stat. 10(2)): a point
    whose variance is further in the upper tail of F(df, d0) than its rank among the points makes likely is
    given less prior weight, d0_i = P(not outlier) d0 + P(outlier) d0_out, where d0_out puts the largest
    variance at the median of F(df, d0_out); d0_i does not increase with the variance. Fewer than 3 points: no
    moderation (d0 = 0, each its own). df_post = d0_i + df, capped at the total of df. The fourth value is the
    sweep's d0 (capped where any point is; before the per-point outlier weighting). `excess`: the sampling spread
    of log variances over the normal law's (sampling_excess; 1 for the normal law), per comparison."""
    var = np.maximum(np.asarray(var, dtype=float), 1e-12)
    df = np.broadcast_to(np.asarray(df, dtype=float), var.shape)
    m = var.shape[-1]
    total = df.sum(axis=-1, keepdims=True)
    if m < 3:
        return var, df, np.full(var.shape[:-1] + (1,), np.nan), np.zeros(var.shape[:-1] + (1,))
    e = np.log(var) - digamma(df / 2) + np.log(df / 2)
    e_mean = e.mean(axis=-1, keepdims=True)
    total_var = ((e - e_mean) ** 2).sum(axis=-1, keepdims=True) / (m - 1)
    k = m - 1  # the chi-square quantile of Wilson and Hilferty (1931): k S^2 / sigma^2 ~ chi2(k)
    chi2_low = k * (1 - 2 / (9 * k) - SPREAD_MARGIN * math.sqrt(2 / (9 * k))) ** 3
    spread = total_var * k / chi2_low - np.asarray(excess) * trigamma(df / 2).mean(axis=-1, keepdims=True)
    d0_fit = np.where(spread > 0, np.minimum(2 * trigamma_inverse(np.maximum(spread, 1e-12)), 1e8), 1e8)
    capped = df >= 2  # per point: a point with 1 df (R = 2, one failed repeat, a noise floor) is not capped
    d0 = np.minimum(d0_fit, D0_MAX) if capped.any() else d0_fit
    s0 = np.exp(e_mean + digamma(d0 / 2) - np.log(d0 / 2))
    d0_i = _robust_prior_df(var / s0, df, d0)
    if capped.any() and not capped.all():
        d0_i = np.where(capped, d0_i, _robust_prior_df(var / s0, df, d0_fit))
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


def pooled(var_a, df_a, var_b, df_b):
    """(variance, df) of one point's run-to-run variance with A's and B's repeats pooled, each about its own
    mean, as limma's residual variance of a two-group fit: df_a var_a + df_b var_b over df_a + df_b. A and B
    ran one configuration on one machine, so under no change they share it; with as many repeats on each side
    the pooled t's standard error, var (1/n_a + 1/n_b), is Welch's, on twice a side's df."""
    df_a, df_b = np.asarray(df_a, dtype=float), np.asarray(df_b, dtype=float)
    df = df_a + df_b
    return (df_a * np.asarray(var_a) + df_b * np.asarray(var_b)) / df, df


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


def one_sided_p(t, df, *, lower: bool):
    """One-sided p-value of t with df degrees of freedom: P(T <= t) (`lower`, a regression: B slower) or
    P(T >= t); df floored and clipped as in two_sided_p."""
    df = np.clip(np.floor(np.nan_to_num(np.asarray(df, dtype=float), nan=1.0) + 1e-9), 1, DF_MAX)
    c = stats.t_cdf(t, df)
    return c if lower else 1 - c


def verdict_codes(d, se, df, threshold: float, alpha: float = ALPHA):
    """For log ratios d (B over A) with standard errors se and df: (p, Holm-adjusted p, code) over the last
    axis; code 0 within noise, -1 regression, +1 improvement, 2 beyond the noise but within the threshold,
    NaN not tested (se NaN). The gate is for regressions, so regressions are one family, tested one-sided (B
    slower than A), Holm at family-wise `alpha`; improvements are another, tested one-sided the other way, Holm
    at `alpha` apart (an improvement never fails a gate, and does not spend the regressions' alpha). A change
    is beyond the noise where its side's Holm rejects ratio 1, and a regression or improvement only where the
    ratio also moves by more than `threshold`. p and the adjusted p are those of the side the estimate lies on."""
    d, se = np.asarray(d, dtype=float), np.asarray(se, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        t = np.where(se > 0, d / np.where(se > 0, se, 1), np.where(d < 0, -np.inf, np.inf))
        p_slower = np.where(np.isnan(se), np.nan, one_sided_p(t, df, lower=True))
        p_faster = np.where(np.isnan(se), np.nan, one_sided_p(t, df, lower=False))
    adj_slower, adj_faster = holm_adjusted(p_slower), holm_adjusted(p_faster)
    change = np.expm1(d)
    regression = (adj_slower <= alpha) & (change < -threshold)
    improvement = (adj_faster <= alpha) & (change > threshold)
    beyond = (adj_slower <= alpha) | (adj_faster <= alpha)
    code = np.where(regression, -1, np.where(improvement, 1, np.where(beyond, 2, 0))).astype(float)
    slower = d < 0
    p, adj = np.where(slower, p_slower, p_faster), np.where(slower, adj_slower, adj_faster)
    return p, adj, np.where(np.isnan(p_slower), np.nan, code)


def both_sides(logs_a: dict, logs_b: dict) -> tuple[list, list, list, list, list]:
    """(keys, var_a, df_a, var_b, df_b): the points with R >= 2 on both sides, each side's sample variance of log
    throughput and its df."""
    keys = [k for k in logs_a if len(logs_a[k]) >= 2 and len(logs_b.get(k, ())) >= 2]
    var_a, df_a = [np.var(logs_a[k], ddof=1) for k in keys], [len(logs_a[k]) - 1 for k in keys]
    var_b, df_b = [np.var(logs_b[k], ddof=1) for k in keys], [len(logs_b[k]) - 1 for k in keys]
    return keys, var_a, df_a, var_b, df_b


def pooled_variances(logs_a: dict, logs_b: dict) -> dict[tuple, tuple[float, float]]:
    """Per point with R >= 2 on both sides: (run-to-run variance of log throughput pooled over A's and B's
    repeats, moderated across those points; its df)."""
    keys, var_a, df_a, var_b, df_b = both_sides(logs_a, logs_b)
    if not keys:
        return {}
    var, df = pooled(var_a, df_a, var_b, df_b)
    post, df_post, _, _ = moderate(var, df, spread_excess(var_a, df_a, var_b, df_b))
    return {k: (float(v), float(d)) for k, v, d in zip(keys, post, df_post)}


def spread_excess(var_a, df_a, var_b, df_b):
    """The `excess` moderate takes for a comparison of A and B (sampling_excess; 1 where EXCESS_MARGIN is None)."""
    return 1.0 if EXCESS_MARGIN is None else sampling_excess(var_a, df_a, var_b, df_b, EXCESS_MARGIN)


NOISE_RATIO_MIN_POINTS = 6
"""The signed-rank test below cannot reject at a two-sided 5% with fewer points (its smallest p is 2 / 2^m)."""


@functools.lru_cache(maxsize=64)
def signed_rank_cdf(m: int) -> np.ndarray:
    """P(T+ <= t), t = 0 .. m(m + 1)/2, of Wilcoxon's signed-rank statistic of m points under its null (each
    point's sign + or - with probability 1/2, independently): the exact law, by recursion over the ranks."""
    p = np.ones(1)
    for k in range(1, m + 1):
        p = 0.5 * (np.concatenate([p, np.zeros(k)]) + np.concatenate([np.zeros(k), p]))
    return np.minimum(np.cumsum(p), 1.0)


NOISE_RATIO_VAR_MIN = 1e-12
"""A point's variance of log throughput at or below this on either side (an sd of 1e-6: identical throughputs,
a deterministic run) leaves the point out of the noise test: its variance ratio is 0 or infinite, not a measure
of how much noisier one side is. Whether a point is left out does not depend on which side is which, so the
test's level stays exact."""


def _log_variance_ratios(var_a, df_a, var_b, df_b):
    """(log var_b - log var_a, the points it counts): points with equal df >= 1 on both sides, both variances
    above NOISE_RATIO_VAR_MIN, the ratio finite and not 1."""
    raw_a, raw_b = np.asarray(var_a, dtype=float), np.asarray(var_b, dtype=float)
    va, vb = np.maximum(raw_a, NOISE_RATIO_VAR_MIN), np.maximum(raw_b, NOISE_RATIO_VAR_MIN)
    dfa = np.broadcast_to(np.asarray(df_a, dtype=float), va.shape)
    dfb = np.broadcast_to(np.asarray(df_b, dtype=float), vb.shape)
    with np.errstate(invalid="ignore"):
        x = np.log(vb) - np.log(va)
        spread = np.minimum(raw_a, raw_b) > NOISE_RATIO_VAR_MIN
        ok = (dfa == dfb) & (dfa >= 1) & spread & np.isfinite(x) & (x != 0)
    return np.where(ok, x, 0.0), ok


def noise_ratio_p(var_a, df_a, var_b, df_b):
    """Two-sided p of Wilcoxon's signed-rank test that B's run-to-run noise is A's, over the last axis (many
    comparisons at once: tests/cisim.gate_sweeps), and the number of points it counts. A point counts where it
    has equal df (>= 1) on both sides; there, under the null (A and B share the point's variance, whatever it
    is), log var_b - log var_a is symmetric about 0 for any noise law, since A's and B's runs can be swapped,
    and independent from point to point: the test's level is exact (at most alpha, discretely) for Gaussian,
    heavy-tailed or skewed noise, points as noisy as they like. A log ratio of exactly 0, or a variance at most
    NOISE_RATIO_VAR_MIN on a side, is left out; ties among the others are ranked in order (continuous data makes
    none). Fewer than NOISE_RATIO_MIN_POINTS: p cannot reach 5%."""
    x, ok = _log_variance_ratios(var_a, df_a, var_b, df_b)
    m = ok.sum(axis=-1)
    mag = np.where(ok, np.abs(x), -1.0)  # left-out points rank below every counted one
    rank = mag.argsort(axis=-1).argsort(axis=-1) + 1 - (ok.shape[-1] - m)[..., None]
    t = np.where(ok & (x > 0), rank, 0).sum(axis=-1)
    p = np.ones(m.shape)
    for k in np.unique(m):
        if k == 0:
            continue
        cdf, here = signed_rank_cdf(int(k)), m == k
        lower = cdf[t[here]]
        upper = 1 - np.where(t[here] > 0, cdf[np.maximum(t[here] - 1, 0)], 0.0)  # P(T+ >= t)
        p[here] = np.minimum(1.0, 2 * np.minimum(lower, upper))
    return p, m


def noise_ratio(var_a, df_a, var_b, df_b, alpha: float = ALPHA) -> dict:
    """B's run-to-run sd over A's across one comparison's points (1-D arrays, one entry per point judged with
    repeats on both sides): the Hodges-Lehmann estimate of the centre of symmetry of the points' log variance
    ratios (the median of their Walsh averages) and its exact 1 - alpha interval from the signed-rank law
    (the Walsh averages of ranks c + 1 and M - c, M = m(m + 1)/2, c the largest count with P(T+ <= c) <=
    alpha / 2), both as a ratio of sds (exp of half). Where B's sd is k times A's on every point (any noise
    law, equal df) that centre is 2 log k. `differs`: the two-sided p (noise_ratio_p) <= alpha, which is the
    interval leaving out 1. ratio, low, high in sd units; low/high 0 and inf where the points are too few."""
    x, ok = _log_variance_ratios(var_a, df_a, var_b, df_b)
    x = x[ok]
    m = int(x.size)
    p, _ = noise_ratio_p(var_a, df_a, var_b, df_b)
    out = {"points": m, "p": float(p), "differs": bool(p <= alpha), "ratio": math.nan, "low": 0.0, "high": math.inf}
    if m == 0:
        return out
    i, j = np.triu_indices(m)
    walsh = np.sort((x[i] + x[j]) / 2)
    cdf = signed_rank_cdf(m)
    c = int(np.searchsorted(cdf, alpha / 2, side="right"))  # the number of t with P(T+ <= t) <= alpha / 2
    out["ratio"] = float(np.exp(np.median(walsh) / 2))
    if c >= 1:
        out["low"], out["high"] = float(np.exp(walsh[c - 1] / 2)), float(np.exp(walsh[walsh.size - c] / 2))
    return out

"""Thompson's propensity: P(the chosen arm's Beta draw is the largest), integrated.

``P(k) = ∫ f_k(x) · Π_{j≠k} F_j(x) dx`` over independent ``Beta(α_j, β_j)``
posteriors. Deterministic float arithmetic (``math`` only, a fixed sequence of
operations): a replay recomputes the recorded number bit for bit.

* The integral is taken in logit space (``y = ln x/(1-x)``), where every Beta
  density is smooth and unbounded-support (no singularity at 0 or 1, whatever
  α, β), by composite 4-point Gauss–Legendre on panels cut at the chosen arm's
  centre ± 0.6, 1.8, 3, 6 and 12 spreads, and at ± 1 and 3 spreads of every competitor
  markedly narrower than it (its CDF is a steep step there). The chosen arm's
  density is exact (``lgamma``). Nodes where the integrand has fallen below 1e-12
  are dropped; competitors are applied strongest first, and one whose CDF is 1
  over the remaining nodes is skipped.
* Each competitor's CDF ``F_j = I_x(α_j, β_j)``, by the smaller parameter:
  ≥ 25, a Cornish–Fisher expansion (skewness and kurtosis, from the polygamma
  functions) of the normal approximation of ``logit X``; 5–25, Peizer–Pratt's
  approximation; below 5, exact (a finite sum when that parameter is a whole
  number, the continued fraction otherwise). Worst absolute CDF error over
  α, β ≥ 1: 1.2e-4 (Peizer–Pratt at 5), 1e-4 (Cornish–Fisher at 25).

Accuracy: against an exact integral (continued-fraction CDFs, 2,400 nodes) on 800
random posterior sets of 2 to 16 arms (fresh, small, fractional, mixed, up to 10^6
pulls, near-ties, chosen by a draw or at random), the worst absolute error is
6.2e-5 (``MAX_ERROR``, 2e-4, is what ``tests/test_propensity.py`` holds it to);
against 100,000-draw Monte Carlo on 200 such sets (every arm) the differences are
the Monte Carlo's own noise (worst 4.8e-3, 3.2 standard errors in ~1,200
comparisons). Cost with the 16 arms of the decision bench: about 90 µs, against
3-7 ms for the 200 draws it replaces (whose standard error was up to 0.035).

Posteriors change only when an outcome or a grade is folded, so the decisions in
between ask for the same posterior sets: the last ``PROPENSITY_CACHE`` results are
kept. A third of a replay's decisions found theirs there (``bench.replay_speed
--strategy thompson``: 4,200-5,150 decisions/s against 3,240-4,650 without, runs
alternated on a noisy machine).
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Sequence
from functools import lru_cache

#: The absolute error the tests hold the result to (worst measured: see the docstring).
MAX_ERROR = 2e-4
#: 4-point Gauss–Legendre on [-1, 1].
_NODES = (-0.8611363115940526, -0.3399810435848563, 0.3399810435848563, 0.8611363115940526)
_WEIGHTS = (0.3478548451374538, 0.6521451548625461, 0.6521451548625461, 0.3478548451374538)
#: Panel edges, in spreads of the chosen arm and of a narrower competitor.
_CHOSEN_EDGES = (-6.0, -3.0, -1.8, -0.6, 0.6, 1.8, 3.0, 6.0)
_NARROW_EDGES = (-3.0, -1.0, 1.0, 3.0)
#: The integration range (and whether an arm matters at all): centre ± this many spreads.
_REACH = 12.0
#: A competitor narrower than this share of the chosen arm's spread gets its own panels.
_NARROW = 0.5
#: Integrand values below this are dropped (at most ~100 nodes: < 1e-10 in all).
_TINY = 1e-12
#: Smaller parameter at or above which the Cornish–Fisher / Peizer–Pratt CDFs apply.
_CORNISH_FISHER_MIN = 25.0
_PEIZER_PRATT_MIN = 5.0
_SQRT_HALF = math.sqrt(0.5)
#: Posterior sets whose propensity is kept (pure function of them: a replay is unchanged).
PROPENSITY_CACHE = 4096

#: A node: logit y, and x, 1 - x, ln x, ln(1 - x).
Node = tuple[float, float, float, float, float]


def thompson_propensity(posteriors: Sequence[tuple[float, float]], chosen: int) -> float:
    """P(arm ``chosen``'s draw is the largest) under independent Beta posteriors."""
    if len(posteriors) == 1:
        return 1.0
    return _propensity(tuple([(float(a), float(b)) for a, b in posteriors]), chosen)


def forget_propensities() -> None:
    """Empty the cache (benches that time the integral itself)."""
    _propensity.cache_clear()


@lru_cache(maxsize=PROPENSITY_CACHE)
def _propensity(posteriors: tuple[tuple[float, float], ...], chosen: int) -> float:
    """The integral for one posterior set (cached: see the module's docstring)."""
    shapes = [_shape(a, b) for a, b in posteriors]
    centre, spread = shapes[chosen][0], shapes[chosen][1]
    low, high = centre - _REACH * spread, centre + _REACH * spread
    # Below every arm's own range, that arm's CDF (a factor) is nil.
    floor = max(shape[0] - _REACH * shape[1] for shape in shapes)
    if floor < high:
        low = max(low, floor)
    competitors = sorted(
        (j for j, shape in enumerate(shapes) if j != chosen and shape[0] + _REACH * shape[1] > low),
        key=lambda j: (-shapes[j][0], j),
    )
    edges = {low, high}
    _cut(edges, centre, spread, _CHOSEN_EDGES, low, high)
    for j in competitors:
        if shapes[j][1] < _NARROW * spread:
            _cut(edges, shapes[j][0], shapes[j][1], _NARROW_EDGES, low, high)
    nodes, values = _chosen_density(posteriors[chosen], sorted(edges))
    ys = [node[0] for node in nodes]
    for j in competitors:
        if not values:
            break
        shape = shapes[j]
        if shape[2] == "cornish-fisher":
            if nodes[0][0] - shape[0] > 8.5 * shape[1]:
                continue  # F_j > 1 - 1e-17 on every node left
            # F_j is 0 below ``first`` and 1 from ``last``: v x 0 is 0 and v x 1 is v, so
            # only the middle is multiplied (the same products as multiplying them all).
            first, last = _cornish_fisher_bounds(shape[3], ys)
            middle = _times_cornish_fisher(values[first:last], ys[first:last], shape[3])
            values = [0.0] * first + middle + values[last:]
        else:
            a, b = posteriors[j]
            values = [v * f for v, f in zip(values, _cdf(a, b, shape, nodes), strict=True)]
        if min(values) <= _TINY:
            kept = [i for i, v in enumerate(values) if v > _TINY]
            nodes, values = [nodes[i] for i in kept], [values[i] for i in kept]
            ys = [node[0] for node in nodes]
    return min(1.0, math.fsum(values))


def _cut(
    edges: set[float], centre: float, spread: float, at: Sequence[float], low: float, high: float
) -> None:
    for t in at:
        edge = centre + t * spread
        if low < edge < high:
            edges.add(edge)


def _chosen_density(
    posterior: tuple[float, float], edges: list[float]
) -> tuple[list[Node], list[float]]:
    """Quadrature nodes on the panels, and weight x density of logit X_k at each."""
    a, b = float(posterior[0]), float(posterior[1])
    log_norm = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
    nodes: list[Node] = []
    values: list[float] = []
    exp, log1p = math.exp, math.log1p
    for left, right in itertools.pairwise(edges):
        half, middle = 0.5 * (right - left), 0.5 * (right + left)
        for t, w in zip(_NODES, _WEIGHTS, strict=True):
            y = middle + half * t
            if y >= 0.0:
                e = exp(-y)
                lx = -log1p(e)
                lq = lx - y
                x = 1.0 / (1.0 + e)
                q = e * x
            else:
                e = exp(y)
                lq = -log1p(e)
                lx = lq + y
                q = 1.0 / (1.0 + e)
                x = e * q
            # Density of y = logit X: x^a (1 - x)^b / B(a, b).
            value = half * w * exp(log_norm + a * lx + b * lq)
            if value > _TINY:
                nodes.append((y, x, q, lx, lq))
                values.append(value)
    return nodes, values


Shape = tuple[float, float, str, tuple[float, ...]]


@lru_cache(maxsize=4096)
def _shape(a: float, b: float) -> Shape:
    """Where logit X lies (approximate centre and spread: panels and cut-offs only), which
    CDF applies, and its constants. Cached: between two decisions most arms are unchanged."""
    # ψ(a) - ψ(b) and ψ'(a) + ψ'(b), roughly (ψ'(1) to 1.5 %, an over-estimate).
    centre = math.log(a / b) - 0.5 / a + 0.5 / b - 1 / (12 * a * a) + 1 / (12 * b * b)
    spread = math.sqrt(_trigamma_bound(a) + _trigamma_bound(b))
    smaller = min(a, b)
    if smaller >= _CORNISH_FISHER_MIN:
        return centre, spread, "cornish-fisher", _cornish_fisher(a, b)
    if smaller >= _PEIZER_PRATT_MIN:
        n = a + b - 1.0
        s, t = (a - 0.5) / n, (b - 0.5) / n
        return centre, spread, "peizer-pratt", (s, t, math.log(s), math.log(t), 1.0 / (n + 1 / 6))
    if smaller.is_integer():
        return centre, spread, "sum", ()
    log_norm = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
    return centre, spread, "fraction", (log_norm,)


def _trigamma_bound(x: float) -> float:
    return 1.0 / x + 0.5 / (x * x) + 1.0 / (6.0 * x * x * x)


def _cdf(a: float, b: float, shape: Shape, nodes: list[Node]) -> list[float]:
    kind, constants = shape[2], shape[3]
    if kind == "cornish-fisher":
        return _cdf_cornish_fisher(constants, nodes)
    if kind == "peizer-pratt":
        return _cdf_peizer_pratt(a, b, constants, nodes)
    if kind == "sum":
        return _cdf_sum(a, b, nodes)
    return [_fraction(a, b, constants[0], node) for node in nodes]


def _polygamma(x: float) -> tuple[float, float, float, float]:
    """ψ, ψ', ψ'', ψ''' by their asymptotic series (x >= 25: error < 1e-13)."""
    i = 1.0 / x
    i2 = i * i
    d0 = math.log(x) - 0.5 * i - i2 * (1 / 12 - i2 * (1 / 120 - i2 / 252))
    d1 = i + i2 * (0.5 + i * (1 / 6 - i2 * (1 / 30 - i2 / 42)))
    d2 = -i2 * (1.0 + i * (1.0 + i * (0.5 - i2 * (1 / 6 - i2 / 6))))
    d3 = i * i2 * (2.0 + i * (3.0 + i * (2.0 - i2 * (1.0 - i2 * 4 / 3))))
    return d0, d1, d2, d3


def _cornish_fisher(a: float, b: float) -> tuple[float, ...]:
    """logit X = ln G_a - ln G_b: mean ψ(a) - ψ(b), variance ψ'(a) + ψ'(b), and so on.

    With w the standardised logit, Φ(z) approximates the CDF where
    ``z = w - γ/6 (w²-1) - κ/24 (w³-3w) + γ²/36 (4w³-7w)``; the constants are z's
    coefficients in w, times -1/√2 (``F = erfc(-z/√2) / 2``).
    """
    pa, pb = _polygamma(a), _polygamma(b)
    mean, variance = pa[0] - pb[0], pa[1] + pb[1]
    spread = math.sqrt(variance)
    skew6 = (pa[2] - pb[2]) / (variance * spread) / 6.0
    kurt24 = (pa[3] + pb[3]) / (variance * variance) / 24.0
    skew36 = skew6 * skew6
    return (
        mean,
        spread,
        -(4.0 * skew36 - kurt24) * _SQRT_HALF,
        skew6 * _SQRT_HALF,
        -(1.0 + 3.0 * kurt24 - 7.0 * skew36) * _SQRT_HALF,
        -skew6 * _SQRT_HALF,
    )


def _cdf_cornish_fisher(constants: tuple[float, ...], nodes: list[Node]) -> list[float]:
    ys = [node[0] for node in nodes]
    first, last, middle = _cornish_fisher_span(constants, ys)
    return [0.0] * first + middle + [1.0] * (len(ys) - last)


def _cornish_fisher_span(
    constants: tuple[float, ...], ys: list[float]
) -> tuple[int, int, list[float]]:
    """The CDF at logits ``ys`` (sorted): 0 before ``first``, 1 from ``last``, and the
    values in between."""
    first, last = _cornish_fisher_bounds(constants, ys)
    return first, last, _times_cornish_fisher([1.0] * (last - first), ys[first:last], constants)


def _cornish_fisher_bounds(constants: tuple[float, ...], ys: list[float]) -> tuple[int, int]:
    """Where the CDF at logits ``ys`` (sorted) stops being 0, and starts being 1."""
    mean, spread = constants[0], constants[1]
    # Beyond 9 spreads the CDF is 0 or 1 (and the cubic would turn back).
    first = bisect.bisect_left(ys, mean - 9.0 * spread)
    return first, bisect.bisect_right(ys, mean + 9.0 * spread, first)


def _times_cornish_fisher(
    values: list[float], ys: list[float], constants: tuple[float, ...]
) -> list[float]:
    """``values[i] x F(ys[i])``, in one pass (each product as ``v x (0.5 x erfc(z))``,
    the same floats as computing F first: the hot loop of a decision's propensity)."""
    mean, spread, c3, c2, c1, c0 = constants
    inverse, erfc = 1.0 / spread, math.erfc
    out: list[float] = []
    append = out.append
    for v, y in zip(values, ys, strict=True):
        w = (y - mean) * inverse
        append(v * (0.5 * erfc(((c3 * w + c2) * w + c1) * w + c0)))
    return out


def _cdf_peizer_pratt(
    a: float, b: float, constants: tuple[float, ...], nodes: list[Node]
) -> list[float]:
    """I_x(a, b) = 1 - P(Binomial(a + b - 1, x) <= a - 1), Peizer and Pratt (1968), with
    ``g(u) = (1 - u² + 2u ln u) / (1 - u)²`` (its series near u = 1)."""
    s, t, log_s, log_t, inverse = constants
    shift, slope = a - 1.0 / 3.0, a + b - 2.0 / 3.0
    ia, ib, iab = 0.02 / a, 0.02 / b, 0.02 / (a + b)
    erfc, sqrt, sqrt_half = math.erfc, math.sqrt, _SQRT_HALF
    out = []
    for _, x, q, lx, lq in nodes:
        u = s / x
        d = 1.0 - u
        g1 = (
            d / 3.0 + d * d / 6.0
            if -1e-3 < d < 1e-3
            else (d * (1.0 + u) + 2.0 * u * (log_s - lx)) / (d * d)
        )
        v = t / q
        e = 1.0 - v
        g2 = (
            e / 3.0 + e * e / 6.0
            if -1e-3 < e < 1e-3
            else (e * (1.0 + v) + 2.0 * v * (log_t - lq)) / (e * e)
        )
        centre = shift - slope * x + q * ia - x * ib + (q - 0.5) * iab
        out.append(
            0.5 * erfc(centre * sqrt((1.0 + q * g1 + x * g2) * inverse / (x * q)) * sqrt_half)
        )
    return out


def _cdf_sum(a: float, b: float, nodes: list[Node]) -> list[float]:
    """I_x(a, b) exactly when the smaller parameter is a whole number (below 5), at every
    node: ``I_x(a, n) = x^a Σ_{i<n} Γ(a+i) / (Γ(a) i!) (1-x)^i`` (and its mirror)."""
    exp = math.exp
    out = []
    if b <= a:
        n = int(b)
        for _, _, q, lx, _ in nodes:
            term = total = 1.0
            for i in range(1, n):
                term *= q * (a + i - 1) / i
                total += term
            out.append(exp(a * lx) * total)
        return out
    n = int(a)
    for _, x, _, _, lq in nodes:
        term = total = 1.0
        for i in range(1, n):
            term *= x * (b + i - 1) / i
            total += term
        out.append(1.0 - exp(b * lq) * total)
    return out


def _fraction(a: float, b: float, log_norm: float, node: Node) -> float:
    """I_x(a, b) by its continued fraction (modified Lentz), for small fractional parameters."""
    _, x, q, lx, lq = node
    front = math.exp(log_norm + a * lx + b * lq)
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _continued_fraction(a, b, x) / a
    return 1.0 - front * _continued_fraction(b, a, q) / b


def _continued_fraction(a: float, b: float, x: float) -> float:
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        for numerator in (
            m * (b - m) * x / ((a - 1.0 + m2) * (a + m2)),
            -(a + m) * (a + b + m) * x / ((a + m2) * (a + 1.0 + m2)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-13:
            break
    return h

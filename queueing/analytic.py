r"""Level 1 of the fidelity ladder: TTFT/TPOT percentiles of a deployment from queueing formulas.

A deployment is reduced to a few numbers per instance type (:class:`InstanceCosts`, taken
from the cost oracle once) and every estimate is then a vectorised formula over arrival
rates, microseconds per rate. Two architectures:

**Disaggregated (PD, "ypzd")** — a tandem queue (BestServe §3.1, Fig. 1b):

1. the prefill pool is a G/G/c queue with :math:`c = y` servers, arrivals at rate
   :math:`\lambda` with squared coefficient of variation :math:`c_a^2` (1 for Poisson) and
   per-request service :math:`S_p` (the prefill of one prompt alone). The waiting time is the
   exact M/D/1 law when :math:`c = 1`, :math:`c_a^2 = 1` and the prompts have one length;
   otherwise an atom at zero plus an exponential tail whose mean is Kingman's (c = 1) or
   Allen–Cunneen's (c > 1) approximation (:func:`~serveplan.queueing.formulas.ggc_wait_quantile`);
2. the KV cache moves to a decode instance: :math:`T_{kv} = E[L_{in}]\,\kappa / (W\,
   \min(t_p, t_d)) + \ell`, with :math:`\kappa` KV bytes per token (all layers),
   :math:`W` the per-GPU link bandwidth (NVLink when both instances fit in one node,
   the scale-out network otherwise), each tensor-parallel rank sending its shard in parallel;
3. each of the :math:`z` decode instances receives :math:`\lambda / z` and runs at the mean
   batch :math:`B` of the fixed point :math:`B = (\lambda/z)\,(E[L_{out}] - 1)\,t_{step}(B)`
   (:func:`~serveplan.queueing.fixed_point.decode_fixed_point`), so TPOT :math:`= t_{step}(B)`.

TTFT :math:`= W_q + S_p` (the prefill emits the first token, as in vLLM's disaggregated
serving); its quantile is :math:`w_q + E[S_p]`. The transfer delays the second token, so it
is spread over the decode: TPOT :math:`= t_{step}(B) + T_{kv} / (E[L_{out}] - 1)`.

**Colocated ("xm")** — each of the :math:`x` instances receives :math:`\lambda / x` and
interleaves prefills with decode steps. Interference is modelled explicitly:

* prefill work occupies the instance a fraction :math:`\rho_p = (\lambda/x)\,E[S_p]` of the
  time, so decode steps are *stretched*: a request's decode proceeds only in the remaining
  :math:`1 - \rho_p`. The decode fixed point becomes
  :math:`B = (\lambda/x)(E[L_{out}] - 1)\,t_{step}(B) / (1 - \rho_p)` and
  TPOT :math:`= t_{step}(B) / (1 - \rho_p)` (time-average over the request's decode);
* a waiting prompt queues behind other prompts only (prefill priority, as vLLM's scheduler
  admits waiting prompts into the next step), an M/G/1 with load :math:`\rho_p`, and then
  shares its step with the running decode batch, which adds one decode step
  :math:`t_{step}(B)` to its TTFT: TTFT quantile :math:`= w_q + E[S_p] + t_{step}(B)`.

Infeasibility is explicit: when :math:`\rho_p \ge 1` or the decode fixed point has no
solution below the batch limit (utilisation :math:`\ge 1`), percentiles are ``inf`` and
``feasible`` is False.

Approximations (stated once, relied on by the request and iteration levels for brackets
only): the prefill of a prompt costs the same whether batched or alone (true for
compute-bound prompts of ~1k tokens and more, pessimistic for short ones); service-time
moments use a two-point rule :math:`E[f(L)] \approx (f(m-s) + f(m+s))/2`, exact for
quadratic :math:`f`; the decode step is priced at the mean context
:math:`E[L_{in}] + E[L_{out}]/2`; TPOT is reported without dispersion across requests
(its percentile equals its mean).

References
----------
.. [BS] BestServe, ``papers/bestserve.txt`` §3.1 (tandem queue view), §3.5 (T_min, bracket).
.. [DS] DistServe (Zhong et al., OSDI'24): prefill as M/D/1, goodput under SLO attainment.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike

from . import formulas as F
from .fixed_point import decode_fixed_point

__all__ = [
    "AnalyticEstimate",
    "InstanceCosts",
    "colocated_estimate",
    "instance_costs",
    "kv_transfer_time",
    "max_rate",
    "pd_estimate",
]


def _moments(dist) -> tuple[float, float]:
    """``(mean, std)`` of a length (an int, or an object with ``mean`` and ``var``)."""
    if isinstance(dist, (int, float, np.integer, np.floating)):
        return float(dist), 0.0
    return float(dist.mean), float(np.sqrt(max(float(dist.var), 0.0)))


def two_point(f, mean: float, std: float, low: float = 1.0) -> tuple[float, float]:
    r"""Mean and variance of :math:`f(L)` from the two-point rule on :math:`L`'s moments.

    Notes
    -----
    Nodes :math:`m \pm s` with equal weights match the first two moments of :math:`L`, so
    :math:`E[f(L)] = (f(m-s) + f(m+s))/2` is exact for quadratic :math:`f` and
    :math:`\mathrm{Var}[f(L)] = ((f(m+s) - f(m-s))/2)^2` is exact for linear :math:`f`.
    The lower node is clipped at ``low`` (lengths are >= 1 token).
    """
    nodes = np.array([max(mean - std, low), mean + std])
    v = np.asarray(f(nodes), dtype=np.float64)
    return float(v.mean()), float(((v[1] - v[0]) / 2.0) ** 2)


@dataclass(frozen=True, eq=False)
class InstanceCosts:
    r"""What the analytic level needs to know about one instance type under one workload.

    Attributes
    ----------
    prefill_s : float
        :math:`E[S_p]`: seconds to prefill one prompt alone (batch 1).
    prefill_scv : float
        Squared coefficient of variation of :math:`S_p` over prompt lengths.
    prefill_batched_s : float
        Per-prompt seconds of the largest prefill batch the token budget allows (the
        throughput-optimal prefill, used for capacity upper bounds only).
    decode_tokens : float
        :math:`E[L_{out}] - 1`: decode steps per request (the first token comes from the prefill).
    t_step : callable
        ``t_step(B)``: seconds of one decode step at (real) batch ``B`` and the mean context.
    max_batch : float
        Largest mean decode batch: ``min(max_num_seqs, kv_tokens / (E[L_in] + E[L_out]/2))``.
    mean_input : float
        :math:`E[L_{in}]` (tokens).
    gpus : int
        GPUs per instance.
    """

    prefill_s: float
    prefill_scv: float
    prefill_batched_s: float
    decode_tokens: float
    t_step: object
    max_batch: float
    mean_input: float
    gpus: int = 1
    fixed_lengths: bool = False
    _peak: list = field(default_factory=list, repr=False)

    @property
    def decode_peak(self) -> tuple[float, float]:
        r"""``(B*, h(B*))``: the batch in :math:`[1, B_{max}]` maximising decode tokens/s
        :math:`h(B) = B / t_{step}(B)`, and that maximum."""
        if not self._peak:
            b = np.unique(np.concatenate([np.arange(1.0, np.floor(self.max_batch) + 1.0),
                                          [self.max_batch]]))
            h = b / np.asarray(self.t_step(b), dtype=np.float64)
            i = int(np.argmax(h))
            self._peak.extend([float(b[i]), float(h[i])])
        return self._peak[0], self._peak[1]

    def decode_rate_at(self, tpot_goal: float) -> float:
        r"""Decode tokens/s at the largest batch :math:`B \le B_{max}` with
        :math:`t_{step}(B) \le` ``tpot_goal`` (0 if even batch 1 is slower)."""
        b = np.arange(1.0, np.floor(self.max_batch) + 1.0)
        t = np.asarray(self.t_step(b), dtype=np.float64)
        ok = t <= tpot_goal
        if not ok.any():
            return 0.0
        return float(np.max(b[ok] / t[ok]))


def instance_costs(oracle, isl, osl, *, max_num_seqs: int, kv_tokens: float,
                   max_num_batched_tokens: int) -> InstanceCosts:
    r"""Evaluate the cost oracle once for the analytic level.

    Parameters
    ----------
    oracle : serveplan.estimator.oracle.CostOracle
        Cost of the instance type (model, GPU, parallelism).
    isl, osl : int or length distribution
        Prompt and output lengths (objects with ``mean`` and ``var``, or fixed ints).
    max_num_seqs : int
        vLLM's running-request limit.
    kv_tokens : float
        KV-cache capacity of the instance (tokens), from the memory planner.
    max_num_batched_tokens : int
        Token budget of a step (bounds the prefill batch).
    """
    m_in, s_in = _moments(isl)
    m_out, _ = _moments(osl)
    mean_s, var_s = two_point(lambda x: oracle.prefill_time(1, np.round(x)), m_in, s_in)
    k = max(1, int(max_num_batched_tokens // max(m_in, 1.0)))
    k = min(k, max_num_seqs)
    batched = float(oracle.prefill_time(k, round(m_in))) / k
    ctx = m_in + m_out / 2.0
    kv_limit = kv_tokens / max(ctx, 1.0)
    max_batch = float(max(1.0, min(max_num_seqs, kv_limit)))

    b_tab = np.arange(1.0, np.ceil(max_batch) + 1.0)
    t_tab = np.asarray(oracle.decode_time(b_tab, ctx), dtype=np.float64)

    def t_step(b):  # tabulated once: microseconds per call afterwards
        return np.interp(np.asarray(b, dtype=np.float64), b_tab, t_tab)

    return InstanceCosts(
        prefill_s=mean_s,
        prefill_scv=var_s / mean_s**2 if mean_s > 0 else 0.0,
        prefill_batched_s=min(batched, mean_s),
        decode_tokens=max(m_out - 1.0, 0.0),
        t_step=t_step,
        max_batch=max_batch,
        mean_input=m_in,
        gpus=int(oracle.parallel.gpus),
        fixed_lengths=s_in == 0.0,
    )


def kv_transfer_time(mean_input: float, kv_bytes_per_token: float, link_bw: float,
                     tp_prefill: int, tp_decode: int, latency_s: float = 0.0) -> float:
    r"""Seconds to move one prompt's KV cache from a prefill to a decode instance.

    :math:`T_{kv} = E[L_{in}]\,\kappa / (W \min(t_p, t_d)) + \ell`: the ``min(tp)`` rank
    pairs send their shards in parallel at ``link_bw`` bytes/s each.
    """
    if link_bw <= 0:
        raise ValueError(f"link_bw must be > 0, got {link_bw!r}")
    lanes = max(1, min(int(tp_prefill), int(tp_decode)))
    return float(mean_input * kv_bytes_per_token / (link_bw * lanes) + latency_s)


@dataclass(frozen=True)
class _WaitLaw:
    """Law of the prefill waiting time, enough for its quantiles and CDF."""

    kind: np.ndarray  # 1: exact M/D/1, 0: atom + exponential tail
    lam: np.ndarray  # per-queue arrival rate (M/D/1)
    service: np.ndarray
    prob_wait: np.ndarray
    mean_wait: np.ndarray

    def quantile(self, q) -> np.ndarray:
        """Quantiles at level(s) ``q``: shape ``q.shape + rates.shape`` (one M/D/1 solve)."""
        q = np.asarray(q, dtype=np.float64)
        qq = q.reshape(q.shape + (1,) * self.lam.ndim)
        if np.any(self.kind == 1):
            md1 = F.md1_wait_quantile(qq, np.where(self.kind == 1, self.lam, 0.0),
                                      self.service)
        else:
            md1 = np.zeros(np.broadcast_shapes(qq.shape, self.lam.shape))
        exp = F.exponential_tail_wait_quantile(qq, self.mean_wait, self.prob_wait)
        return np.where(self.kind == 1, md1, exp)

    def cdf(self, t: np.ndarray) -> np.ndarray:
        md1 = F.md1_wait_cdf(t, np.where(self.kind == 1, self.lam, 0.0), self.service)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            tail = self.prob_wait * np.exp(-self.prob_wait * np.maximum(t, 0.0) / self.mean_wait)
        tail = np.where(self.mean_wait > 0, tail, 0.0)
        exp = np.where(t < 0, 0.0, 1.0 - tail)
        exp = np.where(np.isinf(self.mean_wait), 0.0, exp)
        return np.where(self.kind == 1, md1, exp)


def _prefill_wait(lam: np.ndarray, servers: int, c: InstanceCosts, ca2: float) -> _WaitLaw:
    """Waiting-time law of a prefill queue with ``servers`` servers (module docstring)."""
    s = c.prefill_s
    exact_md1 = servers == 1 and ca2 == 1.0 and c.fixed_lengths
    rho = lam * s / servers
    stable = rho < 1.0
    if servers == 1:
        mean = np.asarray(F.kingman_wait(lam, s, ca2, c.prefill_scv), dtype=np.float64)
        pw = np.minimum(rho, 1.0)
    else:
        mean = np.asarray(F.allen_cunneen_wait(lam, s, servers, ca2, c.prefill_scv),
                          dtype=np.float64)
        pw = np.asarray(F.erlang_c(servers, lam * s), dtype=np.float64)
    mean = np.where(stable, mean, np.inf)
    kind = np.full(lam.shape, 1 if exact_md1 else 0)
    return _WaitLaw(kind=kind, lam=lam, service=np.full(lam.shape, s), prob_wait=pw,
                    mean_wait=mean)


@dataclass(frozen=True)
class AnalyticEstimate:
    """Analytic TTFT/TPOT estimates over arrival rates (arrays shaped like ``rates``).

    Attributes
    ----------
    rates : ndarray
        Total arrival rates (req/s).
    ttft_mean, tpot_mean : ndarray
        Mean TTFT and TPOT (s); ``inf`` where infeasible.
    prefill_utilisation, decode_utilisation : ndarray
        Load of the prefill server(s) and fraction of peak decode throughput demanded;
        for colocated instances they add up (both use the same GPUs).
    decode_batch : ndarray
        Mean running decode batch per (decode) instance.
    feasible : ndarray of bool
        False where a stage's utilisation is >= 1 (no steady state).
    """

    rates: np.ndarray
    ttft_mean: np.ndarray
    tpot_mean: np.ndarray
    prefill_utilisation: np.ndarray
    decode_utilisation: np.ndarray
    decode_batch: np.ndarray
    feasible: np.ndarray
    _wait: _WaitLaw = field(repr=False)
    _ttft_offset: np.ndarray = field(repr=False)

    kind: str = "pd"

    @property
    def utilisation(self) -> np.ndarray:
        """The binding utilisation, >= 1 means infeasible: the larger stage load for PD, the
        sum of prefill and decode load for colocated instances (they share the GPUs)."""
        if self.kind == "pd":
            return np.maximum(self.prefill_utilisation, self.decode_utilisation)
        return self.prefill_utilisation + self.decode_utilisation

    def ttft_quantile(self, q) -> np.ndarray:
        """``q``-quantile(s) of TTFT (s): waiting-time quantile + mean service + offsets.
        An array of levels gives shape ``q.shape + rates.shape``."""
        w = self._wait.quantile(q)
        return np.where(self.feasible, w + self._ttft_offset, np.inf)

    def tpot_quantile(self, q) -> np.ndarray:
        """``q``-quantile(s) of TPOT (s); equal to the mean at this level (no dispersion)."""
        q = np.asarray(q, dtype=np.float64)
        return np.broadcast_to(self.tpot_mean, q.shape + self.tpot_mean.shape).copy()

    def ttft_cdf(self, t: float) -> np.ndarray:
        """:math:`P(TTFT \\le t)`."""
        return np.where(self.feasible, self._wait.cdf(t - self._ttft_offset), 0.0)

    def tpot_cdf(self, t: float) -> np.ndarray:
        """:math:`P(TPOT \\le t)` (a step at the mean)."""
        return np.where(self.feasible & (self.tpot_mean <= t), 1.0, 0.0)


def _rates(rates: ArrayLike) -> np.ndarray:
    lam = np.atleast_1d(np.asarray(rates, dtype=np.float64))
    if np.any(~np.isfinite(lam) | (lam < 0)):
        raise ValueError(f"rates must be finite and >= 0, got {rates!r}")
    return lam


def pd_estimate(rates: ArrayLike, n_prefill: int, n_decode: int, prefill: InstanceCosts,
                decode: InstanceCosts, kv_transfer_s: float = 0.0,
                ca2: float = 1.0) -> AnalyticEstimate:
    r"""Tandem-queue estimate of a ``{n_prefill}p{n_decode}d`` deployment (module docstring).

    Parameters
    ----------
    rates : array_like
        Total arrival rates (req/s).
    n_prefill, n_decode : int
        Prefill and decode instances.
    prefill, decode : InstanceCosts
        Costs of the prefill and the decode instance types (:func:`instance_costs`).
    kv_transfer_s : float
        :math:`T_{kv}` (:func:`kv_transfer_time`).
    ca2 : float
        Squared CV of inter-arrival times (Poisson 1, constant 0, gamma ``cv**2``).

    Examples
    --------
    A constant-step toy: one prefill server (M/D/1, 0.1 s) at 5 req/s has a mean wait of
    :math:`\rho D / (2(1-\rho)) = 0.05` s.

    >>> c = InstanceCosts(0.1, 0.0, 0.1, 9.0, lambda b: 0.01 + 0 * b, 64, 100, 1, True)
    >>> e = pd_estimate([5.0], 1, 1, c, c)
    >>> round(float(e.ttft_mean[0]), 6)
    0.15
    """
    lam = _rates(rates)
    if n_prefill < 1 or n_decode < 1:
        raise ValueError(f"need >= 1 prefill and decode instance, got {n_prefill}p{n_decode}d")
    wait = _prefill_wait(lam, n_prefill, prefill, ca2)
    rho_p = lam * prefill.prefill_s / n_prefill
    steady = decode_fixed_point(lam / n_decode, max(decode.decode_tokens, 1e-12),
                                decode.t_step, decode.max_batch)
    feasible = (rho_p < 1.0) & steady.feasible
    no_decode = decode.decode_tokens == 0
    tpot = np.where(no_decode, 0.0,
                    steady.tpot + kv_transfer_s / max(decode.decode_tokens, 1e-12))
    offset = np.full(lam.shape, prefill.prefill_s)
    ttft = np.where(feasible, wait.mean_wait + offset, np.inf)
    return AnalyticEstimate(
        rates=lam, ttft_mean=ttft, tpot_mean=np.where(feasible, tpot, np.inf),
        prefill_utilisation=rho_p, decode_utilisation=np.asarray(steady.utilisation),
        decode_batch=np.asarray(steady.batch), feasible=feasible, _wait=wait,
        _ttft_offset=offset, kind="pd")


def colocated_estimate(rates: ArrayLike, n_instances: int, costs: InstanceCosts,
                       ca2: float = 1.0) -> AnalyticEstimate:
    r"""Estimate of ``{n_instances}m``: instances interleaving prefill and decode.

    Each instance receives every ``n_instances``-th request (round-robin), a renewal process
    of rate ``rates / n_instances`` whose gaps are sums of ``n_instances`` gaps of the input:
    :math:`c_a^2 / x` (Erlang-x for Poisson input). The exact M/D/1 law is used for one
    instance with Poisson input and fixed prompt lengths.

    Notes
    -----
    With :math:`\lambda_i = \lambda / x` and :math:`\rho_p = \lambda_i E[S_p]`, the decode
    fixed point :math:`B = \lambda_i (E[L_{out}]-1)\, t_{step}(B)/(1-\rho_p)` is solved with
    the stretched step :math:`t_{step}/(1-\rho_p)`; TPOT is that stretched step and TTFT is
    :math:`W_q + E[S_p] + t_{step}(B)` with :math:`W_q` the M/G/1 (or exact M/D/1) prefill
    wait at load :math:`\rho_p`. Utilisation is :math:`\rho_p + \lambda_i (E[L_{out}]-1) /
    h(B^*)`, the prefill busy fraction plus the decode work at peak decode efficiency.
    """
    lam = _rates(rates)
    if n_instances < 1:
        raise ValueError(f"n_instances must be >= 1, got {n_instances!r}")
    lam_i = lam / n_instances
    rho_p = lam_i * costs.prefill_s
    wait = _prefill_wait(lam_i, 1, costs, ca2 / n_instances)
    _, h_peak = costs.decode_peak
    if costs.decode_tokens == 0:
        tpot = np.zeros(lam.shape)
        batch = np.zeros(lam.shape)
        dec_ok = np.ones(lam.shape, dtype=bool)
    else:
        # B (1 - rho_p) = lam_i L t(B) is the plain fixed point at demand lam_i / (1 - rho_p)
        free = np.where(rho_p < 1.0, 1.0 - rho_p, 1.0)
        st = decode_fixed_point(lam_i / free, costs.decode_tokens, costs.t_step, costs.max_batch)
        dec_ok = np.asarray(st.feasible) & (rho_p < 1.0)
        tpot = np.where(dec_ok, np.asarray(st.tpot) / free, np.inf)
        batch = np.where(dec_ok, np.asarray(st.batch), np.inf)
    u_d = lam_i * costs.decode_tokens / h_peak
    feasible = (rho_p < 1.0) & dec_ok & (rho_p + u_d < 1.0)
    step = np.where(np.isfinite(batch), np.asarray(costs.t_step(np.where(np.isfinite(batch),
                                                                         np.maximum(batch, 1.0),
                                                                         1.0))), np.inf)
    offset = np.where(feasible, costs.prefill_s + np.where(costs.decode_tokens > 0, step, 0.0),
                      np.inf)
    ttft = np.where(feasible, wait.mean_wait + offset, np.inf)
    return AnalyticEstimate(
        rates=lam, ttft_mean=ttft, tpot_mean=np.where(feasible, tpot, np.inf),
        prefill_utilisation=rho_p, decode_utilisation=u_d, decode_batch=batch,
        feasible=feasible, _wait=wait, _ttft_offset=offset, kind="colocated")


def max_rate(feasible_at, upper: float, *, rtol: float = 1e-3, grid: int = 64,
             refine: int = 16) -> float:
    r"""Largest rate in :math:`(0, \text{upper}]` where a monotone vectorised predicate holds.

    ``feasible_at(rates) -> bool array`` is evaluated on a geometric grid of ``grid`` rates
    from ``upper * 1e-4`` to ``upper`` (one call); the cell holding the first failure is then
    re-gridded with ``refine`` points per call until its relative width is below ``rtol``
    (three calls take 1e4 down to 1e-3). Returns 0 if it fails everywhere.
    """
    if not (np.isfinite(upper) and upper > 0):
        raise ValueError(f"upper must be finite and > 0, got {upper!r}")
    r = np.geomspace(upper * 1e-4, upper, grid)
    ok = np.asarray(feasible_at(r), dtype=bool)
    if not ok[0]:
        return 0.0
    if ok.all():
        return float(upper)
    i = int(np.argmin(ok))  # first failure; ok[i - 1] holds
    lo, hi = r[i - 1], r[i]
    while hi - lo > rtol * lo:
        pts = np.geomspace(lo, hi, refine + 2)[1:-1]
        ok = np.asarray(feasible_at(pts), dtype=bool)
        j = int(np.argmin(ok)) if not ok.all() else pts.size
        lo = pts[j - 1] if j > 0 else lo
        hi = pts[j] if j < pts.size else hi
    return float(lo)

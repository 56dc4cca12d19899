r"""Level 2 of the fidelity ladder: BestServe's per-request simulators, compiled.

One loop iteration per request event, not per engine step (BestServe §3.4):

* **prefill batching** (Algorithm 2): an idle prefill server takes every arrived prompt, up
  to ``max_num_seqs`` prompts and ``max_num_batched_tokens`` tokens (at least one), and
  prefills them together; the batch costs the oracle's prefill of ``k`` prompts of the
  batch's mean length.
* **decode boxes** (Algorithm 3): an instance has ``max_num_seqs`` boxes (and a KV budget);
  a request entering a box when ``b`` boxes are busy decodes all its remaining
  :math:`L_{out} - 1` tokens at the *pseudo batch size*
  :math:`b^\dagger = \max(\lfloor (b+1)/\tau \rfloor, 1)` (eq. 9; BestServe uses
  :math:`\tau = 2.5`), i.e. it occupies the box for :math:`(L_{out}-1)\,t_{step}(b^\dagger, \bar c)`
  with :math:`\bar c = L_{in} + L_{out}/2` the mean context of its decode.
* **colocated prefill priority with suspend/resume** (Algorithms 4-7): a prefill batch
  starts as soon as the instance is not already prefilling, and every running decode is
  suspended for its duration (its box end moves later by the prefill time).

Differences from the paper's pseudocode, all deliberate:

* Colocated requests are routed round-robin at arrival (as the iteration-level engine and
  vLLM's data-parallel front end do) and a request decodes on the instance that prefilled it
  (its KV cache is there); BestServe draws a random idle instance for each phase.
* Admission follows vLLM: a prompt is admitted only while running requests are below
  ``max_num_seqs`` and its KV (prompt + output tokens, reserved up front) fits, so decode
  boxes never overflow; in PD the decode pool admits in FIFO order to the instance with the
  most free boxes.
* A PD request is ready for decode when its prefill ends plus its KV transfer time. Its first
  token is emitted by the prefill (TTFT ends there, as in vLLM's disaggregated serving and
  the iteration-level engine); TPOT covers the transfer, the decode queueing and the decode.
* No randomness: given the arrivals, the result is deterministic (BestServe shuffles
  instances).

Costs are tabulated once per deployment (:func:`cost_tables`) from the cost oracle or an
affine step cost, so the compiled loops never call back into Python.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from serveplan.kernels import jit

from ._jitcache import sim_jit

__all__ = ["CostTables", "colocated_times", "cost_tables", "pd_times", "pseudo_batch"]

_INF = np.inf


def pseudo_batch(b, tau: float):
    r"""BestServe's pseudo batch size :math:`b^\dagger = \max(\lfloor (b+1)/\tau \rfloor, 1)`."""
    return np.maximum(np.floor((np.asarray(b) + 1) / tau), 1).astype(np.int64)


# ------------------------------------------------------------------------------ cost tables
@dataclass(frozen=True)
class CostTables:
    """Step costs on grids, for the compiled loops.

    ``prefill[k - 1, j]``: seconds to prefill ``k`` prompts of ``prompt_grid[j]`` tokens;
    ``decode[b - 1, j]``: one decode step of batch ``b`` at context ``context_grid[j]``.
    Lookups interpolate linearly between grid points and clamp outside.
    """

    prefill: np.ndarray
    prompt_grid: np.ndarray
    decode: np.ndarray
    context_grid: np.ndarray


def _grid(values: np.ndarray, points: int) -> np.ndarray:
    u = np.unique(values.astype(np.float64))
    if u.size <= points:
        return u
    return np.unique(np.round(np.geomspace(u[0], u[-1], points)))


def cost_tables(cost, prompt: np.ndarray, output: np.ndarray, *, max_prefill_batch: int,
                max_decode_batch: int, points: int = 24) -> CostTables:
    """Tabulate ``cost`` over the prompts and decode contexts of the given requests.

    Parameters
    ----------
    cost : CostOracle or AffineStepCost
        The oracle (its vectorised ``prefill_time`` / ``decode_time``) or an affine step cost
        (``base_s + per_token_s * tokens + per_request_s * requests``).
    prompt, output : int arrays
        Lengths of every request that will be simulated (all seeds), to size the grids.
    max_prefill_batch, max_decode_batch : int
        Table rows (largest prefill batch, largest pseudo batch).
    points : int
        Grid points per length axis; distinct lengths up to ``points`` are tabulated exactly.
    """
    pg = _grid(np.asarray(prompt), points)
    cg = _grid(np.asarray(prompt) + np.asarray(output) / 2.0, points)
    k = np.arange(1, max(1, max_prefill_batch) + 1, dtype=np.float64)[:, None]
    b = np.arange(1, max(1, max_decode_batch) + 1, dtype=np.float64)[:, None]
    if hasattr(cost, "prefill_time"):
        pre = np.asarray(cost.prefill_time(k, pg[None, :]), dtype=np.float64)
        dec = np.asarray(cost.decode_time(b, cg[None, :]), dtype=np.float64)
    else:  # AffineStepCost: tokens and requests of the step
        pre = cost.base_s + cost.per_token_s * k * pg[None, :] + cost.per_request_s * k
        dec = cost.base_s + (cost.per_token_s + cost.per_request_s) * b + 0.0 * cg[None, :]
    pre = np.broadcast_to(pre, (k.shape[0], pg.size)).copy()
    dec = np.broadcast_to(dec, (b.shape[0], cg.size)).copy()
    return CostTables(pre, pg, dec, cg)


@jit(cache=True)
def _interp(tab, row, grid, x):
    n = grid.shape[0]
    if n == 1 or x <= grid[0]:
        return tab[row, 0]
    if x >= grid[n - 1]:
        return tab[row, n - 1]
    j = 0
    while grid[j + 1] < x:
        j += 1
    w = (x - grid[j]) / (grid[j + 1] - grid[j])
    return tab[row, j] * (1.0 - w) + tab[row, j + 1] * w


@jit(cache=True)
def _decode_box_time(tab, grid, b_busy, tau, prompt_r, output_r):
    """Seconds a request occupies its box: (L_out - 1) steps at the pseudo batch size."""
    bd = int(np.floor((b_busy + 1) / tau))
    bd = min(max(bd, 1), tab.shape[0])
    ctx = prompt_r + output_r / 2.0
    return (output_r - 1) * _interp(tab, bd - 1, grid, ctx)


@jit(cache=True)
def _prefill_batch_time(tab, grid, k, tokens):
    k = min(k, tab.shape[0])
    return _interp(tab, k - 1, grid, tokens / k)


# ------------------------------------------------------------------------------ colocated
# The per-event steps of one instance are sim_jit (no reference counting): they take the
# instance's arrays at every event, and counting references on them cost ~25%.
@sim_jit
def _next_event(arrival, nxt, box_end, nbox, pf_end):
    """Time of the next event: an arrival, a decode box end or the prefill batch end."""
    t = _INF
    if nxt < arrival.shape[0]:
        t = arrival[nxt]
    for j in range(nbox):
        if box_end[j] < t:
            t = box_end[j]
    if pf_end < t:
        t = pf_end
    return t


@sim_jit
def _finish_decodes(box_end, box_req, nbox, t, prompt, output, kv_used, done, t_finish):
    """Free the boxes whose decode ends by ``t``; returns ``(nbox, kv_used, done)``."""
    j = 0
    while j < nbox:
        if box_end[j] <= t:
            r = box_req[j]
            t_finish[r] = box_end[j]
            kv_used -= prompt[r] + output[r]
            done += 1
            nbox -= 1
            box_end[j] = box_end[nbox]
            box_req[j] = box_req[nbox]
        else:
            j += 1
    return nbox, kv_used, done


@sim_jit
def _enter_decode(pf_lo, pf_hi, pf_end, box_end, box_req, nbox, prompt, output, dtab, cgrid,
                  tau, kv_used, done, t_first, t_finish):
    """The prefill batch ``pf_lo .. pf_hi - 1`` ends at ``pf_end``: its requests enter decode
    boxes (or finish, with one output token); returns ``(nbox, kv_used, done)``."""
    for r in range(pf_lo, pf_hi):
        t_first[r] = pf_end
        if output[r] <= 1:
            t_finish[r] = pf_end
            kv_used -= prompt[r] + output[r]
            done += 1
            continue
        box_end[nbox] = pf_end + _decode_box_time(dtab, cgrid, nbox, tau, prompt[r], output[r])
        box_req[nbox] = r
        nbox += 1
    return nbox, kv_used, done


@sim_jit
def _admit_prefill(head, nxt, nbox, max_seqs, prompt, output, kv_used, kv_cap, budget):
    """Size of the next prefill batch from the waiting requests ``head .. nxt - 1`` (seats,
    KV room and token budget); returns ``(k, tokens, kv_used)``."""
    k = 0
    tokens = 0.0
    while head + k < nxt and nbox + k < max_seqs:
        r = head + k
        need = prompt[r] + output[r]
        if nbox + k > 0 and kv_used + need > kv_cap:
            break
        if k > 0 and tokens + prompt[r] > budget:
            break
        tokens += prompt[r]
        kv_used += need
        k += 1
    return k, tokens, kv_used


@jit(cache=True)
def _colocated_instance(arrival, prompt, output, ptab, pgrid, dtab, cgrid, max_seqs, budget,
                        kv_cap, tau, t_first, t_finish):
    """One colocated instance, prefill priority with suspension (requests in arrival order)."""
    m = arrival.shape[0]
    box_end = np.empty(max_seqs)
    box_req = np.empty(max_seqs, dtype=np.int64)
    nbox = 0
    nxt = 0  # next request not yet arrived
    head = 0  # first waiting request
    pf_end = _INF
    pf_lo = 0
    pf_hi = 0
    kv_used = 0.0
    done = 0
    while done < m:
        t = _next_event(arrival, nxt, box_end, nbox, pf_end)
        nbox, kv_used, done = _finish_decodes(box_end, box_req, nbox, t, prompt, output,
                                              kv_used, done, t_finish)
        if pf_end <= t:
            nbox, kv_used, done = _enter_decode(pf_lo, pf_hi, pf_end, box_end, box_req, nbox,
                                                prompt, output, dtab, cgrid, tau, kv_used,
                                                done, t_first, t_finish)
            pf_end = _INF
        while nxt < m and arrival[nxt] <= t:
            nxt += 1
        # start the next prefill batch (priority over decodes)
        if pf_end == _INF and head < nxt:
            k, tokens, kv_used = _admit_prefill(head, nxt, nbox, max_seqs, prompt, output,
                                                kv_used, kv_cap, budget)
            if k > 0:
                dur = _prefill_batch_time(ptab, pgrid, k, tokens)
                pf_lo = head
                pf_hi = head + k
                head += k
                pf_end = t + dur
                for j in range(nbox):  # suspend the running decodes
                    box_end[j] += dur


@jit(cache=True)
def _colocated(arrival, prompt, output, n_inst, ptab, pgrid, dtab, cgrid, max_seqs, budget,
               kv_cap, tau, t_first, t_finish):
    n = arrival.shape[0]
    for i in range(n_inst):
        idx = np.arange(i, n, n_inst)
        tf = np.empty(idx.shape[0])
        te = np.empty(idx.shape[0])
        _colocated_instance(arrival[idx], prompt[idx], output[idx], ptab, pgrid, dtab, cgrid,
                            max_seqs, budget, kv_cap, tau, tf, te)
        for k in range(idx.shape[0]):
            t_first[idx[k]] = tf[k]
            t_finish[idx[k]] = te[k]


# ------------------------------------------------------------------------------ PD
@jit(cache=True)
def _prefill_pool(arrival, prompt, n_inst, ptab, pgrid, max_seqs, budget, t_done):
    """Algorithm 2: a shared FIFO queue served by ``n_inst`` batching prefill servers."""
    m = arrival.shape[0]
    free_at = np.zeros(n_inst)
    head = 0
    while head < m:
        i = 0
        for s in range(1, n_inst):
            if free_at[s] < free_at[i]:
                i = s
        t = max(free_at[i], arrival[head])
        k = 0
        tokens = 0.0
        while head + k < m and arrival[head + k] <= t and k < max_seqs:
            if k > 0 and tokens + prompt[head + k] > budget:
                break
            tokens += prompt[head + k]
            k += 1
        end = t + _prefill_batch_time(ptab, pgrid, k, tokens)
        for r in range(head, head + k):
            t_done[r] = end
        free_at[i] = end
        head += k


@jit(cache=True)
def _release(box_end, box_kv, nbox, kv_used, i, t):
    """Free instance ``i``'s boxes whose decode ended by ``t``."""
    j = 0
    while j < nbox[i]:
        if box_end[i, j] <= t:
            kv_used[i] -= box_kv[i, j]
            nbox[i] -= 1
            box_end[i, j] = box_end[i, nbox[i]]
            box_kv[i, j] = box_kv[i, nbox[i]]
        else:
            j += 1


@jit(cache=True)
def _decode_pool(order, ready, prompt, output, n_inst, dtab, cgrid, max_seqs, kv_cap, tau,
                 t_start, t_finish):
    """Algorithm 3: FIFO (by ready time) into the instance with the most free boxes."""
    box_end = np.empty((n_inst, max_seqs))
    box_kv = np.empty((n_inst, max_seqs))
    nbox = np.zeros(n_inst, dtype=np.int64)
    kv_used = np.zeros(n_inst)
    for q in range(order.shape[0]):
        r = order[q]
        t = ready[r]
        need = prompt[r] + output[r]
        while True:
            best = -1
            for i in range(n_inst):
                _release(box_end, box_kv, nbox, kv_used, i, t)
                fits = nbox[i] < max_seqs and (nbox[i] == 0 or kv_used[i] + need <= kv_cap)
                if fits and (best < 0 or nbox[i] < nbox[best]):
                    best = i
            if best >= 0:
                break
            t_next = _INF
            for i in range(n_inst):
                for j in range(nbox[i]):
                    if box_end[i, j] < t_next:
                        t_next = box_end[i, j]
            t = t_next
        t_start[r] = t
        if output[r] <= 1:
            t_finish[r] = t
            continue
        dur = _decode_box_time(dtab, cgrid, nbox[best], tau, prompt[r], output[r])
        box_end[best, nbox[best]] = t + dur
        box_kv[best, nbox[best]] = need
        kv_used[best] += need
        nbox[best] += 1
        t_finish[r] = t + dur


def _check(arrival, prompt, output):
    a = np.ascontiguousarray(arrival, dtype=np.float64)
    p = np.ascontiguousarray(prompt, dtype=np.float64)
    o = np.ascontiguousarray(output, dtype=np.float64)
    if not (a.shape == p.shape == o.shape):
        raise ValueError(f"arrival {a.shape}, prompt {p.shape} and output {o.shape} differ")
    if a.size > 1 and np.any(np.diff(a) < 0):
        raise ValueError("arrival times must be sorted")
    return a, p, o


def _check_knobs(n_inst: int, max_num_seqs: int, tau: float) -> None:
    if n_inst < 1:
        raise ValueError(f"number of instances must be >= 1, got {n_inst!r}")
    if max_num_seqs < 1:
        raise ValueError(f"max_num_seqs must be >= 1, got {max_num_seqs!r}")
    if not (np.isfinite(tau) and tau > 0):
        raise ValueError(f"tau must be a finite number > 0, got {tau!r}")


def colocated_times(arrival, prompt, output, tables: CostTables, *, num_instances: int,
                    max_num_seqs: int, max_num_batched_tokens: int, kv_tokens: float,
                    tau: float = 2.5) -> tuple[np.ndarray, np.ndarray]:
    """First-token and finish times of requests on ``num_instances`` colocated instances.

    Returns
    -------
    t_first, t_finish : float64 arrays
        Seconds; TTFT is ``t_first - arrival``, TPOT ``(t_finish - t_first) / (L_out - 1)``.
    """
    a, p, o = _check(arrival, prompt, output)
    _check_knobs(num_instances, max_num_seqs, tau)
    t_first = np.empty(a.size)
    t_finish = np.empty(a.size)
    if a.size:
        _colocated(a, p, o, int(num_instances), tables.prefill, tables.prompt_grid,
                   tables.decode, tables.context_grid, int(max_num_seqs),
                   float(max_num_batched_tokens), float(kv_tokens), float(tau), t_first,
                   t_finish)
    return t_first, t_finish


def pd_times(arrival, prompt, output, prefill_tables: CostTables, decode_tables: CostTables, *,
             num_prefill: int, num_decode: int, prefill_max_num_seqs: int,
             prefill_max_num_batched_tokens: int, decode_max_num_seqs: int,
             decode_kv_tokens: float, kv_transfer_s, tau: float = 2.5):
    """First-token (prefill end) and finish times on a ``{y}p{z}d`` deployment.

    ``kv_transfer_s`` is a scalar or one value per request (seconds added between the end
    of the prefill and the moment the decode pool may take the request).
    """
    a, p, o = _check(arrival, prompt, output)
    _check_knobs(num_prefill, prefill_max_num_seqs, tau)
    _check_knobs(num_decode, decode_max_num_seqs, tau)
    done = np.empty(a.size)
    t_start = np.empty(a.size)
    t_finish = np.empty(a.size)
    if a.size == 0:
        return done, t_finish
    _prefill_pool(a, p, int(num_prefill), prefill_tables.prefill, prefill_tables.prompt_grid,
                  int(prefill_max_num_seqs), float(prefill_max_num_batched_tokens), done)
    ready = done + np.broadcast_to(np.asarray(kv_transfer_s, dtype=np.float64), a.shape)
    order = np.argsort(ready, kind="stable")
    _decode_pool(order, ready, p, o, int(num_decode), decode_tables.decode,
                 decode_tables.context_grid, int(decode_max_num_seqs), float(decode_kv_tokens),
                 float(tau), t_start, t_finish)
    one = o <= 1
    t_finish[one] = done[one]
    return done, t_finish

"""Tests for serveplan.sim.workload: container validation, arrivals, lengths, prefixes."""

from __future__ import annotations

import doctest

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import special

from serveplan.sim import workload
from serveplan.sim.workload import (
    ClosedLoop,
    ConstantArrivals,
    Empirical,
    Fixed,
    GammaArrivals,
    LogNormal,
    PoissonArrivals,
    PrefixSharing,
    Requests,
    TraceArrivals,
    Uniform,
    closed_loop_predecessor,
    generate_requests,
    scale_pattern,
    synthetic_prefix_hashes,
    tile_requests,
)

N = 400_000

DISTS = [
    Fixed(7),
    Uniform(1, 100),
    Uniform(300, 300),
    LogNormal(3.0, 0.5),
    LogNormal(1000.0, 1.0),
    LogNormal(1000.0, 1.0, clip_max=2048),
    LogNormal.from_mean(500.0, 0.8, clip_max=4096),
    Empirical(np.array([1, 5, 5, 9, 200, 4000])),
]


@pytest.mark.parametrize("dist", DISTS, ids=repr)
def test_sample_moments_match_stated(dist):
    x = dist.sample(N, 123)
    assert x.dtype == np.int64 and x.shape == (N,) and x.min() >= 1
    se = max(dist.std / np.sqrt(N), 1e-12)
    assert abs(x.mean() - dist.mean) < 5 * se
    assert x.var() == pytest.approx(dist.var, rel=0.05, abs=1e-9)
    for q in np.quantile(x, [0.1, 0.5, 0.9]):
        assert np.mean(x > q) == pytest.approx(float(dist.sf(q)), abs=0.005)
    grid = np.array([-1.0, 0.0, 1.0, 2.5, dist.mean, 1e6])
    np.testing.assert_allclose(dist.sf(grid) + dist.cdf(grid), 1.0)
    assert np.all(np.diff(dist.sf(grid)) <= 0)


def test_uniform_and_lognormal_moments_are_exact():
    u = Uniform(3, 11)
    k = np.arange(3, 12)
    assert u.mean == k.mean() and u.var == pytest.approx(k.var())
    # LogNormal: term-by-term sums to k = 2**16, closed-form midpoint tail after that; check the
    # whole thing against the brute-force sum up to clip_max.
    d = LogNormal(1e5, 1.0, clip_max=3_000_000)
    k = np.arange(1, d.clip_max, dtype=np.float64)
    s = special.ndtr((np.log(d.median) - np.log(k)) / d.sigma)
    m1, m2 = 1 + s.sum(), 1 + ((2 * k + 1) * s).sum()
    assert d.mean == pytest.approx(m1, rel=1e-9)
    assert d.var == pytest.approx(m2 - m1 * m1, rel=1e-7)


def test_lognormal_parameterisations():
    d = LogNormal.from_mean(500.0, 0.8)
    assert d.median == pytest.approx(500.0 * np.exp(-0.32))
    assert 500.0 < d.mean < 501.0  # rounding up adds about half a token to the continuous mean
    e = LogNormal(20.0, 1.0)
    assert float(e.sf(19)) > 0.5 == float(e.sf(20)) > float(e.sf(21))
    assert float(LogNormal(20.0, 1.0, clip_max=30).sf(30)) == 0.0
    with pytest.raises(ValueError, match="sigma"):
        LogNormal(20.0, 0.0)


def test_empirical_resamples_the_values():
    values = np.array([3, 3, 8, 10])
    d = Empirical(values)
    assert set(np.unique(d.sample(1000, 0))) == {3, 8, 10}
    assert d.mean == 6.0 and d.var == pytest.approx(values.var())
    np.testing.assert_allclose(d.sf([2, 3, 9, 10]), [1.0, 0.5, 0.25, 0.0])
    with pytest.raises(ValueError, match=r"values\[1\] = 0"):
        Empirical(np.array([2, 0]))


def _gaps(times: np.ndarray) -> np.ndarray:
    assert times[0] == 0.0 and np.all(np.diff(times) >= 0)
    return np.diff(times)


@pytest.mark.parametrize("process, cv", [(PoissonArrivals(4.0), 1.0), (GammaArrivals(4.0, 3.0), 3.0),
                                         (GammaArrivals(4.0, 0.5), 0.5)])
def test_renewal_gap_mean_and_cv(process, cv):
    g = _gaps(process.sample(200_001, 5))
    assert process.cv == cv
    assert g.mean() == pytest.approx(0.25, rel=0.03)
    assert g.std() / g.mean() == pytest.approx(cv, rel=0.03)


def test_constant_arrivals_are_evenly_spaced():
    t = ConstantArrivals(8.0).sample(5, 1)
    np.testing.assert_array_equal(t, [0.0, 0.125, 0.25, 0.375, 0.5])
    assert ConstantArrivals(8.0).cv == 0.0


@pytest.mark.parametrize("process", [PoissonArrivals(), GammaArrivals(cv=2.5), ConstantArrivals()])
def test_common_random_numbers_rescale_exactly(process):
    unit = process.unit_pattern(1000, 42)
    assert np.mean(np.diff(unit)) == pytest.approx(1.0, rel=0.2)
    for rate in (0.37, 3.0, 250.0):
        t = process.with_rate(rate).sample(1000, 42)
        np.testing.assert_array_equal(t, unit / rate)
        np.testing.assert_array_equal(t, scale_pattern(unit, rate))
        np.testing.assert_array_equal(np.argsort(t, kind="stable"), np.argsort(unit, kind="stable"))
    with pytest.raises(ValueError, match="rate"):
        scale_pattern(unit, 0.0)


def test_generate_requests_reuses_streams_across_rates_and_components():
    kw = dict(prompt_len=LogNormal(800.0, 1.0, 8192), output_len=Uniform(1, 300), seed=9)
    a = generate_requests(2000, GammaArrivals(1.0, 2.0), **kw)
    b = generate_requests(2000, GammaArrivals(7.5, 2.0), **kw)
    np.testing.assert_array_equal(b.arrival_s, a.arrival_s / 7.5)  # a is the unit pattern
    np.testing.assert_array_equal(a.prompt_len, b.prompt_len)
    np.testing.assert_array_equal(a.output_len, b.output_len)
    c = generate_requests(2000, PoissonArrivals(1.0), kw["prompt_len"], Fixed(3), seed=9)
    np.testing.assert_array_equal(a.prompt_len, c.prompt_len)  # other components do not shift it
    assert not np.array_equal(a.arrival_s, c.arrival_s)
    rng = np.random.default_rng(9)
    d1 = generate_requests(50, PoissonArrivals(), Fixed(1), Uniform(1, 9), rng)
    d2 = generate_requests(50, PoissonArrivals(), Fixed(1), Uniform(1, 9), rng)
    assert not np.array_equal(d1.arrival_s, d2.arrival_s)  # a Generator is advanced


def test_trace_arrivals_time_scale_and_target_rate():
    ts = np.array([10.0, 10.5, 12.0, 14.0, 18.0])
    tr = TraceArrivals(ts, time_scale=2.0)
    np.testing.assert_allclose(tr.sample(), (ts - 10.0) / 2)
    assert tr.trace_rate == 0.5 and tr.rate == 1.0
    fast = tr.with_rate(3.0)
    assert fast.rate == pytest.approx(3.0)
    t = fast.sample(5)
    assert (len(t) - 1) / t[-1] == pytest.approx(3.0)
    np.testing.assert_allclose(tr.unit_pattern(), (ts - 10.0) * 0.5)
    np.testing.assert_allclose(fast.sample(3), fast.unit_pattern(3) / 3.0)
    with pytest.raises(ValueError, match="exceeds the 5 trace timestamps"):
        tr.sample(6)


def test_prefix_hashes_share_leading_blocks_only():
    prompt = np.array([40, 40, 100, 7, 33, 64])
    group = np.array([0, 0, 0, 1, 1, -1])
    ids, off = synthetic_prefix_hashes(prompt, group, prefix_len=36, block_size=16)
    np.testing.assert_array_equal(np.diff(off), -(-prompt // 16))
    rows = [ids[off[i]:off[i + 1]] for i in range(len(prompt))]
    np.testing.assert_array_equal(rows[0][:2], rows[1][:2])   # 36 // 16 = 2 shared blocks
    np.testing.assert_array_equal(rows[0][:2], rows[2][:2])
    assert rows[0][2] != rows[1][2]                          # block straddling the prefix end
    assert len(rows[3]) == 1 and rows[3][0] not in rows[4]    # 7 tokens: no full shared block
    assert not set(rows[4][:2]) & set(rows[0][:2])            # other group, other ids
    shared = np.concatenate([rows[0][:2], rows[4][:2]])
    rest = np.concatenate([rows[0][2:], rows[1][2:], rows[2][2:], rows[3], rows[4][2:], rows[5]])
    assert len(np.unique(rest)) == len(rest) and not set(rest) & set(shared)


def test_generate_requests_with_prefix_sharing():
    p = PrefixSharing(num_groups=3, prefix_len=64, block_size=16)
    r = generate_requests(300, PoissonArrivals(2.0), Uniform(1, 50), Fixed(4), 3, prefix=p)
    assert r.hash_block_size == 16 and r.prompt_len.min() >= 65
    heads = {tuple(r.hashes(i)[:4]) for i in range(len(r))}
    assert len(heads) == 3  # one 4-block prefix per group
    tails = np.concatenate([r.hashes(i)[4:] for i in range(len(r))])
    assert len(np.unique(tails)) == len(tails)


def test_closed_loop_contract():
    kw = dict(prompt_len=Uniform(5, 50), output_len=Uniform(1, 20), seed=4)
    r = generate_requests(10, ClosedLoop(3), **kw)
    assert r.is_closed_loop and r.concurrency == 3 and np.isnan(r.arrival_s).all()
    np.testing.assert_array_equal(closed_loop_predecessor(r), np.arange(10) - 3)
    o = generate_requests(10, PoissonArrivals(1.0), **kw)
    np.testing.assert_array_equal(r.output_len, o.output_len)
    with pytest.raises(ValueError, match="open-loop"):
        closed_loop_predecessor(o)
    with pytest.raises(ValueError, match=r"arrival_s\[0\] = 0.0"):
        Requests(np.zeros(2), np.ones(2, int), np.ones(2, int), concurrency=2)
    t = tile_requests(r, 25)
    assert t.concurrency == 3 and np.isnan(t.arrival_s).all() and len(t) == 25


@pytest.mark.parametrize("kwargs, match", [
    (dict(prompt_len=[1, 2]), "prompt_len has 2 entries but arrival_s has 3"),
    (dict(output_len=[1, 0, 1]), r"output_len\[1\] = 0"),
    (dict(arrival_s=[0.0, 2.0, 1.0]), r"arrival_s must be sorted: arrival_s\[2\]"),
    (dict(arrival_s=[0.0, np.nan, 1.0]), r"arrival_s\[1\] = nan"),
    (dict(prompt_len=[1.5, 2, 3]), "prompt_len must hold integers"),
    (dict(hash_ids=[1, 2, 3], hash_offsets=[0, 1, 2, 3]), "given together"),
    (dict(hash_ids=[1, 2], hash_offsets=[0, 1, 2, 2], hash_block_size=4), "request 2 has 0 hash ids"),
    (dict(hash_ids=[1, 2, 3], hash_offsets=[0, 1, 2], hash_block_size=4), "hash_offsets must have"),
    (dict(hash_ids=[1, -2, 3], hash_offsets=[0, 1, 2, 3], hash_block_size=4), r"hash_ids\[1\]"),
    (dict(concurrency=0), "concurrency must be an integer >= 1"),
])
def test_requests_validation_names_the_field(kwargs, match):
    base = dict(arrival_s=[0.0, 1.0, 1.0], prompt_len=[1, 2, 3], output_len=[1, 1, 1])
    with pytest.raises(ValueError, match=match):
        Requests(**{**base, **kwargs})


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.floats(-1.0, 100.0), st.integers(-2, 5000), st.integers(-2, 5000)),
                max_size=30))
def test_requests_accepts_exactly_the_valid_inputs(rows):
    arr = np.array([r[0] for r in rows], dtype=np.float64)
    prompt = np.array([r[1] for r in rows], dtype=np.int64)
    out = np.array([r[2] for r in rows], dtype=np.int64)
    valid = bool(np.all(arr >= 0) and np.all(np.diff(arr) >= 0) and np.all(prompt >= 1)
                 and np.all(out >= 1))
    try:
        r = Requests(arr, prompt, out)
    except ValueError as e:
        assert not valid
        assert any(f in str(e) for f in ("arrival_s", "prompt_len", "output_len"))
    else:
        assert valid and len(r) == len(rows) and r.arrival_s.dtype == np.float64


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 200), min_size=1, max_size=40), st.integers(1, 4),
       st.integers(0, 100), st.integers(1, 32), st.data())
def test_take_and_tile_keep_hash_rows(prompt, groups, prefix_len, block, data):
    n = len(prompt)
    group = np.arange(n) % groups
    ids, off = synthetic_prefix_hashes(np.array(prompt), group, prefix_len, block)
    r = Requests(np.arange(n, dtype=float), prompt, np.ones(n, int), ids, off, block)
    idx = np.array(sorted(data.draw(st.sets(st.integers(0, n - 1)))), dtype=np.int64)
    sub = r.take(idx)
    for j, i in enumerate(idx):
        np.testing.assert_array_equal(sub.hashes(j), r.hashes(i))
    m = data.draw(st.integers(0, 3 * n))
    t = tile_requests(r, m)
    assert len(t) == m and (n == 1 or np.all(np.diff(t.arrival_s) > 0))
    for j in range(m):
        np.testing.assert_array_equal(t.hashes(j) - (j // n) * (ids.max() + 1), r.hashes(j % n))


def test_tile_requests_can_reuse_hashes_and_set_gap():
    r = generate_requests(4, ConstantArrivals(1.0), Fixed(40), Fixed(2), 0,
                          prefix=PrefixSharing(1, 32, 16))
    t = tile_requests(r, 10, gap_s=5.0, distinct_hashes=False)
    np.testing.assert_array_equal(t.arrival_s[:6], [0, 1, 2, 3, 8, 9])
    np.testing.assert_array_equal(t.hashes(5), r.hashes(1))


def test_docstring_examples():
    assert doctest.testmod(workload, raise_on_error=True).attempted >= 1


def test_streams_are_the_first_children_of_the_seed():
    # arrivals, prompts, outputs and prefix groups are children 0..3 of the seed, as before the
    # pool-order and think-time streams (children 4, 5) were added: old seeds draw the same
    kids = np.random.default_rng(21).spawn(4)
    r = generate_requests(30, PoissonArrivals(3.0), Uniform(1, 50), Uniform(1, 9), 21,
                          prefix=PrefixSharing(3, 16, 16))
    np.testing.assert_array_equal(r.arrival_s, PoissonArrivals(3.0).sample(30, kids[0]))
    np.testing.assert_array_equal(r.prompt_len, Uniform(1, 50).sample(30, kids[1]) + 16)
    np.testing.assert_array_equal(r.output_len, Uniform(1, 9).sample(30, kids[2]))
    group = kids[3].integers(0, 3, 30)
    np.testing.assert_array_equal(r.hash_ids[r.hash_offsets[:-1]], group)  # block 0 = group


def test_generate_requests_takes_given_lengths():
    r = generate_requests(3, ConstantArrivals(1.0), np.array([5, 6, 7]), np.array([1, 2, 3]), 0)
    np.testing.assert_array_equal(r.prompt_len, [5, 6, 7])
    np.testing.assert_array_equal(r.arrival_s, [0.0, 1.0, 2.0])
    with pytest.raises(ValueError, match="prompt_len gives 2 lengths but 3 prompts are drawn"):
        generate_requests(3, ConstantArrivals(1.0), np.array([5, 6]), Fixed(1), 0)

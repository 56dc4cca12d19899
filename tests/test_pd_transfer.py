"""The KV link model: fair sharing at the busier end, latency tails, layer-wise floors."""

from __future__ import annotations

import numpy as np
import pytest

from serveplan.sim.transfer import (
    KIND_SCALEOUT,
    KIND_SCALEUP,
    X_DONE,
    X_STALLED,
    make_xfer,
    xfer_begin,
    xfer_event,
    xfer_next_time,
    xfer_prefill_done,
)


def _drain(x, until=np.inf):
    """Deliveries ``[(time, request)]`` up to ``until``."""
    out = []
    while np.isfinite(xfer_next_time(x)) and xfer_next_time(x) <= until:
        t = xfer_next_time(x)
        r = xfer_event(x, t)
        if r >= 0:
            out.append((t, r))
    return out


def test_single_transfer_takes_work_plus_latency():
    x = make_xfer(4, 2, 2)
    assert not xfer_begin(x, 0, 1.0, 2.0, 0.0, 0.5, 0, 1, KIND_SCALEOUT)
    assert _drain(x) == [(3.5, 0)]
    assert x.state[0] == X_DONE
    assert xfer_begin(x, 1, 4.0, 0.0, 0.0, 0.0, 0, 1, KIND_SCALEOUT)  # free: at once


def test_equal_share_at_the_decode_end():
    """Two transfers into one decode instance each get half its link; the shorter ends
    first and the other then runs at full rate."""
    x = make_xfer(4, 2, 1)
    xfer_begin(x, 0, 0.0, 1.0, 0.0, 0.0, 0, 0, KIND_SCALEOUT)
    xfer_begin(x, 1, 0.0, 2.0, 0.0, 0.0, 1, 0, KIND_SCALEOUT)
    got = _drain(x)
    assert [r for _, r in got] == [0, 1]
    np.testing.assert_allclose([t for t, _ in got], [2.0, 3.0])


def test_disjoint_pairs_and_link_kinds_do_not_share():
    x = make_xfer(4, 2, 2)
    xfer_begin(x, 0, 0.0, 1.0, 0.0, 0.0, 0, 0, KIND_SCALEOUT)
    xfer_begin(x, 1, 0.0, 1.0, 0.0, 0.0, 1, 1, KIND_SCALEOUT)
    xfer_begin(x, 2, 0.0, 1.0, 0.0, 0.0, 0, 1, KIND_SCALEUP)  # NVLink, not the NIC
    np.testing.assert_allclose([t for t, _ in _drain(x)], [1.0, 1.0, 1.0])


def test_share_is_set_by_the_busier_end():
    """p0 sends to d0 and d1, p1 also sends to d1: the p0->d1 transfer gets 1/2."""
    x = make_xfer(4, 2, 2)
    xfer_begin(x, 0, 0.0, 1.0, 0.0, 0.0, 0, 0, KIND_SCALEOUT)  # p0 has 2 -> 1/2
    xfer_begin(x, 1, 0.0, 1.0, 0.0, 0.0, 0, 1, KIND_SCALEOUT)  # p0: 2, d1: 2 -> 1/2
    xfer_begin(x, 2, 0.0, 1.0, 0.0, 0.0, 1, 1, KIND_SCALEOUT)  # d1 has 2 -> 1/2
    rates = x.rate[:3]
    np.testing.assert_allclose(rates, [0.5, 0.5, 0.5])
    # at every end the rates sum to at most 1
    assert rates[0] + rates[1] <= 1 and rates[1] + rates[2] <= 1


def test_latency_tail_frees_the_link():
    """During its latency tail a transfer no longer uses bandwidth."""
    x = make_xfer(4, 1, 1)
    xfer_begin(x, 0, 0.0, 1.0, 0.0, 10.0, 0, 0, KIND_SCALEOUT)
    xfer_begin(x, 1, 0.0, 3.0, 0.0, 0.0, 0, 0, KIND_SCALEOUT)
    got = dict((r, t) for t, r in _drain(x))
    # both at 1/2 until t=2 (0 done, 1 has 2 left), then 1 alone: ends at 4; 0 at 2 + 10
    assert got[1] == pytest.approx(4.0)
    assert got[0] == pytest.approx(12.0)


def test_layerwise_floor_stalls_until_prefill_done():
    x = make_xfer(2, 1, 1)
    xfer_begin(x, 0, 0.0, 1.0, 0.25, 0.0, 0, 0, KIND_SCALEOUT)
    assert _drain(x, until=5.0) == []
    assert x.state[0] == X_STALLED and x.rem[0] == pytest.approx(0.25)
    xfer_prefill_done(x, 0, 5.0)
    assert _drain(x) == [(5.25, 0)]


def test_layerwise_prefill_done_before_floor_reached():
    x = make_xfer(2, 1, 1)
    xfer_begin(x, 0, 0.0, 1.0, 0.25, 0.0, 0, 0, KIND_SCALEOUT)
    xfer_prefill_done(x, 0, 0.5)
    assert _drain(x) == [(1.0, 0)]

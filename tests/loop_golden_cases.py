"""Named simulator runs whose per-request results are pinned by ``test_loop_golden.py``.

Each case is a small seeded run (60-150 requests) of the colocated event loop
(:func:`serveplan.sim.engine.run_engine`) or the disaggregated one
(:func:`serveplan.sim.pd.run_pd`) through their public Python APIs. :func:`run_case`
returns the per-request arrays (and the accumulators and step counts) as a dict of NumPy
arrays (integers as ``int64``, floats as ``float64``), which the test compares bit for
bit with ``data/golden_loop/<name>.npz``.

The module imports only ``serveplan`` and NumPy, so it can be run against another checkout
of the package (the goldens were written by the code before the loops were unified)::

    cd /tmp && PYTHONPATH=/path/to/old/pkg:/work/main/tests \\
        /work/main/.venv/bin/python -c 'import loop_golden_cases as m; m.regenerate()'
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

import numpy as np

from serveplan.sim.engine import AffineStepCost, EngineParams, run_engine
from serveplan.sim.pd import FittedThroughputCost, KVLink, PoolSpec, run_pd
from serveplan.sim.state import Policy, Router
from serveplan.sim.workload import (
    ClosedLoop,
    GammaArrivals,
    LogNormal,
    PoissonArrivals,
    PrefixSharing,
    Uniform,
    generate_requests,
)

GOLDEN_DIR = Path(__file__).resolve().parent / "data" / "golden_loop"

# the decode routers of serveplan.sim.pd_router.DECODE_ROUTERS at commit 3d67e85
PD_ROUTERS = ("round-robin", "least-loaded", "least-requests", "sibyl", "sibyl-p1",
              "sibyl-no-type1", "sibyl-no-type2", "sibyl-no-type3", "sibyl-reqlevel")
# assignment mode -> run_pd keywords
PD_MODES = {
    "early": dict(assignment="early"),
    "late": dict(assignment="late"),
    "early-layerwise": dict(assignment="early", layerwise=True),
}

COLO_FIELDS = ("arrival", "t_sched", "t_first", "t_last", "t_finish", "itl_max", "n_out",
               "n_preempt", "status", "inst", "hit")
PD_P_FIELDS = ("t_sched", "t_first", "n_preempt", "hit", "inst", "status")
PD_D_FIELDS = ("t_first", "t_last", "t_finish", "itl_max", "n_out", "n_preempt", "status",
               "inst")
PD_FIELDS = ("p_of", "d_of", "t_assign", "tau", "t_kvready", "t_xstart", "t_join", "t_dec1",
             "t_finish", "opt_tok", "opt_req")
FINISHED_MIN = 4  # RequestStatus.FINISHED_STOPPED; larger codes are finished as well
LENGTH_CAPPED, IGNORED = 5, 6


# ---------------------------------------------------------------------------- helpers
def _arr(x) -> np.ndarray:
    """``x`` as a NumPy array of int64 (integers, booleans) or float64 (floats)."""
    a = np.asarray(x)
    if a.dtype.kind in "iub":
        return a.astype(np.int64)
    if a.dtype.kind == "f":
        return a.astype(np.float64)
    raise TypeError(f"unexpected dtype {a.dtype}")


@functools.cache
def oracle():
    """The Llama-3.1-8B / H100 / TP=1 cost oracle (built once)."""
    from serveplan.estimator.oracle import CostOracle

    return CostOracle("llama-3.1-8b", "h100", tp=1)


def _colo_requests(n: int = 100, seed: int = 11, rate: float = 40.0, closed: int = 0):
    arrivals = ClosedLoop(closed) if closed else GammaArrivals(rate, cv=2.0)
    return generate_requests(n, arrivals, LogNormal.from_mean(150, 0.7, clip_max=600),
                             Uniform(1, 60), seed=seed, prefix=PrefixSharing(3, 64, 16))


def _pd_requests(n: int = 100, seed: int = 5, rate: float = 40.0, closed: int = 0):
    arrivals = ClosedLoop(closed) if closed else PoissonArrivals(rate)
    return generate_requests(n, arrivals, LogNormal.from_mean(200, 0.8, clip_max=800),
                             Uniform(1, 120), seed=seed, prefix=PrefixSharing(4, 128, 16))


def _colo_params(policy: Policy, chunked: bool, prefix: bool, **kw) -> EngineParams:
    """Few KV blocks (preemptions); without chunking the budget holds a whole prompt."""
    knobs = dict(num_gpu_blocks=60, policy=policy, max_num_seqs=16,
                 max_num_batched_tokens=256 if chunked else 1024, block_size=16,
                 enable_prefix_caching=prefix, enable_chunked_prefill=chunked,
                 long_prefill_token_threshold=128 if chunked else 0, watermark=0.05,
                 max_model_len=1024)
    knobs.update(kw)
    return EngineParams(**knobs)


AFFINE = AffineStepCost(0.004, 2e-5, 1e-4)
# the accumulators the reference was recorded with (busy until, busy time, KV time, batch
# time, tokens, prefill tokens); later columns hold newer state (sim.state.A_*)
GOLDEN_ACC = 6
P_AFFINE = AffineStepCost(0.003, 4e-5, 2e-4)
D_AFFINE = AffineStepCost(0.005, 1e-5, 1.5e-4)
P_PARAMS = dict(num_gpu_blocks=200, max_num_seqs=8, max_num_batched_tokens=512,
                max_model_len=2048)
D_PARAMS = dict(num_gpu_blocks=120, max_num_seqs=16, max_num_batched_tokens=512,
                max_model_len=2048, watermark=0.02)
# scale-up (same node) and scale-out links; prefill on node 0, decode on nodes 0, 1, 1
LINK = KVLink((2e-6, 2e-5), (5e-5, 4e-4), 131072.0, 32, (0, 0), (0, 1, 1))
LINK_UNIFORM = KVLink.uniform(2e-5, 4e-4, bytes_per_token=131072.0, num_layers=32)


# ---------------------------------------------------------------------------- runners
def _colo(params: EngineParams, *, cost=AFFINE, num_instances: int = 1,
          router: Router = Router.ROUND_ROBIN, requests: Callable = _colo_requests,
          **req_kw) -> dict[str, np.ndarray]:
    """A colocated run and its per-request arrays."""
    cost = oracle() if isinstance(cost, str) else cost
    res = run_engine(requests(**req_kw), cost, params, num_instances=num_instances,
                     router=router)
    out = {f"reqs.{f}": _arr(getattr(res.reqs, f)) for f in COLO_FIELDS}
    out["num_steps"] = _arr(res.num_steps)
    out["inst.acc"] = _arr(res.inst.acc[:, :GOLDEN_ACC])
    if not (out["reqs.status"] >= FINISHED_MIN).all():
        raise AssertionError("a request did not finish")
    return out


def _pd(router: str = "sibyl", *, p_kw: dict | None = None, d_kw: dict | None = None,
        p_cost=P_AFFINE, d_cost=D_AFFINE, n_p: int = 2, n_d: int = 3, link=LINK,
        req_kw: dict | None = None, **kw) -> dict[str, np.ndarray]:
    """A disaggregated run and its per-request arrays."""
    p_cost = oracle() if isinstance(p_cost, str) else p_cost
    d_cost = oracle() if isinstance(d_cost, str) else d_cost
    if isinstance(link, str):  # "oracle": the deployment's own link
        link = KVLink.from_specs(oracle(), oracle(), n_p, n_d)
    prefill = PoolSpec(EngineParams(**{**P_PARAMS, **(p_kw or {})}), p_cost, n_p)
    decode = PoolSpec(EngineParams(**{**D_PARAMS, **(d_kw or {})}), d_cost, n_d)
    res = run_pd(_pd_requests(**(req_kw or {})), prefill, decode, link=link, router=router,
                 **kw)
    out = {f"p_reqs.{f}": _arr(getattr(res.p_reqs, f)) for f in PD_P_FIELDS}
    out.update({f"d_reqs.{f}": _arr(getattr(res.d_reqs, f)) for f in PD_D_FIELDS})
    out.update({f"pd.{f}": _arr(getattr(res.pd, f)) for f in PD_FIELDS})
    out["num_steps"] = _arr(res.num_steps)
    acc = res.inst.acc[:, :GOLDEN_ACC]
    p_acc = acc[res.pool_of == 0]
    if p_acc.shape[0] == 0:  # delay stage: the old loop kept one idle placeholder instance
        p_acc = np.zeros((1, acc.shape[1]))
    out["p_inst.acc"] = _arr(p_acc)
    out["d_inst.acc"] = _arr(acc[res.pool_of == 1])
    for side in ("p_reqs", "d_reqs"):
        if not (out[f"{side}.status"] >= FINISHED_MIN).all():
            raise AssertionError(f"a request did not finish ({side})")
    if np.isnan(out["pd.t_finish"]).any():
        raise AssertionError("a request has no finish time")
    return out


# ---------------------------------------------------------------------------- the matrix
def _colo_cases() -> dict[str, Callable]:
    cases: dict[str, Callable] = {}
    for policy in (Policy.VLLM_V1, Policy.SGLANG, Policy.PREFILL_PRIORITY):  # as recorded
        chunks = (False,) if policy == Policy.PREFILL_PRIORITY else (False, True)
        for chunked in chunks:
            for prefix in (False, True):
                name = f"colo-{policy.name.lower()}-chunk{int(chunked)}-prefix{int(prefix)}"
                cases[name] = functools.partial(_colo, _colo_params(policy, chunked, prefix))
    # max_model_len 400: long prompts are ignored, long outputs capped
    cases["colo-vllm_v1-maxlen"] = functools.partial(
        _colo, _colo_params(Policy.VLLM_V1, True, True, max_model_len=400))
    cases["colo-sglang-maxlen"] = functools.partial(
        _colo, _colo_params(Policy.SGLANG, True, True, max_model_len=400))
    for router in Router:
        cases[f"colo3-{router.name.lower()}"] = functools.partial(
            _colo, _colo_params(Policy.VLLM_V1, True, True, num_gpu_blocks=50),
            num_instances=3, router=router, rate=90.0, n=150)
    cases["colo3-closed-least_outstanding_tokens"] = functools.partial(
        _colo, _colo_params(Policy.VLLM_V1, True, True, num_gpu_blocks=50), num_instances=3,
        router=Router.LEAST_OUTSTANDING_TOKENS, closed=12, n=120)
    # closed loop with ignored prompts: their clients move on at once
    cases["colo3-closed-round_robin-maxlen"] = functools.partial(
        _colo, _colo_params(Policy.SGLANG, True, True, max_model_len=300), num_instances=3,
        router=Router.ROUND_ROBIN, closed=9, n=90)
    cases["colo-oracle-vllm_v1-chunk1-prefix1"] = functools.partial(
        _colo, _colo_params(Policy.VLLM_V1, True, True), cost="oracle")
    cases["colo3-oracle-sglang-least_requests"] = functools.partial(
        _colo, _colo_params(Policy.SGLANG, True, True, num_gpu_blocks=50), cost="oracle",
        num_instances=3, router=Router.LEAST_REQUESTS, rate=90.0, n=150)
    return cases


def _pd_router_cases() -> dict[str, Callable]:
    cases: dict[str, Callable] = {}
    for router in PD_ROUTERS:
        for mode, kw in PD_MODES.items():
            cases[f"pd-{router}-{mode}"] = functools.partial(_pd, router, **kw)
    return cases


def _pd_variant_cases() -> dict[str, Callable]:
    p = functools.partial
    fitted = dict(d_cost=FittedThroughputCost())
    closed = dict(req_kw=dict(closed=10, n=100))
    maxlen = dict(p_kw=dict(max_model_len=420), d_kw=dict(max_model_len=420))
    return {
        "pd-sibyl-early-prefill_rr": p(_pd, "sibyl", prefill_router="round-robin"),
        "pd-least-loaded-late-prefill_rr": p(_pd, "least-loaded", assignment="late",
                                             prefill_router="round-robin"),
        "pd-sibyl-early-freelink": p(_pd, "sibyl", link=None),
        "pd-least-loaded-late-freelink": p(_pd, "least-loaded", assignment="late", link=None),
        "pd-round-robin-early-layerwise-freelink": p(_pd, "round-robin", layerwise=True,
                                                     link=None),
        "pd-delay-sibyl-early": p(_pd, "sibyl", prefill_stage="delay", link=LINK_UNIFORM),
        "pd-delay-least-loaded-late": p(_pd, "least-loaded", assignment="late",
                                        prefill_stage="delay", link=LINK_UNIFORM),
        "pd-delay-sibyl-early-layerwise": p(_pd, "sibyl", prefill_stage="delay",
                                            layerwise=True, link=LINK_UNIFORM),
        "pd-delay-round-robin-late-freelink": p(_pd, "round-robin", assignment="late",
                                                prefill_stage="delay", link=None),
        "pd-fitted-sibyl-early": p(_pd, "sibyl", **fitted),
        "pd-fitted-plateau-least-loaded-late": p(
            _pd, "least-loaded", assignment="late",
            d_cost=FittedThroughputCost(alpha=-2.0, beta=60.0, gamma=5.0, plateau=True)),
        "pd-closed-sibyl-early": p(_pd, "sibyl", **closed),
        "pd-closed-round-robin-late": p(_pd, "round-robin", assignment="late", **closed),
        "pd-prefill-noprefix": p(_pd, "sibyl", p_kw=dict(enable_prefix_caching=False)),
        "pd-maxlen-sibyl-early": p(_pd, "sibyl", **maxlen),
        "pd-closed-maxlen-least-loaded-late": p(_pd, "least-loaded", assignment="late",
                                                **maxlen, **closed),
        "pd-hold1-sibyl-early": p(_pd, "sibyl", prefill_hold=1),
        "pd-hold0-round-robin-late": p(_pd, "round-robin", assignment="late", prefill_hold=0),
        "pd-sibyl-pending4": p(_pd, "sibyl", pending_capacity=4, sibyl_delta=32.0,
                               sibyl_alpha=0.9),
        "pd-decode-sglang": p(_pd, "least-loaded", d_kw=dict(policy=Policy.SGLANG)),
        "pd-prefill-priority-prefill": p(
            _pd, "sibyl", p_kw=dict(policy=Policy.PREFILL_PRIORITY,
                                    max_num_batched_tokens=1024)),
        "pd-1p1d-sibyl-early": p(_pd, "sibyl", n_p=1, n_d=1,
                                 link=KVLink.uniform(3e-5, 2e-4, num_layers=32)),
        "pd-oracle-sibyl-early-layerwise": p(_pd, "sibyl", p_cost="oracle", d_cost="oracle",
                                             link="oracle", layerwise=True),
        "pd-oracle-least-loaded-late": p(_pd, "least-loaded", assignment="late",
                                         p_cost="oracle", d_cost="oracle", link="oracle"),
    }


CASES: dict[str, Callable[[], dict[str, np.ndarray]]] = {
    **_colo_cases(), **_pd_router_cases(), **_pd_variant_cases()}
"""Case name -> zero-argument runner."""


def run_case(name: str) -> dict[str, np.ndarray]:
    """Run case ``name`` and return its arrays."""
    return CASES[name]()


def golden_path(name: str) -> Path:
    return GOLDEN_DIR / f"{name}.npz"


def regenerate(names=None) -> None:
    """Write ``data/golden_loop/<name>.npz`` for every case (or ``names``) and print the
    feature counts."""
    GOLDEN_DIR.mkdir(parents=True, exist_ok=True)
    import serveplan.sim.engine as engine

    print(f"serveplan.sim.engine: {engine.__file__}")
    for name in names or CASES:
        arrays = run_case(name)
        np.savez_compressed(golden_path(name), **arrays)
        print(format_counts(name, arrays))


# ---------------------------------------------------------------------------- coverage
def feature_counts(arrays: dict[str, np.ndarray]) -> dict[str, int]:
    """What a case exercises: requests, preempted ones, prefix hits, ignored and capped
    requests, transfers that took time."""
    if "reqs.status" in arrays:
        status = arrays["reqs.status"]
        preempt = arrays["reqs.n_preempt"]
        hit = arrays["reqs.hit"]
        xfer = wait = 0
    else:
        status = arrays["d_reqs.status"]
        preempt = arrays["p_reqs.n_preempt"] + arrays["d_reqs.n_preempt"]
        hit = arrays["p_reqs.hit"]
        with np.errstate(invalid="ignore"):
            xfer = int((arrays["pd.t_join"] > arrays["pd.t_xstart"]).sum())
            wait = int((arrays["pd.t_xstart"] > arrays["pd.t_kvready"]).sum())
    return {
        "n": len(status),
        "preempted": int((preempt > 0).sum()),
        "hit": int((hit > 0).sum()),
        "ignored": int((status == IGNORED).sum()),
        "capped": int((status == LENGTH_CAPPED).sum()),
        "xfer>0": xfer,
        "pullwait": wait,
        "steps": int(arrays["num_steps"]),
    }


def format_counts(name: str, arrays: dict[str, np.ndarray]) -> str:
    c = feature_counts(arrays)
    return f"{name:45s} " + " ".join(f"{k}={v:<5d}" for k, v in c.items())

"""The pool form of a deployment (``deployment.pools``): validation, conversions to and from
the older forms, one resolution path, and identical runs whatever the form."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import xarray as xr
import yaml
from pydantic import ValidationError

import serveplan
from serveplan.config import (
    Deployment,
    PDDeployment,
    PoolsDeployment,
    SimulationConfig,
    load_config,
    set_path,
    to_legacy,
    to_pools,
)
from serveplan.deployments import gpus, parse_deployment, strategy_name
from serveplan.errors import format_validation_error
from serveplan.pd_simulation import resolve_pd
from serveplan.resolution import resolve, resolve_deployment
from serveplan.sim.pools import Role

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
INSTANCE = {"model": "llama-3.1-8b", "gpu": "h100", "num_gpu_blocks": 3000,
            "max_model_len": 4096}
COLOCATED = {**INSTANCE, "num_instances": 2, "router": "least-requests", "max_num_seqs": 32}
COLOCATED_POOLS = {"pools": [{"role": "colocated", **INSTANCE, "count": 2, "max_num_seqs": 32}],
                   "router": "least-requests"}
PD = {"architecture": "pd", "prefill": {**INSTANCE, "num_instances": 2, "max_num_seqs": 16},
      "decode": {**INSTANCE, "num_instances": 3}, "router": "sibyl",
      "prefill_router": "round-robin", "assignment": "early", "layerwise_transfer": True,
      "placement": "separate", "sibyl": {"delta": 64}}
PD_POOLS = {"pools": [{"role": "prefill", **INSTANCE, "num_instances": 2, "max_num_seqs": 16},
                      {"role": "decode", **INSTANCE, "count": 3}],
            "router": "round-robin", "decode_router": "sibyl", "assignment": "early",
            "layerwise_transfer": True, "placement": "separate", "sibyl": {"delta": 64}}
WORKLOAD = {"kind": "poisson", "rate": 12.0, "num_requests": 50,
            "isl": {"dist": "uniform", "low": 64, "high": 900},
            "osl": {"dist": "uniform", "low": 2, "high": 120}}


def _validate(deployment: dict) -> SimulationConfig:
    return SimulationConfig.model_validate({"deployment": deployment, "workload": WORKLOAD})


def _error(deployment: dict) -> tuple[tuple, str, list[str]]:
    with pytest.raises(ValidationError) as exc:
        _validate(deployment)
    err = exc.value.errors()[0]
    return err["loc"], err["msg"], format_validation_error(exc.value)


# ----------------------------------------------------------------------------- config
def test_old_and_pool_forms_give_the_same_pools():
    colo, colo_pools = _validate(COLOCATED).deployment, _validate(COLOCATED_POOLS).deployment
    assert isinstance(colo, Deployment) and isinstance(colo_pools, PoolsDeployment)
    assert colo.to_pools() == colo_pools == to_pools(COLOCATED)
    assert colo_pools.architecture == "colocated" and colo_pools.pools[0].count == 2
    pd, pd_pools = _validate(PD).deployment, _validate(PD_POOLS).deployment
    assert isinstance(pd, PDDeployment) and pd_pools.architecture == "pd"
    assert pd.to_pools() == pd_pools == to_pools(PD)
    assert pd_pools.pool("prefill").count == 2  # num_instances is count's alias


def test_round_trips():
    for pools in (to_pools(COLOCATED_POOLS), to_pools(PD_POOLS)):
        assert to_pools(pools.to_legacy()) == pools
        assert PoolsDeployment.model_validate(pools.model_dump()) == pools
        assert PoolsDeployment.model_validate_json(pools.model_dump_json()) == pools
    for legacy in (Deployment.model_validate(COLOCATED), PDDeployment.model_validate(PD)):
        assert to_legacy(legacy.to_pools()) == legacy
    cfg = _validate(PD_POOLS)
    assert SimulationConfig.model_validate(cfg.model_dump()) == cfg
    assert SimulationConfig.model_validate_json(cfg.model_dump_json()) == cfg


def test_defaults_and_aliases():
    colo = to_pools({"pools": [{"role": "colocated", **INSTANCE}]})
    assert colo.router == "round-robin" and colo.pools[0].count == 1
    assert to_pools({"pools": [{"role": "colocated", **INSTANCE}],
                     "router": "least-loaded"}).router == "least-outstanding-tokens"
    pd = to_pools({"pools": [{"role": "prefill", **INSTANCE}, {"role": "decode", **INSTANCE}],
                   "decode_router": "ils"})
    assert pd.router == "least-loaded" and pd.decode_router == "least-loaded"
    legacy = pd.to_legacy()
    assert legacy.prefill_router == "least-loaded" and legacy.router == "least-loaded"
    # either order of the two pools; the prefill pool comes first once resolved
    swapped = to_pools({**PD_POOLS, "pools": PD_POOLS["pools"][::-1]})
    assert swapped.to_legacy() == PDDeployment.model_validate(PD)


@pytest.mark.parametrize("roles", [["prefill"], ["decode", "decode"], ["colocated", "prefill"],
                                   ["prefill", "prefill", "decode"], ["attention", "ffn"],
                                   ["prefill", "attention"], ["decode", "attention", "ffn"]])
def test_roles_are_one_colocated_pool_or_prefill_and_decode(roles):
    loc, msg, lines = _error({"pools": [{"role": r, **INSTANCE} for r in roles]})
    assert loc == ("deployment", "pools")
    assert "one prefill, one attention and one ffn pool" in msg
    assert "several pools per role are not supported" in msg
    assert lines[0].startswith("deployment.pools: ")


def test_pools_serve_one_model():
    dep = {"pools": [{"role": "prefill", **INSTANCE},
                     {"role": "decode", **INSTANCE, "model": "qwen3-32b"}]}
    loc, msg, lines = _error(dep)
    assert loc == ("deployment", "pools", 1, "model")
    assert "the prefill and decode pools must serve the same model" in msg
    assert lines == [f"deployment.pools[1].model: {msg}"]
    loc, msg, _ = _error({**PD, "decode": {**PD["decode"], "model": "qwen3-32b"}})
    assert loc == ("deployment", "decode", "model")
    assert "the prefill and decode pools must serve the same model" in msg


@pytest.mark.parametrize("deployment, loc, text", [
    ({**COLOCATED_POOLS, "bogus": 1}, ("deployment", "bogus"), "Extra inputs"),
    ({"pools": [{"role": "colocated", **INSTANCE, "bogus": 1}]},
     ("deployment", "pools", 0, "bogus"), "Extra inputs"),
    ({"pools": [{"role": "colocated", **INSTANCE, "tp": 0}]},
     ("deployment", "pools", 0, "tp"), "greater than or equal to 1"),
    ({"pools": [{**INSTANCE}]}, ("deployment", "pools", 0, "role"), "Field required"),
    ({"pools": [{"role": "colocated", **INSTANCE, "count": 2, "num_instances": 2}]},
     ("deployment", "pools", 0), "not both"),
    ({"pools": []}, ("deployment", "pools"), "at least one pool"),
    ({**COLOCATED_POOLS, "num_instances": 2}, ("deployment", "num_instances"),
     "set per pool: pools[i].count"),
    ({**COLOCATED_POOLS, "max_num_seqs": 8}, ("deployment", "max_num_seqs"), "set per pool"),
    ({**COLOCATED_POOLS, "decode_router": "sibyl"}, ("deployment", "decode_router"),
     "only for prefill and decode pools"),
    ({**COLOCATED_POOLS, "assignment": "late"}, ("deployment", "assignment"),
     "only for prefill and decode pools"),
    ({**COLOCATED_POOLS, "router": "sibyl-alg1"}, ("deployment", "router"),
     "not a router of colocated instances"),
    ({**PD_POOLS, "router": "least-requests"}, ("deployment", "router"),
     "not a router of prefill instances"),
    ({**PD_POOLS, "decode_router": "fastest"}, ("deployment", "decode_router"), "Input should"),
    ({**PD_POOLS, "prefill_router": "round-robin"}, ("deployment", "prefill_router"),
     "the prefill router is `router`"),
    ({**PD_POOLS, "architecture": "colocated"}, ("deployment", "architecture"),
     "does not match the pools' roles"),
    ({**PD_POOLS, "assignment": "late"}, ("deployment",), "layerwise_transfer needs"),
])
def test_errors_name_the_field(deployment, loc, text):
    got_loc, msg, _ = _error(deployment)
    assert got_loc == loc and text in msg


def test_set_path_indexes_lists():
    data = {"deployment": PD_POOLS}
    out = set_path(data, "deployment.pools.1.max_num_seqs", 8)
    assert out["deployment"]["pools"][1]["max_num_seqs"] == 8
    assert "max_num_seqs" not in PD_POOLS["pools"][1]  # a copy
    with pytest.raises(ValueError, match="not an index"):
        set_path(data, "deployment.pools.2.tp", 2)


def test_set_path_takes_list_items_as_error_messages_print_them():
    """``pools[1]`` is what a refusal names (``deployment.pools[1].model: ...``): a user
    who copies it into ``--set`` gets that item, as with ``pools.1``."""
    data = {"deployment": PD_POOLS}
    assert (set_path(data, "deployment.pools[1].max_num_seqs", 8)
            == set_path(data, "deployment.pools.1.max_num_seqs", 8))
    assert set_path(data, "deployment.pools[-1].tp", 2)["deployment"]["pools"][1]["tp"] == 2
    with pytest.raises(ValueError, match=r"^deployment\.pools\[2\]\.tp: '2' is not an index"):
        set_path(data, "deployment.pools[2].tp", 2)


def test_an_unknown_key_with_brackets_is_named_whole():
    """pydantic writes union alternatives into error locations with brackets
    (``function-after[...]``); an unknown key of the user's is never one of them."""
    lines = _error({**COLOCATED_POOLS, "pools[0]": {"tp": 2}})[2]
    assert lines == ["deployment.pools[0]: Extra inputs are not permitted"]


def test_planner_helpers_take_the_pool_form():
    assert parse_deployment(PD_POOLS) == PDDeployment.model_validate(PD)
    assert parse_deployment(COLOCATED_POOLS) == Deployment.model_validate(COLOCATED)
    assert strategy_name(to_pools(PD_POOLS)) == "2p3d" and gpus(to_pools(PD_POOLS)) == 5
    two = {"pools": [{"role": "prefill", **INSTANCE, "count": 2, "tp": 2},
                     {"role": "decode", **INSTANCE, "count": 3}]}
    assert gpus(to_pools(two)) == gpus(parse_deployment(two)) == 7


# ----------------------------------------------------------------------------- resolution
def test_resolution_is_one_path():
    colo = resolve(COLOCATED_POOLS)
    assert colo.describe() == resolve(COLOCATED).describe() == \
        resolve_deployment(COLOCATED).describe() == resolve_deployment(COLOCATED_POOLS).describe()
    (spec,) = colo.pool_specs()
    assert (spec.role, spec.num_instances, spec.gpu_name) == (Role.COLOCATED, 2, "h100")
    assert spec.params.num_gpu_blocks == 2999 and colo.handoff() is None
    pd = resolve(PD_POOLS)
    assert pd.describe() == resolve(PD).describe() == resolve_pd(PD).describe()
    assert pd.describe()["strategy"] == "2p3d" and pd.describe()["prefill_router"] == "round-robin"
    pre, dec = pd.pool_specs()
    assert (pre.role, pre.num_instances, dec.role, dec.num_instances) == \
        (Role.PREFILL, 2, Role.DECODE, 3)
    assert pre.params.max_num_seqs == 16 and dec.params.max_num_seqs == 256
    h = pd.handoff()
    assert (h.router, h.assignment, h.layerwise, h.sibyl_delta) == ("sibyl", "early", True, 64)
    assert h.link is pd.link and h.link.bytes_per_token == 131072
    assert pd.handoff("round-robin").router == "round-robin"
    with pytest.raises(ValueError, match="colocated"):
        resolve_deployment(PD_POOLS)
    with pytest.raises(ValueError, match="prefill/decode"):
        resolve_pd(COLOCATED_POOLS)


def test_fitted_decode_cost_and_gpu_names():
    from serveplan.sim.costs import FittedThroughputCost

    dep = {"pools": [{"role": "prefill", **INSTANCE}, {"role": "decode", **INSTANCE,
                                                       "gpu": "h200", "tp": 2}],
           "decode_cost": {"kind": "fitted-throughput", "plateau": True}}
    r = resolve(dep)
    pre, dec = r.pool_specs()
    assert isinstance(dec.cost, FittedThroughputCost) and dec.cost.plateau
    assert (pre.gpu_name, dec.gpu_name) == ("h100", "h200")
    assert r.describe()["decode"]["decode_cost"]["kind"] == "fitted-throughput"


# ----------------------------------------------------------------------------- runs
def _assert_same_run(a: xr.Dataset, b: xr.Dataset) -> None:
    """Identical Datasets but for the ``config`` attribute (each keeps the form it was given
    in), whose deployments are the same pools."""
    ca, cb = (json.loads(ds.attrs["config"]) for ds in (a, b))
    assert to_pools(ca["deployment"]) == to_pools(cb["deployment"])
    assert {k: v for k, v in ca.items() if k != "deployment"} == \
        {k: v for k, v in cb.items() if k != "deployment"}
    a, b = a.copy(), b.copy()
    a.attrs = {k: v for k, v in a.attrs.items() if k != "config"}
    b.attrs = {k: v for k, v in b.attrs.items() if k != "config"}
    xr.testing.assert_identical(a, b)


@pytest.mark.parametrize("old, pools", [(COLOCATED, COLOCATED_POOLS), (PD, PD_POOLS)],
                         ids=["colocated", "pd"])
def test_same_dataset_whatever_the_form(old, pools, sim_compiled, oracle_8b):
    a = serveplan.simulate(old, WORKLOAD, seed=3, slo={"ttft_ms": 500, "tpot_ms": 40})
    b = serveplan.simulate(pools, WORKLOAD, seed=3, slo={"ttft_ms": 500, "tpot_ms": 40})
    _assert_same_run(a, b)
    c = serveplan.simulate(to_pools(old), WORKLOAD, seed=3, slo={"ttft_ms": 500, "tpot_ms": 40})
    _assert_same_run(a, c)
    assert json.loads(a.attrs["summary"])["completed"] == 50


def _old_form(deployment: dict) -> dict:
    """The older form of a pool-form mapping (as the examples were written before)."""
    legacy = to_legacy(deployment).model_dump(exclude_defaults=True)
    return {**legacy, "architecture": to_pools(deployment).architecture}


@pytest.mark.parametrize("name", ["llama8b-h100", "pd-sibyl", "pd-pools"])
def test_examples_match_their_older_form(name, sim_compiled, oracle_8b):
    data = yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text())
    assert "pools" in data["deployment"]
    data = set_path(data, "workload.num_requests", 60)
    a = serveplan.simulate(data["deployment"], data["workload"], data["seed"], slo=data["slo"])
    b = serveplan.simulate(_old_form(data["deployment"]), data["workload"], data["seed"],
                           slo=data["slo"])
    _assert_same_run(a, b)
    assert json.loads(a.attrs["summary"])["completed"] == 60
    gpus_of = [(p["gpu"], p.get("count", p.get("num_instances", 1)))
               for p in data["deployment"]["pools"]]
    assert list(a["gpu"].values) == [g for g, n in gpus_of for _ in range(n)]


def test_pd_pools_example_loads():
    cfg = load_config(EXAMPLES / "pd-pools.yaml")
    d = cfg.deployment
    assert isinstance(d, PoolsDeployment) and d.architecture == "pd"
    assert [(p.role, p.gpu, p.count) for p in d.pools] == [("prefill", "h100", 2),
                                                           ("decode", "h200", 4)]
    assert cfg.workload.num_requests == 200


@pytest.mark.parametrize("engine, given, want", [
    (None, None, "prefill"), ("vllm", None, "recompute"), ("sglang", None, "decode"),
    ("trtllm", None, "decode"), ("vllm", "prefill", "prefill"), (None, "decode", "decode")])
def test_first_token_source_follows_the_engine(engine, given, want):
    """Pools that name an engine take the first token from the decode instance, as the
    engines' disaggregated serving does (docs/engines.md): vLLM's recomputes the last
    prompt token and samples it, SGLang's and TensorRT-LLM's stream the token that came
    with the KV; engine-less pools keep the prefill's token; ``first_token`` overrides."""
    pools = [{**pool, **({"engine": engine} if engine else {})} for pool in PD_POOLS["pools"]]
    dep = {**PD_POOLS, "pools": pools, **({"first_token": given} if given else {})}
    resolved = resolve(dep)
    assert resolved.first_token_source == want
    assert resolved.handoff().first_token == want
    assert resolved.describe()["first_token"] == want


def test_a_pool_gives_its_engines_capture_sizes():
    pool = {"role": "colocated", "model": "llama-3.1-8b", "gpu": "h100", "engine": "sglang"}
    given = resolve({"pools": [{**pool, "cuda_graph_sizes": [8, 1, 2, 4, 8, 12]}]})
    assert given.pools[0].instance.oracle.graph_sizes.tolist() == [1, 2, 4, 8, 12]
    default = resolve({"pools": [pool]}).pools[0].instance.oracle.graph_sizes
    assert default[:5].tolist() == [1, 2, 4, 8, 12] and default[-1] == 256  # SGLang's, H100 TP 1
    with pytest.raises(ValidationError):
        resolve({"pools": [{**pool, "cuda_graph_sizes": [0, 4]}]})

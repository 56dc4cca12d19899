"""``serveplan goodput`` on an attention/FFN-disaggregated deployment (pool form)."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from serveplan.cli import app
from serveplan.config import SLO
from serveplan.deployments import strategy_name
from serveplan.goodput import GoodputConfig
from serveplan.pools_config import PoolsDeployment
from serveplan.search import SearchSpec, enumerate_strategies, run_search

SPEC = SearchSpec(model="llama-3.1-8b", gpu="h100", isl=1024, osl=64, gpus=3, tp=(1,),
                  architectures=("afd",), micro_batches=(2,),
                  slo=SLO(ttft_ms=1000, tpot_ms=40), fidelity="analytic",
                  num_requests=400, seeds=1, rtol=0.05)


def _config(tmp_path, deployment: dict, fidelity: str = "analytic"):
    cfg = {"deployment": deployment, "workload": SPEC.workload(),
           "slo": {"ttft_ms": 1000, "tpot_ms": 40},
           "goodput": {"fidelity": fidelity, "seeds": 1, "rtol": 0.05}}
    path = tmp_path / "afd.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def _afd_deployment() -> dict:
    (d,) = [d for d in enumerate_strategies(SPEC) if strategy_name(d) == "1p1a1f"]
    return d.model_dump(mode="json", exclude_none=True)


def test_afd_config_keeps_its_pools():
    cfg = GoodputConfig.model_validate({"deployment": _afd_deployment(),
                                        "workload": SPEC.workload(), "slo": {"ttft_ms": 1000}})
    assert isinstance(cfg.deployment, PoolsDeployment)
    assert [p.role for p in cfg.deployment.pools] == ["prefill", "attention", "ffn"]


def test_goodput_of_an_afd_config_is_the_search_row(tmp_path):
    """The same strategy evaluated two ways -- parsed from a goodput YAML, and enumerated
    by the strategy search -- gives the same goodput and GPU count (3: one per role)."""
    ds = run_search(SPEC)
    names = list(ds["name"].values)
    row = ds.isel(strategy=names.index("1p1a1f-tp1-mb2"))
    deployment = json.loads(str(row["deployment"].values))
    assert PoolsDeployment.model_validate(deployment) == PoolsDeployment.model_validate(
        _afd_deployment())
    res = CliRunner().invoke(app, ["goodput", str(_config(tmp_path, deployment)), "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["strategy"] == "1p1a1f" and out["gpus"] == 3
    assert out["goodput"] > 0
    assert out["goodput"] == pytest.approx(float(row["goodput"]), rel=1e-12)


def test_afd_at_the_request_level_is_refused(tmp_path):
    res = CliRunner().invoke(app, ["goodput", str(_config(tmp_path, _afd_deployment(),
                                                          fidelity="request"))])
    assert res.exit_code == 1
    assert "Traceback" not in res.output and "request" in res.output


def test_afd_analytic_level_counts_the_engines_runtime(tmp_path):
    """The analytic level of an AFD deployment sees the engine's runtime as a simulation
    does: a front end adding 0.1 s to every token moves the mean and P90 TTFT by exactly
    0.1 s (a latency moves no step), and a 0.2 s handoff is in the KV transfer."""
    from test_goodput import _engine_profile

    from serveplan.afd_prepared import PreparedAFD
    from serveplan.config import PoissonWorkload

    load = PoissonWorkload(kind="poisson", rate=1.0, num_requests=40, isl=512, osl=16)

    def prepared(profile: str) -> PreparedAFD:
        d = _afd_deployment()
        d["pools"] = [{**p, "engine": "vllm", "engine_version": "0.11.0",
                       "runtime_profile": profile} for p in d["pools"]]
        return PreparedAFD(PoolsDeployment.model_validate(d), load)

    plain, slow, handoff = (prepared(_engine_profile(tmp_path, name, **terms)) for name, terms in
                            (("plain", {}), ("slow", {"frontend_output_s": 0.1}),
                             ("handoff", {"disagg_handoff_s": 0.2})))
    a0, a1 = plain.analytic([1.0, 2.0]), slow.analytic([1.0, 2.0])
    assert a1.ttft_mean - a0.ttft_mean == pytest.approx([0.1, 0.1], abs=1e-12)
    assert a1.ttft_quantile(0.9) - a0.ttft_quantile(0.9) == pytest.approx([0.1, 0.1], abs=1e-9)
    assert handoff.kv_transfer_s - plain.kv_transfer_s == pytest.approx(0.2, abs=1e-12)

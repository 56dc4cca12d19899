"""Runtime terms carried outside the measured runs they were fitted on are announced.

The domain checks are hand cases: a dense model on a GPU and at a version the domain does
not hold, against a MoE model inside it. The shipped profiles' domains are checked against
the end-to-end rows they were fitted on where that data is present.
"""

import importlib
import json
from pathlib import Path

import pytest
import xarray as xr
from pydantic import ValidationError
from typer.testing import CliRunner

from serveplan.cli import app
from serveplan.estimator import notes
from serveplan.estimator.catalog import resolve_model
from serveplan.estimator.memory import parameter_count
from serveplan.estimator.runtime import FitDomain, engine_runtime, load_runtime_profile
from serveplan.resolution import resolve

DOMAIN = FitDomain(source="12 measured runs", gpus=("b200", "b300"),
                   models=("deepseek-ai/DeepSeek-V3",), dense=False, moe=True,
                   versions=("0.5.5", "0.5.10"))
DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "e2e" / "aic_silicon_blackwell"


@pytest.fixture(autouse=True)
def fresh_announcements(monkeypatch):
    monkeypatch.setattr(notes, "_SAID", set())


def test_inside_the_domain_says_nothing():
    moe = resolve_model("deepseek-v3")
    assert DOMAIN.outside("b200", moe, "0.5.9") == []
    assert DOMAIN.outside("b300", moe, None) == []  # no version given: the newest entry


def test_each_way_outside_is_named():
    dense = resolve_model("llama-3.1-8b")
    how = DOMAIN.outside("h100", dense, "0.4.3")
    assert len(how) == 3
    assert "h100" in how[0] and "b200, b300" in how[0]
    assert "llama-3.1-8b is dense" in how[1] and "MoE models only (DeepSeek-V3)" in how[1]
    assert "0.4.3" in how[2] and "0.5.5 to 0.5.10" in how[2]
    # release numbers compare as parse_version reads them: 0.5.10.post1 is inside
    assert DOMAIN.outside("b200", resolve_model("deepseek-v3"), "0.5.10.post1") == []


def _profile(tmp_path, terms: dict, name: str = "sglang.json") -> Path:
    prof = load_runtime_profile("sglang").model_dump(mode="json")
    prof.update(terms=terms, domain=DOMAIN.model_dump(mode="json"))
    path = tmp_path / name
    path.write_text(json.dumps(prof))
    return path


def test_fitted_terms_outside_are_announced_once_and_recorded(tmp_path, capsys):
    path = _profile(tmp_path, {"frontend_output_s": 0.18})
    dense = resolve_model("llama-3.1-8b")
    first = engine_runtime("sglang", None, "h100", 80.0, path, model=dense)
    engine_runtime("sglang", None, "h100", 80.0, path, model=dense)
    err = capsys.readouterr().err
    assert err.count("note: sglang's runtime terms (front-end latency 180 ms)") == 1
    assert "12 measured runs" in err and "calibrate --runs" in err
    assert first.describe()["runtime_terms_outside_fit"] == list(first.outside_fit)
    assert len(first.outside_fit) == 2  # the GPU and the dense model


def test_nothing_to_say_inside_or_without_fitted_terms(tmp_path, capsys):
    fitted = _profile(tmp_path, {"frontend_output_s": 0.18})
    unfitted = _profile(tmp_path, {}, "unfitted.json")
    inside = engine_runtime("sglang", None, "b200", 180.0, fitted,
                            model=resolve_model("deepseek-v3"))
    bare = engine_runtime("sglang", None, "h100", 80.0, unfitted,
                          model=resolve_model("llama-3.1-8b"))
    assert inside.terms.frontend_output_s == 0.18  # fitted terms, inside their domain
    assert inside.outside_fit == () and bare.outside_fit == ()
    assert "runtime_terms_outside_fit" not in inside.describe()
    assert capsys.readouterr().err == ""


def test_simulate_says_so_on_stderr(tmp_path):
    cfg = tmp_path / "sim.yaml"
    cfg.write_text(
        "deployment:\n  pools:\n    - {role: colocated, model: llama-3.1-8b, gpu: h100, "
        "engine: sglang, max_model_len: 4096}\n"
        "workload: {kind: closed-loop, concurrency: 1, num_requests: 4, isl: 256, osl: 8}\n")
    out = tmp_path / "run.nc"
    r = CliRunner().invoke(app, ["simulate", str(cfg), "--json", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "note: sglang's runtime terms" in r.stderr and "llama-3.1-8b is dense" in r.stderr
    with xr.open_dataset(out) as ds:  # the result records it too
        resolved = json.loads(ds.attrs["resolved"])
    assert any("h100" in how for how in resolved["runtime_terms_outside_fit"])


@pytest.mark.skipif(not DATA.exists(), reason="needs ../shared/data/e2e")
def test_shipped_domains_are_the_rows_they_were_fitted_on(accuracy_e2e):  # bench on the path
    """The profiles record what ``bench/accuracy_e2e.py --write-profiles`` computes from
    the data as it is now: each engine's expressible rows, each run once."""
    from serveplan.e2e import expressible, load_rows

    rows = [r for r in load_rows(DATA / "silicon_blackwell.csv")
            if expressible(r, DATA) is None]
    domains = importlib.import_module("accuracy_e2e_profiles").fit_domains(rows, DATA)
    assert sorted(domains) == ["sglang", "trtllm", "vllm"]
    for engine, domain in domains.items():
        assert load_runtime_profile(engine).domain == domain
    assert domains["sglang"].moe and not domains["sglang"].dense  # the shipped rows' fact
    assert "h100" not in domains["vllm"].gpus


@pytest.mark.parametrize("name, billions", [
    ("llama-3.1-8b", 8.03), ("llama-3.1-70b", 70.55), ("mixtral-8x7b", 46.70),
    ("deepseek-v3", 671.03)])
def test_parameter_count_is_the_published_size(name, billions):
    """The model cards' totals: Llama-3.1 8.03 B and 70.55 B (Meta's safetensors index),
    Mixtral-8x7B 46.70 B, DeepSeek-V3 671 B without its MTP module."""
    assert parameter_count(resolve_model(name)) / 1e9 == pytest.approx(billions, abs=0.01)


def test_a_model_outside_the_fitted_sizes_is_named():
    sized = DOMAIN.model_copy(update={"params_b": (600.0, 700.0)})
    assert sized.outside("b200", resolve_model("deepseek-v3"), "0.5.9") == []
    small_moe = resolve_model("mixtral-8x7b")  # MoE, as the domain's models: only its size
    assert sized.outside("b200", small_moe, "0.5.9") == [
        "mixtral-8x7b-v0.1 has 46.7 B parameters; theirs had 600.0 to 700.0 B"]


def test_the_size_range_holds_every_fitted_model():
    models = {n: resolve_model(n) for n in ("llama-3.1-8b", "llama-3.1-70b")}
    domain = FitDomain.of("2 runs", ["h100"], models)
    assert domain.params_b == (8.0, 70.6)  # 8.03 rounded down, 70.55 up
    assert all(domain.outside("h100", m) == [] for m in models.values())
    assert "405.9 B parameters" in domain.outside("h100", resolve_model("llama-3.1-405b"))[0]


def test_a_size_range_upside_down_is_refused():
    with pytest.raises(ValidationError, match="params_b"):
        FitDomain(**{**DOMAIN.model_dump(), "params_b": (70.0, 8.0)})


def test_an_instance_outside_the_fitted_sizes_is_named():
    sized = DOMAIN.model_copy(update={"gpus_per_instance": (4, 32)})
    moe = resolve_model("deepseek-v3")
    assert sized.outside("b200", moe, "0.5.9", 8) == []
    assert sized.outside("b200", moe, "0.5.9", 32) == []  # the ends are inside
    assert sized.outside("b200", moe, "0.5.9", 1) == [
        "an instance runs on 1 GPU(s); theirs on 4 to 32"]
    assert sized.outside("b200", moe, "0.5.9", 64) == [
        "an instance runs on 64 GPU(s); theirs on 4 to 32"]
    assert sized.outside("b200", moe, "0.5.9") == []  # not given: not checked


def test_the_instance_range_is_the_runs_fewest_and_most():
    models = {"llama-3.1-70b": resolve_model("llama-3.1-70b")}
    assert FitDomain.of("3 runs", ["h100"], models, instance_gpus=[8, 2, 4]
                        ).gpus_per_instance == (2, 8)
    assert FitDomain.of("3 runs", ["h100"], models).gpus_per_instance is None
    with pytest.raises(ValidationError, match="gpus_per_instance"):
        FitDomain(**{**DOMAIN.model_dump(), "gpus_per_instance": (8, 2)})


def test_resolution_checks_an_instance_of_tp_x_pp_x_dp_gpus(tmp_path):
    """A pool at tp 2, pp 2 (dp 1) runs 4 GPUs an instance: outside a domain of 8 to 8."""
    prof = load_runtime_profile("vllm").model_dump(mode="json")
    domain = FitDomain.of("2 runs", ["h100"], {"llama-3.1-8b": resolve_model("llama-3.1-8b")},
                          instance_gpus=[8])
    prof.update(terms={"frontend_output_s": 0.02}, domain=domain.model_dump(mode="json"))
    path = tmp_path / "vllm.json"
    path.write_text(json.dumps(prof))
    pool = {"role": "colocated", "model": "llama-3.1-8b", "gpu": "h100", "engine": "vllm",
            "tp": 2, "pp": 2, "runtime_profile": str(path), "max_model_len": 4096}
    runtime = resolve({"pools": [pool]}).pools[0].instance.runtime
    assert runtime.outside_fit == ("an instance runs on 4 GPU(s); theirs on 8 to 8",)


def test_a_mode_the_runs_did_not_serve_is_named():
    moe = resolve_model("deepseek-v3")
    colocated = DOMAIN.model_copy(update={"modes": ("colocated",)})
    assert colocated.outside("b200", moe, "0.5.9", disaggregated=False) == []
    assert colocated.outside("b200", moe, "0.5.9", disaggregated=True) == [
        "it runs disaggregated; theirs ran colocated only"]
    assert colocated.outside("b200", moe, "0.5.9") == []  # not given: not checked
    both = DOMAIN.model_copy(update={"modes": ("colocated", "disaggregated")})
    assert both.outside("b200", moe, "0.5.9", disaggregated=True) == []
    assert DOMAIN.outside("b200", moe, "0.5.9", disaggregated=True) == []  # not recorded


def test_the_modes_are_the_runs_and_say_each_once():
    models = {"llama-3.1-70b": resolve_model("llama-3.1-70b")}
    assert FitDomain.of("3 runs", ["h100"], models, disaggregated=[False, False]
                        ).modes == ("colocated",)
    assert FitDomain.of("3 runs", ["h100"], models, disaggregated=[True, False, True]
                        ).modes == ("colocated", "disaggregated")
    assert FitDomain.of("3 runs", ["h100"], models).modes is None
    for bad in ((), ("colocated", "colocated"), ("pd",)):
        with pytest.raises(ValidationError, match="modes"):
            FitDomain(**{**DOMAIN.model_dump(), "modes": bad})


def test_resolution_names_a_prefill_decode_split_outside_colocated_runs(tmp_path):
    """Every pool of a prefill/decode deployment is checked as disaggregated; the same
    instance colocated is inside a domain of colocated runs."""
    prof = load_runtime_profile("vllm").model_dump(mode="json")
    domain = FitDomain.of("2 runs", ["h100"], {"llama-3.1-8b": resolve_model("llama-3.1-8b")},
                          disaggregated=[False, False])
    prof.update(terms={"frontend_output_s": 0.02}, domain=domain.model_dump(mode="json"))
    path = tmp_path / "vllm.json"
    path.write_text(json.dumps(prof))
    inst = {"model": "llama-3.1-8b", "gpu": "h100", "engine": "vllm",
            "runtime_profile": str(path), "max_model_len": 4096}
    colocated = resolve({"pools": [{"role": "colocated", **inst}]})
    assert colocated.pools[0].instance.runtime.outside_fit == ()
    split = resolve({"pools": [{"role": "prefill", **inst}, {"role": "decode", **inst}]})
    assert [p.instance.runtime.outside_fit for p in split.pools] == [
        ("it runs disaggregated; theirs ran colocated only",)] * 2

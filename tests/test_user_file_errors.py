"""A calibration profile or runtime profile that fails validation: one line per problem,
naming the field and the file and line it is on (the GPU YAML's: ``test_catalog.py``).
Every expected line number below is counted by hand in the text the test writes."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from serveplan.cli import app
from serveplan.estimator.errors import SpecError
from serveplan.estimator.profile import load_profile
from serveplan.estimator.runtime import load_runtime_profile

BAD_PROFILE = """{
  "name": "mine",
  "kernel_fixed_s": -2e-6,
  "phase_speed": {"prefil": 1.1},
  "dispatch_s": {"attention": 4.5e-5, "router": 1e-6},
  "flash_tile": 0
}
"""


def test_a_bad_calibration_profile_names_each_field_and_its_line(tmp_path):
    path = tmp_path / "mine.json"
    path.write_text(BAD_PROFILE)
    with pytest.raises(SpecError) as err:
        load_profile(path=path)
    assert sorted(str(err.value).splitlines()) == sorted([
        f"kernel_fixed_s: Input should be greater than or equal to 0 (got -2e-06) "
        f"({path} line 3)",  # YAML reads -2e-6 as a string: the line is found as JSON
        f"phase_speed: unknown phase(s) ['prefil']; valid: ['prefill', 'decode'] "
        f"({path} line 4)",
        "dispatch_s: unknown module(s) ['router']; known: ('embedding', 'norm', "
        "'attention', 'mlp', 'moe', 'final_norm', 'lm_head', 'sampler') "
        f"({path} line 5)",
        f"flash_tile: Input should be greater than 0 (got 0) ({path} line 6)"])


def test_the_cli_prints_every_problem_of_a_profile_once(tmp_path):
    path = tmp_path / "mine.json"
    path.write_text(BAD_PROFILE)
    r = CliRunner().invoke(app, ["estimate", "--model", "llama-3.1-8b", "--gpu", "h100",
                                 "--profile", str(path)])
    assert r.exit_code == 1 and "Traceback" not in r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 4 and all(ln.startswith("error: ") for ln in lines), r.output
    assert {ln.split(":")[1].strip() for ln in lines} == {
        "kernel_fixed_s", "phase_speed", "dispatch_s", "flash_tile"}


def _shipped_runtime() -> dict:
    return load_runtime_profile("vllm").model_dump(mode="json")


def test_a_bad_runtime_profile_names_every_problem_with_its_nested_field(tmp_path):
    data = _shipped_runtime()
    data["engine"] = "vlm"
    data["terms"]["frontend_prompt_token_s"] = -1.0
    text = json.dumps(data, indent=1)
    path = tmp_path / "runtime.json"
    path.write_text(text)
    term_line = next(n for n, line in enumerate(text.splitlines(), 1)
                     if '"frontend_prompt_token_s"' in line)
    with pytest.raises(SpecError) as err:
        load_runtime_profile("vllm", path)
    assert str(err.value).splitlines() == [
        f"engine: Input should be 'vllm', 'sglang' or 'trtllm' (got 'vlm') ({path} line 2)",
        "terms.frontend_prompt_token_s: Input should be greater than or equal to 0 "
        f"(got -1.0) ({path} line {term_line})"]


def test_a_missing_field_points_at_the_mapping_that_lacks_it(tmp_path):
    """Nested, the line of the mapping's key; at the top level no line: the file alone."""
    data = _shipped_runtime()
    del data["versions"][0]["label"]
    del data["engine"]
    text = json.dumps(data, indent=1)
    path = tmp_path / "runtime.json"
    path.write_text(text)
    item_line = 1 + text.splitlines().index(' "versions": [') + 1  # its "{" line
    with pytest.raises(SpecError) as err:
        load_runtime_profile("vllm", path)
    assert str(err.value).splitlines() == [
        f"engine: Field required ({path})",
        f"versions[0].label: Field required ({path} line {item_line})"]


def test_a_value_the_file_does_not_hold_there_names_the_file_alone(tmp_path):
    """JSON keeps the last of two equal keys; the line search finds the first, which holds
    another value: no line is claimed, the file is still named."""
    text = json.dumps(_shipped_runtime())
    path = tmp_path / "runtime.json"
    path.write_text('{"engine": "vllm", ' + text[1:].replace('"engine": "vllm"', '"engine": "x"'))
    with pytest.raises(SpecError) as err:
        load_runtime_profile("vllm", path)
    assert str(err.value) == (
        f"engine: Input should be 'vllm', 'sglang' or 'trtllm' (got 'x') ({path})")


def test_another_engines_runtime_profile_is_refused(tmp_path):
    """An SGLang profile given to a vLLM pool would run vLLM with SGLang's terms and knob
    defaults (its 154 ms front-end latency among them): refused, naming both engines."""
    path = tmp_path / "sglang.json"
    path.write_text(json.dumps(load_runtime_profile("sglang").model_dump(mode="json")))
    assert load_runtime_profile("sglang", path).engine == "sglang"
    with pytest.raises(SpecError) as err:
        load_runtime_profile("vllm", path)
    assert str(err.value) == (f"runtime_profile: {path} is a runtime profile of sglang, "
                              "not of vllm (the engine it was given for)")


def test_a_value_where_a_mapping_belongs_says_so_not_the_class(tmp_path):
    """A pool given as a number: pydantic's message names its own class
    ("... instance of PoolConfig"); the user is told a mapping of fields belongs there."""
    path = tmp_path / "cfg.yaml"
    path.write_text("deployment:\n  pools:\n    - 5\n"
                    "workload: {kind: poisson, rate: 1, num_requests: 10}\n")
    r = CliRunner().invoke(app, ["simulate", str(path)])
    assert r.exit_code == 1
    assert r.stderr.strip() == (f"error: deployment.pools[0]: expected a mapping of fields "
                                f"(name: value) (got 5) ({path} line 3)")

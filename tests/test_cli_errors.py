"""A new user's mistakes through the CLI: one ``error:`` line that names the field or the
file and says what to do, exit status 1, never a traceback.

Every case of the new user's list is a test here.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer.main
import xarray as xr
import yaml
from typer.testing import CliRunner

from serveplan.cli import app
from serveplan.commands.common import dask_client
from serveplan.errors import UserError
from serveplan.results_io import write_netcdf

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
runner = CliRunner()
BINARY = bytes(range(256)) * 4  # not UTF-8 from byte 128, NUL at byte 0


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def one_error(r, *needles: str) -> str:
    """The single ``error:`` line of a failed run, checked to contain ``needles``."""
    assert r.exit_code == 1, r.output
    assert "Traceback" not in r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), r.output
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


@pytest.fixture()
def binary(tmp_path) -> Path:
    path = tmp_path / "blob.bin"
    path.write_bytes(BINARY)
    return path


@pytest.fixture(scope="module")
def goodput_nc(tmp_path_factory) -> Path:
    """A real goodput result (analytic level: no simulator compile)."""
    out = tmp_path_factory.mktemp("g") / "goodput.nc"
    r = run("goodput", EXAMPLES / "goodput-llama8b.yaml", "--fidelity", "analytic", "--out", out)
    assert r.exit_code == 0, r.output
    return out


# ----------------------------------------------------------------------------- files
@pytest.mark.parametrize("command", ["pareto", "plot", "export"])
def test_garbage_result_file_is_named(command, binary):
    args = {"pareto": ["pareto", binary], "plot": ["plot", binary, "--out", "x.png"],
            "export": ["export", "vllm", binary]}[command]
    one_error(run(*args), f"{binary} is not a serveplan NetCDF result")


def test_binary_config_and_grid_are_named(binary, tmp_path):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_bytes(BINARY)
    one_error(run("simulate", cfg), f"{cfg} is not a text file", "expected a YAML file")
    one_error(run("sweep", cfg, "--out", tmp_path / "s.nc"), f"{cfg} is not a text file")
    one_error(run("goodput", cfg), f"{cfg} is not a text file")


def test_binary_trace_is_named_from_flag_and_from_yaml(binary, tmp_path):
    one_error(run("simulate", EXAMPLES / "llama8b-h100.yaml", "--trace", binary),
              "--trace", f"{binary} is not a text file", "trace")
    data = yaml.safe_load((EXAMPLES / "mooncake-trace.yaml").read_text())
    data["workload"]["path"] = binary.name  # relative to the YAML file's folder
    cfg = tmp_path / "t.yaml"
    cfg.write_text(yaml.safe_dump(data))
    one_error(run("simulate", cfg), "workload.path", f"{binary} is not a text file")


def test_binary_measurements_csv_is_named(tmp_path):
    csv = tmp_path / "m.csv"
    csv.write_bytes(BINARY)
    one_error(run("calibrate", csv, "--gpu", "h100", "--out", tmp_path / "p.json"),
              f"{csv} is not a text file", "CSV")


def test_invalid_yaml_names_file_and_line(tmp_path):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("deployment:\n  model: llama-3.1-8b\n  gpu: [h100\n")
    one_error(run("simulate", cfg), f"{cfg} line 4", "not valid YAML")


# ----------------------------------------------------------------------------- values
def test_set_without_equals_keeps_its_quotes():
    one_error(run("simulate", EXAMPLES / "llama8b-h100.yaml", "--set", "garbage"),
              "--set expects key.path=value", "got 'garbage'")


def test_set_with_broken_yaml_value():
    one_error(run("simulate", EXAMPLES / "llama8b-h100.yaml", "--set", "seed=[1,"),
              "--set seed", "'[1,'", "not valid YAML")


def test_isl_zero_is_one_line_naming_the_field():
    one_error(run("simulate", EXAMPLES / "llama8b-h100.yaml", "--isl", "0"),
              "workload.isl:", "greater than or equal to 1", "got 0")


def test_union_error_keeps_the_alternative_that_explains_it():
    line = one_error(run("simulate", EXAMPLES / "llama8b-h100.yaml", "--set",
                         "workload.isl={dist: lognormal, sigma: 1}"),
                     "workload.isl: give exactly one of mean and median")
    assert "tagged-union" not in line and "valid integer" not in line


def test_missing_union_tag_names_the_field_and_its_choices(tmp_path):
    data = yaml.safe_load((EXAMPLES / "llama8b-h100.yaml").read_text())
    del data["workload"]["kind"]
    cfg = tmp_path / "no-kind.yaml"
    cfg.write_text(yaml.safe_dump(data, sort_keys=False))
    line_no = cfg.read_text().splitlines().index("workload:") + 1
    line = one_error(run("simulate", cfg), "workload.kind: Field required (one of ",
                     "closed-loop", "poisson", "vllm-bench-serve", f"({cfg} line {line_no})")
    assert "discriminator" not in line
    one_error(run("simulate", EXAMPLES / "llama8b-h100.yaml", "--set",
                  "workload.isl={mean: 300}"),
              "workload.isl.dist: Field required (one of ", "lognormal", "uniform")


def test_yaml_value_error_cites_file_and_line(tmp_path):
    data = yaml.safe_load((EXAMPLES / "llama8b-h100.yaml").read_text())
    data["workload"]["rate"] = -3
    cfg = tmp_path / "neg.yaml"
    cfg.write_text(yaml.safe_dump(data, sort_keys=False))
    line_no = next(i for i, ln in enumerate(cfg.read_text().splitlines(), 1)
                   if ln.strip().startswith("rate:"))
    one_error(run("simulate", cfg), "workload.rate:", "got -3", f"({cfg} line {line_no})")


# ----------------------------------------------------------------------------- result kinds
def test_plot_kind_that_does_not_fit_says_which_does(goodput_nc, tmp_path):
    one_error(run("plot", goodput_nc, "--kind", "bars", "--out", tmp_path / "b.png"),
              "goodput result", "use --kind latency-vs-rate", "bars: search results")
    r = run("plot", goodput_nc, "--out", tmp_path / "g.png")  # no --kind: the one that fits
    assert r.exit_code == 0 and (tmp_path / "g.png").read_bytes()[:4] == b"\x89PNG"


def test_pareto_and_export_name_the_kind_they_got(goodput_nc):
    one_error(run("pareto", goodput_nc), "is a goodput result", "sweep result",
              "search result")
    one_error(run("export", "vllm", goodput_nc), "is a goodput result", "search result")


def test_netcdf_without_kind_is_not_a_result(tmp_path):
    path = tmp_path / "plain.nc"
    xr.Dataset({"x": ("i", [1.0, 2.0])}).to_netcdf(path)
    one_error(run("pareto", path), "not a serveplan result", "no 'kind' attribute")


def test_goodput_file_carries_kind_and_units(goodput_nc):
    from serveplan.results_io import missing_units

    with xr.open_dataset(goodput_nc) as ds:
        assert ds.attrs["kind"] == "goodput"
        assert missing_units(ds) == []
        assert ds["rate"].attrs["units"] == "req/s" and ds["ttft_p_s"].attrs["units"] == "s"


def test_write_netcdf_rejects_unknown_kind(tmp_path):
    with pytest.raises(ValueError, match="kind given an invalid value"):
        write_netcdf(xr.Dataset(), tmp_path / "x.nc", kind="mystery")


# ----------------------------------------------------------------------------- export
@pytest.mark.parametrize("port", ["-5", "0", "70000"])
def test_export_refuses_ports_outside_the_tcp_range(port):
    one_error(run("export", "vllm", EXAMPLES / "llama8b-h100.yaml", "--port", port),
              f"--port given an invalid value: {port}", "1..65535")


def test_export_refuses_a_deployment_that_does_not_fit(tmp_path):
    cfg = tmp_path / "big.yaml"
    cfg.write_text(yaml.safe_dump({"deployment": {"model": "llama-3.1-405b", "gpu": "h100",
                                                  "tp": 1}}))
    r = run("export", "vllm", cfg)
    one_error(r, "do not fit", "short by", "GiB", "tp ≥ 16 fits")
    assert "vllm serve" not in r.output


# ----------------------------------------------------------------------------- dask
def test_unreachable_scheduler_fails_at_once_naming_the_address():
    with pytest.raises(UserError, match=r"cannot reach a Dask scheduler at tcp://127\.0\.0\.1:1"
                       r": .*--workers N"):
        dask_client("tcp://127.0.0.1:1", None)
    with pytest.raises(UserError, match="port is not a number"):
        dask_client("127.0.0.1:99999", None)
    with pytest.raises(UserError, match="not both"):
        dask_client("tcp://127.0.0.1:1", 2)


def test_reachable_scheduler_connects():
    from dask.distributed import LocalCluster

    with LocalCluster(n_workers=1, processes=False, dashboard_address=None) as cluster:
        client = dask_client(cluster.scheduler_address, None)
        try:
            assert client.submit(sum, [1, 2]).result() == 3
        finally:
            client.close()


def test_sweep_with_unreachable_scheduler(tmp_path):
    one_error(run("sweep", EXAMPLES / "sweep-llama8b.yaml", "--out", tmp_path / "s.nc",
                  "--scheduler", "tcp://127.0.0.1:1"), "tcp://127.0.0.1:1", "--workers")


# ----------------------------------------------------------------------------- help
def test_version():
    from serveplan import __version__

    r = run("--version")
    assert r.exit_code == 0 and r.output.strip() == f"serveplan {__version__}"


def _options_without_help() -> list[str]:
    group = typer.main.get_command(app)
    return sorted(f"{name} {p.name}" for name, cmd in group.commands.items()
                  for p in cmd.params if not getattr(p, "help", None))


def test_options_of_the_commands_owned_here_have_help():
    mine = ("pareto", "plot", "export", "calibrate", "compare-routers")
    assert [o for o in _options_without_help() if o.split()[0] in mine] == []


def test_every_option_has_help():
    assert _options_without_help() == []


def test_help_is_not_wrapped_at_80_columns_when_piped():
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "TERMINAL_WIDTH")}
    out = subprocess.run([sys.executable, "-m", "serveplan.cli", "pareto", "--help"],
                         capture_output=True, text=True, env=env, check=True).stdout
    assert max(len(ln) for ln in out.splitlines()) > 100
    assert any("TTFT limit in seconds (e.g. 0.5); points above it stay off the frontier." in ln
               for ln in out.splitlines())


def test_sweep_help_describes_the_grid_format():
    out = run("sweep", "--help").output
    for needle in ("base:", "grid:", "measure:", "workload.rate: ["):
        assert needle in out


# ----------------------------------------------------------------------------- catalog
def test_model_name_without_version_suffix():
    r = run("memory", "--model", "mixtral-8x7b", "--gpu", "h100", "--tp", "2", "--json")
    assert r.exit_code == 0, r.output


def test_simulate_file_carries_kind_and_units(tmp_path):
    from serveplan.results_io import missing_units

    out = tmp_path / "run.nc"
    r = run("simulate", EXAMPLES / "llama8b-h100.yaml", "-n", "50", "--out", out)
    assert r.exit_code == 0, r.output
    with xr.open_dataset(out) as ds:
        assert ds.attrs.get("kind") == "simulate" and missing_units(ds) == []


# ----------------------------------------------------------------------------- fuzz findings
# Regression tests of bugs the CLI fuzzer found (tests/test_fuzz.py); each refusal is one
# error: line naming the field (or flag) and, where the value came from a file, the file.
@pytest.mark.parametrize("flag, expected", [("--gpu", "a GPU YAML file"),
                                            ("--profile", "a calibration profile JSON")])
def test_binary_gpu_and_profile_files_are_named(flag, expected, binary):
    args = {"--gpu": ["--gpu", binary], "--profile": ["--gpu", "h100", "--profile", binary]}
    one_error(run("estimate", "--model", "llama-3.1-8b", *args[flag]),
              f"{binary} is not a text file", expected)
    one_error(run("memory", "--model", "llama-3.1-8b", *args[flag]),
              f"{binary} is not a text file")


def test_search_names_a_binary_model_once(binary):
    one_error(run("search", "--model", binary, "--gpus", "2", "--fidelity", "analytic"),
              f"{binary} is not a text file", "config.json")


def test_model_json_that_is_not_an_object_is_named(tmp_path):
    path = tmp_path / "config.json"
    path.write_text("[1, 2]")
    one_error(run("estimate", "--model", path, "--gpu", "h100"), f"{path}",
              "expected a JSON object")


def test_set_through_a_value_that_is_not_a_mapping():
    line = one_error(run("simulate", EXAMPLES / "llama8b-h100.yaml", "--set",
                         "workload.rate.x=1"), "workload.rate.x: workload.rate is float 10.0",
                     "no field 'x'")
    assert line.startswith("error: workload.rate.x: ")


def test_goodput_section_that_is_not_a_mapping_names_file_and_line(tmp_path):
    data = yaml.safe_load((EXAMPLES / "goodput-llama8b.yaml").read_text())
    data["slo"] = 5
    cfg = tmp_path / "g.yaml"
    cfg.write_text(yaml.safe_dump(data, sort_keys=False))
    line_no = cfg.read_text().splitlines().index("slo: 5") + 1
    one_error(run("goodput", cfg, "--ttft", "1"), "error: slo: expected a mapping",
              f"({cfg} line {line_no})")


@pytest.mark.parametrize("value, field", [
    ("{dist: lognormal, median: .inf, sigma: 1}", "workload.isl.median"),
    ("{dist: lognormal, mean: 500, sigma: 1e300}", "workload.isl.sigma"),
    ("{dist: lognormal, mean: 500, sigma: 1, max: 99999999999}", "workload.isl.max"),
])
def test_lognormal_bounds_name_the_field(value, field):
    one_error(run("simulate", EXAMPLES / "llama8b-h100.yaml", "--set", f"workload.isl={value}"),
              f"error: {field}: must be at most")


@pytest.mark.parametrize("workload, field", [
    ("{kind: inference-perf, stages: [{rate: 1e308, duration: 1e308}]}", "workload"),
    ("{kind: closed-loop, concurrency: 2, num_requests: 10, think_time_s: 1e300}",
     "workload.think_time_s"),
    ("{kind: gamma, rate: 1e-9, num_requests: 1000}", "workload.rate"),
])
def test_runs_too_long_or_too_large_are_refused(workload, field):
    one_error(run("simulate", EXAMPLES / "llama8b-h100.yaml", "--set", f"workload={workload}"),
              f"error: {field}: ")


def test_record_steps_is_bounded():
    one_error(run("simulate", EXAMPLES / "llama8b-h100.yaml", "--set", "record_steps=1000000000000"),
              "error: record_steps: must be at most 1,048,576")


@pytest.mark.parametrize("args, flag", [
    (["--gpus", "1025"], "--gpus"), (["--gpus", "512", "--tp", "1"], "--gpus"),
    (["--gpus", "2", "--tp", "2048"], "--tp"), (["--gpus", "2", "--seeds", "1001"], "--seeds"),
    (["--gpus", "2", "--requests", "99999999999"], "--requests"),
])
def test_search_bounds_name_the_flag(args, flag):
    one_error(run("search", *args), f"error: {flag}: ")


def test_strategy_count_is_the_enumeration():
    """count_strategies (the --gpus cap) against building the strategies."""
    from serveplan.search import SearchSpec, count_strategies, enumerate_strategies

    for kw in ({"gpus": 7, "tp": (1, 2)}, {"gpus": 16, "tp": (1, 2, 4, 8)},
               {"gpus": 9, "tp": (1, 4), "same_tp": True}, {"gpus": 6, "tp": (2,), "pp": 2},
               {"gpus": 5, "tp": (1,), "architectures": ("pd",)}):
        spec = SearchSpec(model="llama-3.1-8b", gpu="h100", **kw)
        assert count_strategies(spec) == len(enumerate_strategies(spec))


@pytest.mark.parametrize("config, args, field", [
    ("llama8b-h100.yaml", ["--rate", "inf"], "workload.rate"),
    ("llama8b-h100.yaml", ["--set", "workload.kind=gamma", "--set", "workload.cv=1e300"],
     "workload.cv"),
    ("llama8b-h100.yaml", ["--set", "workload.kind=gamma", "--set", "workload.cv=1e-300"],
     "workload.cv"),
    ("llama8b-h100.yaml", ["--set", "workload.isl={dist: lognormal, mean: 1e-310, sigma: 10}"],
     "workload.isl.mean"),
    ("mooncake-trace.yaml", ["--time-scale", "1e-300"], "workload.time_scale"),
    ("pd-sibyl.yaml", ["--set", "deployment.kv_link_bw=1e-300"], "deployment.kv_link_bw"),
    ("pd-sibyl.yaml", ["--set", "deployment.kv_link_latency_s=1e300"],
     "deployment.kv_link_latency_s"),
])
def test_values_that_broke_the_simulator_name_the_field(config, args, field, request):
    """Found probing the fuzzer's neighbourhood: each was a traceback, an internal message
    or silently wrong output (a trace replayed 1e300x slower: median TTFT 0 ms)."""
    if config == "mooncake-trace.yaml":
        request.getfixturevalue("shared_data")  # the example replays a reference trace
    one_error(run("simulate", EXAMPLES / config, "-n", "60", *args), f"error: {field}: ")

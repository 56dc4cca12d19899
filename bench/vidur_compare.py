"""serveplan's event simulator beside Vidur (microsoft/vidur, MLSys'24) on the same requests.

Same trace (ShareGPT lengths, Llama-2 tokenizer), same Poisson arrival times, same model
(Llama-2-7B, fp16), GPU (H100, TP1), batch cap, token budget and KV-cache block count.
Reports both tools' wall time, the speedup and TTFT/TPOT/E2E percentiles side by side, and
the per-step cost each tool assigns to a few batch shapes. Writes
bench/results/vidur_compare.{json,md}.

Vidur runs from its own virtualenv (never the project's); the script skips with a message
when that venv is absent (CI)::

    python3 -m venv /tmp/vidur-venv
    /tmp/vidur-venv/bin/pip install vidur==0.0.26
    .venv/bin/python bench/vidur_compare.py            # first run trains Vidur's forests

Vidur 0.0.26 reads its profiles from the Hugging Face hub cache only; this script lays out
the local copies (``../shared/data/vidur/profiling``: measured ``mlp.csv`` for
Llama-2-7b-hf on H100, ``h100_dgx`` collectives) as hub-cache snapshots under
``<work-dir>/.vidur_cache`` and runs Vidur offline. Vidur's ``attention.csv`` is not
available here: a SYNTHETIC stand-in (``../shared/tools/vidur_standin_attention.py``,
roofline-shaped numbers, not measurements) takes its place, so Vidur's latencies are not
evidence of accuracy; the comparison is of speed and of the modelling choices.
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
SHARED = REPO.parent / "shared"
VIDUR_DATA = SHARED / "data" / "vidur"
STANDIN_TOOL = SHARED / "tools" / "vidur_standin_attention.py"
SHAREGPT = VIDUR_DATA / "processed_traces" / "sharegpt_8k_filtered_stats_llama2_tokenizer.csv"

# Model / GPU names in each tool.
VIDUR_MODEL = "meta-llama/Llama-2-7b-hf"
VIDUR_DEVICE = "h100"
VIDUR_NODE = "h100_dgx"
SP_MODEL = "llama-2-7b"
SP_GPU = "h100"
MAX_MODEL_LEN = 4096  # Llama-2's context; Vidur's profiles and trace clipping stop here
HUB_REV = "0" * 39 + "1"  # any 40-hex revision id for the local hub-cache snapshots
COMPUTE_DS = "local/vidur-h100-llama-2-7b-hf"
NETWORK_DS = "local/vidur-h100-dgx"
TRACE_DATE = "2023-08-21"
PERCENTILES = (50, 90, 99)

# Batch shapes whose step cost both tools are asked for: (label, q tokens, kv tokens after
# the step) per request, as Vidur's Batch(num_q_tokens, num_kv_tokens).
PROBES = [
    ("decode, 1 x 1k ctx", [1], [1024]),
    ("decode, 16 x 2k ctx", [1] * 16, [2048] * 16),
    ("decode, 48 x 2k ctx", [1] * 48, [2048] * 48),
    ("prefill 2048 tokens, empty cache", [2048], [2048]),
    ("prefill chunk 512 after 1536 cached", [512], [2048]),
    ("mixed: 32 decodes (2k ctx) + 2016-token prefill", [1] * 32 + [2016],
     [2048] * 32 + [2016]),
]

# Runs inside Vidur's venv: Vidur's own main() with phase timers, batch count and the
# step-cost probes. Only Vidur's public classes are used; nothing of Vidur is copied.
VIDUR_RUNNER = r'''
import json, sys, time
t0 = time.perf_counter()
from vidur.config import SimulationConfig
from vidur.entities import Batch, Request
from vidur.simulator import Simulator
from vidur.utils.random import set_seeds
t_import = time.perf_counter()
# Vidur 0.0.26 bug: Request.restart() (preemption by recompute) resets the processed-token
# count but not the per-stage one, so the first restarted request trips the assertion
# "num_stage_processed_tokens <= total_tokens". Reset it too (what restart intends).
_restart = Request.restart
def _restart_fixed(self):
    _restart(self)
    self._num_stage_processed_tokens = 0
    self._is_prefill_stage_complete = False
Request.restart = _restart_fixed
probes = json.loads(sys.argv.pop(1))
config = SimulationConfig.create_from_cli_args()
set_seeds(config.seed)
sim = Simulator(config)
t_init = time.perf_counter()
marks = {}
_write = sim._write_output
def _timed_write():
    marks["loop_end"] = time.perf_counter()
    _write()
sim._write_output = _timed_write
sim.run()
t_end = time.perf_counter()
num_batches = Batch._id + 1
rs = next(iter(sim.scheduler._replica_schedulers.values()))
pred = rs._execution_time_predictor
replica_id = rs.replica_id
out = []
for label, q, kv in probes:
    reqs = [Request(0.0, max(k, 1), 2) for k in kv]
    et = pred.get_execution_time(Batch(replica_id, reqs, q, kv), 0)
    d = {a: float(getattr(et, a)) for a in dir(et)  # ms, one layer
         if a.endswith("_time") and not a.startswith("_")
         and a not in ("total_time", "model_time") and not callable(getattr(et, a))}
    attn = sum(d.get(k, 0.0) for k in ("attention_prefill_execution_time",
               "attention_decode_execution_time", "attention_kv_cache_save_execution_time"))
    out.append({"label": label, "total_ms": et.total_time * 1e3,
                "attention_ms": attn * et.num_layers, "per_layer_ms": d})
print("VIDUR_RESULT " + json.dumps({
    "import_s": t_import - t0, "init_s": t_init - t_import,
    "loop_s": marks["loop_end"] - t_init, "write_s": t_end - marks["loop_end"],
    "num_batches": num_batches, "simulated_end_s": sim._time,
    "output_dir": config.metrics_config.output_dir, "probes": out}))
'''


# ----------------------------------------------------------------------------- inputs
def build_trace(n: int, rate: float, seed: int, out_dir: Path) -> dict:
    """Draw ``n`` ShareGPT requests and Poisson arrivals once; write them for both tools.

    Lengths: rows sampled without replacement; prompt + output clipped to the 4096-token
    context by shortening the prompt (what Vidur's trace readers do), so neither tool
    rejects or truncates anything itself.
    """
    rng = np.random.default_rng(seed)
    raw = np.genfromtxt(SHAREGPT, delimiter=",", names=True)
    idx = rng.choice(len(raw), size=n, replace=False)
    prompt = raw["num_prefill_tokens"][idx].astype(np.int64)
    output = raw["num_decode_tokens"][idx].astype(np.int64)
    output = np.clip(output, 1, MAX_MODEL_LEN - 1)
    prompt = np.clip(np.minimum(prompt, MAX_MODEL_LEN - output), 1, None)
    arrival = np.cumsum(rng.exponential(1.0 / rate, size=n))
    arrival -= arrival[0]  # first request at t = 0 (serveplan's trace reader rebases to it)
    out_dir.mkdir(parents=True, exist_ok=True)
    sp_path = out_dir / "trace_serveplan.csv"
    vd_path = out_dir / "trace_vidur.csv"
    with sp_path.open("w") as f:
        f.write("arrived_at,num_prefill_tokens,num_decode_tokens\n")
        for a, p, o in zip(arrival, prompt, output, strict=True):
            f.write(f"{a:.9f},{p},{o}\n")
    with vd_path.open("w") as f:
        f.write("Date,Time,PromptTokenCount,CompletionTokenCount\n")
        for a, p, o in zip(arrival, prompt, output, strict=True):
            f.write(f"{TRACE_DATE},{a:.9f},{p},{o}\n")
    return {"arrival_s": arrival, "prompt": prompt, "output": output,
            "serveplan_csv": sp_path, "vidur_csv": vd_path}


def prepare_vidur_cache(work: Path) -> None:
    """Local profiles as hub-cache snapshots Vidur 0.0.26 accepts with HF_HUB_OFFLINE=1."""
    base = work / ".vidur_cache" / "profiling_data"
    comp = base / "compute" / ("datasets--" + COMPUTE_DS.replace("/", "--"))
    net = base / "network" / ("datasets--" + NETWORK_DS.replace("/", "--"))
    csnap, nsnap = comp / "snapshots" / HUB_REV, net / "snapshots" / HUB_REV
    if (csnap / "attention.csv.xz").exists() and (nsnap / "send_recv.csv.xz").exists():
        return
    for d, snap in ((comp, csnap), (net, nsnap)):
        (d / "refs").mkdir(parents=True, exist_ok=True)
        (d / "refs" / "main").write_text(HUB_REV)
        snap.mkdir(parents=True, exist_ok=True)

    def xz(src: Path, dst: Path) -> None:
        with src.open("rb") as fi, lzma.open(dst, "wb") as fo:
            shutil.copyfileobj(fi, fo)

    prof = VIDUR_DATA / "profiling"
    xz(prof / "compute" / VIDUR_DEVICE / VIDUR_MODEL / "mlp.csv", csnap / "mlp.csv.xz")
    tmp = csnap / "attention.csv"
    # Llama-2-7B: n_embd 4096, 32 query heads, 32 KV heads.
    subprocess.run([sys.executable, str(STANDIN_TOOL), "4096", "32", "32", str(tmp)],
                   check=True, capture_output=True)
    xz(tmp, csnap / "attention.csv.xz")
    tmp.unlink()
    (csnap / "config.json").write_text(json.dumps({"model": VIDUR_MODEL,
                                                   "device_sku": VIDUR_DEVICE}))
    for name in ("all_reduce", "send_recv"):
        xz(prof / "network" / VIDUR_NODE / f"{name}.csv", nsnap / f"{name}.csv.xz")
    (nsnap / "config.json").write_text(json.dumps({"sku": VIDUR_NODE}))


def vidur_args(trace_csv: Path, out_dir: Path, *, num_blocks: int, max_num_seqs: int,
               token_budget: int, native: bool) -> list[str]:
    """Vidur CLI flags mirroring the serveplan deployment."""
    rf = "--random_forrest_execution_time_predictor_config_"
    tr = "--trace_request_generator_config_"
    return [
        "--replica_config_model_name", VIDUR_MODEL,
        "--replica_config_device", VIDUR_DEVICE,
        "--replica_config_network_device", VIDUR_NODE,
        "--replica_config_tensor_parallel_size", "1",
        "--replica_config_num_pipeline_stages", "1",
        "--cluster_config_num_replicas", "1",
        "--global_scheduler_config_type", "round_robin",
        "--replica_scheduler_config_type", "sarathi",
        "--sarathi_scheduler_config_batch_size_cap", str(max_num_seqs),
        "--sarathi_scheduler_config_chunk_size", str(token_budget),
        "--cache_config_block_size", "16",
        "--cache_config_num_blocks", str(num_blocks),
        "--cache_config_watermark_blocks_fraction", "0.01",
        "--request_generator_config_type", "trace_replay",
        tr + "trace_file", str(trace_csv),
        tr + "date", TRACE_DATE,
        tr + "prefill_scale_factor", "1",
        tr + "decode_scale_factor", "1",
        tr + "time_scale_factor", "1",
        tr + "max_tokens", str(MAX_MODEL_LEN),
        "--execution_time_predictor_config_type", "random_forrest",
        rf + "model_profiling_dataset", COMPUTE_DS,
        rf + "network_profiling_dataset", NETWORK_DS,
        rf + "prediction_max_tokens_per_request", str(MAX_MODEL_LEN),
        *([rf + "use_native_execution_time_predictor"] if native else []),
        "--no-metrics_config_store_plots",
        "--no-metrics_config_enable_chrome_trace",
        "--metrics_config_output_dir", str(out_dir),
    ]


def run_vidur(python: Path, work: Path, args: list[str]) -> dict:
    """One Vidur process; wall time, phase times, per-request metrics."""
    runner = work / "vidur_timed_main.py"
    runner.write_text(VIDUR_RUNNER)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled",
           "HF_HUB_DISABLE_TELEMETRY": "1", "PYTHONHASHSEED": "0"}
    probes = json.dumps([[label, q, kv] for label, q, kv in PROBES])
    t = time.perf_counter()
    proc = subprocess.run([str(python), str(runner), probes, *args], cwd=work, env=env,
                          capture_output=True, text=True)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-8000:])
        raise RuntimeError(f"Vidur exited with {proc.returncode}")
    line = next(s for s in proc.stdout.splitlines() if s.startswith("VIDUR_RESULT "))
    res = json.loads(line.split(" ", 1)[1])
    res["wall_s"] = wall
    res["peak_rss_gib_max_child"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20
    return res


def read_vidur_metrics(output_dir: Path, trace: dict) -> dict[str, np.ndarray]:
    """Per-request TTFT/TPOT/E2E (s) from Vidur's request_metrics.csv, in trace order."""
    path = next(Path(output_dir).rglob("request_metrics.csv"))
    data = np.genfromtxt(path, delimiter=",", names=True)
    rid = data["Request_Id"].astype(np.int64)
    rid -= rid.min()
    n = len(trace["arrival_s"])
    ttft = np.full(n, np.nan)
    e2e = np.full(n, np.nan)
    ttft[rid] = data["prefill_e2e_time"]
    e2e[rid] = data["request_e2e_time"]
    restarts = int(np.nansum(data["request_num_restarts"]))
    out = trace["output"].astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(out > 1, (e2e - ttft) / (out - 1), np.nan)
    return {"ttft_s": ttft, "tpot_s": tpot, "e2e_s": e2e, "num_restarts": restarts}


# ----------------------------------------------------------------------------- serveplan
def sp_deployment(max_num_seqs: int, token_budget: int, num_gpu_blocks: int | None) -> dict:
    d = {"model": SP_MODEL, "gpu": SP_GPU, "tp": 1, "dtype": "fp16", "scheduler": "vllm-v1",
         "max_num_seqs": max_num_seqs, "max_num_batched_tokens": token_budget,
         "enable_chunked_prefill": True, "enable_prefix_caching": False, "block_size": 16,
         "max_model_len": MAX_MODEL_LEN, "watermark": 0.01, "gpu_memory_utilization": 0.9}
    if num_gpu_blocks is not None:
        d["num_gpu_blocks"] = num_gpu_blocks
    return d


def run_serveplan(deployment: dict, trace_csv: Path, runs: int) -> dict:
    import serveplan
    from serveplan.sim.results import summarize

    workload = {"kind": "trace", "path": str(trace_csv), "arrival": "trace"}
    t = time.perf_counter()
    serveplan.simulate(deployment, workload, seed=0)  # warm-up: numba cache load / compile
    warm_up = time.perf_counter() - t
    times, ds = [], None
    for _ in range(runs):
        t = time.perf_counter()
        ds = serveplan.simulate(deployment, workload, seed=0)
        times.append(time.perf_counter() - t)
    s = summarize(ds)
    return {"times_s": times, "median_s": statistics.median(times), "warm_up_s": warm_up,
            "total_steps": s["total_steps"], "completed": s["completed"],
            "num_preemptions": s["num_preemptions"], "mean_batch_size": s["mean_batch_size"],
            "duration_s": s["duration_s"],
            "metrics": {k: ds[k].values.copy() for k in ("ttft_s", "tpot_s", "e2e_s")},
            "arrival_s": ds["arrival_s"].values.copy(),
            "resolved": json.loads(ds.attrs["resolved"])}


def serveplan_cold_process(deployment: dict, trace_csv: Path) -> float:
    """A fresh interpreter: import + one simulate (numba's on-disk cache warm)."""
    code = ("import json,sys,time; t=time.perf_counter(); import serveplan; "
            "serveplan.simulate(json.loads(sys.argv[1]), {'kind':'trace','path':sys.argv[2],"
            "'arrival':'trace'}); print(time.perf_counter()-t)")
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", code, json.dumps(deployment), str(trace_csv)],
                   check=True, capture_output=True, text=True)
    return time.perf_counter() - t


def serveplan_probes(deployment: dict) -> list[dict]:
    from serveplan.simulation import resolve_deployment

    oracle = resolve_deployment(deployment).oracle
    out = []
    for label, q, kv in PROBES:
        q_arr = np.asarray(q, dtype=np.float64)
        ctx = np.asarray(kv, dtype=np.float64) - q_arr  # tokens cached before the step
        out.append({"label": label, "total_ms": oracle.step_time(q_arr, ctx) * 1e3})
    return out


# ----------------------------------------------------------------------------- report
def percentiles(x: np.ndarray) -> dict:
    x = x[np.isfinite(x)]
    return {f"p{p}": float(np.percentile(x, p)) * 1e3 for p in PERCENTILES} | {
        "mean": float(x.mean()) * 1e3, "n": int(x.size)}


def compare(sp: dict, vd: dict) -> dict:
    table = {}
    for key, name in (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("e2e_s", "E2E")):
        a, b = sp[key], vd[key]
        both = np.isfinite(a) & np.isfinite(b) & (b > 0)
        table[name] = {"serveplan_ms": percentiles(a), "vidur_ms": percentiles(b),
                       "median_per_request_ratio_serveplan_over_vidur":
                           float(np.median(a[both] / b[both])) if both.any() else None,
                       "spearman_per_request": _spearman(a[both], b[both])}
    return table


def _spearman(a: np.ndarray, b: np.ndarray) -> float | None:
    if a.size < 3:
        return None
    ra = np.argsort(np.argsort(a)).astype(np.float64)
    rb = np.argsort(np.argsort(b)).astype(np.float64)
    return float(np.corrcoef(ra, rb)[0, 1])



# ----------------------------------------------------------------------------- main
def main() -> int:
    args, ap = _parse_args()
    if args.from_json:
        return _rerender(args.out)
    vpython = args.vidur_venv / "bin" / "python"
    if not vpython.exists():
        print(f"SKIP: no Vidur venv at {args.vidur_venv} (create it with `python3 -m venv "
              f"{args.vidur_venv} && {args.vidur_venv}/bin/pip install vidur==0.0.26`); "
              "nothing compared, results left unchanged.")
        return 0
    work = args.work_dir.resolve()
    work.mkdir(parents=True, exist_ok=True)
    vversion = subprocess.run([str(vpython), "-c", "import importlib.metadata as m;"
                               "print(m.version('vidur'))"], capture_output=True,
                              text=True, check=True).stdout.strip()

    load_before = os.getloadavg()
    prepare_vidur_cache(work)

    # One KV-cache size for both: serveplan's vLLM-style memory plan.
    from serveplan.simulation import resolve_deployment

    planned = resolve_deployment(sp_deployment(args.max_num_seqs, args.token_budget, None))
    usable_blocks = planned.params.num_gpu_blocks
    dep = sp_deployment(args.max_num_seqs, args.token_budget, usable_blocks + 1)

    # Warm-up Vidur run (trains its forests the first time), then timed runs.
    warm = build_trace(50, 1.0, args.seed + 1, work / "inputs_warmup")
    vkw = dict(num_blocks=usable_blocks, max_num_seqs=args.max_num_seqs,
               token_budget=args.token_budget, native=args.native_predictor)
    print("Vidur warm-up run (trains the predictor on first use) ...", flush=True)
    warm_res = run_vidur(vpython, work, vidur_args(warm["vidur_csv"], work / "out_warmup",
                                                   **vkw))
    print(f"  done in {warm_res['wall_s']:.1f} s", flush=True)

    capacity = _capacity(args, vpython, work, vkw, dep) if args.capacity_requests else None
    if args.rate is None:
        if capacity is None:
            ap.error("give --rate or a non-zero --capacity-requests")
        low = min(capacity["vidur_req_per_s"], capacity["serveplan_req_per_s"])
        args.rate = round(args.load * low, 2)
        print(f"arrival rate {args.rate} req/s ({args.load:.0%} of {low:.2f})", flush=True)
    trace = build_trace(args.num_requests, args.rate, args.seed, work / "inputs")
    vruns = _vidur_runs(args, vpython, work, vkw, trace)
    vmetrics = read_vidur_metrics(Path(vruns[-1]["output_dir"]), trace)
    vrestarts = vmetrics.pop("num_restarts")

    sp = run_serveplan(dep, trace["serveplan_csv"], args.serveplan_runs)
    sp["cold_process_s"] = serveplan_cold_process(dep, trace["serveplan_csv"])
    print(f"serveplan: {', '.join(f'{t * 1e3:.0f}' for t in sp['times_s'])} ms", flush=True)
    if not np.allclose(sp["arrival_s"], trace["arrival_s"]):
        raise RuntimeError("serveplan did not replay the trace's arrival times")

    v = _vidur_summary(args, vruns, vrestarts, warm_res)
    setup = {"vversion": vversion, "work": work, "usable_blocks": usable_blocks,
             "load_before": load_before, "capacity": capacity}
    res = _results(args, setup, trace, v, sp, vmetrics, dep, vruns)
    _write(res, args.out)
    return 0


def _parse_args() -> tuple[argparse.Namespace, argparse.ArgumentParser]:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vidur-venv", type=Path,
                    default=Path(os.environ.get("VIDUR_VENV", "/tmp/vidur-venv")))
    ap.add_argument("--work-dir", type=Path, default=Path("/tmp/vidur-work"),
                    help="Vidur's working directory (profile cache, outputs, traces)")
    ap.add_argument("--num-requests", type=int, default=10_000)
    ap.add_argument("--rate", type=float, default=None,
                    help="Poisson arrival rate, req/s (default: --load x the lower of the two "
                         "tools' saturation throughputs, measured first)")
    ap.add_argument("--load", type=float, default=0.8)
    ap.add_argument("--capacity-requests", type=int, default=2000,
                    help="requests in the all-at-once run that measures saturation throughput")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-num-seqs", type=int, default=128)
    ap.add_argument("--token-budget", type=int, default=2048)
    ap.add_argument("--vidur-runs", type=int, default=1)
    ap.add_argument("--serveplan-runs", type=int, default=3)
    ap.add_argument("--native-predictor", action="store_true",
                    help="Vidur's native (C++) execution-time predictor instead of its default "
                         "Python one")
    ap.add_argument("--out", type=Path, default=RESULTS / "vidur_compare")
    ap.add_argument("--from-json", action="store_true",
                    help="only re-render <out>.md (and the explanations) from <out>.json")
    return ap.parse_args(), ap


def _markdown(res: dict, path: Path) -> None:
    from vidur_compare_report import write_markdown

    write_markdown(res, path, trace_name=SHAREGPT.name, max_model_len=MAX_MODEL_LEN)


def _rerender(out: Path) -> int:
    """``--from-json``: refresh the explanations in ``<out>.json`` and re-render ``<out>.md``."""
    from vidur_compare_report import explanations

    res = json.loads(out.with_suffix(".json").read_text())
    res["explanations"] = explanations(res)
    out.with_suffix(".json").write_text(json.dumps(res, indent=1) + "\n")
    _markdown(res, out.with_suffix(".md"))
    return 0


def _capacity(args, vpython: Path, work: Path, vkw: dict, dep: dict) -> dict:
    """Saturation throughput of each tool: the same requests all arriving at t = 0."""
    burst = build_trace(args.capacity_requests, 1e6, args.seed + 2, work / "inputs_capacity")
    vcap = run_vidur(vpython, work, vidur_args(burst["vidur_csv"], work / "out_capacity",
                                               **vkw))
    import serveplan
    from serveplan.sim.results import summarize

    ds = serveplan.simulate(dep, {"kind": "trace", "path": str(burst["serveplan_csv"]),
                                  "arrival": "trace"})
    capacity = {"num_requests": args.capacity_requests,
                "vidur_req_per_s": args.capacity_requests / vcap["simulated_end_s"],
                "serveplan_req_per_s": summarize(ds)["request_throughput"]}
    print(f"saturation throughput: Vidur {capacity['vidur_req_per_s']:.2f} req/s, "
          f"serveplan {capacity['serveplan_req_per_s']:.2f} req/s", flush=True)
    return capacity


def _vidur_runs(args, vpython: Path, work: Path, vkw: dict, trace: dict) -> list[dict]:
    vruns = []
    for i in range(args.vidur_runs):
        r = run_vidur(vpython, work, vidur_args(trace["vidur_csv"], work / "out", **vkw))
        print(f"Vidur run {i + 1}: wall {r['wall_s']:.1f} s, loop {r['loop_s']:.1f} s, "
              f"{r['num_batches']:,} batches", flush=True)
        vruns.append(r)
    return vruns


def _vidur_summary(args, vruns: list[dict], vrestarts, warm_res: dict) -> dict:
    med = statistics.median
    return {"runs": [{k: r[k] for k in ("wall_s", "import_s", "init_s", "loop_s", "write_s",
                                        "num_batches", "simulated_end_s")} for r in vruns],
            "wall_s_median": med(r["wall_s"] for r in vruns),
            "sim_s_median": med(r["init_s"] + r["loop_s"] for r in vruns),
            "loop_s_median": med(r["loop_s"] for r in vruns),
            "num_batches": vruns[-1]["num_batches"],
            "peak_rss_gib": vruns[-1]["peak_rss_gib_max_child"],
            "predictor": "native (C++)" if args.native_predictor else "Python (Vidur's default)",
            "num_restarts": vrestarts,
            "warm_up_wall_s": warm_res["wall_s"]}


def _results(args, setup: dict, trace: dict, v: dict, sp: dict, vmetrics: dict, dep: dict,
             vruns: list[dict]) -> dict:
    """The run's JSON: setup, workload, both tools' timings, latencies, probes, explanations."""
    from vidur_compare_report import explanations, offered_load

    from serveplan import __version__ as sp_version

    mean_p, mean_o = float(trace["prompt"].mean()), float(trace["output"].mean())
    cmd = " ".join([".venv/bin/python bench/vidur_compare.py", *sys.argv[1:]])
    res = {
        "command": cmd,
        "machine": f"{platform.machine()} {os.cpu_count()} cpu(s), Python "
                   f"{platform.python_version()}",
        "load_average_1min": {"start": setup["load_before"][0], "end": os.getloadavg()[0]},
        "setup": {"vidur_version": setup["vversion"], "serveplan_version": sp_version,
                  "serveplan_git": git_state(),
                  "work_dir": str(setup["work"]), "max_num_seqs": args.max_num_seqs,
                  "token_budget": args.token_budget, "kv_blocks": setup["usable_blocks"],
                  "block_size": 16, "model": [SP_MODEL, VIDUR_MODEL],
                  "gpu": [SP_GPU, VIDUR_DEVICE], "vidur_scheduler": "sarathi",
                  "serveplan_scheduler": "vllm-v1",
                  "vidur_attention_profile": "SYNTHETIC stand-in (vidur_standin_attention.py)"},
        "capacity": setup["capacity"],
        "workload": {"num_requests": args.num_requests, "rate": args.rate, "seed": args.seed,
                     "mean_prompt": mean_p, "mean_output": mean_o,
                     "first_arrival_s": float(trace["arrival_s"][0]),
                     "last_arrival_s": float(trace["arrival_s"][-1]),
                     "offered_load_note": ""},
        "vidur": v,
        "serveplan": {k: sp[k] for k in ("times_s", "median_s", "warm_up_s", "cold_process_s",
                                         "total_steps", "completed", "num_preemptions",
                                         "mean_batch_size", "duration_s", "resolved")},
        "speedup": {"sim_vs_simulate": v["sim_s_median"] / sp["median_s"],
                    "loop_vs_simulate": v["loop_s_median"] / sp["median_s"],
                    "process_vs_process": v["wall_s_median"] / sp["cold_process_s"]},
        "latency": compare(sp["metrics"], vmetrics),
        "probes": {"serveplan": serveplan_probes(dep),
                   "vidur": [{k: p[k] for k in ("label", "total_ms", "attention_ms")}
                             for p in vruns[-1]["probes"]]},
    }
    res["workload"]["offered_load_note"] = offered_load(res, trace)
    # Requests per step, same estimate for both: every request takes (output - 1) decode
    # steps and at least ceil(prompt / budget) prefill steps.
    req_steps = float((trace["output"] - 1).sum()
                      + np.ceil(trace["prompt"] / args.token_budget).sum())
    res["requests_per_step_estimate"] = {"serveplan": req_steps / sp["total_steps"],
                                         "vidur": req_steps / v["num_batches"]}
    res["explanations"] = explanations(res)
    return res


def _write(res: dict, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(res, indent=1, default=float) + "\n")
    _markdown(res, out.with_suffix(".md"))
    print(out.with_suffix(".md").read_text())


def git_state() -> str:
    """HEAD commit of the repository and whether the working tree had local changes."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, text=True,
                              capture_output=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=REPO, text=True, capture_output=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + (" (with uncommitted changes)" if dirty else "")


if __name__ == "__main__":
    sys.exit(main())

"""``vllm bench serve --save-result [--save-detailed]`` JSON: read it, and write one.

Schema taken from vllm-project/vllm ``vllm/benchmarks/serve.py`` (``benchmark()`` builds the
``result`` dict, ``calculate_metrics()`` the statistics, ``main_async()`` adds the setup and
traffic keys and drops the per-request lists without ``--save-detailed``) and
``vllm/benchmarks/lib/endpoint_request_func.py`` (``RequestFuncOutput``: ``ttft``,
``itl``, ``latency`` and ``start_time`` in seconds from ``time.perf_counter()``); older
files from ``benchmarks/benchmark_serving.py``. What that gives:

* per request (``--save-detailed``), in the order the requests were scheduled:
  ``input_lens``, ``output_lens`` (0 for a failed request), ``ttfts`` and ``itls``
  (lists of chunk gaps) in **seconds**, ``errors`` ("" when successful), ``generated_texts``;
  since 2025 ``latencies`` (seconds; older files: ``ttft + sum(itl)``, which is how the
  request functions measure it); since Jan 2026 ``start_times`` (``perf_counter`` seconds
  at the actual send, after any ``--max-concurrency`` wait). ``latencies`` and
  ``queue_times`` also stay in files written without ``--save-detailed``;
* statistics in **milliseconds**: ``mean_/median_/std_/pNN_`` + ``ttft, tpot, itl, e2el``
  ``_ms`` (percentiles from ``--metric-percentiles``, default ``99``; ``e2el`` only when
  ``--percentile-metrics`` names it);
* ``duration`` (s), ``completed``, ``failed`` (since Oct 2025), ``total_input_tokens``,
  ``total_output_tokens``, throughputs (``request_goodput`` was spelt ``request_goodput:``
  in 2024-25 files), ``request_rate`` (a number or the string ``"inf"``), ``burstiness``,
  ``max_concurrency``, ``ramp_up_*``, ``model_id``; ``--metadata KEY=VALUE`` pairs as
  string top-level keys (the seed is not saved: pass ``--metadata seed=N`` to keep it).

A request counts as failed when its error string is not empty (or, for an empty error, when
it has neither a first token nor output). Files written with ``--append-result`` hold one
result per line; they are refused with the line of the second result.
"""

from __future__ import annotations

import json
import math
import re
from datetime import datetime
from pathlib import Path

import numpy as np

from serveplan.user_input import UserError

from ._io import (
    Where,
    check_range,
    floats,
    integer,
    json_problem,
    json_value,
    mapping,
    num_list,
    number,
    out_of_range,
    ragged,
    read_text,
    text,
    token_list,
)
from .model import BenchRun, Load
from .workload import with_replay_warnings

EXPECTED = "a `vllm bench serve --save-result` JSON file"
PER_REQUEST = ("input_lens", "output_lens", "ttfts", "itls")
_SCALARS = {"duration": "duration_s", "completed": "completed", "failed": "failed",
            "total_input_tokens": "total_input_tokens",
            "total_output_tokens": "total_output_tokens",
            "request_throughput": "request_throughput", "request_goodput": "request_goodput",
            "request_goodput:": "request_goodput", "output_throughput": "output_throughput",
            "total_token_throughput": "total_token_throughput"}
_STAT = re.compile(r"^(mean|median|std|p\d+(?:\.\d+)?)_([a-z0-9_]+)_ms$")
_METRIC = {"ttft": "ttft", "tpot": "tpot", "itl": "itl", "e2el": "e2e", "e2e_latency": "e2e"}
"""Metric names in the statistics' keys (SGLang's ``bench_serving`` spells E2E
``e2e_latency``)."""
_EXTRAS = ("date", "backend", "label", "tokenizer_id", "num_prompts",
           "max_output_tokens_per_s", "max_concurrent_requests", "rtfx")


# ----------------------------------------------------------------------------- read
def _load_document(path: Path) -> dict:
    raw = read_text(path, EXPECTED)
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        if exc.msg == "Extra data":
            raise UserError(f"{path} line {exc.lineno}: a second result (written with "
                            "--append-result); keep one result per file") from None
        raise json_problem(path, exc) from None
    return mapping(data, Where(path), "top level")


def bench_serve_load(data: dict, where: Where) -> tuple[Load, list[str]]:
    """The load of a ``benchmark_serving``-style result (vLLM's, and SGLang's, which keeps
    its keys): ``request_rate``, ``burstiness``, ``max_concurrency``, ramp-up; the notes on
    what it leaves unrecorded."""
    notes = []
    if "request_rate" not in data:
        notes.append("request_rate not recorded: taken as inf (vLLM's default)")
    rate = number(data.get("request_rate", math.inf), where, "request_rate")
    if "burstiness" not in data:
        notes.append("burstiness not recorded (vLLM before --burstiness): taken as 1 (Poisson)")
    b = number(data.get("burstiness", 1.0), where, "burstiness")
    if not b > 0:
        where.fail("burstiness", f"expected a number > 0, got {b}")
    conc = integer(data.get("max_concurrency"), where, "max_concurrency", low=1, null_ok=True)
    seed = integer(data.get("seed"), where, "seed", null_ok=True)
    ramp = None
    if data.get("ramp_up_strategy") is not None:
        strategy = text(data["ramp_up_strategy"], where, "ramp_up_strategy")
        if strategy not in ("linear", "exponential"):
            where.fail("ramp_up_strategy", f"expected linear or exponential, got {strategy!r}")
        lo = number(data.get("ramp_up_start_rps"), where, "ramp_up_start_rps")
        hi = number(data.get("ramp_up_end_rps"), where, "ramp_up_end_rps")
        if not 0 < lo <= hi:
            where.fail("ramp_up_start_rps", f"expected 0 < start <= end, got {lo} and {hi}")
        ramp = (strategy, lo, hi)
    if not rate > 0:
        where.fail("request_rate", f"expected a number > 0 or \"inf\", got {rate}")
    arrival = "constant" if math.isinf(b) else "poisson" if b == 1.0 else "gamma"
    kind = "concurrency" if conc and math.isinf(rate) and ramp is None else "rate"
    return Load(kind, rate, b, conc, arrival=arrival, seed=seed, ramp_up=ramp), notes


def _itls(value: object, n: int, where: Where) -> list[np.ndarray]:
    if not isinstance(value, list):
        where.fail("itls", f"expected a list of lists of seconds, got {json_value(value)}")
    if len(value) != n:
        where.fail("itls", f"has {len(value)} entries but input_lens has {n}")
    gaps = [floats(v, where, f"itls[{i}]") for i, v in enumerate(value)]
    flat = np.concatenate(gaps) if gaps else np.zeros(0)
    bad = out_of_range(flat, low=0)  # checked once: ~10^5 gaps in ~10^3 lists
    if bad.any():
        i = int(np.searchsorted(np.cumsum([len(g) for g in gaps]), np.argmax(bad), "right"))
        check_range(gaps[i], value[i], where, f"itls[{i}]", low=0)
    return gaps


def _seconds(value: object, where: Where, field: str) -> np.ndarray:
    return num_list(value, where, field, low=0)


def _column(data: dict, key: str, n: int, where: Where, kind=_seconds) -> np.ndarray | None:
    if key not in data:
        return None
    values = kind(data[key], where, key)
    if len(values) != n:
        where.fail(key, f"has {len(values)} entries but input_lens has {n}")
    return values


def _errors(data: dict, n: int, where: Where) -> np.ndarray | None:
    if "errors" not in data:
        return None
    errors = data["errors"]
    if not isinstance(errors, list) or len(errors) != n:
        where.fail("errors", f"expected a list of {n} strings")
    for i, e in enumerate(errors):
        text(e, where, f"errors[{i}]")
    return np.array([bool(e) for e in errors], dtype=bool)


NO_LATENCIES = ("latencies not recorded (vLLM before 2025): E2E = TTFT + sum of ITLs, as "
                "vLLM's request functions measure it")


def bench_serve_requests(data: dict, where: Where, no_latencies: str = NO_LATENCIES
                         ) -> tuple[dict, list[str]]:
    """The per-request arrays (``--save-detailed``), in send order; ``no_latencies``: the
    note where the file has no ``latencies``."""
    present = [k for k in PER_REQUEST if k in data]
    if not present:
        return {}, []
    for key in PER_REQUEST:
        if key not in data:
            where.fail(key, f"missing (the file has {', '.join(present)}: written with "
                            "--save-detailed?)")
    inputs = token_list(data["input_lens"], where, "input_lens")
    n, notes = len(inputs), []
    outputs = _column(data, "output_lens", n, where, token_list)
    ttft = _column(data, "ttfts", n, where)
    itls = _itls(data["itls"], n, where)
    ok = ~((ttft == 0) & (outputs == 0))  # neither a first token nor output: failed
    errored = _errors(data, n, where)
    if errored is None:
        notes.append("errors not recorded: requests with neither a first token nor output "
                     "are taken as failed")
    else:
        ok &= ~errored
    e2e = _column(data, "latencies", n, where)
    if e2e is None:
        e2e = ttft + np.array([g.sum() for g in itls])
        if no_latencies:
            notes.append(no_latencies)
    send = _column(data, "start_times", n, where, num_list)
    completed = data.get("completed")
    if isinstance(completed, int) and completed != int(ok.sum()):
        notes.append(f"completed = {completed} but {int(ok.sum())} requests have no error")
    flat, offsets = ragged([g if keep else np.zeros(0) for g, keep in zip(itls, ok, strict=True)])
    arrays = dict(input_len=inputs, output_len=np.where(ok, outputs, -1), success=ok,
                  ttft_s=np.where(ok, ttft, np.nan), e2e_s=np.where(ok, e2e, np.nan),
                  itl_s=flat, itl_offsets=offsets, send_s=None)
    if send is not None:
        notes += _order_by_send(arrays, send)
    return arrays, notes


def _order_by_send(arrays: dict, send: np.ndarray) -> list[str]:
    """Set ``send_s`` and put the requests in send order (they are in schedule order; a
    ``--max-concurrency`` wait can swap two sends)."""
    from serveplan.sim.requests import ragged_take

    arrays["send_s"] = send - send.min() if len(send) else send
    order = np.argsort(send, kind="stable")
    if np.all(order == np.arange(len(send))):
        return []
    for key in ("input_len", "output_len", "success", "ttft_s", "e2e_s", "send_s"):
        arrays[key] = arrays[key][order]
    arrays["itl_s"], arrays["itl_offsets"] = ragged_take(arrays["itl_s"], arrays["itl_offsets"],
                                                         order)
    return ["requests reordered by start_times (sent out of schedule order)"]


def bench_serve_summary(data: dict, where: Where) -> dict[str, float]:
    """:attr:`BenchRun.summary` of a ``benchmark_serving``-style result's statistics."""
    out: dict[str, float] = {}
    for key, name in _SCALARS.items():
        value = number(data.get(key), where, key, null_ok=True)
        if value is not None:
            out[name] = value
    for key, value in data.items():
        m = _STAT.match(key)
        if m is None or value is None:
            continue
        stat = "p50" if m.group(1) == "median" else m.group(1)
        out[f"{stat}_{_METRIC.get(m.group(2), m.group(2))}_s"] = number(value, where, key) / 1e3
    done = out.get("completed")
    if done:
        for total, mean in (("total_input_tokens", "mean_input_len"),
                            ("total_output_tokens", "mean_output_len")):
            if total in out:
                out[mean] = out[total] / done
    return out


def _extras(data: dict, where: Where) -> dict:
    out = {k: data[k] for k in _EXTRAS if data.get(k) is not None}
    out.update({k: v for k, v in data.items() if k.startswith(("spec_decode_", "diffusion_"))})
    if "queue_times" in data and isinstance(data["queue_times"], list):
        out["client_queue_s"] = num_list(data["queue_times"], where, "queue_times", low=0)
    return out


def read_vllm(path: str | Path) -> BenchRun:
    """A ``vllm bench serve --save-result`` JSON file (module docstring)."""
    path = Path(path)
    data = _load_document(path)
    where = Where(path)
    if not any(k in data for k in ("completed", "request_throughput") + PER_REQUEST):
        where.fail("completed", "missing: not a vllm bench serve result")
    load, notes = bench_serve_load(data, where)
    arrays, more = bench_serve_requests(data, where)
    model = text(data.get("model_id"), where, "model_id")
    run = BenchRun(path=path, tool="vllm", model=model, load=load, **arrays,
                   summary=bench_serve_summary(data, where), extras=_extras(data, where),
                   warnings=tuple(notes + more))
    return with_replay_warnings(run)


# ----------------------------------------------------------------------------- write
def _stats(name: str, values: np.ndarray, percentiles) -> dict[str, float]:
    """``calculate_metrics``: ``np.mean(x or 0) * 1000`` and friends, in ms."""
    x = values if len(values) else np.zeros(1)
    out = {f"mean_{name}_ms": float(np.mean(x) * 1000),
           f"median_{name}_ms": float(np.median(x) * 1000),
           f"std_{name}_ms": float(np.std(x) * 1000)}
    for p in percentiles:
        word = str(int(p)) if int(p) == p else str(p)
        out[f"p{word}_{name}_ms"] = float(np.percentile(x, p) * 1000)
    return out


def _gaps(run: BenchRun) -> list[list[float]]:
    """Each request's gaps; equal gaps ``(e2e - ttft) / (out - 1)`` when the run has none."""
    ok = run.success
    if run.itl_s is not None:
        return [run.itls(i).tolist() if ok[i] else [] for i in range(run.n)]
    tpot = run.per_request_tpot_s()
    return [[float(tpot[i])] * int(run.output_len[i] - 1) if np.isfinite(tpot[i]) else []
            for i in range(run.n)]


def _result(run: BenchRun, label: str | None) -> dict:
    ok = run.success
    out = np.where(ok, run.output_len, 0)
    send = run.send_s if run.send_s is not None else np.zeros(run.n)
    duration = run.summary.get("duration_s")
    if duration is None or not math.isfinite(duration):
        duration = float(np.max(send[ok] + run.e2e_s[ok])) if ok.any() else 0.0
    tin, tout = int(run.input_len[ok].sum()), int(out.sum())
    per = 1.0 / duration if duration > 0 else 0.0
    load = run.load
    result = {"date": datetime.now().strftime("%Y%m%d-%H%M%S"), "endpoint_type": run.tool,
              "backend": run.tool, "label": label, "model_id": run.model,
              "tokenizer_id": run.model, "num_prompts": run.n,
              "request_rate": load.request_rate if math.isfinite(load.request_rate) else "inf",
              "burstiness": load.burstiness, "max_concurrency": load.concurrency}
    if load.seed is not None:
        result["seed"] = load.seed
    if load.ramp_up is not None:
        result.update(zip(("ramp_up_strategy", "ramp_up_start_rps", "ramp_up_end_rps"),
                          load.ramp_up, strict=True))
    result.update({
        "duration": duration, "completed": int(ok.sum()), "failed": int((~ok).sum()),
        "total_input_tokens": tin, "total_output_tokens": tout,
        "request_throughput": ok.sum() * per, "request_goodput": None,
        "output_throughput": tout * per, "total_token_throughput": (tin + tout) * per,
        "input_lens": run.input_len.tolist(), "output_lens": out.tolist(),
        "ttfts": np.where(ok, run.ttft_s, 0.0).tolist(), "itls": _gaps(run),
        "latencies": np.where(ok, run.e2e_s, 0.0).tolist()})
    if run.send_s is not None:
        result["start_times"] = run.send_s.tolist()
    result["generated_texts"] = [""] * run.n
    result["errors"] = ["" if k else "request failed" for k in ok]
    return result


def write_vllm(run: BenchRun, path: str | Path, *, percentiles=(99.0,),
               label: str | None = None) -> Path:
    """Write ``run`` as ``vllm bench serve --save-result --save-detailed`` would.

    Same keys and units as vLLM (per-request seconds, statistics in ms computed as
    ``calculate_metrics`` does, over the successful requests; ``e2el`` statistics included),
    plus ``start_times`` (the run's ``send_s``) and ``seed`` (``--metadata seed=N``) when the
    run has them. A run without inter-token gaps gets equal gaps, its TPOT. Reading the
    file back with :func:`read_vllm` returns the same lengths, times, gaps and load.
    """
    if not run.has_requests:
        raise ValueError(f"{run.path.name} has no per-request records to write")
    result = _result(run, label)
    ok = run.success
    itl = np.array([g for i in np.flatnonzero(ok) for g in result["itls"][i]])
    for name, values in (("ttft", run.ttft_s[ok]), ("tpot", run.per_request_tpot_s()),
                         ("itl", itl), ("e2el", run.e2e_s[ok])):
        result.update(_stats(name, values[np.isfinite(values)], percentiles))
    path = Path(path)
    path.write_text(json.dumps(result), encoding="utf-8")
    return path


__all__ = ["bench_serve_load", "bench_serve_requests", "bench_serve_summary", "read_vllm",
           "write_vllm"]

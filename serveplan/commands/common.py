"""Helpers shared by several commands: ``--set``/flag overrides and the summary tables.

Command modules import from here and never from one another (no import cycles).
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.table import Table

from serveplan.errors import UserError, check_text_file, yaml_line


def check_at_most(flag: str, value, limit: int, why: str) -> None:
    """Raise :class:`UserError` naming ``flag`` if ``value`` exceeds ``limit`` (``why``: the
    reason for the bound, e.g. what is allocated per unit)."""
    if value is not None and value > limit:
        raise UserError(f"{flag}: must be at most {limit:,} ({why}), got {value:,}")


def check_run_size(resolved, requests, workload) -> None:
    """Refuse a simulation whose arrays would outgrow memory, naming what to lower
    (:func:`serveplan.config.check_simulator_memory`: the bound of each field keeps it
    small alone, not their product, instances x KV blocks x ...), or whose requests arrive
    over too long a time (:func:`serveplan.config.check_arrivals`)."""
    from serveplan.config import check_arrivals, check_simulator_memory

    check_arrivals(requests.arrival_s, workload)
    pools = [(s.params, s.num_instances, s.role) for s in resolved.pool_specs()]
    check_simulator_memory(pools, requests.prompt_len, requests.output_len,
                           prefill_hold=getattr(resolved.deployment, "prefill_hold", None))


def parse_set(items: list[str]) -> dict[str, Any]:
    """``key.path=value`` pairs; values are YAML (``8``, ``true``, ``1e-3``, text,
    ``[1, 2]``, ``{dist: fixed, value: 64}``)."""
    out = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise UserError(f"--set expects key.path=value (e.g. --set seed=3), got {item!r}")
        try:
            out[key.strip()] = yaml.safe_load(raw) if raw.strip() else None
        except yaml.YAMLError as exc:
            problem = getattr(exc, "problem", None) or "not valid YAML"
            raise UserError(f"--set {key.strip()}: value {raw!r} is not valid YAML "
                            f"({problem})") from None
    return out


def dask_client(scheduler: str | None, workers: int | None, threads: bool = False, *,
                timeout_s: float = 5.0):
    """A Dask client: an existing scheduler (``--scheduler``), a local cluster of
    ``workers`` processes (threads with ``threads``), or None for a serial run.

    An unreachable scheduler fails within ``timeout_s`` with one line naming the address.
    """
    if scheduler and workers:
        raise UserError("give --scheduler or --workers, not both")
    if not scheduler and not workers:
        return None
    from dask.distributed import Client, LocalCluster

    if not scheduler:
        cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=not threads,
                               dashboard_address=None)
        return Client(cluster)
    address = scheduler if "://" in scheduler else f"tcp://{scheduler}"
    problem = _unreachable(address, timeout_s)
    if problem is None:
        try:
            return Client(address, timeout=timeout_s)
        except (OSError, TimeoutError) as exc:
            problem = f"no answer within {timeout_s:g} s ({type(exc).__name__})"
    raise UserError(f"--scheduler: cannot reach a Dask scheduler at {address}: {problem}; start "
                    f"one there (`dask scheduler`, then `dask worker {address}`) or run "
                    "locally with --workers N")


def _unreachable(address: str, timeout_s: float) -> str | None:
    """Why a ``tcp://host:port`` address cannot be connected to (None: it can, or the
    protocol is not plain TCP and Dask must find out)."""
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(address)
    if parts.scheme != "tcp":
        return None
    try:
        port = parts.port or 8786
    except ValueError:
        return "the port is not a number in 1..65535"
    try:
        socket.create_connection((parts.hostname or "localhost", port), timeout=timeout_s).close()
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    return None


def check_sections(data: dict, source: Path | None = None,
                   sections: tuple[str, ...] = ("deployment", "workload")) -> None:
    """Raise :class:`UserError` naming the field (and ``source``'s file and line) if one of
    ``sections`` is present but not a mapping (``workload: 1``): flags and ``--set`` items
    are fields inside it, so there is nothing to override."""
    for key in sections:
        value = data.get(key)
        if value is None or isinstance(value, dict):
            continue
        where = ""
        if source is not None:
            line = yaml_line(source, (key,), value)
            where = f" ({source}" + (f" line {line})" if line else ")")
        raise UserError(f"{key}: expected a mapping of fields (e.g. {EXAMPLE_FIELDS[key]}), "
                        f"got {type(value).__name__} {_short(value)}{where}")


EXAMPLE_FIELDS = {"deployment": "model: llama-3.1-8b, gpu: h100",
                  "workload": "kind: poisson, rate: 4", "slo": "ttft_ms: 500",
                  "goodput": "seeds: 3"}


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _workload_overrides(workload: dict, trace, sessions, num_sessions, concurrency) -> dict:
    """``--trace``, ``--sessions``, ``--num-sessions`` and ``--concurrency`` on the file's
    workload mapping (:func:`resolve_overrides`)."""
    from serveplan.config import switch_workload_kind

    if trace is not None:
        check_text_file(trace, "a trace (Mooncake .jsonl, Azure or Vidur CSV)", field="--trace")
        was_trace = workload.get("kind") == "trace"
        workload = switch_workload_kind(workload, "trace")
        workload["path"] = str(trace)
        if not was_trace:  # a synthetic rate is not a replay rate: replay the timestamps
            workload.pop("rate", None)
    if sessions is not None:
        check_text_file(sessions, "a session trace (JSON Lines)", field="--sessions")
        was_sessions = workload.get("kind") == "sessions"
        workload = switch_workload_kind(workload, "sessions")
        workload.pop("generator", None)
        workload["path"] = str(sessions)
        if not was_sessions:  # a request rate is not a session rate: keep the file's arrivals
            workload.pop("rate", None)
    if num_sessions is not None:
        workload["num_sessions"] = num_sessions
    if concurrency is not None:
        workload = switch_workload_kind(workload, "closed-loop")
        workload["concurrency"] = concurrency
    return workload


WORKLOAD_ALIASES = {"num_requests": ("num_prompts",), "rate": ("request_rate",)}
"""Workload fields a file may give under a client's own name (``vllm bench serve``'s)."""


def resolve_overrides(data: dict, *, rate=None, requests=None, trace=None, time_scale=None,
                      concurrency=None, isl=None, osl=None, seed=None, scheduler=None,
                      router=None, num_instances=None, num_gpu_blocks=None, max_num_seqs=None,
                      max_num_batched_tokens=None, kv_offload_gb=None,
                      sets: dict | None = None, source: Path | None = None, sessions=None,
                      num_sessions=None) -> dict:
    """Apply CLI overrides to the file's mapping (file < flags < ``--set``).

    ``--trace`` turns the workload into a trace workload, ``--sessions`` into a session
    trace and ``--concurrency`` into a closed loop, keeping the fields the new kind accepts
    (e.g. ``num_requests``). A
    ``deployment`` or ``workload`` that is not a mapping is refused naming the field (and
    the file ``source`` and its line).
    """
    from serveplan.config_paths import set_path

    check_sections(data, source)
    workload = _workload_overrides(dict(data.get("workload") or {}), trace, sessions,
                                   num_sessions, concurrency)
    n_key = "num_sessions" if workload.get("kind") == "sessions" else "num_requests"
    if workload.get("kind") == "inference-perf" and (rate, requests) != (None, None):
        raise UserError("--rate / --requests: an inference-perf workload takes its rate and "
                        "request count from its stages (rate x duration each); change "
                        "workload.stages instead")
    for key, value in (("rate", rate), (n_key, requests), ("time_scale", time_scale),
                       ("isl", isl), ("osl", osl)):
        if value is not None:
            for alias in WORKLOAD_ALIASES.get(key, ()):  # the flag replaces the file's
                workload.pop(alias, None)
            workload[key] = value
    data = {**data, "workload": workload} if workload or "workload" in data else dict(data)
    flags = {"seed": seed, "deployment.router": router,
             "deployment.num_instances": num_instances}
    knobs = {"scheduler": scheduler, "num_gpu_blocks": num_gpu_blocks,
             "max_num_seqs": max_num_seqs, "max_num_batched_tokens": max_num_batched_tokens}
    pools = (data.get("deployment") or {}).get("pools")
    if kv_offload_gb is not None:
        knobs["kv_offload"] = _offload_flag(data.get("deployment") or {}, kv_offload_gb)
    if isinstance(pools, list):  # the pool form: instance knobs apply to every pool
        if len(pools) == 1:  # (a pool that is not a mapping: pydantic names it)
            count = flags.pop("deployment.num_instances")
            flags["deployment.pools.0.count"] = count if isinstance(pools[0], dict) else None
        for i in (i for i, pool in enumerate(pools) if isinstance(pool, dict)):
            flags.update({f"deployment.pools.{i}.{k}": v for k, v in knobs.items()})
    else:
        flags.update({f"deployment.{k}": v for k, v in knobs.items()})
    for key, value in {**{k: v for k, v in flags.items() if v is not None},
                       **(sets or {})}.items():
        data = set_path(data, key, value.value if isinstance(value, Enum) else value)
    return data


def _offload_flag(deployment: dict, gb: float) -> dict:
    """``kv_offload`` after ``--kv-offload-gb``: the file's other options kept (those of the
    deployment, or of its first pool that has any), its size replaced."""
    from serveplan.kv_offload import SIZE_FIELDS

    found = [deployment.get("kv_offload")]
    pools = deployment.get("pools")
    found += [p.get("kv_offload") for p in pools if isinstance(p, dict)] \
        if isinstance(pools, list) else []
    base = next((f for f in found if isinstance(f, dict)), {})
    return {**{k: v for k, v in base.items() if k not in SIZE_FIELDS}, "cpu_gb": gb}


def wide_console(*, stderr: bool = False) -> Console:
    """A rich Console, 120 columns wide when the output is not a terminal (a pipe, a file,
    CI), so tables are not wrapped at 80 columns."""
    c = Console(stderr=stderr)
    return c if c.is_terminal else Console(stderr=stderr, width=120)


def fmt(v) -> str:
    """A summary value as table text: ``—`` for missing/NaN, ``yes``/``no`` for flags."""
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return "—" if v != v else f"{v:,.2f}"
    return f"{v:,}" if isinstance(v, int) else str(v)


_HEAD = ("completed", "failed", "duration_s", "request_throughput", "output_throughput",
         "total_token_throughput", "mean_itl_ms", "num_preemptions")
_CPU_TIER = ("gpu_prefix_hit_rate", "cpu_prefix_hit_rate", "cpu_bytes_stored",
             "cpu_bytes_loaded", "cpu_load_time_s")  # with a CPU KV tier only
_COLOCATED = {
    "head": (*_HEAD, "prefix_hit_rate", *_CPU_TIER, "mean_batch_size", "mean_kv_usage",
             "max_kv_usage", "total_steps"),
    "stats": ("mean", "median", "p90", "p99"),
    "latency": (("ttft", "TTFT"), ("tpot", "TPOT"), ("e2el", "E2E"),
                ("queue", "queueing delay"), ("max_itl", "max ITL per request")),
}
_PD = {
    "head": (*_HEAD, "kv_bytes_transferred", "optimal_assignment_ratio",
             "optimal_assignment_ratio_requests", "prefill_mean_batch_size",
             "prefill_mean_kv_usage", "decode_mean_batch_size", "decode_mean_kv_usage",
             "decode_requests_per_instance_min", "decode_requests_per_instance_max",
             *_CPU_TIER, "total_steps"),
    "stats": ("mean", "median", "p99", "p99_9"),
    "latency": (("ttft", "TTFT"), ("tpot", "TPOT"), ("e2el", "E2E"),
                ("queue", "prefill queueing"), ("kv_wait", "wait for decode admission"),
                ("transfer", "KV transfer"), ("decode_queue", "prefill end → decode start")),
}


def summary_title(resolved: dict, *, pd: bool) -> str:
    """The deployment line above the summary table."""
    if pd:
        p = resolved["prefill"]
        role = "attention" if "attention" in resolved else "decode"
        d = resolved[role]
        ffn = resolved.get("ffn")
        afd = (f" · ffn on {ffn['gpu']} tp={ffn['tp']} ep={ffn['ep']}, "
               f"{resolved['micro_batches']} micro-batches" if ffn else "")
        return (f"{resolved['strategy']} · prefill {p['model']} on {p['gpu']} tp={p['tp']} · "
                f"{role} {d['model']} on {d['gpu']} tp={d['tp']}{afd} · router "
                f"{resolved['router']} ({resolved['assignment']} assignment)")
    return (f"{resolved['model']} on {resolved['gpu']} tp={resolved['tp']} · "
            f"{resolved['num_instances']}× {resolved['scheduler']} · "
            f"{resolved['usable_kv_blocks']:,} KV blocks of {resolved['block_size']}")


def print_summary(summary: dict, resolved: dict, console: Console, *, pd: bool = False) -> None:
    """``serveplan simulate``'s tables (headline metrics, then latency percentiles) for a
    colocated (``pd=False``) or disaggregated (``pd=True``) deployment."""
    layout = _PD if pd else _COLOCATED
    head = Table(title=summary_title(resolved, pd=pd), show_header=False)
    head.add_column("metric")
    head.add_column("value", justify="right")
    for key in layout["head"]:
        if key in summary:
            head.add_row(key, fmt(summary[key]))
    for key in sorted(k for k in summary if k.startswith(("slo_", "spec_"))):
        head.add_row(key, fmt(summary[key]))
    console.print(head)
    lat = Table(title="latency (ms)")
    lat.add_column("metric")
    for stat in layout["stats"]:
        lat.add_column(stat.replace("_", "."), justify="right")
    for name, label in layout["latency"]:
        lat.add_row(label, *(fmt(summary.get(f"{stat}_{name}_ms")) for stat in layout["stats"]))
    console.print(lat)
    if "sessions" in summary:
        print_sessions(summary, console)


_SESSION_STATS = ("mean", "median", "p90", "p95", "p99")
_SESSION_LATENCY = (("answer_ttft", "answer-visible TTFT"), ("session_makespan", "makespan"),
                    ("followup_ttft", "TTFT of later rounds"))
_SESSION_HEAD = ("sessions", "sessions_completed", "hidden_planning_throughput",
                 "followup_history_tokens", "followup_prefix_hit_tokens",
                 "followup_history_hit_rate")


def print_sessions(summary: dict, console: Console) -> None:
    """The session tables of a session workload (docs/sessions.md)."""
    head = Table(title="sessions", show_header=False)
    head.add_column("metric")
    head.add_column("value", justify="right")
    for key in _SESSION_HEAD:
        label = f"{key} (tokens/s)" if key == "hidden_planning_throughput" else key
        head.add_row(label, fmt(summary.get(key)))
    console.print(head)
    lat = Table(title="session latency (ms)")
    lat.add_column("metric")
    for stat in _SESSION_STATS:
        lat.add_column(stat, justify="right")
    for name, label in _SESSION_LATENCY:
        lat.add_row(label, *(fmt(summary.get(f"{stat}_{name}_ms")) for stat in _SESSION_STATS))
    console.print(lat)

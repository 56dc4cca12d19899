"""Report of ``bench/vidur_compare.py``: the Markdown page and the explanations of the gaps.

Pure functions of the run's JSON (``res``), so ``vidur_compare.py --from-json`` can re-render
the page without rerunning either tool.
"""

from __future__ import annotations

from pathlib import Path


def fmt(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:,.1f}" if abs(x) >= 10 else f"{x:.2f}"


def write_markdown(res: dict, path: Path, *, trace_name: str, max_model_len: int) -> None:
    """Render ``res`` (the JSON of a run) as the Markdown page ``path``.

    ``trace_name`` (the ShareGPT file) and ``max_model_len`` describe the workload setup.
    """
    lines = (_md_intro(res) + _md_setup(res, trace_name, max_model_len) + _md_wall_time(res)
             + _md_latency(res) + _md_probes(res))
    path.write_text("\n".join(lines))


def _md_intro(res: dict) -> list[str]:
    return [
        "# serveplan vs Vidur: same requests, same model/GPU, wall time and latencies",
        "",
        "Reproduce (Vidur only in its own venv outside the repository; the first Vidur run "
        "trains its random forests, about 40-50 min on 2 cores, later runs reuse "
        f"`{res['setup']['work_dir']}/.vidur_cache`):",
        "",
        "```",
        "python3 -m venv /tmp/vidur-venv",
        "/tmp/vidur-venv/bin/pip install vidur==0.0.26",
        res["command"],
        "```",
        "",
        "(from the repository root; the script reads `../shared/data/vidur` and "
        "`../shared/tools/vidur_standin_attention.py`, writes Vidur's inputs, profile cache "
        "and outputs under the work directory, and `--from-json` re-renders this page from "
        "the JSON.)",
        "",
        f"Machine: {res['machine']}; 1-min load average {res['load_average_1min']['start']:.1f} "
        f"at start, {res['load_average_1min']['end']:.1f} at end (the machine is shared; "
        "both tools were timed under the same conditions, one process at a time). "
        f"Vidur {res['setup']['vidur_version']}, "
        f"serveplan {res['setup']['serveplan_version']} (git {res['setup']['serveplan_git']}).",
        "",
    ]


def _md_setup(res: dict, trace_name: str, max_model_len: int) -> list[str]:
    v, s, w = res["vidur"], res["serveplan"], res["workload"]
    return [
        "## Setup (identical inputs)",
        "",
        f"- Requests: {w['num_requests']:,} rows of `{trace_name}` (sampled without "
        f"replacement, seed {w['seed']}); prompt+output clipped to {max_model_len} tokens by "
        f"shortening the prompt (mean prompt {w['mean_prompt']:.0f}, mean output "
        f"{w['mean_output']:.0f} tokens).",
        f"- Arrivals: Poisson, {w['rate']} req/s, drawn once; both tools replay the same "
        "timestamps from a file (serveplan `kind: trace`, Vidur `trace_replay`).",
        f"- Model/GPU: Llama-2-7B fp16 on one H100 (TP1). Scheduler: serveplan `vllm-v1` "
        "(chunked prefill, prefix caching off) vs Vidur `sarathi` (chunked prefill); batch cap "
        f"{res['setup']['max_num_seqs']}, token budget per step "
        f"{res['setup']['token_budget']} (serveplan `max_num_batched_tokens`, Vidur "
        f"`chunk_size`); KV cache {res['setup']['kv_blocks']:,} blocks of 16 tokens in both "
        "(serveplan's vLLM-style memory plan at gpu_memory_utilization 0.9, passed to Vidur "
        "as `num_blocks`); watermark 1% of blocks in both.",
        f"- Vidur's step costs: its default random-forest models (execution-time predictor: "
        f"{v['predictor']}) trained on the measured `mlp.csv` (Llama-2-7b-hf, "
        "H100) and a SYNTHETIC stand-in `attention.csv` (roofline-shaped, A100-like "
        "constants; the real file is not available here). Its latencies are therefore not "
        "evidence of accuracy. serveplan: its roofline + dispatch cost oracle "
        f"(profile `{s['resolved'].get('profile')}`).",
        f"- Estimated offered load: {w['offered_load_note']}",
        "",
    ]


def _md_wall_time(res: dict) -> list[str]:
    v, s = res["vidur"], res["serveplan"]
    walls = ", ".join(f"{r['wall_s']:.1f}" for r in v["runs"])
    inits = ", ".join(f"{r['init_s']:.1f}" for r in v["runs"])
    return [
        "## Wall time",
        "",
        "| | value |",
        "|---|---|",
        f"| Vidur, whole process (imports, predictor load, simulation, metrics) | "
        f"{v['wall_s_median']:.1f} s |",
        f"| Vidur, simulation only (request generation + predictor load + event loop) | "
        f"{v['sim_s_median']:.1f} s |",
        f"| Vidur, event loop only | {v['loop_s_median']:.1f} s |",
        f"| serveplan `simulate()`, median of {len(s['times_s'])} after one warm-up | "
        f"{s['median_s'] * 1e3:.0f} ms |",
        f"| serveplan, fresh process (import + one simulate, numba cache warm) | "
        f"{s['cold_process_s']:.2f} s |",
        f"| **speedup, Vidur simulation / serveplan simulate()** | "
        f"**{res['speedup']['sim_vs_simulate']:.0f}x** (target >= 50x) |",
        f"| speedup, Vidur event loop only / serveplan simulate() | "
        f"{res['speedup']['loop_vs_simulate']:.0f}x |",
        f"| speedup, Vidur whole process / serveplan fresh process | "
        f"{res['speedup']['process_vs_process']:.0f}x |",
        f"| steps simulated: Vidur / serveplan | {v['num_batches']:,} / {s['total_steps']:,} |",
        f"| wall time per simulated step: Vidur loop / serveplan | "
        f"{v['loop_s_median'] / v['num_batches'] * 1e6:.0f} us / "
        f"{s['median_s'] / max(s['total_steps'], 1) * 1e6:.2f} us |",
        "",
        f"Vidur runs: {len(v['runs'])} (wall {walls} s; predictor setup {inits} s). "
        f"serveplan runs: {', '.join(f'{t * 1e3:.0f}' for t in s['times_s'])} ms (warm-up "
        f"{s['warm_up_s']:.2f} s).",
        "",
    ]


def _md_latency(res: dict) -> list[str]:
    v, s, w = res["vidur"], res["serveplan"], res["workload"]
    lines = [
        "## Latency percentiles (ms, over completed requests)",
        "",
        "| metric | tool | P50 | P90 | P99 | mean |",
        "|---|---|---|---|---|---|",
    ]
    for name, row in res["latency"].items():
        for tool in ("serveplan", "vidur"):
            p = row[f"{tool}_ms"]
            lines.append(f"| {name} | {tool} | {fmt(p['p50'])} | {fmt(p['p90'])} | "
                         f"{fmt(p['p99'])} | {fmt(p['mean'])} |")
    lines += ["", "Per-request agreement (same request in both tools):", "",
              "| metric | median serveplan/Vidur ratio | Spearman rank correlation |",
              "|---|---|---|"]
    for name, row in res["latency"].items():
        r, c = row["median_per_request_ratio_serveplan_over_vidur"], row["spearman_per_request"]
        lines.append(f"| {name} | {r:.2f} | {c:.2f} |")
    lines += [
        "",
        f"Run facts: makespan serveplan {s['duration_s']:.0f} s vs Vidur "
        f"{v['runs'][0]['simulated_end_s'] - w['first_arrival_s']:.0f} s (last arrival at "
        f"{w['last_arrival_s']:.0f} s); serveplan mean batch size "
        f"{s['mean_batch_size']:.1f} (time-weighted), {s['num_preemptions']} preemptions; "
        f"Vidur {v['num_restarts']} restarts (preemptions). Requests per step (estimate "
        "applied to both: sum of output-1 decode steps and ceil(prompt/budget) prefill "
        f"steps, over steps simulated): serveplan "
        f"{res['requests_per_step_estimate']['serveplan']:.1f}, Vidur "
        f"{res['requests_per_step_estimate']['vidur']:.1f}.",
        "",
    ]
    return lines


def _md_probes(res: dict) -> list[str]:
    lines = [
        "## Step cost each tool assigns to the same batch (ms per forward step)",
        "",
        "| batch | serveplan | Vidur total | Vidur attention part (synthetic) | "
        "Vidur non-attention part (measured mlp.csv) |",
        "|---|---|---|---|---|",
    ]
    for sp_p, vd_p in zip(res["probes"]["serveplan"], res["probes"]["vidur"], strict=True):
        lines.append(f"| {sp_p['label']} | {sp_p['total_ms']:.2f} | {vd_p['total_ms']:.2f} | "
                     f"{vd_p['attention_ms']:.2f} | "
                     f"{vd_p['total_ms'] - vd_p['attention_ms']:.2f} |")
    lines += ["", "Effective KV-read bandwidth implied by the 16- and 48-request decode "
              f"probes: serveplan {implied_kv_bandwidth(res['probes']['serveplan']):.2f} "
              f"TB/s, Vidur {implied_kv_bandwidth(res['probes']['vidur']):.2f} TB/s.",
              "", "## Where the differences come from", ""]
    lines += [f"- {t}" for t in res["explanations"]]
    lines.append("")
    return lines


KV_BYTES_PER_TOKEN = 2 * 32 * 32 * 128 * 2  # K and V, 32 layers, 32 KV heads x 128, fp16


def standin_prefill_attention_ms(chunk: int, kv: int, layers: int = 32) -> float:
    """The stand-in profile's formula (vidur_standin_attention.py docstring) for Llama-2-7B,
    attention + KV-cache save of one prefill chunk, all layers."""
    hq, d, hkv = 32, 128, 32
    pre = 0.010 + 4 * hq * d * chunk * (kv + chunk / 2) / 150e12 * 1e3 * (1 + 64 / chunk)
    save = 0.006 + chunk * 2 * hkv * d * 2 / 1.2e12 * 1e3
    return (pre + save) * layers


def implied_kv_bandwidth(probes: list[dict]) -> float:
    """TB/s: extra KV bytes read between the 16- and 48-request decode probes over the
    extra step time (weights are read once in both, so the difference is KV traffic)."""
    t = {p["label"]: p["total_ms"] for p in probes}
    extra_tokens = (48 - 16) * 2048
    return extra_tokens * KV_BYTES_PER_TOKEN / ((t["decode, 48 x 2k ctx"]
                                                 - t["decode, 16 x 2k ctx"]) * 1e-3) / 1e12


def explanations(res: dict) -> list[str]:
    """The bullet points of "Where the differences come from", from the run's numbers."""
    return _explain_step_costs(res) + _explain_load(res) + _explain_rest(res)


def _explain_step_costs(res: dict) -> list[str]:
    pr_s = {p["label"]: p["total_ms"] for p in res["probes"]["serveplan"]}
    pr_v = {p["label"]: p for p in res["probes"]["vidur"]}
    d1 = "decode, 1 x 1k ctx"
    pf = "prefill 2048 tokens, empty cache"
    lat = res["latency"]
    bw_s = implied_kv_bandwidth(res["probes"]["serveplan"])
    bw_v = implied_kv_bandwidth(res["probes"]["vidur"])
    out = [
        "Decode attention (the main TPOT difference): the cost each tool adds per cached "
        "token read in a decode step implies an effective KV-read bandwidth of "
        f"{bw_s:.2f} TB/s in serveplan (H100 HBM3: 3.35 TB/s peak) and {bw_v:.2f} TB/s in "
        "Vidur, whose attention numbers come from the SYNTHETIC stand-in profile (its "
        "formula assumes 1.5 TB/s, an A100-like constant, not an H100 measurement). Decode "
        "steps with tens of requests at 1-3k context are mostly attention, so Vidur's steps "
        f"are ~2x longer there; median per-request TPOT ratio serveplan/Vidur "
        f"{lat['TPOT']['median_per_request_ratio_serveplan_over_vidur']:.2f}.",
        "Decode fixed cost agrees by coincidence of two different models: a 1-request decode "
        f"step is {pr_s[d1]:.2f} ms in serveplan and {pr_v[d1]['total_ms']:.2f} ms in "
        "Vidur. Vidur's is the measured per-op GPU times at 1 token (each op timed on its own "
        "with CUDA events, so per-kernel fixed costs are inside them) x 32 layers; Vidur "
        "0.0.26 models nothing "
        "outside the transformer blocks (no embedding, LM head, sampler, no CPU/scheduling "
        "overhead: `ExecutionTime.total_time` = block time x layers). serveplan's is a "
        "weights-read roofline under CUDA graphs plus LM head, sampler and a per-step "
        "overhead.",
        "Prefill (the main TTFT difference): a 2048-token prefill on an empty cache costs "
        f"{pr_s[pf]:.1f} ms in serveplan and {pr_v[pf]['total_ms']:.1f} ms in Vidur, of which "
        f"{pr_v[pf]['total_ms'] - pr_v[pf]['attention_ms']:.1f} ms are Vidur's measured "
        f"linear/norm ops (close to serveplan's whole step) and {pr_v[pf]['attention_ms']:.1f} "
        "ms synthetic attention. Vidur 0.0.26 queries its prefill-attention model with the "
        "context *including* the current chunk (`num_kv_tokens` = processed + chunk), while "
        "the stand-in tabulates the context *before* it (as the GitHub release's predictor "
        "queried it: `request.num_processed_tokens`); the stand-in formula "
        f"gives {standin_prefill_attention_ms(2048, 0):.1f} ms at context 0 but "
        f"{standin_prefill_attention_ms(2048, 2048):.1f} ms at context 2048, so most of "
        "that attention time is this convention mismatch plus the A100-like 150 TFLOP/s.",
    ]
    return out


def _explain_load(res: dict) -> list[str]:
    lat, cap, rate = res["latency"], res["capacity"], res["workload"]["rate"]
    out = []
    if cap:
        out.append(
            "Load: the slower step costs give Vidur a lower saturation throughput "
            f"({cap['vidur_req_per_s']:.2f} vs {cap['serveplan_req_per_s']:.2f} req/s), so "
            f"the same {rate} req/s is {rate / cap['vidur_req_per_s']:.0%} load for Vidur but "
            f"{rate / cap['serveplan_req_per_s']:.0%} for serveplan: Vidur runs larger "
            f"batches (about {res['requests_per_step_estimate']['vidur']:.0f} vs "
            f"{res['requests_per_step_estimate']['serveplan']:.0f} requests per step), so "
            "each prefill shares its step with more decodes, and it queues more, "
            "which widens the TTFT and E2E tails beyond the per-step difference "
            f"(median per-request TTFT ratio "
            f"{lat['TTFT']['median_per_request_ratio_serveplan_over_vidur']:.2f}, P99 "
            f"{lat['TTFT']['serveplan_ms']['p99']:.0f} vs {lat['TTFT']['vidur_ms']['p99']:.0f} "
            "ms).")
    return out


def _explain_rest(res: dict) -> list[str]:
    return [
        "Scheduling (not isolated here): both run decode-first chunked prefill with the "
        "same token budget, batch cap, KV blocks and watermark. Vidur's sarathi scheduler "
        "reserves KV blocks for the whole prompt at admission and preempts by restarting "
        "the newest request; serveplan's vLLM-v1 scheduler allocates blocks per scheduled "
        f"chunk and preempts the last-admitted request by recompute. Preemptions in this "
        f"run: serveplan {res['serveplan']['num_preemptions']}, Vidur restarts "
        f"{res['vidur']['num_restarts']}.",
        "Vidur's own two predictors disagree: the Python execution-time predictor (Vidur's "
        "default, used here) applies `attention_decode_batching_overhead_fraction` (0.1) "
        "only to GQA models, while with `use_native_execution_time_predictor` the decode "
        "attention of this MHA model came out exactly 1.10x higher in our probes, giving "
        "different decode costs and a different number of batches (the per-batch wall time "
        "is the same; run with --native-predictor to see it).",
        "Speed: Vidur is a Python event loop with an object per request, batch, batch stage "
        "and event and a dictionary look-up per operator per batch; serveplan's loop is "
        "compiled (numba) over structure-of-arrays request state with an O(1) cost "
        "evaluation per step. Per simulated step the difference is larger than per run, "
        "because serveplan's cheaper steps make it simulate more (smaller) steps for the "
        "same requests.",
        "Vidur 0.0.26 needed one runtime fix to run at all under KV pressure: "
        "`Request.restart()` does not reset the per-stage processed-token count, so the "
        "first preempted request fails an assertion; the runner resets it (no Vidur files "
        "are changed).",
    ]


def offered_load(res: dict, trace: dict) -> str:
    """Arrival rate against each tool's saturation throughput; drain time after the last
    arrival."""
    cap, rate = res["capacity"], res["workload"]["rate"]
    head = ""
    if cap:
        head = (f"saturation throughput (all {cap['num_requests']:,} requests of another "
                f"sample arriving at t = 0): Vidur {cap['vidur_req_per_s']:.2f} req/s, "
                f"serveplan {cap['serveplan_req_per_s']:.2f} req/s; {rate} req/s is "
                f"{rate / cap['vidur_req_per_s']:.0%} of Vidur's and "
                f"{rate / cap['serveplan_req_per_s']:.0%} of serveplan's. ")
    span = float(trace["arrival_s"][-1] - trace["arrival_s"][0])
    sp_end = res["serveplan"]["duration_s"]
    vd_end = res["vidur"]["runs"][0]["simulated_end_s"] - float(trace["arrival_s"][0])
    return head + (f"Arrivals span {span:.0f} s; the last request finishes {sp_end - span:.0f} s "
            f"(serveplan) / {vd_end - span:.0f} s (Vidur) after the last arrival, i.e. "
            "neither queue diverges.")

"""Markdown for ``bench/results/accuracy_e2e.md`` (from the JSON of bench/accuracy_e2e.py)."""

from __future__ import annotations

from pathlib import Path

from accuracy_e2e_domains import fold_domain_section

GROUP_NAMES = {"gpu_only": "(a) GPU steps only", "engine_unfitted": "(b) engine runtime, unfitted",
               "engine_fitted_lomo": "(c) engine runtime, fitted LOMO"}
NAMES = {**GROUP_NAMES, "as_shipped": "(d) as the profiles ship: (c) where an engine's terms "
                                      "ship, its step overhead alone held out where only that "
                                      "ships, else (b)"}


def _pct(x) -> str:
    return f"{100 * x:+.1f}" if x is not None else "-"


def _abs(x) -> str:
    return f"{100 * x:.1f}" if x is not None else "-"


def _ms(x) -> str:
    return f"{x:.0f}" if x is not None else "-"


STAT_HEAD = "TTFT med abs % | TTFT bias % | TPOT med abs % | TPOT bias % |"


def _stats_rows(entries, keys: tuple[str, ...], names: dict[str, str], label) -> list[str]:
    """A markdown table of error statistics: the entry fields ``keys``, its rows, then one
    line per prediction setting of ``names`` it has (``label``: the setting's column)."""
    lines = ["| " + " | ".join(keys) + " | rows | setting | " + STAT_HEAD,
             "|---" * (len(keys) + 6) + "|"]
    for g in entries:
        for key, name in names.items():
            e = g.get(key)
            if e is not None:
                head = " | ".join(str(g[k]) for k in keys)
                lines.append(f"| {head} | {g['rows']} | {label(name)} | "
                             f"{_abs(e['ttft_med_abs'])} | {_pct(e['ttft_bias'])} | "
                             f"{_abs(e['tpot_med_abs'])} | {_pct(e['tpot_bias'])} |")
    return lines


def _group_rows(report) -> list[str]:
    return _stats_rows(report["groups"], ("engine", "model", "system", "mode"), GROUP_NAMES,
                       lambda name: name)


def _load_rows(report) -> list[str]:
    return _stats_rows(report.get("by_load", []), ("engine", "load"), NAMES,
                       lambda name: name[:3])


def _gap_rows(report) -> list[str]:
    lines = ["| engine | model | system | isl | rows | measured TTFT ms | engine alone ms | "
             "gap ms | gap in decode steps |", "|---|---|---|---|---|---|---|---|---|"]
    for g in report.get("light_load_gaps", []):
        lines.append(f"| {g['engine']} | {g['model']} | {g['system']} | {g['isl']} | "
                     f"{g['rows']} | {g['measured_ms']:.0f} | {g['engine_ms']:.0f} | "
                     f"{g['gap_ms']:.0f} | {g['gap_steps']:.1f} |")
    return lines


def _gap_section(report) -> str:
    return f"""## Light load: TTFT outside the simulated engine

Colocated rows with at most 8 clients: medians of the measured TTFT, of the simulated
engine's without runtime terms (setting (b)), and of their difference, in ms and in the
row's own measured decode steps. This is the time the runtime terms have to carry; one
engine's terms can carry it only where it is alike across that engine's models and systems.

{chr(10).join(_gap_rows(report))}"""


def _targets(report) -> list[str]:
    distinct = report.get("overall_distinct", {"rows": None, "settings": {}})
    lines = ["| setting | TTFT median abs % (target <= 15) | TPOT median abs % (target <= 10) "
             "| TTFT, each run once | TPOT, each run once |", "|---|---|---|---|---|"]
    for key, label in NAMES.items():
        o, once = report["overall"].get(key), distinct["settings"].get(key, {})
        if o is None:
            lines.append(f"| {label} | not run | not run | not run | not run |")
            continue
        lines.append(f"| {label} | {_abs(o['ttft_med_abs'])} | {_abs(o['tpot_med_abs'])} | "
                     f"{_abs(once.get('ttft_med_abs'))} | {_abs(once.get('tpot_med_abs'))} |")
    if distinct["rows"] is not None:
        lines += ["", f"Each run once: {distinct['rows']:,} of {report['coverage']['expressible']:,}"
                  " rows. Rows of one engine, system and load whose measured TTFT and TPOT agree "
                  "to 0.01 ms are one run exported more than once (some under the other "
                  "DeepSeek checkpoint's name or another recorded layout, some rounded to "
                  "0.01 ms in a gap-analysis CSV). The "
                  "fits count each run once; the targets are read on the rows as the data "
                  "gives them, copies included."]
    return lines


def _self_calibration(report) -> str:
    sc = report.get("self_calibration")
    if sc is None:
        return "Not run (`--no-fit`, `--fit-step-overhead`, or a report from before it)."
    terms = ", ".join(f"`{t}`" for t in sc["terms"])
    table = _stats_rows(sc["by_engine"], ("engine", "deployments"),
                        {"c": "(c) held out", "e": "(e) own light runs"}, lambda name: name)
    return f"""Not a target setting: what a user who has measured their own deployment at a
few light loads gets from calibrating on those runs (`serveplan calibrate --runs`). A
deployment is an engine, model, system, mode, precision and layout; each with at least
{sc['min_light_rows']} runs at up to {sc['light_clients']} clients (and some rows above) has {terms}
fitted on those runs, each once (the folds' two steps, `bench/accuracy_e2e_selfcal.py`), and its rows
above {sc['light_clients']} clients are predicted with them; (c) on the same rows for comparison.

{chr(10).join(table)}"""


def _profiles(report) -> list[str]:
    if not report["profiles"]:
        return ["Not fitted in this run (`--no-fit`)."]
    lines = []
    for engine, info in report["profiles"].items():
        if not info.get("fitted"):
            lines.append(f"- {engine}: not shipped -- {info['reason']}")
            continue
        terms = ", ".join(f"{k} = {v:.3g}" for k, v in info["terms"].items() if v)
        before, after = info["median_abs_err_before"], info["median_abs_err_held_out"]
        chosen = (f"; term set {info['term_set']}" + (f": {info['why']}" if info.get("why")
                                                      else "") if info.get("term_set") else "")
        lines.append(f"- {engine}: {terms or 'all terms 0'} (median abs error TTFT/TPOT of "
                     f"(b) {_abs(before[0])}/{_abs(before[1])} % -> held out (c) "
                     f"{_abs(after[0])}/{_abs(after[1])} %{chosen}); left out: "
                     + ("; ".join(f"{k} ({v})" for k, v in info["skipped"].items()) or "none")
                     + (f"; held-out models it makes worse: {'; '.join(info['held_out_worse'])}"
                        if info.get("held_out_worse") else "")
                     + (f". All terms held out did not ship: {info['reason']}"
                        if info.get("reason") else ""))
    if report["folds"]:
        lines += ["", "Leave-one-model-out folds (terms fitted without the held-out model, "
                  "its twins of one architecture held out with it; "
                  "the training rows' median abs TTFT/TPOT of (b) and of the first-order "
                  "model with the terms; a two-step fit's, over the rows it simulated "
                  "again at its first terms):", ""]
    for f in report["folds"]:
        b, a = f["median_abs_err_before"], f["median_abs_err_after_first_order"]
        terms = ", ".join(f"{k} = {v:.3g}" for k, v in f["terms"].items() if v)
        rows = (f"training rows ({f['resimulated_rows']} of {f['rows']} simulated again)"
                if "resimulated_rows" in f else "training rows")
        lines.append(f"- {f['engine']}, held out {f['held_out']}: {terms or 'all terms 0'}; "
                     f"{rows} {_abs(b[0])}/{_abs(b[1])} -> {_abs(a[0])}/{_abs(a[1])} %")
    return lines


def _agreement(result: dict) -> str:
    if not result:
        return "- not computed in this run"
    lines = [f"- {NAMES[k]}: best per GPU {v['agree']}, fastest request "
             f"{v.get('fastest', '-')} of {v['groups']} groups" for k, v in result.items()]
    chance = next(iter(result.values())).get("chance")
    if chance is not None:
        lines.append(f"- a layout picked at random: {chance:g} of those groups on average")
    return "\n".join(lines)


def _slopes(report) -> list[str]:
    lines = ["| engine | model | system | tp | isl | concurrency | measured ms | (a) | (b) | "
             "(c) |", "|---|---|---|---|---|---|---|---|---|---|"]
    for s in report["osl_slopes"]:
        lines.append(f"| {s['engine']} | {s['model']} | {s.get('system', '-')} | {s['tp']} | "
                     f"{s['isl']} | "
                     f"{s['concurrency']} | {s['measured']:.0f} | {s['gpu_only']:.0f} | "
                     f"{s['engine_unfitted']:.0f} | {_ms(s.get('engine_fitted_lomo'))} |")
    return lines


def _spread(report) -> str:
    s = report["repeat_spread"]
    if not s.get("measurements"):
        return "No deployment and load was measured twice."
    return (f"{s['measurements']:,} measurements repeat a deployment and load on another date "
            "(a run exported more than once counts once, whatever date its copies carry). "
            "Each against the "
            "median of its repeats: TTFT "
            f"{_abs(s['ttft_median'])} % median, {_abs(s['ttft_p75'])} % p75; TPOT "
            f"{_abs(s['tpot_median'])} % median, {_abs(s['tpot_p75'])} % p75 -- a floor "
            "under any prediction's error on those rows.")


def _notes(path: Path) -> str:
    """The analysis of the latest run (``accuracy_e2e_notes.md`` beside the report, written
    by hand after reading the run), or a pointer to it."""
    notes = path.with_name("accuracy_e2e_notes.md")
    if not notes.exists():
        return "## Where the targets are missed, and why\n\n(no notes for this run yet)"
    return notes.read_text().strip()


def _reasons(cov: dict) -> str:
    return "\n".join(f"- {n:,} rows: {r}" for r, n in
                     sorted(cov["reasons"].items(), key=lambda kv: -kv[1]))


def _layout_section(report: dict) -> str:
    best, split = (_agreement(report.get(key, {})) for key in ("best_tp", "best_pd_split"))
    return f"""## Does the layout serveplan ranks best per GPU match the measured best?

Per engine and version, model, system, precision, isl, osl and concurrency with two or
more layouts measured: is the layout with the most output tokens/s per GPU by prediction
the measured best, and is the one with the shortest request (TTFT + (osl - 1) TPOT) the
measured fastest? At a fixed concurrency the first is mostly decided by the GPU counts,
which both sides share; the second tests the predictions. A layout is the whole parallel
layout (tp, pp, attention dp, ep), so TP 8 and attention DP 8 + EP 8 on the same eight GPUs
are two; it is chosen for one checkpoint and one engine version, so layouts are compared
within one precision and version.

Parallel layout (agg rows):

{best}

Prefill / decode split (disaggregated rows: workers x parallel layout of each role):

{split}
"""


def write_markdown(report: dict, path: Path) -> None:
    cov = report["coverage"]
    reasons = _reasons(cov)
    text = f"""# End-to-end accuracy against measured deployments

Command: `{report['command']}` ({report['date']}, {report['seconds']} s). Data:
`e2e/aic_silicon_blackwell`: means of TTFT and TPOT of the client that measured each row
(InferenceX's: 10 requests per client from a burst, lengths uniform on [0.8 L, L];
`serveplan.e2e.row_client`; why not its SOURCE.md's aiperf medians: `docs/validate.md`).
Error = predicted / measured - 1. Settings: {'; '.join(NAMES.values())} (each model
predicted by terms fitted on the engine's other models; checkpoints of one architecture,
such as DeepSeek-R1 and V3, are one model, held out together).

## Repeated measurements

{_spread(report)}

## Coverage

{cov['expressible']:,} of {cov['rows']:,} rows can be expressed:

{reasons}

## Overall (expressible rows)

{chr(10).join(_targets(report))}

## Per engine and load

Settings (a)-(d) as above; load = the row's concurrency (clients).

{chr(10).join(_load_rows(report))}

## Per engine x model x system x mode

{chr(10).join(_group_rows(report))}

{fold_domain_section(report.get("fold_domains", []))}
{_gap_section(report)}

## (e) Calibrated on the deployment's own light-load runs

{_self_calibration(report)}

{_notes(path)}

## Runtime terms fitted

{chr(10).join(_profiles(report))}

## TTFT rise from osl 1024 to 8192 at fixed concurrency

A closed-loop client waits for its previous request, so TTFT depends on the output length.

{chr(10).join(_slopes(report))}

{_layout_section(report)}"""
    path.write_text(text)

"""What the eager dispatch term does to measured rows that differ in their CUDA graphs.

InferenceX ran vLLM's Kimi-K2.5 fp4 rows on one image (v0.17.0) and layout in March 2026
and on 2026-04-20. ``kimik2.5_fp4_b200.sh`` first passed ``--max-num-seqs $CONC`` alone (vLLM
then captures graphs up to ``2 x CONC`` tokens, and a 1k-token prefill runs eager); PR 1047
added ``--max-cudagraph-capture-size 2048`` (such a prefill replays piecewise graphs) in
between (``serveplan.e2e_recipes.KIMI_VLLM_FP4_TUNED_FROM`` says how that is dated).
Measured, the 1k-prompt rows' TTFT differs by ~90 ms between the dates and the 8k-prompt
rows' does not (an 8k prefill leaves the graphs either way). This probe simulates such
rows, without fitted terms, both ways -- each row's recipe with graphs up to 2,048 tokens,
and with vLLM's default ceiling as the March flags left it -- at a few values of
``RuntimeTerms.eager_dispatch_layer_s``, next to the measured TTFT.

It fits nothing and changes no shipped term: it shows the mechanism the term models and
the size it would need (the shipped profiles carry 0). Writes
``bench/results/eager_dispatch_probe.md``.
Usage: ``python bench/eager_dispatch_probe.py [--data DIR]``
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from serveplan import e2e_recipes
from serveplan.e2e import load_rows, resolve_row, simulate_row, with_terms
from serveplan.estimator.runtime import RuntimeTerms

HERE = Path(__file__).resolve().parent
DATA = HERE.parents[1] / "shared" / "data" / "e2e" / "aic_silicon_blackwell"
OUT = HERE / "results" / "eager_dispatch_probe.md"
ROWS = ("2026_04_06_kimi_k2_5_b200_sxm_vllm_fp4_agg_1024x1024_c4_tp8_ep1_1297",
        "kimik2_5_b200_vllm_fp4_agg_1024x1024_c4_cfg636",
        "2026_04_06_kimi_k2_5_b200_sxm_vllm_fp4_agg_8192x1024_c4_tp8_ep1_1311",
        "kimik2_5_b200_vllm_fp4_agg_8192x1024_c4_cfg636",
        "2026_04_06_kimi_k2_5_b200_sxm_vllm_fp4_agg_1024x1024_c16_tp4_ep4_1317",
        "kimik2_5_b200_vllm_fp4_agg_1024x1024_c16_cfg811")
TERMS_MS = (0.0, 1.0, 1.5)  # eager_dispatch_layer_s, ms per layer


def _with_graphs(row, graphs: bool):
    """``row``'s recipe (its dated state, :mod:`serveplan.e2e_recipes`) with CUDA graphs up
    to 2,048 tokens (``graphs``) or vLLM's default capture sizes (without
    ``cuda_graph_sizes``), its other flags as they are."""
    recipe = e2e_recipes.recipe_for(row)
    knobs = recipe.knobs
    graph_sizes = e2e_recipes._VLLM_GRAPHS_2048 if graphs else {}
    return replace(recipe, knobs=lambda r: {**{k: v for k, v in knobs(r).items()
                                               if k != "cuda_graph_sizes"}, **graph_sizes})


def _ttfts(row, data: Path) -> list[float]:
    resolved = resolve_row(row, data)
    return [simulate_row(row, resolved=with_terms(
        resolved, RuntimeTerms(eager_dispatch_layer_s=ms * 1e-3)))[0] for ms in TERMS_MS]


def probe(data: Path) -> list[str]:
    rows = {r.id: r for r in load_rows(data / "silicon_blackwell.csv")}
    head = " | ".join(f"{g}, {ms:g} ms" for g in ("2,048", "default") for ms in TERMS_MS)
    lines = [f"| row | measured | tp | prompt | clients | measured TTFT | {head} |",
             "|---|---|---|---|---|---|" + "---|" * 2 * len(TERMS_MS)]
    recipes = e2e_recipes.RECIPES
    for rid in ROWS:
        row = rows[rid]
        ran, ttfts = e2e_recipes.recipe_for(row), []
        for graphs in (True, False):
            probed = _with_graphs(row, graphs)
            e2e_recipes.RECIPES = tuple(probed if rc is ran else rc for rc in recipes)
            try:
                ttfts += _ttfts(row, data)
            finally:
                e2e_recipes.RECIPES = recipes
        cells = " | ".join(f"{t:.0f}" for t in ttfts)
        lines.append(f"| `{rid}` | {row.measured} | {row.tp} | {row.isl} | "
                     f"{row.concurrency} | {row.ttft_ms:.0f} | {cells} |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DATA)
    args = ap.parse_args()
    table = probe(args.data)
    OUT.write_text("\n".join([
        "# Eager dispatch probe (vLLM, Kimi-K2.5 fp4 on B200)", "",
        "Simulated mean TTFT (ms) without fitted terms, each row with its dated recipe's "
        "other flags: CUDA graphs up to 2,048 tokens (`--max-cudagraph-capture-size 2048`) "
        "or vLLM's default ceiling (`2 x max_num_seqs`, as the script's first flags left it), "
        "at `eager_dispatch_layer_s` per column. Command: "
        "`python bench/eager_dispatch_probe.py`.", "", *table, ""]))
    print(OUT.read_text())


if __name__ == "__main__":
    main()

"""Measured vs predicted CDFs of a comparison (``serveplan compare --plot``)."""

from __future__ import annotations

import numpy as np

from serveplan.plots import _plt, _save, log_axis, outside_legend, series_styles
from serveplan.user_input import UserError

PANELS = (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2e", "E2E latency"))


def _cdf(ax, values_s: np.ndarray, label: str, style) -> None:
    x = np.sort(values_s[np.isfinite(values_s)]) * 1e3
    if not x.size:
        return
    colour, marker = style
    y = np.arange(1, x.size + 1) / x.size
    ax.step(x, y, where="post", color=colour, label=f"{label} (n = {x.size:,})")
    ax.plot(x[-1], 1.0, marker=marker, color=colour, ls="none")


def plot_cdfs(comparison, run, path) -> None:
    """A 2 x 2 figure: the CDF of each latency, measured and predicted, milliseconds on a
    log axis where the values span a factor of 10 or more."""
    pairs = comparison.pairs
    if pairs is None:
        raise UserError(f"--plot: {run.name} has no per-request records to draw "
                        f"({run.detail_hint})")
    plt = _plt()
    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    styles = series_styles(2)
    for ax, (key, name) in zip(axes.ravel(), PANELS, strict=True):
        series = []
        for side, style in zip(("measured", "predicted"), styles, strict=True):
            values = pairs[f"{side}_{key}_s"].values
            series.append(values[np.isfinite(values)])
            _cdf(ax, values, side, style)
        ax.set_xlabel(f"{name} (ms)")
        ax.set_ylabel("fraction of requests" if key != "itl" else "fraction of gaps")
        ax.grid(alpha=0.3)
        both = np.concatenate(series)
        if both.size and both.min() > 0 and both.max() / both.min() >= 10:
            log_axis(ax, "x")
    outside_legend(axes[0, 1])
    fig.suptitle(f"{run.name} ({run.tool}, model {run.model or '?'}): measured vs "
                 "serveplan", fontsize=10)
    fig.tight_layout()
    _save(fig, path)


__all__ = ["plot_cdfs"]

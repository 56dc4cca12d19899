r"""What a deployment costs per hour, and Frontier's spend ratio and cost efficiency.

Prices are US dollars per GPU-hour by GPU type: defaults from
``estimator/data/gpus/prices.yaml`` (each with its source), overridden by the user
(``--price h100=2.10``). A deployment costs :math:`\mathrm{Price}(g) = \sum_r N_r\,p(g(r))`
per hour -- the GPUs of each role pool times its GPU type's price (Frontier §6.2) -- and a
goodput of :math:`\lambda` requests/s serves :math:`3600\,\lambda / \mathrm{Price}(g)`
requests per dollar. Against a baseline allocation :math:`g_0` (Frontier §6.2, eq. in the
heterogeneous study):

.. math::

    \mathrm{SR}(g) = \frac{\mathrm{Price}(g_0)}{\mathrm{Price}(g)}, \qquad
    \mathrm{CE}(g) = \frac{T(g)/\mathrm{Price}(g)}{T(g_0)/\mathrm{Price}(g_0)},

the spend ratio (above 1: cheaper than the baseline) and the cost efficiency (above 1:
more served per dollar). :math:`T` is the goodput -- the rate at which the SLO still holds --
so a placement whose queueing tail breaks the SLO has little or no :math:`T` however cheap
it is (Frontier's SLA gate is built in).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from functools import cache
from importlib import resources

import yaml

from serveplan.deployments import pool_gpus
from serveplan.estimator.catalog import resolve_gpu
from serveplan.estimator.specs import SpecError
from serveplan.user_input import UserError

__all__ = ["cost_efficiency", "default_prices", "hourly_cost", "parse_prices", "price_table",
           "spend_ratio"]


@cache
def default_prices() -> dict[str, tuple[float, str]]:
    """``{gpu: (usd_per_hour, source)}`` from the shipped price table."""
    text = resources.files("serveplan.estimator.data.gpus").joinpath("prices.yaml").read_text(
        encoding="utf-8")
    return {name: (float(row["usd_per_hour"]), str(row["source"]))
            for name, row in yaml.safe_load(text).items()}


def _canonical(gpu: str) -> str:
    return resolve_gpu(gpu).name


def parse_prices(items: Iterable[str], *, option: str = "--price") -> dict[str, float]:
    """``["h100=2.1", "h20=1.2"]`` (or comma-joined) as ``{gpu: usd_per_hour}``."""
    out: dict[str, float] = {}
    for item in (part.strip() for text in items for part in str(text).split(",")):
        if not item:
            continue
        name, sep, value = item.partition("=")
        try:
            price = float(value) if sep else math.nan
        except ValueError:
            price = math.nan
        if not name.strip() or not math.isfinite(price) or price <= 0:
            raise UserError(f"{option}: expected GPU=DOLLARS_PER_HOUR with a positive price "
                            f"(h100=2.10), got {item!r}")
        try:
            out[_canonical(name.strip())] = price
        except SpecError as exc:
            raise UserError(f"{option}: {exc}") from None
    return out


def price_table(overrides: Mapping[str, float] | None = None) -> dict[str, float]:
    """Dollars per GPU-hour by canonical GPU name: the defaults, then ``overrides``."""
    table = {name: usd for name, (usd, _) in default_prices().items()}
    for name, usd in (overrides or {}).items():
        table[_canonical(name)] = float(usd)
    return table


def hourly_cost(deployment, prices: Mapping[str, float]) -> float:
    """Dollars per hour of the deployment's GPUs (module doc); a GPU type without a price
    is an error saying how to give one."""
    total = 0.0
    for given, count in pool_gpus(deployment):
        gpu = _canonical(given)
        if gpu not in prices:
            raise UserError(f"no price for GPU {gpu!r}: give one with --price {gpu}=<dollars "
                            f"per GPU-hour> (defaults exist for {', '.join(sorted(prices))})")
        total += count * prices[gpu]
    return total


def spend_ratio(cost: float, baseline_cost: float) -> float:
    """:math:`\\mathrm{SR} = \\mathrm{Price}(g_0)/\\mathrm{Price}(g)` (module doc)."""
    return baseline_cost / cost if cost > 0 else math.nan


def cost_efficiency(throughput: float, cost: float, baseline_throughput: float,
                    baseline_cost: float) -> float:
    """:math:`\\mathrm{CE} = (T/\\mathrm{Price}) / (T_0/\\mathrm{Price}_0)` (module doc);
    NaN without a positive baseline throughput."""
    if not (cost > 0 and baseline_cost > 0 and baseline_throughput > 0):
        return math.nan
    return (throughput / cost) / (baseline_throughput / baseline_cost)

"""How much faster a GPU without per-op data runs than its lender's profile says, measured.

B300 has no per-op tables: it prices its steps with B200's fitted profile on its own
datasheet peaks (:mod:`serveplan.estimator.profile`, ``profile_from``). The Blackwell
sample ran many deployments on both: the same engine release, model, precision, layout,
prompt and output lengths and clients on a B200 node and on a B300 node. On such a pair the
measured B300 / B200 ratio of TTFT (or TPOT), set against the ratio the GPU steps alone
predict, says how much faster the B300 runs than the borrowed profile makes it:

    speed = (predicted B300 / predicted B200) / (measured B300 / measured B200)

per pair, TTFT for the prefill phase and TPOT for the decode phase; the GPU's
``lender_speed`` is the median over the pairs (:func:`lender_speed`). Both measured
runs share the engine's runtime, so its terms cancel from the ratio as far as they are
alike on both nodes; the host CPUs may differ, and what differs there is counted as GPU
speed (TTFT carries the front end; ``bench/results/gpu_lender_speed.md`` gives the ratio at
1k and 8k prompts apart). Held out, a row is predicted with the speed measured on the
other engines' pairs only (:func:`speed_without_engine`): none of its engine's runs, so
none of its model's, enter it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import astuple, dataclass, replace
from pathlib import Path

import numpy as np
import yaml

from serveplan.e2e import E2ERow
from serveplan.e2e_fit import measured_means
from serveplan.estimator.catalog import resolve_gpu
from serveplan.estimator.specs import GPUSpec

LENDER_SYSTEM = {"b300_sxm": "b200_sxm"}
"""The Blackwell sample's systems whose GPU borrows a profile, and their lender's system
(GB200 and GB300 ran no colocated deployment that B200 also ran)."""


@dataclass(frozen=True)
class SpeedPair:
    """One deployment and load measured on both systems: the rows of each (repeats of one
    run on other dates are one side's rows)."""

    lender: tuple[E2ERow, ...]
    borrower: tuple[E2ERow, ...]

    @property
    def engine(self) -> str:
        return self.lender[0].engine

    @property
    def model(self) -> str:
        return self.lender[0].model


def _pair_key(row: E2ERow) -> tuple:
    """What a pair's two sides share: the row without its id, system, date, source and
    measurements."""
    return astuple(replace(row, id="", system="", measured="", source="", ttft_ms=0.0,
                           tpot_ms=0.0))


def speed_pairs(rows: Sequence[E2ERow], borrower: str = "b300_sxm") -> list[SpeedPair]:
    """The colocated deployments of ``rows`` measured on ``borrower`` and on its lender's
    system (:data:`LENDER_SYSTEM`), in a stable order."""
    lender = LENDER_SYSTEM[borrower]
    sides: dict[tuple, dict[str, list[E2ERow]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        if r.mode == "agg" and r.system in (lender, borrower):
            sides[_pair_key(r)][r.system].append(r)
    return [SpeedPair(tuple(s[lender]), tuple(s[borrower]))
            for _, s in sorted(sides.items(), key=lambda kv: repr(kv[0]))
            if s[lender] and s[borrower]]


def measured(pair_side: Sequence[E2ERow]) -> np.ndarray:
    """A side's measured (TTFT, TPOT), ms: the median of its runs."""
    return np.median(measured_means(pair_side), axis=0)


def pair_speeds(predicted: np.ndarray, meas: np.ndarray) -> np.ndarray:
    """Each pair's (prefill, decode) speed: ``predicted`` and ``meas`` are ``(n, 2, 2)`` --
    pair, side (lender, borrower), (TTFT, TPOT)."""
    predicted, meas = np.asarray(predicted, float), np.asarray(meas, float)
    return (predicted[:, 1] / predicted[:, 0]) / (meas[:, 1] / meas[:, 0])


def lender_speed(speeds: np.ndarray) -> dict[str, float]:
    """The median (prefill, decode) speed over pairs (``(n, 2)``), as a ``lender_speed``."""
    speeds = np.asarray(speeds, float).reshape(-1, 2)
    if not len(speeds):
        raise ValueError("lender_speed: no pairs")
    prefill, decode = np.median(speeds, axis=0)
    return {"prefill": round(float(prefill), 3), "decode": round(float(decode), 3)}


def speed_without_engine(pairs: Sequence[SpeedPair], speeds: np.ndarray,
                         engine: str) -> dict[str, float] | None:
    """The speed measured on the pairs of engines other than ``engine`` (None: none)."""
    keep = [k for k, p in enumerate(pairs) if p.engine != engine]
    return lender_speed(np.asarray(speeds)[keep]) if keep else None


def gpu_yaml(name: str, speed: dict[str, float] | None, directory: Path) -> Path:
    """A GPU YAML of catalog GPU ``name`` with ``lender_speed`` set to ``speed`` (None: the
    borrowed profile as is), written into ``directory``; its path."""
    spec: GPUSpec = resolve_gpu(name)
    fields = spec.model_dump(exclude_none=True)
    fields["aliases"] = list(fields.get("aliases", ()))
    fields.pop("lender_speed", None)
    if speed is not None:
        fields["lender_speed"] = dict(speed)
    tag = "as-lender" if speed is None else "-".join(
        f"{k}{v:.3f}" for k, v in sorted(speed.items()))
    path = Path(directory) / f"{name}-{tag}.yaml"
    path.write_text(yaml.safe_dump(fields, sort_keys=True))
    return path


def held_out_gpus(rows: Sequence[E2ERow], without_engine: dict[str, dict | None],
                  directory: Path) -> dict[str, str]:
    """Each row on a GPU with a measured ``lender_speed`` (its catalog entry's), by id: a
    GPU YAML (:func:`gpu_yaml`) with the speed measured without the row's engine
    (``without_engine[engine]``; None or absent: the profile as borrowed). Rows on other
    GPUs are absent."""
    out: dict[str, str] = {}
    made: dict[tuple[str, str], str] = {}
    for r in rows:
        spec = resolve_gpu(r.system)
        if spec.lender_speed is None:
            continue
        key = (spec.name, r.engine)
        if key not in made:
            made[key] = str(gpu_yaml(spec.name, without_engine.get(r.engine), directory))
        out[r.id] = made[key]
    return out


__all__ = ["LENDER_SYSTEM", "SpeedPair", "gpu_yaml", "held_out_gpus", "lender_speed",
           "measured", "pair_speeds", "speed_pairs", "speed_without_engine"]

"""Import Vidur's measured profiles (``mlp.csv`` and network CSVs) into the measurement schema.

See :mod:`serveplan.estimator.measurements` for the schema and ``docs/measurements.md``
for the caveats of this source.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from .measurements_schema import (
    _VIDUR_DEVICE_TO_GPU,
    _VIDUR_NODE_TO_GPU,
    MeasurementError,
    _assemble,
    _col,
    validate_measurements,
)

__all__ = ["load_vidur"]

_LFS_PREFIX = b"version https://git-lfs"

# Vidur mlp.csv op -> op_family
_VIDUR_OPS: dict[str, str] = {
    "attn_pre_proj": "gemm",
    "attn_post_proj": "gemm",
    "mlp_up_proj": "gemm",
    "mlp_down_proj": "gemm",
    "mlp_act": "elementwise",
    "add": "elementwise",
    "input_layernorm": "norm",
    "post_attention_layernorm": "norm",
    "attn_rope": "rope",
    "emb": "embedding",
}


def _is_lfs_pointer(path: Path) -> bool:
    with path.open("rb") as fh:
        return fh.read(len(_LFS_PREFIX)) == _LFS_PREFIX


def load_vidur(
    root: str | Path,
    statistic: str = "median",
    engine_version: str = "7d47513",
    min_rows: int = 1,
) -> pd.DataFrame:
    """Import Vidur's measured profiles (``profiling/compute/**/mlp.csv`` and network CSVs).

    Parameters
    ----------
    root : str or Path
        The ``vidur`` data folder (holding ``profiling/``), or ``profiling/`` itself.
    statistic : {"median", "mean", "min", "max"}
        Which ``time_stats.<op>.<statistic>`` to use. Vidur trains on the median.
    engine_version : str
        Recorded as ``engine_version`` (the microsoft/vidur snapshot the copy is from).
    min_rows : int
        Passed to :func:`validate_measurements`.

    Returns
    -------
    pandas.DataFrame
        Schema rows with ``engine = "vidur"``, ``dtype = "fp16"`` and a ``model``
        column (``org/name``) kept as an extra.

    Raises
    ------
    MeasurementError
        If ``root`` has no ``profiling`` folder or ``statistic`` is invalid.

    Notes
    -----
    ``mlp.csv`` times are ms for one call of one op of one layer on one GPU of a TP
    group; shapes are derived from the model columns with ``d = n_embd / n_head``:
    QKV GEMM ``n = (n_head + 2 n_kv_head) d / tp, k = n_embd``; O GEMM ``n = n_embd,
    k = n_head d / tp``; up GEMM ``n = (2 if gated else 1) n_expanded_embd / tp``; down
    GEMM ``n = n_embd, k = n_expanded_embd / tp``; ``m = num_tokens``. Element-wise,
    norm, rope and embedding rows carry ``num_tokens`` and the width they act on.
    Network ``size`` is a count of fp16 elements (``message_bytes = 2 size``).
    Git-LFS pointer files are skipped with a warning; ``attention.csv`` files are
    never imported (the real ones are not in this copy; any present may be the
    synthetic stand-in).
    """
    if statistic not in ("median", "mean", "min", "max"):
        raise MeasurementError(f"statistic given an invalid value: {statistic!r}; "
                               f"valid: ['median', 'mean', 'min', 'max']")
    root = Path(root)
    prof = root if root.name == "profiling" else root / "profiling"
    if not prof.is_dir():
        raise MeasurementError(f"{root}: no Vidur 'profiling' directory found")
    parts = _vidur_compute_parts(prof, statistic) + _vidur_network_parts(prof, statistic)
    for part in parts:
        part.update(engine="vidur", engine_version=engine_version, dtype="fp16")
    out = _assemble(parts, [len(p["latency_s"]) for p in parts])
    return validate_measurements(out, source=f"vidur {prof}", min_rows=min_rows)


# the warnings below use stacklevel=3 so that they point at the caller of load_vidur


def _vidur_compute_parts(prof: Path, statistic: str) -> list[dict]:
    """Column dicts of every ``compute/<device>/<org>/<model>/mlp.csv``."""
    parts = []
    for path in sorted(prof.glob("compute/*/*/*/*.csv")):
        rel = path.relative_to(prof.parent).as_posix()
        if _is_lfs_pointer(path):
            warnings.warn(f"{rel}: Git-LFS pointer, not data; skipped", stacklevel=3)
            continue
        if path.name != "mlp.csv":
            warnings.warn(f"{rel}: only mlp.csv is imported from compute/; skipped",
                          stacklevel=3)
            continue
        device = path.parent.parent.parent.name
        gpu = _VIDUR_DEVICE_TO_GPU.get(device, device)
        model = f"{path.parent.parent.name}/{path.parent.name}"
        frame = _vidur_mlp(pd.read_csv(path), statistic, gpu, model, rel)
        parts.append({c: frame[c].to_numpy() for c in frame.columns})
    return parts


def _vidur_network_parts(prof: Path, statistic: str) -> list[dict]:
    """Column dicts of every ``network/<node>/{all_reduce,send_recv}.csv``."""
    parts = []
    for path in sorted(prof.glob("network/*/*.csv")):
        rel = path.relative_to(prof.parent).as_posix()
        if _is_lfs_pointer(path):
            warnings.warn(f"{rel}: Git-LFS pointer, not data; skipped", stacklevel=3)
            continue
        if path.name not in ("all_reduce.csv", "send_recv.csv"):
            warnings.warn(f"{rel}: not a network profile; skipped", stacklevel=3)
            continue
        node = path.parent.name
        gpu = _VIDUR_NODE_TO_GPU.get(node, node)
        frame = _vidur_network(pd.read_csv(path), statistic, gpu, rel)
        parts.append({c: frame[c].to_numpy() for c in frame.columns})
    return parts


def _vidur_mlp(d: pd.DataFrame, stat: str, gpu: str, model: str, rel: str) -> pd.DataFrame:
    need = ["n_head", "n_kv_head", "n_embd", "n_expanded_embd", "use_gated_mlp",
            "num_tokens", "num_tensor_parallel_workers"]
    missing = [c for c in need if c not in d.columns]
    if missing:
        raise MeasurementError(f"{rel}: missing column(s) {missing}")
    tokens = _col(d, "num_tokens")
    tp = _col(d, "num_tensor_parallel_workers")
    n_head, n_kv = _col(d, "n_head"), _col(d, "n_kv_head")
    embd, inter = _col(d, "n_embd"), _col(d, "n_expanded_embd")
    gated = d["use_gated_mlp"].astype(str).str.lower().isin(["true", "1"]).to_numpy()
    head_dim = embd / n_head
    shapes = {
        "attn_pre_proj": dict(m=tokens, n=(n_head + 2 * n_kv) * head_dim / tp, k=embd),
        "attn_post_proj": dict(m=tokens, n=embd, k=n_head * head_dim / tp),
        "mlp_up_proj": dict(m=tokens, n=np.where(gated, 2.0, 1.0) * inter / tp, k=embd),
        "mlp_down_proj": dict(m=tokens, n=embd, k=inter / tp),
        "mlp_act": dict(num_tokens=tokens, hidden_size=inter / tp),
        "add": dict(num_tokens=tokens, hidden_size=embd),
        "input_layernorm": dict(num_tokens=tokens, hidden_size=embd),
        "post_attention_layernorm": dict(num_tokens=tokens, hidden_size=embd),
        "attn_rope": dict(num_tokens=tokens, num_heads=n_head / tp, num_kv_heads=n_kv / tp,
                          head_dim=head_dim),
        "emb": dict(num_tokens=tokens, hidden_size=embd),
    }
    frames = []
    for op, family in _VIDUR_OPS.items():
        col = f"time_stats.{op}.{stat}"
        if col not in d.columns:
            continue
        lat = _col(d, col) * 1e-3  # Vidur times are ms
        keep = np.isfinite(lat)
        cols = {"op_family": family, "op_name": op, "gpu": gpu, "source": rel,
                "model": model, "tp": tp, "latency_s": lat}
        for key, val in shapes[op].items():
            cols[key] = val
        frames.append(pd.DataFrame(cols)[keep])
    return pd.concat(frames, ignore_index=True)


def _vidur_network(d: pd.DataFrame, stat: str, gpu: str, rel: str) -> pd.DataFrame:
    collective = d["collective"].astype(str)
    fam = collective.map({"all_reduce": "allreduce", "send_recv": "p2p"})
    if fam.isna().any():
        raise MeasurementError(f"{rel}: unknown collective(s) "
                               f"{sorted(set(collective[fam.isna()]))}; "
                               f"valid: ['all_reduce', 'send_recv']")
    lat = np.full(len(d), np.nan)
    for name in collective.unique():
        col = f"time_stats.{name}.{stat}"
        if col not in d.columns:
            raise MeasurementError(f"{rel}: missing column {col!r}")
        mask = (collective == name).to_numpy()
        lat[mask] = _col(d, col)[mask] * 1e-3
    workers = _col(d, "num_workers")
    per_node = _col(d, "devices_per_node")
    return pd.DataFrame({
        "op_family": fam.to_numpy(dtype=object), "op_name": collective.to_numpy(dtype=object),
        "gpu": gpu, "source": rel, "num_gpus": workers,
        "num_nodes": np.ceil(workers / per_node),
        "message_bytes": _col(d, "size") * 2.0,  # fp16 elements
        "latency_s": lat,
    })

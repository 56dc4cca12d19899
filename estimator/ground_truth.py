"""Batch-level ground truth for validation: Argonne's LLM-Inference-Bench fixed-batch runs.

These numbers are for checking the estimator and for reporting only. Nothing may be
fitted to them (the per-op measurements in :mod:`serveplan.estimator.measurements`
are the training data).

What a row is
-------------
A batch of ``batch_size`` identical requests, each ``input_len`` prompt tokens and
``output_len`` generated tokens, run offline to completion on ``num_gpus`` devices.
:func:`load_argonne` returns one tidy table over the four published CSVs; columns:

=========================  ====  ======================================================
column                     unit  meaning
=========================  ====  ======================================================
source                     -     ``all_results``, ``ttft_itl``, ``power`` or ``quant``
hardware                   -     the CSV's label (``Nvidia H100 GPU``)
gpu                        -     our short name (:data:`ARGONNE_HARDWARE_TO_GPU`)
framework                  -     the CSV's label (``vLLM``, ``TensorRT-LLM`` ...)
engine                     -     normalised (``vllm``, ``trtllm``, ``deepspeed-mii`` ...)
model                      -     the CSV's model name
hf_model                   -     Hugging Face repo id (:func:`argonne_model_to_hf`)
model_known                -     False if ``model`` could not be mapped (kept as is)
in_catalog                 -     ``hf_model`` has a config in ``models_dir`` (NA if
                                 no ``models_dir`` was given)
num_gpus                   1     devices used
tp                         1     tensor-parallel degree (= num_gpus for vLLM and
                                 TensorRT-LLM, whose run scripts pass it; NaN else)
batch_size                 1     requests in the batch
input_len, output_len      tok   prompt / generated tokens per request
weight_dtype, kv_dtype     -     ``fp16`` unless the ``quant`` file says otherwise
latency_s                  s     wall time of the whole batch (end to end)
throughput_tok_s           tok/s as published: (input + output) x batch / latency
throughput_consistent      -     published throughput equals 2 L B / latency (False
                                 for llama.cpp, which defines it differently)
output_throughput_tok_s    tok/s derived: output_len x batch_size / latency_s
ttft_s                     s     time to first token (``ttft_itl`` rows only)
tpot_s                     s     derived, ``ttft_itl`` rows only:
                                 (latency_s - ttft_s) / (output_len - 1)
avg_power                  ?     ``power`` rows; unit not stated in the file
=========================  ====  ======================================================

See ``docs/measurements.md`` for the evidence behind the GPU mapping and the
``ttft_itl`` interpretation.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

__all__ = [
    "ARGONNE_FILES",
    "ARGONNE_HARDWARE_TO_GPU",
    "ARGONNE_MODEL_ALIASES",
    "GroundTruthError",
    "argonne_model_to_hf",
    "catalog_model_ids",
    "load_argonne",
]


class GroundTruthError(ValueError):
    """Unreadable or unexpected ground-truth data."""


#: source label -> file name in the Argonne folder.
ARGONNE_FILES: dict[str, str] = {
    "all_results": "All_results.csv",
    "ttft_itl": "all_results_TTFT_ITL.csv",
    "power": "power_results.csv",
    "quant": "A100_H100_quant_all_results.csv",
}

#: Argonne ``Hardware`` label -> our short GPU name. The A100s are the 40 GB SXM4 parts of
#: ALCF Polaris (the vLLM A100 scripts are PBS jobs on Polaris' file systems, and
#: Mixtral-8x7B, 93 GB in fp16, never runs on fewer than 4 of them); the H100 form
#: factor is not recorded.
ARGONNE_HARDWARE_TO_GPU: dict[str, str] = {
    "Nvidia A100 GPU": "a100-40gb",
    "Nvidia H100 GPU": "h100",
    "Nvidia GH200 GPU": "gh200",
    "AMD MI300X GPU": "mi300x",
    "AMD MI250 GPU": "mi250",
    "Intel PVC GPU": "intel-max-1550",
    "Intel Max 1550": "intel-max-1550",
    "Habana Gaudi2": "gaudi2",
    "SambaNova SN40L": "sn40l",
}

_FRAMEWORK_TO_ENGINE: dict[str, str] = {
    "vLLM": "vllm",
    "TensorRT-LLM": "trtllm",
    "Deepspeed-MII": "deepspeed-mii",
    "Deepspeed": "deepspeed",
    "llama.cpp": "llama.cpp",
    "sambaflow": "sambaflow",
}
_TP_FRAMEWORKS = ("vllm", "trtllm")

#: Short model labels used in the paper's figures -> Hugging Face repo ids (the CSVs
#: already use repo ids, which map to themselves).
ARGONNE_MODEL_ALIASES: dict[str, str] = {
    "LLaMA-2-7B": "meta-llama/Llama-2-7b-hf",
    "LLaMA-2-70B": "meta-llama/Llama-2-70b-hf",
    "LLaMA-3-8B": "meta-llama/Meta-Llama-3-8B",
    "LLaMA-3-70B": "meta-llama/Meta-Llama-3-70B",
    "Mistral-7B": "mistralai/Mistral-7B-v0.1",
    "Mixtral-8x7B": "mistralai/Mixtral-8x7B-v0.1",
    "Qwen2-7B": "Qwen/Qwen2-7B",
    "Qwen2-72B": "Qwen/Qwen2-72B",
}


def _model_key(name: str) -> str:
    return re.sub(r"[^a-z0-9.]", "", name.lower())


_ALIAS_BY_KEY = {_model_key(k): v for k, v in ARGONNE_MODEL_ALIASES.items()}
_HF_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def catalog_model_ids(models_dir: str | Path) -> set[str]:
    """Hugging Face ids of the ``org--name.json`` configs in a models folder.

    Examples
    --------
    A file ``meta-llama--Meta-Llama-3-8B.json`` gives ``"meta-llama/Meta-Llama-3-8B"``.
    """
    folder = Path(models_dir)
    if not folder.is_dir():
        raise GroundTruthError(f"models_dir {str(folder)!r} is not a directory")
    return {p.stem.replace("--", "/", 1) for p in folder.glob("*--*.json")}


def argonne_model_to_hf(name: str, catalog: Iterable[str] | None = None) -> tuple[str, bool]:
    """Hugging Face repo id for an Argonne model name.

    Parameters
    ----------
    name : str
        A repo id (``"meta-llama/Meta-Llama-3-8B"``) or a short label from the paper
        (``"LLaMA-3-8B"``; case and punctuation are ignored).
    catalog : iterable of str, optional
        Known repo ids (see :func:`catalog_model_ids`); a case-insensitive match is
        returned with the catalog's spelling.

    Returns
    -------
    (str, bool)
        The repo id and whether the name was recognised. An unrecognised name is
        returned unchanged with ``False``.

    Examples
    --------
    >>> argonne_model_to_hf("LLaMA-3-8B")
    ('meta-llama/Meta-Llama-3-8B', True)
    >>> argonne_model_to_hf("bigscience/bloom-7b1")
    ('bigscience/bloom-7b1', True)
    >>> argonne_model_to_hf("Falcon-40B")
    ('Falcon-40B', False)
    """
    text = str(name).strip()
    if catalog is not None:
        by_lower = {c.lower(): c for c in catalog}
        if text.lower() in by_lower:
            return by_lower[text.lower()], True
    alias = _ALIAS_BY_KEY.get(_model_key(text))
    if alias is not None:
        return alias, True
    if _HF_ID.match(text):
        return text, True
    return text, False


def _read(path: Path) -> pd.DataFrame:
    df = pd.read_csv(path, skip_blank_lines=True)
    df.columns = [str(c).strip() for c in df.columns]
    return df.dropna(how="all").reset_index(drop=True)


def _need(df: pd.DataFrame, cols: list[str], path: Path) -> None:
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise GroundTruthError(f"{path}: missing column(s) {missing}; found {list(df.columns)}")


_DTYPE_LABEL = re.compile(r"Weight\s*=\s*(\w+)\s*,\s*KV Cache\s*=\s*(\w+)", re.IGNORECASE)


def load_argonne(
    root: str | Path,
    sources: Iterable[str] | str | None = None,
    models_dir: str | Path | None = None,
) -> pd.DataFrame:
    """Load LLM-Inference-Bench's fixed-batch results as one tidy table (validation only).

    Parameters
    ----------
    root : str or Path
        The ``argonne_llm_inference_bench`` folder.
    sources : str or iterable of str, optional
        Subset of :data:`ARGONNE_FILES` keys; default all files present (at least
        ``All_results.csv`` must exist).
    models_dir : str or Path, optional
        Folder of ``org--name.json`` configs; fills ``in_catalog``.

    Returns
    -------
    pandas.DataFrame
        Columns as in the module docstring, one row per published measurement.

    Raises
    ------
    GroundTruthError
        On an unknown source name, a missing file or column, or an unknown hardware
        or framework label (the message lists the known ones).

    Notes
    -----
    ``All_results.csv`` and ``power_results.csv`` have one length column (ISL = OSL).
    In ``all_results_TTFT_ITL.csv`` the ``Output Length`` column is 1 (the run that
    measured TTFT), while ``end_latency`` is the latency of the ISL = OSL = 1024 run
    (it equals the matching ``All_results`` latency); those rows therefore get
    ``output_len = input_len`` and a derived ``tpot_s``. The paper's Figure 22 "ITL"
    is ``tpot_s / batch_size``.
    """
    root = Path(root)
    chosen = _chosen_sources(root, sources)
    catalog = catalog_model_ids(models_dir) if models_dir is not None else None
    res = pd.concat([_read_source(root, src) for src in chosen], ignore_index=True)
    _add_engine_columns(res)
    _add_model_columns(res, catalog)
    _add_derived_columns(res)
    return res[_COLUMN_ORDER]


#: Column order of :func:`load_argonne`'s table.
_COLUMN_ORDER = ["source", "hardware", "gpu", "framework", "engine", "model", "hf_model",
                 "model_known", "in_catalog", "num_gpus", "tp", "batch_size", "input_len",
                 "output_len", "weight_dtype", "kv_dtype", "latency_s", "throughput_tok_s",
                 "throughput_consistent", "output_throughput_tok_s", "ttft_s", "tpot_s",
                 "avg_power"]


def _chosen_sources(root: Path, sources: Iterable[str] | str | None) -> list[str]:
    """The :data:`ARGONNE_FILES` keys to read: those given (validated) or all present."""
    if sources is None:
        chosen = [k for k, f in ARGONNE_FILES.items() if (root / f).is_file()]
        if "all_results" not in chosen:
            raise GroundTruthError(f"{root}: {ARGONNE_FILES['all_results']} not found")
    else:
        chosen = [sources] if isinstance(sources, str) else list(sources)
        bad = sorted(set(chosen) - set(ARGONNE_FILES))
        if bad:
            raise GroundTruthError(f"sources given invalid value(s) {bad}; "
                                   f"valid: {sorted(ARGONNE_FILES)}")
    return chosen


def _read_source(root: Path, src: str) -> pd.DataFrame:
    """One source file as the raw columns of the tidy table (before label mapping)."""
    path = root / ARGONNE_FILES[src]
    if not path.is_file():
        raise GroundTruthError(f"{path}: file not found")
    df = _read(path)
    base = ["Hardware", "Num of Hardware", "Framework", "Model", "Batch Size"]
    out = pd.DataFrame({
        "source": src,
        "hardware": df.get("Hardware"),
        "framework": df.get("Framework"),
        "model": df.get("Model"),
    })
    if src == "ttft_itl":
        _need(df, [*base, "Input Length", "Output Length", "TTFT Latency", "end_latency"],
              path)
        out["input_len"] = df["Input Length"].astype(float)
        out["output_len"] = df["Input Length"].astype(float)
        out["latency_s"] = pd.to_numeric(df["end_latency"], errors="coerce")
        out["ttft_s"] = pd.to_numeric(df["TTFT Latency"], errors="coerce")
        out["throughput_tok_s"] = np.nan
    else:
        lat_col = "latency" if src == "quant" else "Latency"
        thr_col = "throughput" if src == "quant" else "Throughput"
        _need(df, [*base, "Input Output Length", lat_col, thr_col], path)
        out["input_len"] = df["Input Output Length"].astype(float)
        out["output_len"] = df["Input Output Length"].astype(float)
        out["latency_s"] = pd.to_numeric(df[lat_col], errors="coerce")
        out["ttft_s"] = np.nan
        out["throughput_tok_s"] = pd.to_numeric(df[thr_col], errors="coerce")
    out["num_gpus"] = df["Num of Hardware"].astype(float)
    out["batch_size"] = df["Batch Size"].astype(float)
    out["weight_dtype"], out["kv_dtype"] = "fp16", "fp16"
    if src == "quant":
        _add_quant_dtypes(out, df, path)
    out["avg_power"] = (pd.to_numeric(df["avg_power"], errors="coerce")
                        if src == "power" and "avg_power" in df.columns else np.nan)
    return out


def _add_quant_dtypes(out: pd.DataFrame, df: pd.DataFrame, path: Path) -> None:
    """Weight / KV dtypes of the quantisation runs, parsed from their ``kv_cache_dtype`` label."""
    _need(df, ["kv_cache_dtype"], path)
    parsed = df["kv_cache_dtype"].astype(str).str.extract(_DTYPE_LABEL)
    if parsed.isna().any(axis=None):
        bad = sorted(set(df["kv_cache_dtype"][parsed[0].isna()].astype(str)))
        raise GroundTruthError(f"{path}: unparsed kv_cache_dtype label(s) {bad}")
    out["weight_dtype"] = parsed[0].str.lower()
    out["kv_dtype"] = parsed[1].str.lower()


def _add_engine_columns(res: pd.DataFrame) -> None:
    """``gpu``, ``engine`` and ``tp`` from the hardware and framework labels."""
    hw = res["hardware"].astype(str).str.strip()
    unknown = sorted(set(hw) - set(ARGONNE_HARDWARE_TO_GPU))
    if unknown:
        raise GroundTruthError(f"unknown Hardware label(s) {unknown}; "
                               f"known: {sorted(ARGONNE_HARDWARE_TO_GPU)}")
    res["gpu"] = hw.map(ARGONNE_HARDWARE_TO_GPU)
    fw = res["framework"].astype(str).str.strip()
    unknown = sorted(set(fw) - set(_FRAMEWORK_TO_ENGINE))
    if unknown:
        raise GroundTruthError(f"unknown Framework label(s) {unknown}; "
                               f"known: {sorted(_FRAMEWORK_TO_ENGINE)}")
    res["engine"] = fw.map(_FRAMEWORK_TO_ENGINE)
    res["tp"] = np.where(res["engine"].isin(_TP_FRAMEWORKS), res["num_gpus"], np.nan)


def _add_model_columns(res: pd.DataFrame, catalog: set[str] | None) -> None:
    """``hf_model``, ``model_known`` and ``in_catalog`` from the model labels."""
    mapped = {m: argonne_model_to_hf(m, catalog) for m in res["model"].astype(str).unique()}
    res["hf_model"] = res["model"].astype(str).map(lambda m: mapped[m][0])
    res["model_known"] = res["model"].astype(str).map(lambda m: mapped[m][1]).astype(bool)
    if catalog is None:
        res["in_catalog"] = pd.array([pd.NA] * len(res), dtype="boolean")
    else:
        res["in_catalog"] = pd.array(res["hf_model"].isin(catalog), dtype="boolean")


def _add_derived_columns(res: pd.DataFrame) -> None:
    """Throughput consistency check, output throughput and TPOT."""
    tokens = res["input_len"] + res["output_len"]
    expected = tokens * res["batch_size"] / res["latency_s"]
    consistent = np.isclose(res["throughput_tok_s"], expected, rtol=1e-6)
    res["throughput_consistent"] = pd.array(
        np.where(res["throughput_tok_s"].notna(), consistent, None), dtype="boolean")
    res["output_throughput_tok_s"] = res["output_len"] * res["batch_size"] / res["latency_s"]
    with np.errstate(invalid="ignore", divide="ignore"):
        res["tpot_s"] = (res["latency_s"] - res["ttft_s"]) / (res["output_len"] - 1)

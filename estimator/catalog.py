"""Catalog: models and GPUs by short name, or from user files.

Models ship as verbatim Hugging Face ``config.json`` files (``data/models``, provenance in
``data/models/SOURCE.md``), with ModelOpt's ``hf_quant_config.json`` beside a quantized one
(``<org>--<name>.hf_quant_config.json``). A model's short name is its HF repo name
lowercased with a trailing ``-hf`` dropped (``meta-llama/Llama-2-70b-hf`` -> ``llama-2-70b``);
the full ``org/name`` works too, as does a path to any ``config.json`` (an
``hf_quant_config.json`` beside it is read). Instruct / base / chat variants of a shipped
model resolve to its config (``meta-llama/Llama-3.1-8B-Instruct`` -> ``llama-3.1-8b``;
``mixtral-8x7b-instruct-v0.1``; ``mixtral-8x7b`` for ``mixtral-8x7b-v0.1``): they share the
architecture. Quantized checkpoints of a shipped architecture (``Qwen/Qwen3-235B-A22B-FP8``,
``nvidia/Llama-3.1-8B-Instruct-FP8``) are named in ``data/models/aliases.yaml`` with the
checkpoint's quantization and its source. GPUs come from ``data/gpus/catalog.yaml`` by name
or alias, or from a user YAML file with the same fields.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

import yaml
from pydantic import ValidationError

from .specs import GPUSpec, ModelSpec, SpecError, read_text_file
from .validation import file_problems

__all__ = ["CatalogError", "list_gpus", "list_models", "model_repo", "resolve_gpu",
           "resolve_model"]

QUANT_SUFFIX = ".hf_quant_config.json"
_VARIANT = re.compile(r"-(?:instruct|base|chat|it)(?=$|-v\d|-\d{4})")


class CatalogError(SpecError):
    """An unknown model or GPU name, or an unreadable spec file."""


def _data_dir():
    return resources.files(__package__).joinpath("data")


def _short_name(repo: str) -> str:
    name = repo.split("/")[-1].lower()
    return name[:-3] if name.endswith("-hf") else name


def _variant_key(name: str) -> str:
    """``name`` without its instruct / base / chat / it tag (``-hf`` dropped too)."""
    name = name[:-3] if name.endswith("-hf") else name
    return _VARIANT.sub("", name)


@dataclass(frozen=True)
class _Entry:
    """A catalog model: the HF id it stands for, the shipped config it is read from and,
    for an alias, that alias's id in ``aliases.yaml``."""

    repo: str
    file: str
    alias: str | None = None


@lru_cache(maxsize=1)
def _aliases() -> dict[str, dict]:
    """``aliases.yaml``: HF id -> ``config`` (a shipped model's HF id), ``source``, and the
    checkpoint's ``quantization_config`` or ``hf_quant_config`` (inline or a shipped file)."""
    return yaml.safe_load(_data_dir().joinpath("models", "aliases.yaml").read_text()) or {}


@lru_cache(maxsize=1)
def _model_index() -> dict[str, _Entry]:
    """Map every accepted model name (short and ``org/name``, lowercased) to its entry."""
    index: dict[str, _Entry] = {}
    bare: dict[str, list[_Entry]] = {}
    for path in _data_dir().joinpath("models").iterdir():
        if not path.name.endswith(".json") or path.name.endswith(QUANT_SUFFIX):
            continue
        entry = _Entry(path.name[: -len(".json")].replace("--", "/"), path.name)
        index[_short_name(entry.repo)] = entry
        index[entry.repo.lower()] = entry
        stem = re.sub(r"-v\d+(?:\.\d+)*$", "", _short_name(entry.repo))
        if stem != _short_name(entry.repo):
            bare.setdefault(stem, []).append(entry)
    for stem, entries in bare.items():  # mixtral-8x7b for mixtral-8x7b-v0.1, if unambiguous
        if len(entries) == 1:
            index.setdefault(stem, entries[0])
    for alias, fields in _aliases().items():
        entry = _Entry(alias, index[str(fields["config"]).lower()].file, alias)
        index.setdefault(_short_name(alias), entry)
        index.setdefault(alias.lower(), entry)
    return index


@lru_cache(maxsize=1)
def _variant_index() -> dict[str, _Entry]:
    """Names without their instruct / base tag -> the one entry they stand for."""
    found: dict[str, set[_Entry]] = {}
    for key, entry in _model_index().items():
        found.setdefault(_variant_key(key), set()).add(entry)
    return {k: next(iter(v)) for k, v in found.items() if len(v) == 1}


def _lookup(name: str) -> _Entry | None:
    """The entry of a catalog name: exact, without ``-hf``, or as a variant of one."""
    index = _model_index()
    key = name.lower()
    for candidate in (key, key[:-3] if key.endswith("-hf") else key, _variant_key(key)):
        if candidate in index:
            return index[candidate]
    return _variant_index().get(_variant_key(key))


def model_repo(name: str) -> str | None:
    """The HF id a catalog name stands for, with the catalog's casing; an ``org/name`` that
    resolves as a variant is returned as given; None for names the catalog cannot tell the
    repository of."""
    index = _model_index()
    key = name.lower()
    for candidate in (key, key[:-3] if key.endswith("-hf") else key):
        if candidate in index:
            return index[candidate].repo
    return name if "/" in name and _lookup(name) is not None else None


@lru_cache(maxsize=1)
def _gpu_table() -> dict[str, dict]:
    text = _data_dir().joinpath("gpus", "catalog.yaml").read_text()
    return yaml.safe_load(text)


def list_models() -> list[str]:
    """Short names of the bundled models and aliases, sorted."""
    return sorted(k for k in _model_index() if "/" not in k)


def list_gpus() -> list[str]:
    """Names of the bundled GPUs, sorted."""
    return sorted(_gpu_table())


def _unknown(kind: str, name: str, choices: list[str], shown: list[str]) -> CatalogError:
    """Error naming the close matches among ``choices`` and listing ``shown``."""
    close = difflib.get_close_matches(name.lower(), choices, n=4, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    return CatalogError(
        f"unknown {kind} {name!r}{hint} (known: {', '.join(shown)}; "
        f"or give a path to a {'config.json' if kind == 'model' else 'YAML file'})"
    )


def _read_text(path: Path, expected: str) -> str:
    """The text of a user's spec file; :class:`CatalogError` naming it if it cannot be
    read or is not text."""
    try:
        return read_text_file(path, expected)
    except SpecError as exc:
        raise CatalogError(str(exc)) from None
    except OSError as exc:
        raise CatalogError(f"{path}: cannot read ({exc.strerror})") from None


def _read_json(path: Path, expected: str = "a Hugging Face config.json") -> dict:
    try:
        data = json.loads(_read_text(path, expected))
    except json.JSONDecodeError as exc:
        raise CatalogError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    if not isinstance(data, dict):
        raise CatalogError(f"{path}: expected a JSON object ({expected}), "
                           f"got {type(data).__name__}")
    return data


def _quant_sibling(path: Path) -> Path:
    """Where ModelOpt's ``hf_quant_config.json`` of the config ``path`` would be:
    ``hf_quant_config.json`` beside ``config.json``, ``X_hf_quant_config.json`` beside
    ``X_config.json``, else ``X.hf_quant_config.json`` beside ``X.json``."""
    name = path.name
    if name.endswith("config.json"):
        return path.with_name(name[: -len("config.json")] + "hf_quant_config.json")
    return path.with_name(name[: -len(".json")] + QUANT_SUFFIX)


@lru_cache(maxsize=64)
def _bundled_model(filename: str, alias: str | None = None) -> ModelSpec:
    models = _data_dir().joinpath("models")
    cfg = json.loads(models.joinpath(filename).read_text())
    quant_file = models.joinpath(filename[: -len(".json")] + QUANT_SUFFIX)
    hf_quant = json.loads(quant_file.read_text()) if quant_file.is_file() else None
    repo = alias or filename[: -len(".json")].replace("--", "/")
    if alias is not None:
        fields = _aliases()[alias]
        if "quantization_config" in fields:
            cfg = {**cfg, "quantization_config": fields["quantization_config"]}
        hf_quant = fields.get("hf_quant_config", hf_quant)
        if isinstance(hf_quant, str):
            hf_quant = json.loads(models.joinpath(hf_quant).read_text())
    return ModelSpec.from_hf_config(cfg, name=_short_name(repo), hf_quant_config=hf_quant,
                                    source=f"catalog model {repo}")


def _read_model_file(path: Path) -> ModelSpec:
    """A user's ``config.json`` (and the ``hf_quant_config.json`` beside it, if any)."""
    if path.is_dir():
        path = path / "config.json"
    if not path.exists():
        raise CatalogError(f"{path}: no such file")
    quant = _quant_sibling(path)
    hf_quant = _read_json(quant, "ModelOpt's hf_quant_config.json") if quant.is_file() else None
    return ModelSpec.from_hf_config(_read_json(path), name=path.parent.name or path.stem,
                                    hf_quant_config=hf_quant, source=str(path))


def resolve_model(model: str | Path | dict | ModelSpec) -> ModelSpec:
    """A :class:`ModelSpec` from a short name, ``org/name``, config path, dict or spec."""
    if isinstance(model, ModelSpec):
        return model
    if isinstance(model, dict):
        return ModelSpec.from_hf_config(model)
    text = str(model)
    path = Path(text).expanduser()
    if path.suffix == ".json" or path.is_file() or "/" in text and path.exists():
        return _read_model_file(path)
    entry = _lookup(text)
    if entry is not None:
        return _bundled_model(entry.file, entry.alias)
    raise _unknown("model", text, list(_model_index()), list_models())


def resolve_gpu(gpu: str | Path | dict | GPUSpec) -> GPUSpec:
    """A :class:`GPUSpec` from a catalog name / alias, a YAML path, a dict or a spec."""
    if isinstance(gpu, GPUSpec):
        return gpu
    if isinstance(gpu, dict):
        return GPUSpec(**gpu)
    text = str(gpu)
    path = Path(text).expanduser()
    if path.suffix in (".yaml", ".yml") or path.is_file():
        if not path.exists():
            raise CatalogError(f"{path}: no such file")
        source = _read_text(path, "a GPU YAML file")
        try:
            data = yaml.safe_load(source)
        except yaml.YAMLError as exc:
            raise CatalogError(f"{path}: not valid YAML ({exc})") from None
        if not isinstance(data, dict):
            raise CatalogError(f"{path}: expected a mapping of GPU fields")
        data.setdefault("name", path.stem)
        try:
            return GPUSpec(**data)
        except ValidationError as exc:
            raise CatalogError(file_problems(exc, path, source, root="GPU")) from None
    table = _gpu_table()
    key = text.lower()
    for name, fields in table.items():
        if key == name or key in [a.lower() for a in fields.get("aliases", [])]:
            return GPUSpec(name=name, **{**fields, "aliases": tuple(fields.get("aliases", []))})
    names = list(table) + [a for f in table.values() for a in f.get("aliases", [])]
    raise _unknown("GPU", text, names, list_gpus())

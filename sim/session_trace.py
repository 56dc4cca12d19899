"""The JSON Lines session trace: one round per line.

Fields of a line::

    {"session_id": "s17", "round": 0, "arrival_s": 12.5,
     "prompt_tokens": 4096, "output_tokens": 96, "kind": "thinking"}
    {"session_id": "s17", "round": 1, "tool_delay_s": 0.8,
     "prompt_tokens": 1024, "output_tokens": 64, "kind": "thinking"}

* ``session_id`` (string or integer) -- lines of one session may interleave with others;
* ``round`` -- 0, 1, 2, ... in file order within the session;
* ``arrival_s`` (round 0 only) -- the session's arrival, seconds from the trace's start;
* ``tool_delay_s`` (rounds >= 1) -- seconds from the previous round's last token to this
  round's send (the tool call, or a user's think time);
* ``prompt_tokens`` -- the round's *new* prompt tokens (the simulator prepends the history:
  every earlier prompt and output of the session); ``output_tokens``;
* ``kind`` (optional) -- ``thinking`` (hidden planning) or ``answer`` (visible); without it
  a session's last round is its answer and the others think.

Other fields are ignored; blank lines too. A bad line raises
:class:`~serveplan.sim.traces.TraceError` naming the file, the 1-based line and the field.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from .session_state import KIND_ANSWER, KIND_THINKING
from .sessions import KINDS, SessionRounds
from .traces import TraceError

_UNSET = -1


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _seconds(rec: dict, key: str) -> str | None:
    v = rec.get(key)
    if v is None:
        return "missing"
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        return f"{v!r} is not a finite number of seconds >= 0"
    return None


def _line_problem(rec, expected_round: int) -> tuple[str, str] | None:
    """``(field, problem)`` of a parsed line, or None."""
    if not isinstance(rec, dict):
        return "line", "is not a JSON object"
    sid = rec.get("session_id")
    if sid is None:
        return "session_id", "missing"
    if not (isinstance(sid, str) or _is_int(sid)):
        return "session_id", f"{sid!r} is not a string or an integer"
    rnd = rec.get("round")
    if not _is_int(rnd):
        return "round", "missing" if rnd is None else f"{rnd!r} is not an integer"
    if rnd != expected_round:
        return "round", (f"{rnd} but session {sid!r} is at round {expected_round} here (rounds "
                         "go 0, 1, 2, ... in file order)")
    key = "arrival_s" if rnd == 0 else "tool_delay_s"
    problem = _seconds(rec, key)
    if problem is not None:
        return key, problem
    for key in ("prompt_tokens", "output_tokens"):
        v = rec.get(key)
        if not _is_int(v) or v < 1:
            return key, "missing" if v is None else f"{v!r} is not an integer >= 1"
    kind = rec.get("kind", "unset")
    if kind != "unset" and kind not in KINDS:
        return "kind", f"{kind!r} is not one of {', '.join(KINDS)}"
    return None


def _parse(path: Path, line: str, lineno: int, next_round: dict):
    try:
        rec = json.loads(line)
    except json.JSONDecodeError as exc:
        raise TraceError(f"{path} line {lineno}: not valid JSON ({exc.msg})") from None
    sid = rec.get("session_id") if isinstance(rec, dict) else None
    key = (type(sid).__name__, sid) if isinstance(sid, (str, int)) else None
    problem = _line_problem(rec, next_round.get(key, 0))
    if problem is not None:
        raise TraceError(f"{path} line {lineno}: {problem[0]}: {problem[1]}")
    return key, rec


def read_session_trace(path: str | Path, *, limit: int | None = None) -> SessionRounds:
    """Read a JSON Lines session trace (module docstring); ``limit``: the first sessions."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"session trace {path} does not exist")
    order: dict = {}  # session key -> list of rounds
    next_round: dict = {}
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            key, rec = _parse(path, line, lineno, next_round)
            next_round[key] = rec["round"] + 1
            if key in order or limit is None or len(order) < limit:
                order.setdefault(key, []).append(rec)
    if not order:
        raise TraceError(f"{path}: no sessions read")
    return _rounds(order)


def _rounds(order: dict) -> SessionRounds:
    sess, new, out, kind, delay, arrival, names = [], [], [], [], [], [], []
    for s, (key, recs) in enumerate(order.items()):
        names.append(str(key[1]))
        arrival.append(float(recs[0]["arrival_s"]))
        for k, rec in enumerate(recs):
            sess.append(s)
            new.append(rec["prompt_tokens"])
            out.append(rec["output_tokens"])
            default = KIND_ANSWER if k == len(recs) - 1 else KIND_THINKING
            kind.append(KINDS[rec["kind"]] if "kind" in rec else default)
            delay.append(float(rec.get("tool_delay_s", 0.0)) if k else 0.0)
    return SessionRounds(session=np.array(sess, dtype=np.int64),
                         new_tokens=np.array(new, dtype=np.int64),
                         output_tokens=np.array(out, dtype=np.int64),
                         kind=np.array(kind, dtype=np.int8), delay_s=np.array(delay),
                         arrival_s=np.array(arrival), names=tuple(names))


def write_session_trace(path: str | Path, rounds: SessionRounds) -> None:
    """Write ``rounds`` in this format (e.g. a generated workload, to replay or edit)."""
    names = rounds.names or tuple(str(s) for s in range(len(rounds.arrival_s)))
    with Path(path).open("w", encoding="utf-8") as f:
        prev = -1
        k = 0
        for j, s in enumerate(np.asarray(rounds.session)):
            k = k + 1 if s == prev else 0
            prev = s
            rec = {"session_id": names[s], "round": k}
            if k == 0:
                rec["arrival_s"] = float(rounds.arrival_s[s])
            else:
                rec["tool_delay_s"] = float(rounds.delay_s[j])
            rec.update(prompt_tokens=int(rounds.new_tokens[j]),
                       output_tokens=int(rounds.output_tokens[j]),
                       kind="answer" if rounds.kind[j] == KIND_ANSWER else "thinking")
            f.write(json.dumps(rec) + "\n")


__all__ = ["read_session_trace", "write_session_trace"]

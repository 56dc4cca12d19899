"""Compile the simulator and the cost kernels into numba's cache, once per machine.

``serveplan warmup`` does it in the foreground (for container images and CI set-up);
``python -m serveplan.warmup`` is the background compile a first run starts
(:mod:`serveplan.kernels.jit_mode`). Both run the same small jobs -- a colocated and a
prefill/decode simulation, one under an engine runtime (its API-server front end), a
small strategy search and the cost oracle's calls -- which
compile every path the commands take; anything a rarer option needs still compiles when
first used, announced on stderr. Then the cache is marked warm for the current sources.
"""

from __future__ import annotations

import sys
import time

from serveplan.kernels import jit_mode

_INSTANCE = {"model": "llama-3.1-8b", "gpu": "h100", "tp": 1, "max_model_len": 4096}
_WORKLOAD = {"kind": "poisson", "rate": 20.0, "num_requests": 48,
             "isl": {"dist": "lognormal", "mean": 400, "sigma": 0.8, "max": 2048},
             "osl": {"dist": "lognormal", "mean": 40, "sigma": 0.8, "max": 256},
             "prefix": {"num_groups": 2, "prefix_len": 64}}


def run_jobs() -> None:
    """The jobs that compile what the commands use (module doc)."""
    from serveplan.estimator.notes import held_notes
    from serveplan.estimator.oracle import CostOracle
    from serveplan.search import SearchSpec, run_search
    from serveplan.simulation import simulate

    oracle = CostOracle("llama-3.1-8b", "h100", tp=1)
    oracle.decode_time(8, 128)
    oracle.step_time([16, 1], [0, 10])
    simulate({"pools": [{"role": "colocated", **_INSTANCE}]}, _WORKLOAD)
    with held_notes():  # the engine runtime's front end; its fit-domain note is not news
        simulate({"pools": [{"role": "colocated", **_INSTANCE, "engine": "vllm"}]},
                 _WORKLOAD)
    simulate({"pools": [{"role": "prefill", **_INSTANCE},
                        {"role": "decode", **_INSTANCE, "count": 2}],
              "decode_router": "sibyl"}, _WORKLOAD)
    run_search(SearchSpec(model="llama-3.1-8b", gpu="h100", gpus=2, isl=512, osl=32,
                          num_requests=100, seeds=1, max_decide=2))


def warm_up() -> float | None:
    """Compile (or load) everything :func:`run_jobs` needs and mark the cache warm; the
    seconds it took, or ``None`` when another process is doing it (this one then waits for
    it and returns ``None``)."""
    lock = jit_mode.WarmupLock()
    if not lock.acquired and jit_mode.fcntl is not None and jit_mode.cache_dir() is not None:
        jit_mode.WarmupLock(blocking=True).release()  # wait for the other one
        return None
    try:
        jit_mode.force("compile")
        started = time.perf_counter()
        run_jobs()
        seconds = time.perf_counter() - started
        jit_mode.mark_warm(seconds)
        return seconds
    finally:
        lock.release()


def main() -> int:
    seconds = warm_up()
    if seconds is not None:
        print(f"serveplan: compiled code ready ({seconds:.1f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

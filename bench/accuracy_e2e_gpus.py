"""The end-to-end report's B300 rows at the GPU speed measured without their engine.

B300 borrows B200's profile at the speed its paired deployments measure (the catalog's
``lender_speed``, ``bench/gpu_lender_speed.py``). The report holds that measurement out as
it holds out the runtime terms: a row is simulated with the speed of the other engines'
pairs only, so no run of its engine -- and none of its model's -- sets the speed it is
predicted with.
"""

from __future__ import annotations

import atexit
import json
import shutil
import sys
import tempfile
from pathlib import Path

from serveplan.e2e_gpu_speed import held_out_gpus

SPEEDS = Path(__file__).resolve().parent / "results" / "gpu_lender_speed.json"
HELD_OUT_GPU: dict[str, str] = {}
"""Row id -> the GPU YAML its simulations run on (:func:`hold_out_gpu_speeds`)."""


def hold_out_gpu_speeds(rows) -> None:
    """Put every row on a GPU whose catalog entry carries a measured ``lender_speed`` (B300)
    on that GPU with the speed the other engines' pairs measure
    (``gpu_lender_speed.json``, :func:`serveplan.e2e_gpu_speed.held_out_gpus`), into
    :data:`HELD_OUT_GPU`: no run of the row's engine, so none of its model's, sets it."""
    if not SPEEDS.is_file():
        sys.exit(f"{SPEEDS} is missing: run `python bench/gpu_lender_speed.py` first")
    speeds = json.loads(SPEEDS.read_text())["without_engine"]
    directory = Path(tempfile.mkdtemp(prefix="serveplan-e2e-gpus-"))
    atexit.register(shutil.rmtree, directory, ignore_errors=True)
    HELD_OUT_GPU.update(held_out_gpus(rows, speeds, directory))

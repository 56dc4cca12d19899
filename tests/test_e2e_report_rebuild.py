"""``bench/accuracy_e2e.py --report-only`` rebuilds the report from the previous run's rows
file and JSON without losing setting (e) (a rebuild once rewrote the rows file before reading
its calibrated column back, and dropped the section)."""

from __future__ import annotations

import csv
import json
import sys

import numpy as np
import pytest

from serveplan.e2e import expressible, load_rows


@pytest.fixture
def small_data(blackwell_e2e, tmp_path):
    """Six expressible vLLM rows of the measured data, with its model configs."""
    with (blackwell_e2e / "silicon_blackwell.csv").open(newline="") as fh:
        reader = csv.DictReader(fh)
        header, rows = reader.fieldnames, [r for r in reader if r["backend"] == "vllm"]
    data = tmp_path / "data"
    data.mkdir()
    for sub in ("model_configs", "methodology"):
        (data / sub).symlink_to(blackwell_e2e / sub)
    with (data / "silicon_blackwell.csv").open("w", newline="") as fh:
        out = csv.DictWriter(fh, header)
        out.writeheader()
        out.writerows(rows[:40])
    ok = [r for r in load_rows(data / "silicon_blackwell.csv") if expressible(r, data) is None]
    assert len(ok) >= 6
    with (data / "silicon_blackwell.csv").open("w", newline="") as fh:
        out = csv.DictWriter(fh, header)
        out.writeheader()
        out.writerows([r for r in rows[:40] if r["id"] in {o.id for o in ok[:6]}])
    return data, ok[:6]


def test_report_only_keeps_setting_e(accuracy_e2e, small_data, tmp_path, monkeypatch):
    data, ok = small_data
    results = tmp_path / "results"
    results.mkdir()
    monkeypatch.setattr(accuracy_e2e, "HERE", tmp_path)
    meas = np.array([[r.ttft_ms, r.tpot_ms] for r in ok])
    calibrated = meas * 1.1
    calibrated[:3] = np.nan  # the light rows: fitted on, not predicted
    preds = {n: meas * (1 + 0.1 * i) for i, n in enumerate(
        ("gpu_only", "engine_unfitted", "engine_fitted_lomo", "as_shipped"))}
    probe = meas * 1.2  # the eager term's secant runs (--eager-term): kept too
    accuracy_e2e.write_rows_csv(results / "accuracy_e2e_rows.csv", ok, meas,
                                {**preds, "self_calibrated": calibrated, "eager_probe": probe})
    section = {"light_clients": 8, "min_light_rows": 3, "terms": ["frontend_output_s"],
               "fits": [], "by_engine": [{"engine": "all", "rows": 3, "deployments": 1,
                                          "c": None, "e": {"ttft_med_abs": 0.1,
                                                           "ttft_bias": 0.1,
                                                           "tpot_med_abs": 0.1,
                                                           "tpot_bias": 0.1}}]}
    (results / "accuracy_e2e.json").write_text(json.dumps(
        {"command": "python bench/accuracy_e2e.py", "date": "2026-11-29", "seconds": 1.0,
         "folds": [], "profiles": {}, "self_calibration": section}))
    monkeypatch.setattr(sys, "argv", ["accuracy_e2e.py", "--report-only", "--data", str(data)])
    accuracy_e2e.main()
    kept = accuracy_e2e.read_rows_csv(results / "accuracy_e2e_rows.csv", ok,
                                      ("self_calibrated", "eager_probe"))
    # ten significant digits: a rebuild's medians are the run's, not 4-digit roundings
    np.testing.assert_allclose(kept["self_calibrated"], calibrated, rtol=1e-9)
    np.testing.assert_allclose(kept["eager_probe"], probe, rtol=1e-9)
    assert json.loads((results / "accuracy_e2e.json").read_text())["self_calibration"] == section
    assert "| all | 1 | 3 | (e) own light runs | 10.0 | +10.0 | 10.0 | +10.0 |" in (
        results / "accuracy_e2e.md").read_text()


def test_reuse_leaves_out_rows_no_longer_expressible(accuracy_e2e, small_data, tmp_path,
                                                     capsys):
    """A rule that refuses rows since the last run (an MTP sweep, say) keeps ``--reuse``
    usable: the remaining rows take their own predictions; a row the file lacks, or rows
    out of order, still refuse."""
    _, ok = small_data
    meas = np.array([[r.ttft_ms, r.tpot_ms] for r in ok])
    preds = {"gpu_only": meas * 2.0, "engine_unfitted": meas * 3.0}
    path = tmp_path / "rows.csv"
    accuracy_e2e.write_rows_csv(path, ok, meas, preds)
    kept = [ok[0], ok[2], ok[5]]
    got = accuracy_e2e.read_rows_csv(path, kept, ("gpu_only", "engine_unfitted"))
    np.testing.assert_allclose(got["engine_unfitted"], meas[[0, 2, 5]] * 3.0, rtol=1e-9)
    assert "3 rows of the previous run are no longer expressible" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="not the rows of this data"):
        accuracy_e2e.read_rows_csv(path, [ok[2], ok[0]], ("gpu_only",))
    with pytest.raises(SystemExit, match="not the rows of this data"):
        accuracy_e2e.read_rows_csv(path, [ok[0], ok[0]], ("gpu_only",))

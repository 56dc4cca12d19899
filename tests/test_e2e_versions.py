"""Which engine release a measured row ran (serveplan.e2e_versions), and the runtime entry
it selects."""

from serveplan.e2e_versions import engine_version, measured_date
from serveplan.estimator.runtime import load_runtime_profile, parse_version


def test_measured_date_is_read_from_the_source_column():
    src = ("source_file=2026-04-06.csv; model=Llama-3.1-70B; silicon_concurrency=8; "
           "measured=2025-10-29T00:00:00.000Z; wip=False")
    assert measured_date(src) == "2025-10-29"
    assert measured_date("db-dump/2026-04-27; config_id=177") == ""


def test_an_unversioned_vllm_row_runs_the_release_current_at_its_date():
    # vLLM 0.11.0 was released 2025-10-02 and 0.11.1 on 2025-11-18: a run measured on
    # 2025-10-29 ran 0.11.0, whose profile entry (0.9 <= v < 0.12) has async scheduling off
    assert engine_version("vllm", "", "2025-10-29") == "0.11.0"
    assert engine_version("vllm", "", "2025-11-20") == "0.11.1"
    entry = load_runtime_profile("vllm").entry(engine_version("vllm", "", "2025-10-29"))
    assert not entry.async_scheduling
    assert engine_version("vllm", "", "") is None  # no date: the newest the profile knows


def test_a_dynamo_tag_recorded_for_trtllm_means_the_pytorch_backend():
    # TensorRT-LLM reached 1.0 in September 2025; '0.8.1.post2' measured in 2026 is the
    # Dynamo container's tag, so the row runs the newest entry (PyTorch backend, overlap)
    assert engine_version("trtllm", "0.8.1.post2", "2026-02-03") is None
    assert engine_version("trtllm", "1.2.0rc6.post2", "2026-01-29") == "1.2.0rc6.post2"
    newest = load_runtime_profile("trtllm").entry(None)
    assert newest.async_scheduling and parse_version(newest.min) <= (1, 0)
    # a real 0.x TensorRT-LLM measured before 1.0 keeps its version
    assert engine_version("trtllm", "0.16.0", "2025-01-10") == "0.16.0"


def test_nightly_builds_take_the_newest_entry():
    assert engine_version("sglang", "nightly-dev-20260216-d3bae71e", "2026-02-20") is None
    assert engine_version("vllm", "0.19.0", "2026-04-03") == "0.19.0"


def test_vllm_batch_defaults_follow_the_gpu_class():
    """vllm/engine/arg_utils.py get_batch_defaults (0.9 on, API server): 1024 sequences and
    8192 batched tokens on GPUs of 70 GiB or more that are not A100s, 256 / 2048 otherwise;
    the 0.8 entry has no GPU rule (256 / 2048 everywhere)."""
    from serveplan.estimator.runtime import engine_runtime

    def limits(version, gpu, gib):
        d = engine_runtime("vllm", version, gpu, gib).defaults
        return d["max_num_seqs"], d["max_num_batched_tokens"]

    assert limits("0.11.0", "h100", 79.6) == (1024, 8192)
    assert limits("0.19.0", "b200", 179.1) == (1024, 8192)
    assert limits("0.11.0", "a100-80gb", 79.3) == (256, 2048)  # excluded by name
    assert limits("0.11.0", "l40s", 44.4) == (256, 2048)  # under 70 GiB
    assert limits("0.8.5", "h100", 79.6) == (256, 2048)

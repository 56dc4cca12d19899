"""API servers: every instance of the entry pool runs its own (``api_servers`` each, vLLM's
--api-server-count, SGLang's --tokenizer-worker-num), so a deployment of many instances is
not held to one tokenizer. The queue itself is worked by hand in ``test_runtime.py``."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from serveplan.config import SimulationConfig
from serveplan.launch import sglang_commands, vllm_commands
from serveplan.resolution import resolve

INSTANCE = {"model": "llama-3.1-8b", "gpu": "h100", "max_model_len": 4096, "max_num_seqs": 64}


def _servers(pools) -> int | None:
    front = resolve({"pools": pools}).front_end()
    return None if front is None else front.servers


def test_each_instance_of_the_entry_pool_runs_its_own_api_servers():
    """Four colocated vLLM instances: four API servers; with two each, eight. A P/D split:
    its two prefill instances (the entry pool), not the three decode ones. Without an engine
    there is no front end at all."""
    vllm = {**INSTANCE, "engine": "vllm"}
    assert _servers([{"role": "colocated", "count": 4, **vllm}]) == 4
    assert _servers([{"role": "colocated", "count": 4, "api_servers": 2, **vllm}]) == 8
    assert _servers([{"role": "prefill", "count": 2, **vllm},
                     {"role": "decode", "count": 3, **vllm}]) == 2
    assert _servers([{"role": "colocated", "count": 4, **INSTANCE}]) is None


def test_the_launch_commands_carry_the_api_server_count():
    one = {**INSTANCE, "num_instances": 1}
    assert "--api-server-count" not in " ".join(vllm_commands(one))
    assert "--api-server-count 4" in " ".join(vllm_commands({**one, "api_servers": 4}))
    assert "--tokenizer-worker-num 4" in " ".join(sglang_commands({**one, "api_servers": 4}))


def test_no_api_servers_is_refused_by_name():
    pool = {"role": "colocated", "api_servers": 0, **INSTANCE}
    with pytest.raises(ValidationError, match="api_servers"):
        SimulationConfig.model_validate({"deployment": {"pools": [pool]},
                                         "workload": {"kind": "poisson", "rate": 1,
                                                      "num_requests": 10}})

"""Launch commands for a chosen strategy: ``vllm serve`` (and SGLang) command lines.

Colocated (``xm``): one ``vllm serve`` per instance on its own GPUs and port, with the
instance's parallelism and engine knobs (vLLM's flag names), plus a note on the front end
(any round-robin load balancer; the planner's iteration level assumed round-robin).

Disaggregated (``ypzd``): prefill and decode instances started with vLLM's
``--kv-transfer-config`` (``NixlConnector``, ``kv_role: kv_both``, each with its own
``VLLM_NIXL_SIDE_CHANNEL_PORT``) and the proxy that sends each request to a prefill instance
and then to a decode instance. SGLang: ``sglang.launch_server`` with
``--disaggregation-mode prefill|decode`` and ``sglang_router`` in ``--pd-disaggregation`` mode.

GPUs are numbered consecutively from 0 in the order prefill, decode (or instance order); a
``hosts`` layout is left to the operator (the commands say which GPUs each instance needs).
"""

from __future__ import annotations

import json
import shlex

from serveplan.config import InstanceConfig
from serveplan.deployments import AnyDeployment, PDDeployment, parse_deployment
from serveplan.estimator.catalog import _model_index

__all__ = ["hf_repo", "sglang_commands", "vllm_commands"]


def hf_repo(model: str) -> str:
    """The Hugging Face repo id of a catalog model name (paths and unknown names unchanged)."""
    index = _model_index()
    key = model.lower()
    for candidate in (key, key[:-3] if key.endswith("-hf") else key):
        if candidate in index:
            return index[candidate][: -len(".json")].replace("--", "/")
    return model


def _gpus(start: int, n: int) -> str:
    return ",".join(str(g) for g in range(start, start + n))


def _vllm_flags(c: InstanceConfig) -> list[str]:
    f = [f"--tensor-parallel-size {c.tp}"]
    if c.pp > 1:
        f.append(f"--pipeline-parallel-size {c.pp}")
    if c.dp > 1:
        f.append(f"--data-parallel-size {c.dp}")
    if c.ep > 1:
        f.append("--enable-expert-parallel")
    f.append(f"--max-num-seqs {c.max_num_seqs}")
    if c.max_num_batched_tokens is not None:
        f.append(f"--max-num-batched-tokens {c.max_num_batched_tokens}")
    f.append(f"--gpu-memory-utilization {c.gpu_memory_utilization:g}")
    if c.max_model_len is not None:
        f.append(f"--max-model-len {c.max_model_len}")
    if c.block_size is not None:
        f.append(f"--block-size {c.block_size}")
    f.append("--enable-prefix-caching" if c.enable_prefix_caching
             else "--no-enable-prefix-caching")
    f.append("--enable-chunked-prefill" if c.enable_chunked_prefill
             else "--no-enable-chunked-prefill")
    if c.long_prefill_token_threshold:
        f.append(f"--long-prefill-token-threshold {c.long_prefill_token_threshold}")
    if c.dtype is not None:
        f.append("--quantization fp8" if c.dtype == "fp8" else f"--dtype {_torch(c.dtype)}")
    if c.kv_dtype == "fp8":
        f.append("--kv-cache-dtype fp8")
    if not c.cuda_graph:
        f.append("--enforce-eager")
    return f


def _torch(dtype: str) -> str:
    return {"bf16": "bfloat16", "fp16": "float16"}.get(dtype, dtype)


def _gpus_of(c: InstanceConfig) -> int:
    return c.tp * c.pp * c.dp


def vllm_commands(deployment, *, base_port: int = 8100) -> list[str]:
    """Shell lines that start the deployment with vLLM (comments start with ``#``)."""
    d: AnyDeployment = parse_deployment(deployment)
    lines = []
    gpu = 0
    if isinstance(d, PDDeployment):
        cfg = shlex.quote(json.dumps({"kv_connector": d.kv_connector, "kv_role": "kv_both"}))
        ports = {"prefill": [], "decode": []}
        port = base_port
        for role, pool in (("prefill", d.prefill), ("decode", d.decode)):
            for i in range(pool.num_instances):
                n = _gpus_of(pool)
                lines.append(f"# {role} instance {i}: GPUs {_gpus(gpu, n)}")
                lines.append(
                    f"CUDA_VISIBLE_DEVICES={_gpus(gpu, n)} "
                    f"VLLM_NIXL_SIDE_CHANNEL_PORT={5600 + port - base_port} "
                    f"vllm serve {hf_repo(pool.model)} --port {port} "
                    + " ".join(_vllm_flags(pool)) + f" --kv-transfer-config {cfg} &")
                ports[role].append(port)
                gpu += n
                port += 1
        lines.append("# proxy: each request is prefilled on a prefill instance, then decoded "
                     "(vLLM's toy_proxy_server.py from its NixlConnector tests/examples)")
        lines.append(
            "python toy_proxy_server.py --port 8000 "
            f"--prefiller-hosts {' '.join(['localhost'] * len(ports['prefill']))} "
            f"--prefiller-ports {' '.join(map(str, ports['prefill']))} "
            f"--decoder-hosts {' '.join(['localhost'] * len(ports['decode']))} "
            f"--decoder-ports {' '.join(map(str, ports['decode']))}")
        return lines
    for i in range(d.num_instances):
        n = _gpus_of(d)
        lines.append(f"# instance {i}: GPUs {_gpus(gpu, n)}")
        lines.append(f"CUDA_VISIBLE_DEVICES={_gpus(gpu, n)} vllm serve {hf_repo(d.model)} "
                     f"--port {base_port + i} " + " ".join(_vllm_flags(d)) + " &")
        gpu += n
    if d.num_instances > 1:
        ports = ", ".join(str(base_port + i) for i in range(d.num_instances))
        lines.append(f"# front end: round-robin over ports {ports} (any HTTP load balancer)")
    return lines


def _sglang_flags(c: InstanceConfig) -> list[str]:
    f = [f"--tp {c.tp}"]
    if c.pp > 1:
        f.append(f"--pp {c.pp}")
    if c.dp > 1:
        f.append(f"--dp {c.dp}")
    if c.ep > 1:
        f.append(f"--ep-size {c.ep}")
    f.append(f"--max-running-requests {c.max_num_seqs}")
    if c.max_num_batched_tokens is not None:
        f.append(f"--chunked-prefill-size {c.max_num_batched_tokens}")
    f.append(f"--mem-fraction-static {c.gpu_memory_utilization:g}")
    if c.max_model_len is not None:
        f.append(f"--context-length {c.max_model_len}")
    if not c.enable_prefix_caching:
        f.append("--disable-radix-cache")
    if c.kv_dtype == "fp8":
        f.append("--kv-cache-dtype fp8_e4m3")
    if not c.cuda_graph:
        f.append("--disable-cuda-graph")
    return f


def sglang_commands(deployment, *, base_port: int = 30000) -> list[str]:
    """Shell lines that start the deployment with SGLang and its router."""
    d: AnyDeployment = parse_deployment(deployment)
    lines = []
    gpu = 0
    if isinstance(d, PDDeployment):
        urls = {"prefill": [], "decode": []}
        port = base_port
        for role, pool in (("prefill", d.prefill), ("decode", d.decode)):
            for i in range(pool.num_instances):
                n = _gpus_of(pool)
                lines.append(f"# {role} instance {i}: GPUs {_gpus(gpu, n)}")
                lines.append(
                    f"CUDA_VISIBLE_DEVICES={_gpus(gpu, n)} python -m sglang.launch_server "
                    f"--model-path {hf_repo(pool.model)} --port {port} "
                    + " ".join(_sglang_flags(pool))
                    + f" --disaggregation-mode {role} --disaggregation-transfer-backend "
                    "mooncake &")
                urls[role].append(f"http://127.0.0.1:{port}")
                gpu += n
                port += 1
        lines.append("python -m sglang_router.launch_router --pd-disaggregation "
                     + " ".join(f"--prefill {u}" for u in urls["prefill"]) + " "
                     + " ".join(f"--decode {u}" for u in urls["decode"])
                     + " --host 0.0.0.0 --port 8000")
        return lines
    urls = []
    for i in range(d.num_instances):
        n = _gpus_of(d)
        lines.append(f"# instance {i}: GPUs {_gpus(gpu, n)}")
        lines.append(f"CUDA_VISIBLE_DEVICES={_gpus(gpu, n)} python -m sglang.launch_server "
                     f"--model-path {hf_repo(d.model)} --port {base_port + i} "
                     + " ".join(_sglang_flags(d)) + " &")
        urls.append(f"http://127.0.0.1:{base_port + i}")
        gpu += n
    if d.num_instances > 1:
        lines.append("python -m sglang_router.launch_router --policy round_robin "
                     f"--worker-urls {' '.join(urls)} --host 0.0.0.0 --port 8000")
    return lines

"""Launch commands for a chosen strategy: ``vllm serve`` (and SGLang) command lines.

Before anything is printed every pool is checked with the memory planner
(:func:`check_fits`): a deployment that does not fit is refused with the planner's reason
(short by how many GiB, which TP would fit).

Instances are placed on nodes of ``gpus_per_node`` GPUs (8 unless given) in the order
colocated, prefill, decode (:func:`place`): an instance never straddles two nodes unless it
needs more GPUs than a node has, in which case it takes whole nodes. The commands come in
one block per node, with ``CUDA_VISIBLE_DEVICES`` counted from 0 on each node; hosts are
``localhost`` on one node, else the names given (``node0``, ``node1``, ... by default).

Colocated (``xm``): one ``vllm serve`` per instance on its own GPUs and port, with the
instance's parallelism and engine knobs (vLLM's flag names), plus a note on the front end
(any round-robin load balancer; the planner's iteration level assumed round-robin).

Disaggregated (``ypzd``): prefill and decode instances started with vLLM's
``--kv-transfer-config`` (``NixlConnector``, ``kv_role: kv_both``, each with its own
``VLLM_NIXL_SIDE_CHANNEL_PORT``) and the proxy that sends each request to a prefill instance
and then to a decode instance. SGLang: ``sglang.launch_server`` with
``--disaggregation-mode prefill|decode`` and ``sglang_router`` in ``--pd-disaggregation`` mode.

An instance larger than a node runs on a Ray cluster of its nodes (vLLM,
``--distributed-executor-backend ray``) or with ``--nnodes``/``--node-rank`` (SGLang).
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass

from serveplan.errors import UserError
from serveplan.estimator.catalog import model_repo
from serveplan.pools_config import Deployment, InstanceConfig, instance_fields, to_pools

__all__ = ["Placement", "check_fits", "hf_repo", "place", "sglang_commands", "vllm_commands"]

FRONT_PORT = 8000  # the proxy / router every request goes to
NIXL_PORT = 5600  # first NIXL side-channel port
RAY_PORT = 6379
SGLANG_DIST_PORT = 5000


def hf_repo(model: str) -> str:
    """The Hugging Face repo id of a catalog model name (paths and unknown names unchanged)."""
    return model_repo(model) or model


# ----------------------------------------------------------------------------- checks
def check_fits(deployment) -> None:
    """Raise :class:`UserError` unless every pool's instance fits its GPUs (the memory
    planner's verdict with vLLM's defaults, as the simulator resolves it)."""
    from serveplan.estimator.specs import SpecError
    from serveplan.resolution import resolve_instance

    for pool in to_pools(deployment).ordered_pools():
        try:
            resolve_instance(Deployment(num_instances=1, **instance_fields(pool)))
        except SpecError as exc:
            raise UserError(
                f"the {pool.role} instances ({pool.model} on {pool.gpu}, tp={pool.tp}"
                + (f", pp={pool.pp}" if pool.pp > 1 else "") + ") do not fit: "
                + str(exc).splitlines()[0] + "; no launch commands printed") from None


def check_ports(base_port: int, count: int, reserved: tuple = ()) -> None:
    """Instance ports ``base_port .. base_port + count - 1`` must be valid TCP ports and
    miss the ``reserved`` ranges ``(name, low, high)``."""
    last = base_port + count - 1
    if not 1 <= base_port <= 65535:
        raise UserError(f"--port given an invalid value: {base_port} (valid: 1..65535)")
    if last > 65535:
        raise UserError(f"--port {base_port}: {count} instances need ports up to {last}, "
                        "above 65535; choose a lower --port")
    for name, lo, hi in reserved:
        if base_port <= hi and lo <= last:
            raise UserError(f"--port {base_port}: the instance ports {base_port}..{last} "
                            f"overlap {name} ({lo}..{hi}); choose another --port")


# ----------------------------------------------------------------------------- placement
@dataclass(frozen=True)
class Placement:
    """Where one instance runs: its role, index in the role, nodes, GPUs and port."""

    role: str
    index: int
    slot: int  # position among all instances (ports, side channels)
    config: InstanceConfig
    nodes: tuple[int, ...]
    gpus: tuple[int, ...]  # GPU ids on each of its nodes
    port: int

    @property
    def cuda(self) -> str:
        return ",".join(map(str, self.gpus))


def _gpus_of(c: InstanceConfig) -> int:
    return c.tp * c.pp * c.dp


def place(deployment, *, gpus_per_node: int = 8, base_port: int = 8100,
          side_channels: bool = False) -> list[Placement]:
    """Instances of ``deployment`` on nodes of ``gpus_per_node`` GPUs, in role order,
    first fit without straddling a node; ports from ``base_port`` in the same order, clear
    of the front end's port and (``side_channels``) the NIXL side-channel ports."""
    if gpus_per_node < 1:
        raise UserError(f"--gpus-per-node given an invalid value: {gpus_per_node} (>= 1)")
    pools = to_pools(deployment).ordered_pools()
    count = sum(p.count for p in pools)
    reserved = (("the front end's port", FRONT_PORT, FRONT_PORT),)
    if side_channels:
        reserved += (("the NIXL side-channel ports", NIXL_PORT, NIXL_PORT + count - 1),)
    check_ports(base_port, count, reserved)
    out: list[Placement] = []
    node, used = 0, 0
    for pool in pools:
        n = _gpus_of(pool)
        if n > gpus_per_node and n % gpus_per_node:
            raise UserError(f"a {pool.role} instance needs {n} GPUs: more than a node's "
                            f"{gpus_per_node} but not whole nodes; set --gpus-per-node")
        for i in range(pool.count):
            if n > gpus_per_node:  # whole nodes of its own
                node, used = (node + 1, 0) if used else (node, 0)
                span = n // gpus_per_node
                nodes, gpus = tuple(range(node, node + span)), tuple(range(gpus_per_node))
                node += span
            else:
                if used + n > gpus_per_node:
                    node, used = node + 1, 0
                nodes, gpus = (node,), tuple(range(used, used + n))
                used += n
            out.append(Placement(pool.role, i, len(out), pool, nodes, gpus, base_port + len(out)))
    return out


def _hosts(placements: list[Placement], hosts: list[str] | None) -> list[str]:
    n = max(p.nodes[-1] for p in placements) + 1
    if not hosts:
        return ["localhost"] if n == 1 else [f"node{k}" for k in range(n)]
    if len(hosts) < n:
        raise UserError(f"--hosts names {len(hosts)} host(s) but the deployment needs {n} "
                        "nodes")
    return list(hosts)


def _blocks(placements, hosts, lines_of) -> list[str]:
    """One block of commands per node (``lines_of(p, node) -> lines``), headed by the host."""
    nodes = max(p.nodes[-1] for p in placements) + 1
    total = sum(len(p.gpus) * len(p.nodes) for p in placements)
    out = []
    if nodes > 1:
        out.append(f"# {total} GPUs on {nodes} nodes: run each block on its node")
    for k in range(nodes):
        if nodes > 1:
            out.append(f"# ===== on {hosts[k]} (node {k}) =====")
        for p in placements:
            if k in p.nodes:
                out.extend(lines_of(p, k))
    return out


def _title(p: Placement, hosts: list[str]) -> str:
    role = "instance" if p.role == "colocated" else f"{p.role} instance"
    where = ", ".join(hosts[k] for k in p.nodes)
    each = "each of " if len(p.nodes) > 1 else ""
    return f"# {role} {p.index}: GPUs {p.cuda}" + (f" on {each}{where}" if len(hosts) > 1 else "")


# ----------------------------------------------------------------------------- vLLM
def _vllm_flags(c: InstanceConfig) -> list[str]:
    if 1 < c.ep != c.tp * c.dp:
        raise UserError(f"export: vLLM's expert parallelism spans all tp x dp = {c.tp * c.dp} "
                        f"GPUs of an instance; ep={c.ep} shards each expert over "
                        f"{c.tp * c.dp // c.ep} of them, which SGLang runs (--engine sglang) "
                        "and vLLM does not")
    f = [f"--tensor-parallel-size {c.tp}"]
    if c.pp > 1:
        f.append(f"--pipeline-parallel-size {c.pp}")
    if c.dp > 1:
        f.append(f"--data-parallel-size {c.dp}")
    if c.ep > 1:
        f.append("--enable-expert-parallel")
    if c.moe_routing is not None and c.moe_routing.balanced_placement:
        f.append("--enable-eplb --eplb-config "
                 f"'{{\"num_redundant_experts\": {c.moe_routing.redundant_experts}}}'")
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
    if c.dtype == "fp8":
        f.append("--quantization fp8")
    elif c.dtype in ("bf16", "fp16"):  # other formats need a checkpoint quantized in them
        f.append(f"--dtype {_torch(c.dtype)}")
    if c.kv_dtype == "fp8":
        f.append("--kv-cache-dtype fp8")
    if not c.cuda_graph:
        f.append("--enforce-eager")
    if (c.api_servers or 1) > 1:
        f.append(f"--api-server-count {c.api_servers}")
    return f


def _torch(dtype: str) -> str:
    return {"bf16": "bfloat16", "fp16": "float16"}.get(dtype, dtype)


def _vllm_lines(p: Placement, node: int, hosts: list[str], kv: str | None) -> list[str]:
    head = hosts[p.nodes[0]]
    env = f"CUDA_VISIBLE_DEVICES={p.cuda} "
    extra = ""
    if kv is not None:
        env += f"VLLM_NIXL_SIDE_CHANNEL_PORT={NIXL_PORT + p.slot} "
        env += f"VLLM_NIXL_SIDE_CHANNEL_HOST={head} " if len(hosts) > 1 else ""
        extra = f" --kv-transfer-config {kv}"
    serve = (f"{env}vllm serve {hf_repo(p.config.model)} --port {p.port} "
             + " ".join(_vllm_flags(p.config)) + extra)
    if len(p.nodes) == 1:
        return [_title(p, hosts), serve + " &"]
    if node != p.nodes[0]:
        return [_title(p, hosts) + f" (Ray worker of the head on {head})",
                f"ray start --address {head}:{RAY_PORT} --block &"]
    workers = ", ".join(hosts[k] for k in p.nodes[1:])
    return [_title(p, hosts) + " (Ray head)", f"ray start --head --port {RAY_PORT}",
            f"# once the Ray workers on {workers} have joined:",
            serve + " --distributed-executor-backend ray &"]


def _launchable(deployment):
    """The deployment's pool form; an attention/FFN one is refused: no engine launches it."""
    d = to_pools(deployment)
    if d.architecture == "afd":
        raise UserError("export: attention/FFN disaggregation has no launch command -- "
                        "neither vLLM nor SGLang serves attention and FFN on separate "
                        "instances; serveplan models it for planning only")
    return d


def vllm_commands(deployment, *, base_port: int = 8100, gpus_per_node: int = 8,
                  hosts: list[str] | None = None, check: bool = True) -> list[str]:
    """Shell lines that start the deployment with vLLM (comments start with ``#``), one
    block per node; ``check`` first runs :func:`check_fits`."""
    d = _launchable(deployment)
    if check:
        check_fits(deployment)
    placements = place(d, gpus_per_node=gpus_per_node, base_port=base_port,
                       side_channels=d.architecture == "pd")
    hosts = _hosts(placements, hosts)
    kv = (shlex.quote(json.dumps({"kv_connector": d.kv_connector, "kv_role": "kv_both"}))
          if d.architecture == "pd" else None)
    lines = _blocks(placements, hosts, lambda p, k: _vllm_lines(p, k, hosts, kv))
    at = {role: [p for p in placements if p.role == role]
          for role in ("colocated", "prefill", "decode")}
    if d.architecture == "pd":
        lines.append("# proxy (any node): each request is prefilled on a prefill instance, "
                     "then decoded (vLLM's toy_proxy_server.py from its NixlConnector examples)")
        lines.append(
            f"python toy_proxy_server.py --port {FRONT_PORT} "
            f"--prefiller-hosts {' '.join(hosts[p.nodes[0]] for p in at['prefill'])} "
            f"--prefiller-ports {' '.join(str(p.port) for p in at['prefill'])} "
            f"--decoder-hosts {' '.join(hosts[p.nodes[0]] for p in at['decode'])} "
            f"--decoder-ports {' '.join(str(p.port) for p in at['decode'])}")
    elif len(at["colocated"]) > 1:
        ends = ", ".join(f"{hosts[p.nodes[0]]}:{p.port}" for p in at["colocated"])
        lines.append(f"# front end: round-robin over {ends} (any HTTP load balancer)")
    return lines


# ----------------------------------------------------------------------------- SGLang
def _sglang_flags(c: InstanceConfig) -> list[str]:
    f = [f"--tp {c.tp}"]
    if c.pp > 1:
        f.append(f"--pp {c.pp}")
    if c.dp > 1:
        f.append(f"--dp {c.dp}")
    if c.ep > 1:
        f.append(f"--ep-size {c.ep}")
    if c.moe_routing is not None and c.moe_routing.balanced_placement:
        f.append(f"--enable-eplb --ep-num-redundant-experts "
                 f"{c.moe_routing.redundant_experts}")
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
    if (c.api_servers or 1) > 1:
        f.append(f"--tokenizer-worker-num {c.api_servers}")
    return f


def _sglang_lines(p: Placement, node: int, hosts: list[str]) -> list[str]:
    line = (f"CUDA_VISIBLE_DEVICES={p.cuda} python -m sglang.launch_server "
            f"--model-path {hf_repo(p.config.model)} --port {p.port} "
            + " ".join(_sglang_flags(p.config)))
    if len(p.nodes) > 1:
        line += (f" --nnodes {len(p.nodes)} --node-rank {p.nodes.index(node)} "
                 f"--dist-init-addr {hosts[p.nodes[0]]}:{SGLANG_DIST_PORT}")
    if p.role != "colocated":
        line += f" --disaggregation-mode {p.role} --disaggregation-transfer-backend mooncake"
    return [_title(p, hosts), line + " &"]


def sglang_commands(deployment, *, base_port: int = 30000, gpus_per_node: int = 8,
                    hosts: list[str] | None = None, check: bool = True) -> list[str]:
    """Shell lines that start the deployment with SGLang and its router, one block per
    node; ``check`` first runs :func:`check_fits`."""
    d = _launchable(deployment)
    if check:
        check_fits(deployment)
    placements = place(d, gpus_per_node=gpus_per_node, base_port=base_port)
    hosts = _hosts(placements, hosts)
    lines = _blocks(placements, hosts, lambda p, k: _sglang_lines(p, k, hosts))
    url = {role: [f"http://{hosts[p.nodes[0]]}:{p.port}" for p in placements if p.role == role]
           for role in ("colocated", "prefill", "decode")}
    if d.architecture == "pd":
        lines.append("python -m sglang_router.launch_router --pd-disaggregation "
                     + " ".join(f"--prefill {u}" for u in url["prefill"]) + " "
                     + " ".join(f"--decode {u}" for u in url["decode"])
                     + f" --host 0.0.0.0 --port {FRONT_PORT}")
    elif len(url["colocated"]) > 1:
        lines.append("python -m sglang_router.launch_router --policy round_robin "
                     f"--worker-urls {' '.join(url['colocated'])} --host 0.0.0.0 "
                     f"--port {FRONT_PORT}")
    return lines

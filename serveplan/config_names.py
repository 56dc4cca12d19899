"""Names a deployment config accepts: schedulers, engines, routers, dtypes and roles
(:mod:`serveplan.pools_config` re-exports them)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BeforeValidator

SchedulerName = Literal["vllm-v1", "sglang", "prefill-priority", "trtllm-no-evict",
                        "trtllm-max-utilization", "skip-join-mlfq", "h2q-br"]
EngineName = Literal["vllm", "sglang", "trtllm"]
RouterName = Literal["round-robin", "least-outstanding-tokens", "least-requests"]
PrefillRouterName = Literal["least-loaded", "round-robin"]
DecodeRouterName = Literal["round-robin", "least-loaded", "least-requests", "sibyl", "sibyl-p1",
                           "sibyl-no-type1", "sibyl-no-type2", "sibyl-no-type3",
                           "sibyl-reqlevel", "sibyl-alg1"]
DECODE_ROUTER_ALIASES = {"rr": "round-robin", "ils": "least-loaded", "ils-tokens": "least-loaded",
                         "ils-requests": "least-requests"}
DecodeRouter = Annotated[DecodeRouterName, BeforeValidator(
    lambda v: DECODE_ROUTER_ALIASES.get(v, v) if isinstance(v, str) else v)]
"""A decode router name, its aliases (``rr``, ``ils``, ...) accepted."""
DTypeName = Literal["bf16", "fp16", "fp8"]
STATE_DTYPE_ALIASES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
StateDType = Annotated[Literal["fp32", "bf16", "fp16"], BeforeValidator(  # torch names too
    lambda v: STATE_DTYPE_ALIASES.get(v, v) if isinstance(v, str) else v)]
WeightDTypeName = Literal["bf16", "fp16", "fp8", "fp8_block", "nvfp4", "mxfp4", "int4"]
WEIGHT_DTYPE_ALIASES = {"fp4": "nvfp4"}
WeightDType = Annotated[WeightDTypeName, BeforeValidator(  # the dtype shorthand; fp4 = NVFP4
    lambda v: WEIGHT_DTYPE_ALIASES.get(v, v) if isinstance(v, str) else v)]
RoleName = Literal["colocated", "prefill", "decode", "attention", "ffn"]

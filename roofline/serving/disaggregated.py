"""Prefill/decode disaggregation: separate prefill and decode servers with the KV cache moved between them.

Splitwise (Patel et al., ISCA 2024) and DistServe (Zhong et al., OSDI 2024) run prompts on one pool
of GPUs and decoding on another. Here each pool is a set of identical servers behind a round-robin
balancer, each priced like any other server:

1. the prefill servers run every request with one output token: its first token leaves when its
   prompt's last chunk is done (TTFT);
2. the prompt's KV cache, ``input_tokens x`` KV bytes per token, crosses the link between the pools
   at ``link_bytes_per_s``;
3. the decode servers take each request, prefilled, when its cache has arrived, and decode the
   rest under the speculation policy (speculation is a decode-pool choice: the prefill pool emits
   one token per request either way).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from roofline.core.errors import SpecroofError
from roofline.serving.policies import ServingPolicy, parse_policy
from roofline.serving.prices import StepPrices
from roofline.serving.scheduler import RunResult, SchedulerConfig, simulate_run
from roofline.serving.workload import Workload


def _pool(
    w: Workload,
    servers: int,
    prices: StepPrices,
    policy: ServingPolicy,
    alpha: np.ndarray,
    cfg: SchedulerConfig,
    seed: int,
    first_token_s: np.ndarray | None = None,
) -> tuple[pd.DataFrame, list[RunResult]]:
    """Requests of ``w`` spread round-robin over ``servers``; per-request rows back in ``w``'s order."""
    frames, runs = [], []
    for s in range(min(servers, w.n)):
        idx = np.arange(s, w.n, servers)
        part = Workload(w.arrival_s[idx], w.input_tokens[idx], w.output_tokens[idx])
        ft = None if first_token_s is None else first_token_s[idx]
        r = simulate_run(part, prices, policy, alpha[idx], cfg, np.random.default_rng([seed, s]), first_token_s=ft)
        runs.append(r)
        frames.append(r.requests.assign(request=idx, server=s))
    return pd.concat(frames, ignore_index=True).sort_values("request").reset_index(drop=True), runs


def simulate_disaggregated(
    w: Workload,
    prices: StepPrices,
    policy: ServingPolicy,
    alpha: np.ndarray,
    cfg: SchedulerConfig,
    seed: int,
    *,
    prefill_servers: int,
    decode_servers: int,
    kv_bytes_per_token: float,
    link_bytes_per_s: float,
) -> RunResult:
    """One run of a disaggregated deployment (module docstring); the result reads like one server's."""
    if prefill_servers < 1 or decode_servers < 1:
        raise SpecroofError(
            f"disaggregation needs >= 1 prefill and decode server (got {prefill_servers}:{decode_servers})"
        )
    if not link_bytes_per_s > 0:
        raise SpecroofError("the KV link between the pools needs a bandwidth > 0 (the profile lists no interconnect)")
    pre_w = Workload(w.arrival_s, w.input_tokens, np.ones(w.n, dtype=np.int64))
    pre, pre_runs = _pool(pre_w, prefill_servers, prices, parse_policy("off"), alpha, cfg, seed)
    first = pre["first_token_s"].to_numpy()
    transfer = w.input_tokens * kv_bytes_per_token / link_bytes_per_s
    ready = first + transfer
    rest = np.nonzero(w.output_tokens >= 2)[0]  # one-token outputs are done at the prefill server
    order = rest[np.argsort(ready[rest], kind="stable")]
    finish = first.copy()
    dec_runs: list[RunResult] = []
    preempt = pre["preemptions"].to_numpy().copy()
    if order.size:
        dec_w = Workload(ready[order], w.input_tokens[order], w.output_tokens[order])
        dec, dec_runs = _pool(dec_w, decode_servers, prices, policy, alpha[order], cfg, seed + 1, first[order])
        finish[order] = dec["finish_s"].to_numpy()
        preempt[order] += dec["preemptions"].to_numpy()
    out = w.output_tokens
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(out > 1, (finish - first) / (out - 1), np.nan)
    requests = pd.DataFrame(
        {
            "request": np.arange(w.n),
            "arrival_s": w.arrival_s,
            "first_token_s": first,
            "finish_s": finish,
            "ttft_s": first - w.arrival_s,
            "tpot_s": tpot,
            "e2e_s": finish - w.arrival_s,
            "input_tokens": w.input_tokens,
            "output_tokens": out,
            "alpha": alpha,
            "preemptions": preempt,
            "kv_transfer_s": transfer,
        }
    )
    runs = dec_runs or pre_runs
    itl = np.sum([r.itl_counts for r in dec_runs], axis=0) if dec_runs else pre_runs[0].itl_counts * 0
    return RunResult(
        requests=requests,
        itl_counts=itl,
        # busy time, batch and KV figures describe the decode pool: where speculation runs
        busy_s=sum(r.busy_s for r in runs),
        batch_seconds=sum(r.batch_seconds for r in runs),
        kv_block_seconds=sum(r.kv_block_seconds for r in runs),
        kv_blocks=runs[0].kv_blocks,
        max_kv_utilisation=max(r.max_kv_utilisation for r in pre_runs + dec_runs),
        max_step_tokens=max(r.max_step_tokens for r in pre_runs + dec_runs),
        rounds=sum(r.rounds for r in dec_runs),
        draft_tokens=sum(r.draft_tokens for r in dec_runs),
        accepted_tokens=sum(r.accepted_tokens for r in dec_runs),
        trace=runs[0].trace,
        decode_runs=sum(r.decode_runs for r in pre_runs + dec_runs),
        prefill_steps=sum(r.prefill_steps for r in pre_runs + dec_runs),
    )

"""Serving under load: a continuous-batching simulator priced by the roofline, with speculation per step.

``simulate(...)`` sweeps request rates and speculation policies and returns per-request
times and a summary per (policy, rate); ``speculation_stops_paying_at_rate`` reads off where
a policy stops beating plain decoding. One file per idea: ``workload`` (arrivals and
lengths), ``policies`` (how much each step speculates), ``prices`` (step-price tables from
the one time model), ``scheduler`` (the continuous-batching loop), ``metrics``
(percentiles, goodput), ``disaggregated`` (separate prefill and decode servers), ``split`` (one long
light-load run cut where its server stood empty, its chunks simulated in parallel) and ``sweep``
(the points of a run, replicas behind a balancer). The formulas are in
docs/cost-model.md, section "Serving under load".
"""

from roofline.serving.disaggregated import simulate_disaggregated
from roofline.serving.metrics import (
    goodput,
    histogram_percentile,
    percentile,
    speculation_pays,
    speculation_stops_paying_at_rate,
)
from roofline.serving.policies import ServingPolicy, parse_policy
from roofline.serving.prices import StepPrices, kv_capacity_tokens, pricing_context, step_prices
from roofline.serving.scheduler import RunResult, SchedulerConfig, Trace, simulate_run
from roofline.serving.sweep import ServingResult, parse_acceptance, simulate
from roofline.serving.workload import Workload, read_trace, synthetic

__all__ = [
    "RunResult",
    "SchedulerConfig",
    "ServingPolicy",
    "ServingResult",
    "StepPrices",
    "Trace",
    "Workload",
    "goodput",
    "histogram_percentile",
    "kv_capacity_tokens",
    "parse_acceptance",
    "parse_policy",
    "percentile",
    "pricing_context",
    "read_trace",
    "simulate",
    "simulate_disaggregated",
    "simulate_run",
    "speculation_pays",
    "speculation_stops_paying_at_rate",
    "step_prices",
    "synthetic",
]

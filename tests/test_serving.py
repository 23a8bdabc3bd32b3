"""The serving simulator: scheduler invariants, reductions to closed forms, metrics by hand, determinism, bad input."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from roofline.core.errors import SpecroofError
from roofline.costing.passtime import pass_seconds
from roofline.costing.pricing import Pricing
from roofline.serving import (
    SchedulerConfig,
    Workload,
    goodput,
    histogram_percentile,
    parse_policy,
    percentile,
    pricing_context,
    read_trace,
    simulate,
    simulate_run,
    speculation_pays,
    speculation_stops_paying_at_rate,
    step_prices,
)
from roofline.serving.metrics import ITL_LO_S, ITL_RATIO, itl_bins
from roofline.speculation.drafters import as_drafter
from roofline.speculation.speculative import speedup

HW, TARGET, DRAFT = "h100-sxm-80gb", "llama-3.1-8b", "model:llama-3.2-1b"


def _at_once(n: int, inp: int, out: int) -> Workload:
    """``n`` requests all present at t = 0 (no arrivals afterwards)."""
    return Workload(np.zeros(n), np.full(n, inp, dtype=np.int64), np.full(n, out, dtype=np.int64))


# -- the scheduler's limits -------------------------------------------------------------


@pytest.mark.parametrize("policy", ["off", "static:4"])
def test_scheduler_never_exceeds_kv_capacity_or_token_budget_and_preempts_when_full(policy):
    cap, budget = 6_000, 512
    res = simulate(
        hardware=HW, target=TARGET, drafter=DRAFT, acceptance=0.8, policy=[policy], rates=[200.0],
        requests=300, input_len="uniform:100-700", output_len="uniform:20-200",
        kv_capacity_tokens=cap, max_tokens=budget, max_seqs=64, seed=3,
    )  # fmt: skip
    s = res.summary.iloc[0]
    assert s["kv_utilisation_max"] <= 1.0
    assert s["max_step_tokens"] <= budget
    assert s["preemptions"] > 0  # the cache was full: the limit was reached, not just never approached
    tr = res.traces[(policy, 200.0)]
    assert tr["kv_utilisation"].max() <= 1.0 and tr["batch"].max() <= 64
    q = res.requests
    assert q["finish_s"].notna().all() and (q["first_token_s"] >= q["arrival_s"]).all()
    assert (q["finish_s"] >= q["first_token_s"]).all()


def test_a_request_that_cannot_fit_the_cache_is_refused():
    with pytest.raises(SpecroofError, match="does not fit the KV cache"):
        simulate(hardware=HW, target=TARGET, policy="off", rates=[1.0], requests=2, input_len=900,
                 output_len=200, kv_capacity_tokens=1000)  # fmt: skip


# -- reductions -------------------------------------------------------------------------


def test_off_with_one_request_is_plain_decoding():
    inp, out = 200, 50
    res = simulate(hardware=HW, target=TARGET, policy="off", rates=[1.0], requests=1, input_len=inp,
                   output_len=out, engine="serving")  # fmt: skip
    q = res.requests.iloc[0]
    pr = Pricing.of(HW, engine="serving")
    from roofline.passes.model import get_model

    spec = get_model(TARGET)
    prefill = float(pass_seconds(spec, pr, 1, inp, 0))
    decode = float(np.sum(pass_seconds(spec, pr, 1, 1, inp + np.arange(out - 1))))
    # the price tables interpolate linearly in context between grid points (a decode pass is linear in it)
    assert q["ttft_s"] == pytest.approx(prefill, rel=2e-3)
    assert q["e2e_s"] == pytest.approx(prefill + decode, rel=2e-3)
    assert q["tpot_s"] == pytest.approx(decode / (out - 1), rel=2e-3)


@pytest.mark.parametrize("alpha,gamma,tol", [(1.0, 3, 5e-3), (0.7, 3, 0.03)])
def test_constant_acceptance_and_no_arrivals_reduce_to_the_closed_form_speedup(alpha, gamma, tol):
    """All requests present at t = 0 and prefilled in one step, then one decode batch: the median request's
    time per output token without speculation over with it is speedup() at that batch and context.

    alpha = 1 is deterministic (every round emits gamma + 1); the decode phase runs from context 1000 to
    1072 and speedup() is priced at its middle (the ratio moves < 0.5% over that range). At alpha = 0.7 a
    round emits 2.53 tokens with a standard deviation of 1.24, so one request's 95 rounds vary by 5% and the
    median of 32 requests by about 1%; the batch also thins as the first requests finish: 3%.
    """
    n, inp = 32, 1000
    out = 1 + (gamma + 1) * 18 if alpha == 1.0 else 240
    pr = Pricing.of(HW, engine="serving")
    ctx = pricing_context(TARGET, pr)
    d = as_drafter(DRAFT)
    prices = step_prices(ctx, d, max_gamma=gamma, max_batch=n, max_tokens=n * inp, max_context=inp + out)
    cfg = SchedulerConfig(max_seqs=n, max_tokens=n * inp, kv_capacity_tokens=1 << 30)
    w = _at_once(n, inp, out)
    a = np.full(n, alpha)
    runs = {}
    for pol in ("off", f"static:{gamma}"):
        r = simulate_run(w, prices, parse_policy(pol), a, cfg, np.random.default_rng(0))
        q = r.requests
        assert q["first_token_s"].nunique() == 1  # one prefill step for all
        runs[pol] = float(q["tpot_s"].median())
    ratio = runs["off"] / runs[f"static:{gamma}"]
    closed = float(speedup(pr, TARGET, d, alpha, gamma, batch=n, context=inp + out // 2).speedup)
    assert ratio == pytest.approx(closed, rel=tol)


# -- metrics by hand ----------------------------------------------------------------------


def test_percentile_and_goodput_by_hand():
    v = [4.0, 1.0, 3.0, 2.0, np.nan]
    assert percentile(v, 50) == 2.5  # (2 + 3) / 2: linear between order statistics, NaN left out
    assert percentile(v, 90) == pytest.approx(3.7)  # rank 0.9 x 3 = 2.7 -> 3 + 0.7 x (4 - 3)
    assert np.isnan(percentile([np.nan], 50))
    ttft = [0.1, 0.5, 0.2, 0.3]
    tpot = [0.01, 0.01, 0.05, np.nan]  # the last request emitted one token: no TPOT, meets any TPOT SLO
    assert goodput(ttft, tpot, 2.0, 0.25, 0.02) == 0.5  # request 0 only: 1 and 3 miss the TTFT SLO, 2 the TPOT one
    assert goodput(ttft, tpot, 2.0, 0.4, 0.02) == 1.0  # requests 0 and 3
    assert goodput(ttft, tpot, 4.0, None, None) == 1.0  # no SLO: every finished request
    with pytest.raises(SpecroofError, match="slo_ttft_s"):
        goodput(ttft, tpot, 1.0, 0.0, None)


def test_itl_histogram_percentile_by_hand():
    counts = np.zeros(5000, dtype=np.int64)
    np.add.at(counts, itl_bins([1e-3, 1e-3, 1e-3, 2e-3]), 1)
    # three gaps of 1 ms and one of 2 ms: the median and p75 lie in 1 ms's bin, p90 in 2 ms's
    for q, want in ((50, 1e-3), (75, 1e-3), (90, 2e-3)):
        assert histogram_percentile(counts, q) == pytest.approx(want, rel=ITL_RATIO - 1)
    assert np.isnan(histogram_percentile(np.zeros(10), 50))
    assert itl_bins([ITL_LO_S / 10])[0] == 0


def test_stops_paying_interpolates_the_crossing_on_log_rate():
    rows = []
    for rate, off, spec in ((1, 1.0, 0.5), (4, 1.0, 2.0), (16, 1.0, 3.0)):
        rows += [{"policy": "off", "rate_req_s": rate, "e2e_p50_s": off, "goodput_req_s": 1 / off},
                 {"policy": "static:3", "rate_req_s": rate, "e2e_p50_s": spec, "goodput_req_s": 1 / spec}]  # fmt: skip
    s = pd.DataFrame(rows)
    # log ratio goes from log 0.5 to log 2: it crosses 0 halfway on log rate, at sqrt(1 x 4) = 2 req/s
    assert speculation_stops_paying_at_rate(s, "static:3") == pytest.approx(2.0)
    assert speculation_stops_paying_at_rate(s, "static:3", metric="goodput_req_s") == pytest.approx(2.0)
    assert list(speculation_pays(s, "static:3")["pays"]) == [True, False, False]
    always = s.assign(e2e_p50_s=np.where(s["policy"] == "off", 1.0, 0.5))
    assert speculation_stops_paying_at_rate(always, "static:3") is None
    never = s.assign(e2e_p50_s=np.where(s["policy"] == "off", 1.0, 1.5))
    assert speculation_stops_paying_at_rate(never, "static:3") == 1.0
    with pytest.raises(SpecroofError, match="not in the summary"):
        speculation_stops_paying_at_rate(s, "goodput:8")


# -- policies -----------------------------------------------------------------------------


def test_policies_parse_and_by_batch_follows_vllm_disable_by_batch_size():
    p = parse_policy("by-batch:1=4,32=0")
    assert [p.gamma_for(b) for b in (1, 31, 32, 200)] == [4, 4, 0, 0]
    assert parse_policy("static:0").kind == "off" and parse_policy("goodput:5").top_gamma == 5
    for bad in ("static:-1", "static:x", "by-batch:4", "goodput:0", "fastest", "by-batch:0=2"):
        with pytest.raises(SpecroofError):
            parse_policy(bad)


def test_goodput_speculates_less_at_high_load_and_by_batch_switches_off():
    res = simulate(
        hardware=HW, target=TARGET, drafter=DRAFT, acceptance=0.8, engine="serving",
        policy=["goodput", "by-batch:1=4,16=0"], rates=[0.5, 400.0], requests=600, input_len=256,
        output_len=128, seed=1,
    )  # fmt: skip
    s = res.summary.set_index(["policy", "rate_req_s"])
    # on an H100 an 8B target's decode stays memory bound to batch ~64: past it, each draft costs compute
    assert s.loc[("goodput:8", 400.0), "mean_batch"] > 128
    assert s.loc[("goodput:8", 400.0), "mean_gamma"] < s.loc[("goodput:8", 0.5), "mean_gamma"]
    assert s.loc[("goodput:8", 0.5), "mean_gamma"] >= 2
    assert s.loc[("by-batch:1=4,16=0", 0.5), "mean_gamma"] == pytest.approx(4.0, abs=0.05)
    assert s.loc[("by-batch:1=4,16=0", 400.0), "mean_gamma"] < 1.0


# -- determinism and traces ------------------------------------------------------------------


def test_a_trace_replay_is_deterministic_under_a_seed(tmp_path):
    f = tmp_path / "trace.csv"
    rng = np.random.default_rng(5)
    t = np.cumsum(rng.exponential(0.05, 60))
    pd.DataFrame({"arrival_s": t, "input_tokens": rng.integers(50, 400, 60),
                  "output_tokens": rng.integers(5, 80, 60)}).to_csv(f, index=False)  # fmt: skip
    kw = dict(hardware=HW, target=TARGET, drafter=DRAFT, acceptance=0.7, policy=["off", "static:3"], rates=None,
              trace=str(f), alpha_concentration=10.0)  # fmt: skip
    a, b = simulate(seed=7, **kw), simulate(seed=7, **kw)
    pd.testing.assert_frame_equal(a.requests, b.requests)
    pd.testing.assert_frame_equal(a.summary, b.summary)
    c = simulate(seed=8, **kw)
    assert not a.requests["finish_s"].equals(c.requests["finish_s"])
    q = a.requests[a.requests["policy"] == "off"]
    np.testing.assert_allclose(q["arrival_s"], t)  # replayed as it is
    assert read_trace(f).n == 60


def test_rates_share_their_requests_and_scale_arrivals():
    res = simulate(hardware=HW, target=TARGET, policy="off", rates=[1.0, 10.0], requests=50, input_len=64,
                   output_len="lognormal:20,0.5", seed=2)  # fmt: skip
    q = res.requests
    lo, hi = q[q["rate_req_s"] == 1.0], q[q["rate_req_s"] == 10.0]
    np.testing.assert_array_equal(lo["output_tokens"].to_numpy(), hi["output_tokens"].to_numpy())
    np.testing.assert_allclose(lo["arrival_s"].to_numpy() / 10.0, hi["arrival_s"].to_numpy())


# -- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kw,match",
    [
        (dict(rates=[-1.0]), "rate must be a positive"),
        (dict(slo_ttft_s=0.0), "slo_ttft_s must be a positive"),
        (dict(slo_tpot_s=-0.1), "slo_tpot_s must be a positive"),
        (dict(output_len=200_000), "context window"),
        (dict(input_len="uniform:5-1"), "uniform:A-B"),
        (dict(arrivals="gamma:0"), "burstiness"),
        (dict(policy="static:3", drafter=None), "give a drafter"),
        (dict(acceptance=1.5, policy="static:3"), "alpha"),
        (dict(acceptance="mean:9@3", policy="static:3"), "mean"),
    ],
)
def test_bad_input_is_one_clear_error(kw, match):
    args = dict(hardware=HW, target=TARGET, drafter=DRAFT, policy="off", rates=[1.0], requests=3) | kw
    with pytest.raises(SpecroofError, match=match):
        simulate(**args)


@pytest.mark.parametrize(
    "text,match",
    [
        ("arrival_s,input_tokens,output_tokens\n0.5,10,10\n0.2,10,10\n", "sorted"),
        ("arrival_s,input_tokens\n0.1,10\n", "missing column"),
        ("arrival_s,input_tokens,output_tokens\n0.1,10,x\n", "no number"),
        ('{"arrival_s": 0, "input_tokens": 5}\n', "missing column"),
        ("", "empty"),
    ],
)
def test_bad_trace_files(tmp_path, text, match):
    f = tmp_path / "t.csv"
    f.write_text(text)
    with pytest.raises(SpecroofError, match=match):
        read_trace(f)


# -- past one server ---------------------------------------------------------------------------


def test_processes_give_the_same_answer_and_replicas_share_the_load():
    kw = dict(hardware=HW, target=TARGET, drafter=DRAFT, acceptance=0.7, policy=["off", "static:3"],
              rates=[4.0, 64.0], requests=120, input_len=256, output_len=64, seed=4)  # fmt: skip
    one, two = simulate(**kw), simulate(workers=2, **kw)
    pd.testing.assert_frame_equal(one.summary, two.summary)
    pd.testing.assert_frame_equal(one.requests, two.requests)
    rep = simulate(replicas=4, **kw)
    q = rep.requests[(rep.requests["policy"] == "off") & (rep.requests["rate_req_s"] == 64.0)]
    assert sorted(q["server"].value_counts().tolist()) == [30, 30, 30, 30]
    np.testing.assert_array_equal(q["request"], np.arange(120))  # back in arrival order
    s1 = one.summary.set_index(["policy", "rate_req_s"])
    s4 = rep.summary.set_index(["policy", "rate_req_s"])
    # four servers at 64 req/s each see 16 req/s: smaller batches, faster tokens
    assert s4.loc[("off", 64.0), "mean_batch"] < s1.loc[("off", 64.0), "mean_batch"]
    assert s4.loc[("off", 64.0), "tpot_p50_s"] < s1.loc[("off", 64.0), "tpot_p50_s"]


def test_disaggregated_prefill_and_decode_with_one_request_add_the_kv_transfer():
    inp, out = 300, 40
    res = simulate(hardware=HW, target=TARGET, policy="off", rates=[1.0], requests=1, input_len=inp,
                   output_len=out, engine="serving", disaggregate="1:1", kv_link_GB_per_s=50.0)  # fmt: skip
    q = res.requests.iloc[0]
    from roofline.passes.model import get_model

    spec = get_model(TARGET)
    pr = Pricing.of(HW, engine="serving")
    transfer = inp * spec.kv_bytes(1, 2) / 50e9  # bf16 KV of the prompt over a 50 GB/s link
    assert q["kv_transfer_s"] == pytest.approx(transfer)
    prefill = float(pass_seconds(spec, pr, 1, inp, 0))
    decode = float(np.sum(pass_seconds(spec, pr, 1, 1, inp + np.arange(out - 1))))
    assert q["ttft_s"] == pytest.approx(prefill, rel=2e-3)
    assert q["e2e_s"] == pytest.approx(prefill + transfer + decode, rel=2e-3)
    with pytest.raises(SpecroofError, match="P:D"):
        simulate(hardware=HW, target=TARGET, policy="off", rates=[1.0], requests=2, disaggregate="2")


@pytest.mark.parametrize("policy", ["off", "static:3", "by-batch:1=3,8=1,16=0", "tree:eagle"])
def test_advancing_many_rounds_at_once_equals_stepping_one_round_at_a_time(monkeypatch, policy):
    """Without speculation, or with every draft accepted (alpha = 1), every step is deterministic: the fast
    path (K decode rounds per iteration, cut at arrivals, finishes and KV exhaustion) must reproduce the
    scheduler stepped one round at a time."""
    import roofline.serving.scheduler as sched

    kw = dict(hardware=HW, target=TARGET, drafter=DRAFT, acceptance=1.0, policy=policy, rates=[3.0, 40.0], requests=150, input_len="uniform:16-900",
              output_len="uniform:1-300", kv_capacity_tokens=12_000, max_tokens=768, max_seqs=48, seed=9)  # fmt: skip
    fast = simulate(**kw)
    monkeypatch.setattr(sched, "MAX_ROUNDS_AT_ONCE", 1)
    slow = simulate(**kw)
    for col in ("first_token_s", "finish_s", "preemptions"):
        np.testing.assert_allclose(fast.requests[col], slow.requests[col], rtol=1e-9)
    assert fast.summary["preemptions"].sum() > 0  # the KV cut was exercised


def test_a_tree_policy_with_one_request_is_rounds_of_the_priced_tree():
    """EAGLE's 25-node tree, every path accepted (alpha 1): each round emits depth + 1 = 6 tokens and costs
    predict_speedup's tree round (draft level by level, one tree-masked verify pass, host time)."""
    from roofline.speculation.predict import predict_speedup

    inp, rounds = 500, 12
    out = 1 + 6 * rounds
    res = simulate(hardware=HW, target=TARGET, drafter="eagle", acceptance=1.0, policy=["off", "tree:eagle"],
                   rates=[1.0], requests=1, input_len=inp, output_len=out, engine="serving")  # fmt: skip
    q = res.requests.set_index("policy")
    p = predict_speedup(hardware=HW, target=TARGET, drafter="eagle", mean_accepted=6.0, tree="eagle",
                        engine="serving", context=inp + out // 2)  # fmt: skip
    assert q.loc["tree:eagle", "tpot_s"] == pytest.approx(p.t_round_s / 6.0, rel=0.01)
    s = res.summary.set_index("policy")
    assert s.loc["tree:eagle", "mean_gamma"] == pytest.approx(5.0)  # the tree's depth: accepted runs are capped there
    with pytest.raises(SpecroofError, match="unknown tree"):
        parse_policy("tree:oak")


# -- an engine without chunked prefill ----------------------------------------------------


def test_separate_prefill_with_one_request_is_one_pass_of_the_prompt_plus_the_draft_models():
    """prefill="separate" (measure.serve's loop): the prompt is one target pass of its own, plus one pass of the
    draft model when the policy drafts with it; plain decoding never prefills the drafter. Fused stays as it was."""
    from roofline.passes.model import get_model

    inp, out = 200, 50
    pr = Pricing.of(HW, engine="serving")
    t_pre = float(pass_seconds(get_model(TARGET), pr, 1, inp, 0))
    d_pre = float(pass_seconds(get_model("llama-3.2-1b"), pr, 1, inp, 0))
    kw = dict(hardware=HW, target=TARGET, drafter=DRAFT, acceptance=1.0, policy=["off", "static:3"], rates=[1.0],
              requests=1, input_len=inp, output_len=out, engine="serving")  # fmt: skip
    sep = simulate(**kw, prefill="separate").requests.set_index("policy")
    fused = simulate(**kw).requests.set_index("policy")
    assert sep.loc["off", "ttft_s"] == pytest.approx(t_pre, rel=2e-3)
    assert sep.loc["static:3", "ttft_s"] == pytest.approx(t_pre + d_pre, rel=2e-3)
    assert fused.loc["static:3", "ttft_s"] == pytest.approx(t_pre, rel=2e-3)  # fused: the default, unchanged
    # decoding alone is priced alike in both modes
    np.testing.assert_allclose(sep["tpot_s"], fused["tpot_s"], rtol=1e-12)


def test_separate_prefill_runs_after_the_decode_round_whose_tokens_arrive_before_it():
    """Request 0 prefills alone; request 1 arrives during that pass and joins the next step, which decodes
    request 0's last token (it finishes when the round ends) and then prefills request 1: its TTFT is the rest
    of request 0's prefill, the round and its own prefill. Fused, the step is one pass of both."""
    from roofline.passes.model import get_model

    spec, pr = get_model(TARGET), Pricing.of(HW, engine="serving")
    inp = 300
    P = float(pass_seconds(spec, pr, 1, inp, 0))
    D = float(pass_seconds(spec, pr, 1, 1, inp))
    w = Workload(np.array([0.0, P / 2]), np.array([inp, inp]), np.array([2, 5]))
    kw = dict(hardware=HW, target=TARGET, policy="off", rates=None, trace=w, engine="serving")
    q = simulate(**kw, prefill="separate").requests
    assert q.loc[0, "e2e_s"] == pytest.approx(P + D, rel=2e-3)  # not at the end of the step's prefill
    assert q.loc[1, "ttft_s"] == pytest.approx(P / 2 + D + P, rel=2e-3)
    fused = simulate(**kw).requests  # one pass of 1 + 300 tokens: the decode's weights are read once for both
    assert P / 2 + P < fused.loc[1, "ttft_s"] < q.loc[1, "ttft_s"]
    assert fused.loc[0, "e2e_s"] == pytest.approx(fused.loc[1, "first_token_s"])  # its token waits for the step


def test_round_host_time_is_added_to_every_decode_round_and_to_no_prefill():
    inp, out, host = 200, 41, 1.5e-3
    kw = dict(hardware=HW, target=TARGET, drafter=DRAFT, acceptance=1.0, policy=["off", "static:3"], rates=[1.0],
              requests=1, input_len=inp, output_len=out, engine="serving", prefill="separate")  # fmt: skip
    base = simulate(**kw).requests.set_index("policy")
    more = simulate(**kw, round_host_s=host).requests.set_index("policy")
    np.testing.assert_allclose(more["ttft_s"], base["ttft_s"], rtol=1e-12)
    # off: out - 1 = 40 rounds of one token; static:3 at alpha 1: 10 rounds of 4 tokens
    assert (more.loc["off", "e2e_s"] - base.loc["off", "e2e_s"]) == pytest.approx(40 * host, rel=1e-6)
    assert (more.loc["static:3", "e2e_s"] - base.loc["static:3", "e2e_s"]) == pytest.approx(10 * host, rel=1e-6)
    # the per-sequence part: two requests decoding together pay it twice a round
    w = Workload(np.zeros(2), np.full(2, inp, dtype=np.int64), np.full(2, out, dtype=np.int64))
    kw2 = {**kw, "requests": 2, "trace": w, "rates": None, "policy": "off"}
    b2 = simulate(**kw2).requests
    m2 = simulate(**kw2, round_host_s=host, round_host_per_seq_s=host / 3).requests
    np.testing.assert_allclose(m2["e2e_s"] - b2["e2e_s"], 40 * (host + 2 * host / 3), rtol=1e-6)


@pytest.mark.parametrize(
    "kw,match",
    [
        (dict(prefill="chunky"), "prefill must be one of"),
        (dict(prefill="separate", input_len=600, max_tokens=512), "whole prompts"),
        (dict(round_host_s=-1.0), "round_host_s"),  # (signed, but not below what a round costs)
        (dict(round_host_per_seq_s=float("nan")), "round_host_per_seq_s"),
    ],
)
def test_bad_prefill_options_are_one_clear_error(kw, match):
    base = dict(hardware=HW, target=TARGET, policy="off", rates=[1.0], requests=2, input_len=100, output_len=10)
    with pytest.raises(SpecroofError, match=match):
        simulate(**{**base, **kw})


def test_separate_prefill_under_load_keeps_the_limits_and_the_fast_path(monkeypatch):
    """Many arrivals, a small cache (preemptions, recomputed prompts longer than the budget go alone): every
    request finishes, the prefill pass never exceeds the budget but for a lone recompute, and advancing many
    rounds at once equals stepping one at a time (alpha 1: deterministic)."""
    import roofline.serving.scheduler as sched

    kw = dict(hardware=HW, target=TARGET, drafter=DRAFT, acceptance=1.0, policy=["off", "static:3"], rates=[40.0],
              requests=120, input_len="uniform:16-700", output_len="uniform:1-300", kv_capacity_tokens=12_000,
              max_tokens=768, max_seqs=32, seed=4, prefill="separate", round_host_s=2e-4)  # fmt: skip
    fast = simulate(**kw)
    monkeypatch.setattr(sched, "MAX_ROUNDS_AT_ONCE", 1)
    slow = simulate(**kw)
    for col in ("first_token_s", "finish_s", "preemptions"):
        np.testing.assert_allclose(fast.requests[col], slow.requests[col], rtol=1e-9)
    s = fast.summary
    assert s["preemptions"].sum() > 0
    assert (s["kv_utilisation_max"] <= 1.0).all()
    q = fast.requests
    assert (q["first_token_s"] >= q["arrival_s"]).all() and (q["finish_s"] >= q["first_token_s"]).all()


@pytest.mark.parametrize("prefill", ["fused", "separate"])
def test_the_first_step_after_the_server_idled_pays_the_idle_start_and_no_other(prefill):
    kw = dict(hardware="h100-sxm-80gb", target="llama-3.1-8b", drafter="model:llama-3.2-1b", acceptance=0.7,
              policy=["static:3"], requests=120, input_len="uniform:64-512", output_len="uniform:8-64",
              prefill=prefill, seed=5)  # fmt: skip
    # 0.001 req/s: every request finds the server idle, its first token waits for its own prefill step alone
    # (but the first, arriving at time 0: the server has not waited for it)
    a = simulate(rates=[0.001], **kw).requests
    b = simulate(rates=[0.001], idle_start_s=4e-3, **kw).requests
    assert a["arrival_s"].iloc[0] == 0.0 and b["ttft_s"].iloc[0] == a["ttft_s"].iloc[0]
    a, b = a.iloc[1:], b.iloc[1:]
    # (times near 1e5 s: differences good to ~1e-10 s)
    assert np.allclose(b["ttft_s"] - a["ttft_s"], 4e-3, rtol=0, atol=1e-9)
    assert np.allclose(b["e2e_s"] - a["e2e_s"], 4e-3, rtol=0, atol=1e-9)
    assert np.allclose(b["tpot_s"], a["tpot_s"], rtol=1e-6, equal_nan=True)  # the decode rounds are as before
    # overloaded, the server never waits (its first request arrives at time 0): no step pays
    a = simulate(rates=[5000.0], **kw).requests
    b = simulate(rates=[5000.0], idle_start_s=4e-3, **kw).requests
    pd.testing.assert_frame_equal(a, b, check_exact=True)
    # zero is the simulator without the term, number for number
    pd.testing.assert_frame_equal(simulate(rates=[3.0], idle_start_s=0.0, **kw).requests,
                                  simulate(rates=[3.0], **kw).requests, check_exact=True)  # fmt: skip
    with pytest.raises(SpecroofError, match="idle_start_s"):
        simulate(rates=[1.0], idle_start_s=-1e-3, **kw)


@pytest.mark.parametrize("workers", [1, 2])
def test_on_run_reports_every_run_in_order_with_its_label(workers):
    """``on_run(done, total, label)`` after each (policy, rate) run, in the jobs' order, in one process or several."""
    seen = []
    simulate(hardware=HW, target=TARGET, drafter=DRAFT, policy=["off", "static:2"], rates=[2.0, 5.0], requests=40,
             input_len=64, output_len=16, workers=workers, on_run=lambda *a: seen.append(a))  # fmt: skip
    assert [(d, t) for d, t, _ in seen] == [(1, 4), (2, 4), (3, 4), (4, 4)]
    assert [lab for *_, lab in seen] == [
        "off at 2 req/s",
        "static:2 at 2 req/s",
        "off at 5 req/s",
        "static:2 at 5 req/s",
    ]

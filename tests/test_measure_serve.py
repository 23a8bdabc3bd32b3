"""Real continuous batching (measure.serve): lossless whatever joins or leaves, scheduler invariants, a short replay."""

from __future__ import annotations

import argparse
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

torch = pytest.importorskip("torch")

from measure.decode import autoregressive_generate  # noqa: E402
from measure.models import Transformer  # noqa: E402
from measure.serve import serve  # noqa: E402
from measure.serve_check import _verdicts, latency_summary, requests_per_run, with_pass_overhead  # noqa: E402
from roofline import SpecroofError  # noqa: E402
from roofline.costing.hardware import Hardware, Measured  # noqa: E402
from roofline.passes.model import ModelSpec  # noqa: E402

SPEC = ModelSpec("target", 4, 64, 4, 2, 16, 128, 50, max_context=1024)


@pytest.fixture(scope="module")
def pair():
    torch.manual_seed(0)
    target = Transformer(SPEC, dtype="fp32", init_std=0.08)
    draft = Transformer(SPEC.replace(n_layers=1, name="draft"), dtype="fp32", init_std=0.08)
    with torch.no_grad():  # a draft sharing the target's embedding and first layer agrees often
        draft.embed_tokens.weight.copy_(target.embed_tokens.weight)
        draft.lm_head.weight.copy_(target.lm_head.weight)
        draft.layers[0].load_state_dict(target.layers[0].state_dict())
    return target, draft


class FakeClock:
    """Advances a fixed tick per reading: the replay is deterministic, whatever the machine's load."""

    def __init__(self, tick: float = 0.01) -> None:
        self.t, self.tick = 0.0, tick

    def __call__(self) -> float:
        self.t += self.tick
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


def _trace(n: int, seed: int) -> tuple[list[list[int]], np.ndarray, list[int]]:
    rng = np.random.default_rng(seed)
    prompts = [rng.integers(0, 50, int(rng.integers(1, 9))).tolist() for _ in range(n)]
    outs = rng.integers(1, 22, n).tolist()
    outs[0] = 1  # a one-token request leaves at its prefill
    return prompts, np.sort(rng.uniform(0.0, 1.2, n)), outs


def _plain(target, prompts, outs):
    # a one-token prompt is padded by the baseline's own rule (it needs 2 tokens): compare those apart
    return [
        autoregressive_generate(target, [p], o).tokens[0] if len(p) >= 2 else None
        for p, o in zip(prompts, outs, strict=True)
    ]


@pytest.mark.parametrize(
    ("policy", "which"),
    [("off", None), ("static:1", "draft"), ("static:3", "draft"), ("static:2", "early-exit"), ("tree:medusa", "draft")],
)
@pytest.mark.parametrize("slots", [1, 3])
def test_greedy_serving_emits_each_requests_plain_decoding(pair, policy, which, slots):
    target, draft = pair
    prompts, arr, outs = _trace(12, seed=slots)
    drafter = {"draft": draft, "early-exit": 2, None: None}[which]
    clock = FakeClock()
    res = serve(target, prompts, arr, outs, policy=policy, drafter=drafter, slots=slots, clock=clock, sleep=clock.sleep)
    base = _plain(target, prompts, outs)
    for i, b in enumerate(base):
        if b is not None:
            assert res.tokens[i] == b, f"request {i} under {policy}"
        assert len(res.tokens[i]) == outs[i]
    # joins and leaves really happened around running requests
    assert (res.steps["prefills"] > 0).sum() >= 2
    assert (res.steps["finished"] > 0).sum() >= 2
    if slots > 1:
        assert ((res.steps["decode_batch"] > 0) & (res.steps["prefills"] > 0)).any()


def test_one_token_prompts_are_served_beside_others(pair):
    target, _ = pair
    clock = FakeClock()
    res = serve(target, [[5], [7, 5]], [0.0, 0.0], [6, 6], slots=2, clock=clock, sleep=clock.sleep)
    assert res.tokens[1] == autoregressive_generate(target, [[7, 5]], 6).tokens[0]
    assert len(res.tokens[0]) == 6


def test_scheduler_invariants(pair):
    target, draft = pair
    prompts, arr, outs = _trace(16, seed=4)
    clock = FakeClock(0.02)
    res = serve(target, prompts, arr, outs, policy="static:2", drafter=draft, slots=2, clock=clock, sleep=clock.sleep)
    q, s = res.requests, res.steps
    assert (s["decode_batch"] <= 2).all() and (s["running_after"] <= 2).all()
    assert (q["admitted_s"] >= q["arrival_s"]).all()
    assert np.all(np.diff(q["admitted_s"]) >= 0)  # first come, first served
    assert (q["first_token_s"] > q["admitted_s"]).all() and (q["finish_s"] >= q["first_token_s"]).all()
    assert (q["generated_tokens"] == q["output_tokens"]).all()
    one = q["output_tokens"] == 1
    assert (q.loc[one, "finish_s"] == q.loc[one, "first_token_s"]).all()
    assert q.loc[~one, "tpot_s"].gt(0).all() and q.loc[one, "tpot_s"].isna().all()
    # nobody waits while a slot is free: every iteration between a request's arrival and its admission
    # started with all slots taken (the running requests and that iteration's newcomers)
    waited = q[q["admitted_s"] > q["arrival_s"]]
    assert len(waited) > 0
    for _, r in waited.iterrows():
        between = s[(s["start_s"] > r["arrival_s"]) & (s["start_s"] < r["admitted_s"])]
        assert (between["decode_batch"] + between["prefills"] == 2).all()
    assert res.mean_tokens_per_round >= 1.0
    assert set(latency_summary(q)) == {f"{m}_p{p}_s" for m in ("ttft", "tpot", "e2e") for p in (50, 90)}


def test_a_short_wall_clock_replay(pair):
    target, draft = pair
    prompts, _, outs = _trace(6, seed=9)
    arr = np.linspace(0.0, 0.05, 6)
    res = serve(target, prompts, arr, outs, policy="static:2", drafter=draft, slots=3)
    q = res.requests
    assert q["finish_s"].notna().all() and (q["ttft_s"] > 0).all() and (q["e2e_s"] >= q["ttft_s"]).all()
    assert res.duration_s >= 0.05 and res.policy == "static:2"


def test_refusals(pair):
    target, draft = pair
    with pytest.raises(SpecroofError, match="off, static:G and tree"):
        serve(target, [[1, 2]], [0.0], [3], policy="goodput", drafter=draft)
    with pytest.raises(SpecroofError, match="give a drafter"):
        serve(target, [[1, 2]], [0.0], [3], policy="static:2")
    with pytest.raises(SpecroofError, match="sorted"):
        serve(target, [[1, 2], [3, 4]], [1.0, 0.0], [3, 3])
    with pytest.raises(SpecroofError, match="slots"):
        serve(target, [[1, 2]], [0.0], [3], slots=0)
    with pytest.raises(SpecroofError, match="output_tokens"):
        serve(target, [[1, 2]], [0.0], [0])


def test_verdicts_and_the_host_term():
    t = pd.DataFrame(
        {
            "rate_req_s": [1.0, 1.0, 9.0, 9.0],
            "policy": ["off", "static:3", "off", "static:3"],
            "e2e_p50_measured_s": [1.0, 0.8, 1.0, 1.2],
            "e2e_p50_simulated_s": [1.0, 0.7, 1.0, 0.9],
        }
    )
    v = _verdicts(t, ["off", "static:3"])
    assert v["pays_measured"].tolist() == [True, False]
    assert v["pays_simulated"].tolist() == [True, True]
    assert v["agree"].tolist() == [True, False]
    hw = Hardware("cpu-x", "x", 1e10, {"fp32": 1e11}, measured=Measured(1e10, {"fp32": 1e11}, pass_overhead_s=1e-4))
    assert with_pass_overhead(hw, 2e-4).measured.pass_overhead_s == pytest.approx(3e-4)
    with pytest.raises(SpecroofError, match="measured"):
        with_pass_overhead(Hardware("cpu-y", "y", 1e10, {"fp32": 1e11}), 1e-4)


def test_the_command_registers_and_checks_its_numbers():
    from specroof.commands.measure_serve import add_parser, cmd_measure_serve

    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    args = parser.parse_args(["serve", "--policy", "off", "--policy", "static:2", "--rate", "2,8", "--budget", "0"])
    assert args.policy == ["off", "static:2"] and args.rate == [2.0, 8.0]
    with pytest.raises(SpecroofError, match="--budget"):
        cmd_measure_serve(args)
    args = parser.parse_args(["serve", "--rate", "0"])
    with pytest.raises(SpecroofError, match="--rate"):
        cmd_measure_serve(args)
    assert parser.parse_args(["serve", "--rate", "2", "8,16"]).rate == [2.0, 8.0, 16.0]  # by comma or by space
    with pytest.raises(SpecroofError, match="--seed must be >= 0"):
        cmd_measure_serve(parser.parse_args(["serve", "--seed", "-1"]))


def test_off_always_runs_and_a_side_by_side_needs_something_against_it():
    from measure.serve_check import serve_policies

    assert [p.name for p in serve_policies(["static:4"])] == ["off", "static:4"]  # off added, as `serve` does
    assert [p.name for p in serve_policies(["off", "static:2", "static:0"])] == ["off", "static:2"]
    for alone in (["off"], ["static:0"], ["off", "static:0"]):
        with pytest.raises(SpecroofError, match="--policy off alone compares nothing"):
            serve_policies(alone)
    with pytest.raises(SpecroofError, match="policies repeat: static:3, static:3"):
        serve_policies(["static:3", "static:3"])


def test_prompts_the_pair_cannot_hold_are_refused_before_any_measurement():
    from measure.serve_check import serve_check

    with pytest.raises(SpecroofError, match="keep prompt \\+ output within 2038$"):
        serve_check(input_len=2000, output_len="uniform:16-48", budget_s=600.0, progress=False, device="cpu")


def test_a_budget_even_one_replay_overruns_is_refused_with_the_budget_that_would_do():
    # what the fixed steps and the lightest rate's one replay take is measured, then refused: a 1 s budget ran
    # 23 s and said "23.3 s spent of the 1 s budget"
    import re

    from measure.serve_check import serve_check

    # (under heavy load the target's sweep may refuse first, in the same words: both are the budget's refusal)
    with pytest.raises(SpecroofError, match="1 s? ?is too short for (measure serve|this sweep) here") as e:
        serve_check(rates=[1.0], budget_s=1.0, progress=False, device="cpu")
    asked = int(re.search(r"give a --budget of at least (\d+) s", str(e.value)).group(1))
    assert asked > 1


def test_the_engine_host_terms_are_read_back_from_rounds_priced_by_the_fit():
    """Rounds that took their priced passes plus a + s b, prefills that took theirs plus 0.5 ms: the calibration
    returns a, s and 0.5 ms (the line through the per-batch medians; an outlier round does not move a median)."""
    from measure.serve import ServeResult
    from measure.serve_check import _prices, engine_host_terms

    hw = Hardware("cpu-x", "x", 1e10, {"fp32": 1e11}, measured=Measured(1e10, {"fp32": 1e11}, pass_overhead_s=1e-4))
    draft = SPEC.replace(n_layers=1, name="draft")
    gamma, a, s = 3, 2e-3, 7e-4
    p = _prices(hw, SPEC, draft, gamma, 4, 64, 80)
    rows = []
    for b in (1, 2, 3, 4, 4, 4, 2):
        ctx = 40 * b
        rows.append(dict(decode_batch=b, decode_context_tokens=ctx, prefills=0, prefill_tokens=0, t_prefill_s=0.0,
                         t_decode_s=float(p.decode_time(gamma, b, ctx / b)) + a + s * b))  # fmt: skip
    rows[-1]["t_decode_s"] += 1.0  # one round the machine stalled in: the median at batch 2 ignores it
    rows.append(dict(decode_batch=2, decode_context_tokens=80, prefills=0, prefill_tokens=0, t_prefill_s=0.0,
                     t_decode_s=float(p.decode_time(gamma, 2, 40.0)) + a + 2 * s))  # fmt: skip
    for m in (1, 3):
        rows.append(dict(decode_batch=0, decode_context_tokens=0, prefills=m, prefill_tokens=16 * m, t_decode_s=0.0,
                         t_prefill_s=p.prefill_time(m, 16 * m, 0.0, draft=True) + 5e-4))  # fmt: skip
    run = ServeResult(pd.DataFrame(), pd.DataFrame(rows), [], "static:3", 4)
    got_a, got_s, got_pre = engine_host_terms(run, hw, SPEC, draft, gamma, 64)
    assert got_a == pytest.approx(a, rel=1e-6)
    assert got_s == pytest.approx(s, rel=1e-6)
    assert got_pre == pytest.approx(5e-4, rel=1e-6)

    # the same steps back to back, then three prefills the engine ran alone after waiting idle, 3 ms slower each:
    # the first prefill after an idle wait costs 3 ms beyond the others (and the others' residual is unmoved)
    from measure.serve_check import host_residuals, idle_start

    t = 0.0
    for r in rows:
        r["start_s"] = t
        t = r["end_s"] = t + r["t_decode_s"] + r["t_prefill_s"]
    assert idle_start(host_residuals(run, hw, SPEC, draft, gamma, 64)) == 0.0  # it never waited
    n_warm = len(rows)
    for m in (1, 2, 1):
        t += 0.05  # idle
        tp = p.prefill_time(m, 16 * m, 0.0, draft=True) + 5e-4 + 3e-3
        rows.append(dict(decode_batch=0, decode_context_tokens=0, prefills=m, prefill_tokens=16 * m, t_decode_s=0.0,
                         t_prefill_s=tp, start_s=t, end_s=t + tp))  # fmt: skip
        t += tp
    res = host_residuals(ServeResult(pd.DataFrame(), pd.DataFrame(rows), [], "static:3", 4), hw, SPEC, draft, gamma, 64)
    assert res.prefill_s == pytest.approx(5e-4, rel=1e-6)
    assert idle_start(res) == pytest.approx(3e-3, rel=1e-6)

    # cold stairs of 3 and 4 prompts whose priced passes are 9 ms short (the profile's error at that size, not a
    # cold start): the term is read off the one-prompt cold steps alone, and is unmoved
    for m in (3, 4, 3, 4):
        t += 0.05
        tp = p.prefill_time(m, 16 * m, 0.0, draft=True) + 5e-4 + 3e-3 + 9e-3
        rows.append(dict(decode_batch=0, decode_context_tokens=0, prefills=m, prefill_tokens=16 * m, t_decode_s=0.0,
                         t_prefill_s=tp, start_s=t, end_s=t + tp))  # fmt: skip
        t += tp
    res = host_residuals(ServeResult(pd.DataFrame(), pd.DataFrame(rows), [], "static:3", 4), hw, SPEC, draft, gamma, 64)
    assert idle_start(res) == pytest.approx(3e-3, rel=1e-6)
    # runs pooled one after the other, each on its own clock from 0: a run's first prefill that started some time
    # into it waited idle (a staircase's first stair) and is cold; one that started at 0 (a burst's) is not
    tp = p.prefill_time(1, 16, 0.0, draft=True) + 5e-4 + 3e-3
    alone = dict(decode_batch=0, decode_context_tokens=0, prefills=1, prefill_tokens=16, t_decode_s=0.0, t_prefill_s=tp)
    t0 = 0.5 * rows[n_warm - 1]["end_s"]  # (before the last pooled step's end: the clock started again)
    assert t0 > 2e-3
    fresh = rows[:n_warm] + [{**alone, "start_s": t0, "end_s": t0 + tp}]
    res = host_residuals(
        ServeResult(pd.DataFrame(), pd.DataFrame(fresh), [], "static:3", 4), hw, SPEC, draft, gamma, 64
    )
    assert idle_start(res) == pytest.approx(3e-3, rel=1e-6)
    fresh[-1].update(start_s=0.0, end_s=tp)
    res = host_residuals(
        ServeResult(pd.DataFrame(), pd.DataFrame(fresh), [], "static:3", 4), hw, SPEC, draft, gamma, 64
    )
    assert idle_start(res) == 0.0

    # with no one-prompt cold step, every cold step counts: the multi-prompt ones, 3 + 9 ms
    multi = rows[:n_warm] + rows[-4:]  # (the first of them still starts long after the warm steps end: idle)
    res = host_residuals(
        ServeResult(pd.DataFrame(), pd.DataFrame(multi), [], "static:3", 4), hw, SPEC, draft, gamma, 64
    )
    assert idle_start(res) == pytest.approx(12e-3, rel=1e-6)


def test_the_replays_share_the_budget_at_each_rates_pace():
    """n requests at rate r last n / min(r, capacity): the replays predicted that way fill 85% of what is left, less
    the calibrations; bounds hold at both ends."""
    rates, cap = [3.0, 9.0, 15.0], 10.0
    n = requests_per_run(300.0, 4.0, rates, cap, 2, 2)
    replays_s = n * 2 * 2 * sum(1.0 / min(r, cap) for r in rates)
    calibrations_s = len(rates) * 2 * 4.0
    assert replays_s <= 0.85 * 300.0 - calibrations_s < replays_s + 2 * 2 * sum(1.0 / min(r, cap) for r in rates)
    # the lightest rate no longer prices every run: more requests than that rule gave, from the same budget
    old = (0.85 * 300.0 / 6 - 4.0) / 2 / (1 / 3.0 + 1 / cap)
    assert n > 1.5 * old
    assert requests_per_run(1.0, 4.0, rates, cap, 2, 2) == 8  # nothing left: the floor
    assert requests_per_run(1e9, 0.0, rates, cap, 2, 2) == 2000  # the cap
    assert requests_per_run(None, 0.0, [cap], cap, 1, 1) == 300  # unbudgeted: 30 s of replay per run


def test_ttft_is_split_by_what_each_arrival_found():
    """Hand-made requests: the first arrives to an idle engine; the second while the first is in the system; the
    third after both finished (idle again); the fourth with the third still there."""
    from measure.serve_check import ttft_by_arrival

    df = pd.DataFrame(
        {
            "arrival_s": [0.0, 0.5, 3.0, 3.1],
            "finish_s": [1.0, 2.0, 4.0, 3.5],
            "ttft_s": [0.1, 0.3, 0.2, 0.5],
        }
    ).iloc[[2, 0, 3, 1]]  # (any row order)
    got = ttft_by_arrival(df)
    assert got["idle_share"] == pytest.approx(0.5)
    assert got["ttft_idle_p50_s"] == pytest.approx(0.15)  # 0.1 and 0.2
    assert got["ttft_busy_p50_s"] == pytest.approx(0.4)  # 0.3 and 0.5
    # the latest finish before an arrival counts, not the last-arrived one's: C arrives after B left, A still there
    abc = pd.DataFrame({"arrival_s": [0.0, 1.0, 5.0], "finish_s": [10.0, 2.0, 6.0], "ttft_s": [0.1, 0.2, 0.3]})
    assert ttft_by_arrival(abc)["idle_share"] == pytest.approx(1 / 3)
    one = ttft_by_arrival(df.iloc[:1])
    assert one["idle_share"] == 1.0 and np.isnan(one["ttft_busy_p50_s"])

    # the table's columns, each side (the real: the mean over the replays), named as the page reads them
    from measure.serve_check import found_columns
    from specroof.commands.measure_serve import text

    cols = found_columns([got, {**got, "idle_share": 0.7}], one)
    assert cols["idle_share_measured"] == pytest.approx(0.6) and cols["idle_share_simulated"] == 1.0
    assert cols["ttft_idle_p50_measured_s"] == pytest.approx(0.15)
    sides = ("measured", "simulated")
    names = [("idle_share", ""), ("ttft_idle_p50", "_s"), ("ttft_busy_p50", "_s")]
    assert set(cols) == {f"{k}_{side}{u}" for k, u in names for side in sides}
    row = {"rate_req_s": 2.0, "policy": "off", **cols}
    for m in ("ttft_p50", "ttft_p90", "tpot_p50", "tpot_p90"):
        row.update({f"{m}_measured_s": 0.01, f"{m}_simulated_s": 0.01, f"{m}_rel_error": 0.0})
    check = SimpleNamespace(
        table=pd.DataFrame([row]),
        verdicts=pd.DataFrame(columns=["rate_req_s", "policy", "pays_measured", "pays_simulated", "agree"]),
        host_per_round_s={},
        host_per_seq_s={},
        settings={"target": "t", "draft": "d", "threads": 1, "slots": 4, "load": {}, "fit_mape": 0.05,
                  "plain_step_s": 5e-3, "prefill_per_request_s": 8e-3, "capacity_req_s": 20.0, "seconds": 1.0},
    )  # fmt: skip
    assert "  2 req/s off: 60% / 100% of arrivals found it idle" in text(check)


def _scaled_hardware(f: float) -> Hardware:
    """A profile whose every pass costs ``f`` times the f = 1 profile's: bandwidth and compute over f, the fixed
    cost per pass times f."""
    return Hardware(
        "cpu-x",
        "x",
        1e10 / f,
        {"fp32": 1e11 / f},
        measured=Measured(1e10 / f, {"fp32": 1e11 / f}, pass_overhead_s=1e-4 * f),
    )


@pytest.mark.parametrize("policy", ["off", "static:3"])
def test_the_simulator_at_a_replays_speed_is_the_simulator_with_every_price_scaled(policy):
    """A run's events depend on their order and durations only: the trace with its arrivals divided by f, simulated
    at the f = 1 prices, its times then multiplied by f, is the trace as it is at prices f times higher (every pass
    and every host term): request for request, with speculation's random draws too."""
    from measure.serve import engine_policy
    from measure.serve_check import _simulate_trace
    from roofline.serving import synthetic

    f = 1.37
    pol = engine_policy(policy)
    draft = SPEC.replace(n_layers=1, name="draft")
    w = synthetic(60, 32, "uniform:16-48", seed=3).at_rate(150.0)  # busy and idle stretches both
    terms = (3e-4, 5e-5, 4e-4, 1e-3)
    kw = dict(slots=4, max_tokens=4 * 4 + 4 * 32, seed=5, concentration=3.0)
    slow = _simulate_trace(_scaled_hardware(f), SPEC, draft, pol, 2.4, tuple(f * x for x in terms), w=w, **kw)
    fast = _simulate_trace(_scaled_hardware(1.0), SPEC, draft, pol, 2.4, terms, speed=f, w=w, **kw)
    for col in ("arrival_s", "first_token_s", "finish_s", "ttft_s", "tpot_s", "e2e_s"):
        np.testing.assert_allclose(slow[col].to_numpy(), fast[col].to_numpy(), rtol=1e-9)
    np.testing.assert_allclose(slow["arrival_s"].to_numpy(), w.arrival_s, rtol=1e-12)  # the trace's own clock
    plain = _simulate_trace(_scaled_hardware(1.0), SPEC, draft, pol, 2.4, terms, w=w, **kw)
    assert not np.allclose(slow["ttft_s"], plain["ttft_s"], rtol=1e-3)  # (the speed moves the figures)


def test_a_replays_speed_is_what_its_steps_took_over_their_price():
    """Steps that took 1.25 x (their priced passes + the host terms + the idle start of the cold one): speed 1.25,
    and 1.0 for the steps as priced; the matched figures' errors are against the replays' mean."""
    from measure.serve_check import _prices, speed_matched_figures, steps_speed

    hw = _scaled_hardware(1.0)
    draft = SPEC.replace(n_layers=1, name="draft")
    gamma, terms = 3, (2e-3, 7e-4, 5e-4, 3e-3)
    p = _prices(hw, SPEC, draft, gamma, 4, 64, 200)
    t, rows = 0.05, []  # the first step starts after an idle wait: cold
    tp = p.prefill_time(2, 32, 0.0, draft=True) + terms[2] + terms[3]
    rows.append(dict(decode_batch=0, decode_context_tokens=0, prefills=2, prefill_tokens=32, t_decode_s=0.0,
                     t_prefill_s=tp, start_s=t, end_s=t + tp))  # fmt: skip
    t += tp
    for b in (2, 2, 3, 1):
        td = float(p.decode_time(gamma, b, 40.0)) + terms[0] + terms[1] * b
        rows.append(dict(decode_batch=b, decode_context_tokens=40 * b, prefills=0, prefill_tokens=0, t_decode_s=td,
                         t_prefill_s=0.0, start_s=t, end_s=t + td))  # fmt: skip
        t += td

    def run(scale: float) -> pd.DataFrame:
        df = pd.DataFrame(rows)
        df[["t_decode_s", "t_prefill_s"]] *= scale
        return df

    kw = dict(hw=hw, target=SPEC, draft=draft, gamma=gamma, max_tokens=64)
    assert steps_speed(run(1.0), terms=terms, **kw) == pytest.approx(1.0, rel=1e-9)
    assert steps_speed(run(1.25), terms=terms, **kw) == pytest.approx(1.25, rel=1e-9)
    # without its idle start the cold step is priced short: the speed reads above 1
    assert steps_speed(run(1.0), terms=(*terms[:3], 0.0), **kw) > 1.0

    fig = dict(ttft_p50_s=0.02, ttft_p90_s=0.04, tpot_p50_s=0.005, tpot_p90_s=0.006, e2e_p50_s=0.2)
    reps = [fig, {k: 1.2 * v for k, v in fig.items()}]  # the replays: 1.0 and 1.2 x fig, mean 1.1 x
    out = speed_matched_figures(
        reps, [{k: 1.0 * v for k, v in fig.items()}, {k: 1.4 * v for k, v in fig.items()}], [1.0, 1.3]
    )
    assert out["replay_speed"] == pytest.approx(1.15)
    assert out["tpot_p50_speed_matched_s"] == pytest.approx(1.2 * 0.005)
    assert out["tpot_p50_speed_matched_rel_error"] == pytest.approx(1.2 / 1.1 - 1)
    assert out["tpot_p50_speed_matched_noisy"]  # the replays' range (0.2 / 1.1) exceeds the error (0.09)
    out = speed_matched_figures(reps, [{k: 1.5 * v for k, v in fig.items()}] * 2, [1.0, 1.0])
    assert out["ttft_p90_speed_matched_rel_error"] == pytest.approx(1.5 / 1.1 - 1)
    assert not out["ttft_p90_speed_matched_noisy"]

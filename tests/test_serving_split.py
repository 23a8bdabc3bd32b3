"""A long light run cut where its server stood empty (roofline.serving.split): the pieces make the same run."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import roofline.serving.split as split
from roofline.serving import SchedulerConfig, parse_policy, pricing_context, simulate, simulate_run, step_prices
from roofline.serving.workload import synthetic
from roofline.speculation.drafters import as_drafter

HW, TARGET, DRAFT = "h100-sxm-80gb", "llama-3.1-8b", "model:llama-3.2-1b"
LIGHT = dict(input_len="uniform:128-1024", output_len="uniform:16-256")


@pytest.fixture
def small_chunks(monkeypatch):
    """Chunks of 500 requests, handed over within 200 (at most), decided by a pilot of 200: cuts in runs of a few
    thousand."""
    monkeypatch.setattr(split, "CHUNK_REQUESTS", 500)
    monkeypatch.setattr(split, "WINDOW_REQUESTS", 200)
    monkeypatch.setattr(split, "MIN_WINDOW_REQUESTS", 100)
    monkeypatch.setattr(split, "PILOT_REQUESTS", 200)


@pytest.fixture(scope="module")
def prices():
    ctx = pricing_context(TARGET, HW, engine="serving")
    return step_prices(ctx, as_drafter(DRAFT), max_gamma=3, max_batch=256, max_tokens=2048, max_context=1300)


def _setup(n, rate, policy, seed=3):
    w = synthetic(n, LIGHT["input_len"], LIGHT["output_len"], arrivals="poisson", seed=seed).at_rate(rate)
    return w, parse_policy(policy), np.full(w.n, 0.75), SchedulerConfig(kv_capacity_tokens=400_000)


def _cut(w, prices, pol, alpha, cfg, seed=5):
    cut = split.plan(w, prices, pol, alpha, cfg, seed)
    assert cut is not None and len(cut.starts) >= 3 and 100 <= cut.window <= 200
    runs = [split.run_chunk(split.chunk_args(w, prices, pol, alpha, cfg, seed, cut, c)) for c in range(len(cut.starts))]
    return split.splice(runs, cut, w.arrival_s, cfg.trace_points), cut


def test_marks_are_the_arrivals_that_find_the_server_empty(prices):
    w, pol, alpha, cfg = _setup(1500, 4.0, "static:3")
    r = simulate_run(w, prices, pol, alpha, cfg, np.random.default_rng(1), marks=((100, 300),))
    finish = r.requests["finish_s"].to_numpy()
    empty = np.r_[True, np.maximum.accumulate(finish)[:-1] < w.arrival_s[1:]]  # every earlier request done
    assert r.idle is not None and 20 < r.idle.request.size < 1500
    assert w.arrival_s[0] == 0.0  # (the first request arrives as the run starts: it waits for nothing)
    assert np.array_equal(r.idle.request, np.flatnonzero(empty)[1:])
    assert sorted(r.idle.itl) == [j for j in r.idle.request.tolist() if 100 <= j < 300]
    # the maxima restart at every mark: together they are the run's
    assert max(r.idle.max_kv.max(), r.idle.tail_max_kv) == r.max_kv_utilisation


def test_a_plain_run_cut_at_empty_moments_is_the_unsplit_run(prices, small_chunks):
    """Plain decoding draws no random numbers: from an empty server the pieces take the very steps of the whole
    run, so the cut run is the unsplit one, request for request (its totals up to rounding). At 3.5 req/s: since
    vLLM's per-step host time (docs/cost-model.md, section 32) a plain step costs more, and at 4 req/s this workload
    leaves the server empty too seldom for a cut within the test's 200-request windows."""
    w, pol, alpha, cfg = _setup(2600, 3.5, "off")
    whole = simulate_run(w, prices, pol, alpha, cfg, np.random.default_rng(0))
    cut, _ = _cut(w, prices, pol, alpha, cfg)
    assert cut is not None
    pd.testing.assert_frame_equal(cut.requests, whole.requests, check_exact=True)
    assert np.array_equal(cut.itl_counts, whole.itl_counts)
    for k in ("rounds", "decode_runs", "prefill_steps", "max_step_tokens", "kv_blocks"):
        assert getattr(cut, k) == getattr(whole, k), k
    for k in ("busy_s", "batch_seconds", "kv_block_seconds", "max_kv_utilisation"):
        assert getattr(cut, k) == pytest.approx(getattr(whole, k), rel=1e-9), k
    assert cut.trace.time_s.size <= cfg.trace_points and np.all(np.diff(cut.trace.time_s) >= 0)


def test_a_cut_speculative_run_counts_every_token_once_and_keeps_the_distribution(prices, small_chunks):
    w, pol, alpha, cfg = _setup(6000, 4.0, "static:3")
    cut, _ = _cut(w, prices, pol, alpha, cfg)
    assert cut is not None
    q = cut.requests
    assert q["request"].tolist() == list(range(w.n)) and np.all(q["finish_s"] >= q["first_token_s"])
    # every request-round counted once, in the totals and in the histogram (one gap each: no preemptions here)
    assert int(q["preemptions"].sum()) == 0
    assert int(cut.itl_counts.sum()) == cut.rounds and cut.draft_tokens == 3 * cut.rounds
    # and every token: a first one per request, then a round's accepted drafts and one more (the last round's
    # accepted drafts may run past a request's end)
    assert w.n + cut.rounds <= int(w.output_tokens.sum()) <= w.n + cut.rounds + cut.accepted_tokens
    whole = simulate_run(w, prices, pol, alpha, cfg, np.random.default_rng(0))
    for col in ("ttft_s", "tpot_s", "e2e_s"):
        assert q[col].median() == pytest.approx(whole.requests[col].median(), rel=0.03), col
    assert cut.accepted_tokens / cut.draft_tokens == pytest.approx(whole.accepted_tokens / whole.draft_tokens, rel=0.02)
    assert cut.batch_seconds / cut.busy_s == pytest.approx(whole.batch_seconds / whole.busy_s, rel=0.03)


def test_a_busy_run_is_not_cut(prices, small_chunks):
    w, pol, alpha, cfg = _setup(2000, 60.0, "off")  # the server never stands empty
    assert split.plan(w, prices, pol, alpha, cfg, 5) is None
    w, pol, alpha, cfg = _setup(900, 4.0, "off")  # fewer than two chunks
    assert split.plan(w, prices, pol, alpha, cfg, 5) is None


def _sim(workers, **kw):
    r = simulate(hardware=HW, target=TARGET, drafter=DRAFT, engine="serving", acceptance=0.75,
                 policy=["off", "static:3"], rates=[4.0], requests=2600, workers=workers, **LIGHT, **kw)  # fmt: skip
    return r.requests, r.summary, pd.Series(r.settings["chunks"])


def test_a_cut_run_is_the_same_for_every_number_of_workers(small_chunks):
    a, b = _sim(2), _sim(3)
    assert a[2].to_dict() == b[2].to_dict() == {"off@4": 5, "static:3@4": 5}
    for x, y in zip(a[:2], b[:2], strict=True):
        pd.testing.assert_frame_equal(x, y, check_exact=True)
    one = _sim(1)  # one worker runs whole: the plain policy's requests are the same, the speculative ones drawn anew
    off = a[0]["policy"] == "off"
    pd.testing.assert_frame_equal(a[0][off].reset_index(drop=True), one[0][off].reset_index(drop=True))


def test_no_handover_in_a_window_runs_the_point_whole(small_chunks, monkeypatch):
    monkeypatch.setattr(split, "_handover", lambda *a: None)
    a, one = _sim(2), _sim(1)
    for x, y in zip(a[:2], one[:2], strict=True):
        pd.testing.assert_frame_equal(x, y, check_exact=True)
    assert a[2].to_dict() == one[2].to_dict() == {"off@4": 1, "static:3@4": 1}


def test_the_window_is_wider_where_the_server_stands_empty_less_often(prices, monkeypatch):
    monkeypatch.setattr(split, "CHUNK_REQUESTS", 500)
    monkeypatch.setattr(split, "PILOT_REQUESTS", 400)
    cuts = {}
    for policy in ("off", "static:3"):  # the draft shortens each request's stay: the server empties more often
        w, pol, alpha, cfg = _setup(1200, 4.0, policy)
        cuts[policy] = split.plan(w, prices, pol, alpha, cfg, 5)
    off, spec = cuts["off"], cuts["static:3"]
    assert off is not None and spec is not None and off.starts == spec.starts == (0, 500)
    assert split.MIN_WINDOW_REQUESTS <= spec.window < off.window <= split.WINDOW_REQUESTS


def test_each_replica_is_cut_on_its_own_and_disaggregated_pools_run_whole(small_chunks):
    kw = dict(hardware=HW, target=TARGET, drafter=DRAFT, engine="serving", acceptance=0.75, policy=["static:3"],
              rates=[4.0], requests=2600, workers=2, **LIGHT)  # fmt: skip
    r = simulate(replicas=2, **kw)
    assert r.settings["chunks"] == {"static:3@4": 6}  # 1,300 requests per server: chunks of 500, 500 and 300
    assert r.requests["request"].tolist() == list(range(2600))
    d = simulate(disaggregate="1:1", **kw)
    assert d.settings["chunks"] == {"static:3@4": 1}

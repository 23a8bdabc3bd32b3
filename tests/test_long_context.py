"""Long contexts at batch (docs/cost-model.md, section 31): the window draft's cache, and the KV-bound crossover."""

from __future__ import annotations

import numpy as np
import pytest

from roofline.costing.passtime import kv_bound_context, kv_share, pass_seconds
from roofline.costing.pricing import Pricing
from roofline.deploy.planner import plan
from roofline.passes.model import get_model
from roofline.speculation.drafters import Ctx, as_drafter
from roofline.speculation.speculative import speedup

T8B = "llama-3.1-8b"
SPEC = get_model(T8B)


@pytest.fixture(scope="module")
def a100x8() -> Pricing:
    return Pricing.of("a100-sxm-80gb", engine="compiled", tp=8)


def test_the_crossover_is_exact_on_the_integer_grid(a100x8: Pricing) -> None:
    batches = np.array([8, 32, 128])
    at = kv_bound_context(T8B, a100x8, batches, 4)
    assert np.all(at > 0)
    below = kv_share(T8B, a100x8, batches, 4, at - 1)
    above = kv_share(T8B, a100x8, batches, 4, at)
    assert np.all(below < 0.5) and np.all(above >= 0.5)
    # one call per configuration gives the vectorised answer
    assert [int(kv_bound_context(T8B, a100x8, int(b), 4)) for b in batches] == at.tolist()


def test_more_sequences_turn_the_pass_kv_bound_at_shorter_contexts(a100x8: Pricing) -> None:
    at = kv_bound_context(T8B, a100x8, np.array([8, 16, 32, 64, 128, 256]), 4)
    assert np.all(np.diff(at[:-1]) < 0)
    # 256 sequences of one KV head per device fill an A100's 108 SMs in 2.4 waves, 128 in 1.2: the read of 128 is the
    # slower per byte, so it turns KV-bound no later than 256 (the decode kernel's waves, docs/cost-model.md, section 54)
    assert at[-1] >= at[-2]
    # a single sequence never gets there on 8 A100s: the per-layer floor and the all-reduces outweigh its cache
    assert int(kv_bound_context(T8B, a100x8, 1, 4)) == -1
    # a wider verify pass has more weight-side work to outweigh: it turns KV-bound later than a one-token step
    one, five = kv_bound_context(T8B, a100x8, 128, [1, 5])
    assert five > one


def test_the_pure_roofline_crossover_follows_the_bytes() -> None:
    """Without an engine and at batch B, a one-token pass of a dense GQA model is KV-bound once the cache's bytes
    pass the weights' (both streamed at one rate, the FLOPs hidden): B L* 2 l KV h k ~ N w, activations aside."""
    pr = Pricing.of("h100-sxm-80gb")
    spec = SPEC
    B = 16
    at = int(kv_bound_context(spec, pr, B, 1))
    # the pass reads the weights but the embedding table, of which it reads B rows
    read = spec.weight_bytes(2.0) - (spec.embedding_params - B * spec.d_model) * 2.0
    assert at == pytest.approx(read / (B * spec.kv_bytes(1, 2.0)), rel=0.02)


def test_plan_shows_each_rows_crossover(a100x8: Pricing) -> None:
    table = plan(a100x8, T8B, "window:512", 0.8, batch=[32, 128], context=32768, gammas=range(0, 6))
    for _, row in table.iterrows():
        want = int(kv_bound_context(T8B, a100x8, int(row["batch"]), int(row["gamma"]) + 1))
        assert int(row["kv_bound_context"]) == want


def test_the_window_draft_reads_its_window_at_every_step_and_holds_it(a100x8: Pricing) -> None:
    d = as_drafter("window:512")
    B, L, g = 64, 32768, 3
    r = speedup(a100x8, T8B, d, 0.8, g, batch=B, context=L)
    steps = sum(float(pass_seconds(SPEC, a100x8, B, 1, 512 + i, tp=8)) for i in range(g))
    assert float(r.t_draft_s) == pytest.approx(steps, rel=1e-9)
    assert float(r.t_verify_s) == pytest.approx(float(pass_seconds(SPEC, a100x8, B, g + 1, L, tp=8)), rel=1e-9)
    ctx = Ctx(T8B, a100x8)
    per_token = ctx.target.kv_bytes(1, 2.0)
    assert float(d.extra_memory_bytes(ctx, B, L)) == pytest.approx(B * 512 * per_token / 8)
    assert float(d.extra_memory_bytes(ctx, B, 100)) == pytest.approx(B * 100 * per_token / 8)
    # at long context the windowed draft step costs a fraction of a plain step, and more so at larger batch
    ratio = [float(speedup(a100x8, T8B, d, 0.8, g, batch=b, context=L).t_draft_s) / g
             / float(pass_seconds(SPEC, a100x8, b, 1, L)) for b in (32, 128)]  # fmt: skip
    assert ratio[1] < ratio[0] < 1.0


def test_past_the_crossover_speculation_pays_more_with_batch(a100x8: Pricing) -> None:
    s = [float(speedup(a100x8, T8B, "window:512", 0.8, 3, batch=b, context=32768).speedup) for b in (32, 64, 128)]
    assert s[0] < s[1] < s[2]

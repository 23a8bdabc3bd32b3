"""Capture before timing: the shapes a run plans to capture are every shape it reaches (checked on the CPU).

On the CPU nothing is captured, but the runner builds a static call for each shape it runs: after a run, every
key in ``runner.calls`` must be one the run's plan held, so on a GPU no timed round captures.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from measure import decode, graphs  # noqa: E402
from measure.decode import autoregressive_generate, speculative_generate  # noqa: E402
from measure.models import Transformer, context_bucket  # noqa: E402
from measure.serve import serve  # noqa: E402
from roofline.passes.model import ModelSpec  # noqa: E402
from roofline.speculation.gamma_policies import BatchSchedule, HeuristicSchedule  # noqa: E402
from roofline.speculation.trees import Tree  # noqa: E402
from roofline.speculation.verification import SamplingParams  # noqa: E402

SPEC = ModelSpec("target", 3, 64, 4, 2, 16, 128, 50, max_context=1024)
PROMPTS = [[1, 2, 3, 4, 5], [7, 8, 9], [3, 3, 3, 3, 3, 3, 3]]
TREE = Tree([-1, -1, 0, 0, 1, 2])


def _pair():
    torch.manual_seed(0)
    target = Transformer(SPEC, dtype="fp32", init_std=0.08)
    draft = Transformer(SPEC.replace(n_layers=1, name="draft"), dtype="fp32", init_std=0.08)
    graphs.attach(target, capture=False)
    graphs.attach(draft, capture=False)
    return target, draft


@pytest.fixture
def planned(monkeypatch):
    """Every shape handed to a runner's precapture, by runner."""
    seen: dict[int, set] = {}
    real = graphs.GraphRunner.precapture

    def record(self, shapes, allows=None):
        seen.setdefault(id(self), set()).update(s.key() for s in shapes)
        return real(self, shapes, allows)

    monkeypatch.setattr(graphs.GraphRunner, "precapture", record)
    return seen


def _reached_within(runner, seen):
    missing = set(runner.calls) - seen.get(id(runner), set())
    assert not missing, f"reached but not planned: {sorted(k[:2] + k[3:4] for k in missing)}"


@pytest.mark.parametrize(
    "kind",
    ["plain", "draft", "early exit", "tree", "early-exit tree", "sampled chain", "schedule", "heuristic", "lookup"],
)
def test_a_decoding_captures_every_shape_it_reaches_before_its_rounds(planned, kind):
    target, draft = _pair()
    sp = SamplingParams(temperature=1.0)
    # a long run: the context crosses buckets (64 -> 128 -> 192) while it decodes
    n = 150
    if kind == "plain":
        autoregressive_generate(target, PROMPTS, n)
    elif kind == "draft":
        speculative_generate(target, draft, PROMPTS, 3, n)
    elif kind == "early exit":
        speculative_generate(target, 2, PROMPTS, 4, n)
    elif kind == "tree":
        speculative_generate(target, draft, PROMPTS, TREE, n)
    elif kind == "early-exit tree":
        speculative_generate(target, 1, PROMPTS, TREE, n, sp, seed=1, tree_variant="specinfer")
    elif kind == "sampled chain":
        speculative_generate(target, draft, PROMPTS, 2, n, sp, seed=2)
    elif kind == "schedule":  # gamma by batch size: a shape per gamma the schedule names
        speculative_generate(target, draft, PROMPTS, BatchSchedule({1: 4, 2: 2, 3: 0}), n)
    elif kind == "heuristic":  # gamma moves between 1 and its most from round to round
        speculative_generate(target, 1, PROMPTS, HeuristicSchedule(initial=2, max_gamma=5), n)
    else:
        speculative_generate(target, "prompt-lookup", PROMPTS, 3, n)
    assert len({k[3] for k in target.runner.calls}) >= 3  # the run did cross buckets
    _reached_within(target.runner, planned)
    _reached_within(draft.runner, planned)


def test_a_plain_decodings_plan_is_exactly_what_it_reaches(planned):
    target, _ = _pair()
    autoregressive_generate(target, PROMPTS, 150)
    assert set(target.runner.calls) == planned[id(target.runner)]


def test_the_plan_is_largest_first_and_its_buckets_are_the_ladders():
    assert graphs.buckets_between(1, 64, 4096) == [64]
    assert graphs.buckets_between(60, 300, 4096) == [64, 128, 192, 256, 320]
    assert graphs.buckets_between(500, 9000, 700) == [512, 640, 700]  # capped at the cache
    for lo, hi in [(3, 900), (129, 130), (1000, 3000)]:
        got = graphs.buckets_between(lo, hi, 8192)
        assert got == sorted({context_bucket(v, 8192) for v in range(lo, hi + 1)})
    shapes = graphs.decode_shapes(
        batches=[1, 3, 9], max_batch=16, max_seq=400, need_lo=10, need_hi=300, gammas=[0, 2], drafter="early exit",
        n_layers=1,
    )  # fmt: skip
    order = graphs.plan_order(shapes["target"] * 2)  # repeats dropped
    assert len(order) == len(shapes["target"]) == len({s.key() for s in order})
    sizes = [s.size for s in order]
    assert sizes == sorted(sizes, reverse=True) and order[0].batch == 16 and order[-1].batch == 1
    # the batch runs padded to a capture size: 3 -> 4, 9 -> 16
    assert {s.batch for s in order} == {1, 4, 16}
    assert not shapes["draft"]  # an early exit drafts on the target's runner
    assert {(s.kind, s.width) for s in order} == {("pass", 1), ("pass", 3), ("chain", 2)}


def test_serving_captures_every_batch_and_bucket_it_reaches_before_it_starts(planned):
    target, draft = _pair()
    prompts = [[1, 2, 3, 4], [5, 6], [7, 8, 9, 10, 11], [2, 2, 2], [9, 8, 7, 6, 5, 4]]
    arrivals = [0.0, 0.0, 0.001, 0.002, 0.002]
    outs = [70, 20, 90, 40, 66]

    def clock():
        clock.t += 1e-3
        return clock.t

    for policy, drafter in [("static:3", draft), ("tree:parents:-1,-1,0,1", 1), ("off", None)]:
        clock.t = 0.0
        target, draft = _pair()
        serve(target, prompts, arrivals, outs, policy=policy, drafter=drafter if drafter != 0 else None,
              slots=3, clock=clock, sleep=lambda s: None)  # fmt: skip
        assert len({k[1] for k in target.runner.calls}) >= 2  # several padded batches were run
        _reached_within(target.runner, planned)
        _reached_within(draft.runner, planned)


def test_a_sweep_captures_its_points_before_timing(planned):
    from measure.sweep import sweep

    target, _ = _pair()
    df = sweep(target, [1, 3], [1, 4], [10, 100], ["fp32"], device="cpu", repeats=1, rounds=1, progress=False)
    assert len(df) == 8
    _reached_within(target.runner, planned)
    assert df.attrs["runner"]["captures"] == 0  # the CPU captures nothing, but it planned every point


def test_no_plan_runs_without_a_runner(planned):
    torch.manual_seed(0)
    target = Transformer(SPEC, dtype="fp32", init_std=0.08)
    res = speculative_generate(target, 1, PROMPTS, 2, 8)
    assert res.captures == 0 and res.capture_s == 0.0 and not planned
    assert decode.precapture_run(target, None, 3, 5, 9) == {"graphs": 0.0, "seconds": 0.0, "planned": 0.0}
    assert np.isfinite(res.decode_s)


def _outputs(out):
    if isinstance(out, torch.Tensor):
        return [out]
    return [t for o in out for t in _outputs(o)] if isinstance(out, (tuple, list)) else []


def test_with_captures_emulated_every_one_happens_before_the_timed_rounds(monkeypatch):
    """The runner captures (a fake capture on the CPU: the warm-up calls, then outputs a replay rewrites in place):
    every capture happens inside a run's precapture, none inside a timed span, and the decodings stay exact, so
    the captures' warm-up passes wrote nothing a row reads."""
    from measure import timing

    where: list[str] = []
    inside = {"precapture": False}
    real_precapture = graphs.GraphRunner.precapture

    def precapture(self, shapes, allows=None):
        inside["precapture"] = True
        try:
            return real_precapture(self, shapes, allows)
        finally:
            inside["precapture"] = False

    def fake_capture(self):
        assert not timing._OPEN, "a capture inside a timed span"
        where.append("precapture" if inside["precapture"] else "run")
        self.fn()  # the two warm-up calls on the side stream
        self.out = self.fn()

        def replay(call=self):
            for mine, new in zip(_outputs(call.out), _outputs(call.fn()), strict=True):
                if mine is not new:
                    mine.copy_(new)

        self.graph = SimpleNamespace(replay=replay)
        self.runner.stats["captures"] += 1

    sp = SamplingParams(temperature=1.0)

    def runs(target, draft):
        return {
            "plain": autoregressive_generate(target, PROMPTS, 40).tokens,
            "draft": speculative_generate(target, draft, PROMPTS, 3, 40).tokens,
            "early exit": speculative_generate(target, 2, PROMPTS, 3, 40).tokens,
            "tree": speculative_generate(target, draft, PROMPTS, TREE, 40).tokens,
            "sampled early exit": speculative_generate(target, 1, PROMPTS, 2, 40, sp, seed=4).tokens,
        }

    torch.manual_seed(0)
    eager = runs(Transformer(SPEC, dtype="fp32", init_std=0.08),
                 Transformer(SPEC.replace(n_layers=1, name="draft"), dtype="fp32", init_std=0.08))  # fmt: skip
    monkeypatch.setattr(graphs.GraphRunner, "precapture", precapture)
    monkeypatch.setattr(graphs.StaticCall, "_capture", fake_capture)
    target, draft = _pair()
    target.runner.capture = draft.runner.capture = True
    res = speculative_generate(target, draft, PROMPTS, 3, 40)
    assert res.captures > 0 and res.capture_s > 0
    assert runs(target, draft) == eager
    assert where and set(where) == {"precapture"}

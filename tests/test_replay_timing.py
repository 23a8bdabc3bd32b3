"""Device time is the replay's: the timer's plumbing checked on the CPU with a fake clock and fake CUDA events.

A static call brackets its own replay (measure.graphs.StaticCall, measure.timing.replay_span); the input copies
before it, a first capture and the host work after it are outside the device time of the span that holds it.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from measure import graphs, timing  # noqa: E402
from measure.decode import speculative_generate  # noqa: E402
from measure.models import Transformer  # noqa: E402
from roofline.passes.model import ModelSpec  # noqa: E402


class Clock:
    """A host clock that moves only when told: a step of work costs what the test says."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def work(self, s: float) -> None:
        self.t += s


class FakeEvent:
    """A CUDA event on the fake clock: the device runs when the host launches (an idle GPU)."""

    def __init__(self, clock: Clock) -> None:
        self.clock, self.at = clock, None

    def record(self) -> None:
        self.at = self.clock()

    def elapsed_time(self, end: FakeEvent) -> float:
        return (end.at - self.at) * 1e3  # milliseconds, as CUDA's

    def synchronize(self) -> None:
        pass


class FakeGraph:
    def __init__(self, clock: Clock, cost: float) -> None:
        self.clock, self.cost = clock, cost

    def replay(self) -> None:
        self.clock.work(self.cost)


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(timing, "_clock", c)
    monkeypatch.setattr(timing, "_event", lambda: FakeEvent(c))
    monkeypatch.setattr(timing, "synchronize", lambda device: None)
    monkeypatch.setattr(timing.time, "perf_counter", c)
    return c


def _static_call(clock: Clock, capture: bool) -> graphs.StaticCall:
    """A static call whose pass costs 5 s, whose first capture costs 1000 s."""
    runner = SimpleNamespace(capture=capture)
    call = graphs.StaticCall(lambda: clock.work(5.0), {}, runner)  # type: ignore[arg-type]

    def capture_once(self=call):
        clock.work(1000.0)
        self.graph = FakeGraph(clock, 5.0)

    call._capture = capture_once  # type: ignore[method-assign]
    return call


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("capture", [False, True])
def test_a_span_holds_the_replay_alone(clock, device, capture):
    if capture and device == "cpu":
        pytest.skip("the CPU never captures")
    call = _static_call(clock, capture)
    timer = timing.PassTimer(device)
    for _ in range(2):  # the first round captures (a capture), the second replays
        t0 = clock()
        with timer.span("verify"):
            clock.work(100.0)  # the input copies and uniforms before the replay: host time
            call()
            clock.work(50.0)  # slicing the outputs, reading them: host time
        wall = clock() - t0
        got = timer.read()
        assert got == {"verify": 5.0}
        assert wall - got["verify"] >= 150.0  # the host share holds the copies (and a first capture)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_a_span_without_a_replay_is_charged_whole(clock, device):
    timer = timing.PassTimer(device)
    with timer.span("draft"):
        clock.work(7.0)  # an eager pass: its launches are the pass
    with timer.span("verify"):
        clock.work(3.0)
        with timer.span("inner"):  # a replay is charged to the innermost span only
            graphs.StaticCall(lambda: clock.work(2.0), {}, SimpleNamespace(capture=False))()  # type: ignore[arg-type]
    assert timer.read() == {"draft": 7.0, "inner": 2.0, "verify": 5.0}
    assert timer.read() == {}
    graphs.StaticCall(lambda: clock.work(2.0), {}, SimpleNamespace(capture=False))()  # type: ignore[arg-type]
    assert timer.read() == {}  # outside a span a replay is charged to nothing


def test_time_fn_reports_the_replay_as_device_time_and_the_rest_as_host(clock):
    call = _static_call(clock, capture=True)

    def one_pass():
        clock.work(0.5)  # input copies
        call()

    t = timing.time_fn(one_pass, warmup=1, repeats=4, device="cuda")
    assert t.samples_s == (5.0,) * 4  # the first capture fell in the warm-up, and the copies are not a pass's
    assert t.wall_samples_s == (5.5,) * 4 and t.host_median_s == 0.5
    cold = _static_call(clock, capture=True)
    t = timing.time_fn(lambda: cold(), warmup=0, repeats=2, device="cuda")
    assert t.samples_s == (5.0, 5.0) and t.wall_samples_s == (1005.0, 5.0)  # a capture never enters a sample


def test_a_rounds_verify_time_is_its_static_call(monkeypatch):
    spec = ModelSpec("target", 2, 64, 4, 2, 16, 128, 50, max_context=256)
    torch.manual_seed(0)
    target = Transformer(spec, dtype="fp32", init_std=0.08)
    graphs.attach(target, capture=False)
    fn_s: list[float] = []
    real = graphs.StaticCall.__call__

    def measured(self):
        t0 = timing._clock()
        out = real(self)
        fn_s.append(timing._clock() - t0)
        return out

    monkeypatch.setattr(graphs.StaticCall, "__call__", measured)
    r = speculative_generate(target, 1, [[1, 2, 3], [4, 5, 6, 7]], 2, 6).rounds
    per_round = r.drop_duplicates("round")
    # each round's draft and verify times are what its two static calls took, within the clock's own overhead
    calls = list(zip(fn_s[0::2], fn_s[1::2], strict=True))
    assert len(calls) == len(per_round)
    for (d, v), (_, row) in zip(calls, per_round.iterrows(), strict=True):
        assert row["t_draft_s"] <= d and row["t_verify_s"] <= v
        assert row["t_host_s"] >= row["t_round_s"] - d - v - 1e-9

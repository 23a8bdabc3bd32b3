"""What a CUDA graph capture requires of the captured functions, checked without a GPU.

A capture records the device work of one call and replays it: nothing inside may read a device value on the host
(``.item()``, ``bool()``, ``nonzero``, ``.tolist()``, a copy to the CPU), and host Python runs once, at capture.

* On the meta device (shapes, no data) every such read raises: every function the runner captures is run there.
* ``make_fx`` traces a function once, as a capture does, and the trace is replayed with new inputs: a decoding whose
  static calls are traced once per shape and replayed must emit exactly what eager decoding emits.
* On a GPU, replays run under ``torch.cuda.set_sync_debug_mode("error")``: any synchronising call raises.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

from measure import graphs  # noqa: E402
from measure.decode import autoregressive_generate, speculative_generate  # noqa: E402
from measure.models import Transformer  # noqa: E402
from roofline.passes.model import ModelSpec  # noqa: E402
from roofline.speculation.trees import Tree  # noqa: E402
from roofline.speculation.verification import SamplingParams  # noqa: E402

SPEC = ModelSpec("target", 4, 64, 4, 2, 16, 128, 50, max_context=1024)
PROMPTS = [[1, 2, 3, 4, 5], [7, 8, 9], [3, 3, 3, 3, 3, 3, 3]]
TREE = Tree([-1, -1, 0, 0, 1, 2])
GREEDY, SAMPLED = SamplingParams(temperature=0.0), SamplingParams(temperature=1.0)


def _pair(device: str = "cpu") -> tuple[Transformer, Transformer]:
    torch.manual_seed(0)
    target = Transformer(SPEC, dtype="fp32", init_std=0.08, device=device)
    draft = Transformer(SPEC.replace(n_layers=1, name="draft"), dtype="fp32", init_std=0.08, device=device)
    with torch.no_grad():
        draft.embed_tokens.weight.copy_(target.embed_tokens.weight)
        draft.lm_head.weight.copy_(target.lm_head.weight)
        draft.layers[0].load_state_dict(target.layers[0].state_dict())
    return target, draft


def test_the_meta_device_refuses_what_a_capture_cannot_hold():
    # the check below can fail: each of these raises on meta tensors
    t = torch.zeros(4, device="meta")
    for bad in (lambda: t.sum().item(), lambda: bool(t.any()), lambda: t.nonzero(), lambda: t.tolist()):
        with pytest.raises((RuntimeError, NotImplementedError)):
            bad()
    with pytest.raises(RuntimeError):
        t + torch.ones(4)  # a CPU tensor mixed into a device pass


def test_every_captured_function_runs_on_the_meta_device():
    model = Transformer(SPEC, dtype="fp32", init_std=0.08, device="meta")
    model.auto_kernels = False  # no kernel race on a device without data
    model.setup_cache(4, 256)
    runner = graphs.attach(model, capture=False)
    meta = torch.device("meta")
    chain = torch.zeros(3, 1, dtype=torch.long, device=meta)
    prefix = torch.zeros(3, 2, dtype=torch.long, device=meta)
    with torch.inference_mode():
        for lengths in ([5, 3, 7, 9], [0, 0, 0, 0]):  # ragged, and a padded-looking batch
            model.cache.lengths[:] = lengths
            assert model(torch.zeros(3, 4, dtype=torch.long, device=meta)).shape == (3, 4, SPEC.vocab_size)
            assert model(torch.zeros(3, 7, dtype=torch.long, device=meta), Tree([-1, 0, 0, 1, 1, 2, 3])).device == meta
            for sp in (GREEDY, SAMPLED):
                for n_layers in (None, 2):  # a draft model's chain, an early exit's
                    x, q = runner.draft_chain(chain, 3, sp, None, n_layers)
                    assert x.shape == (3, 3) and x.device == meta
                    model.cache.lengths[:] = lengths
                for variant in ("sequoia", "specinfer"):
                    x, q = runner.draft_tree(prefix, TREE, sp, None, variant, 2)
                    assert x.shape == (3, TREE.n_nodes) and x.device == meta
    # every kind of static call the runner captures ran here, and every one of its outputs is on the device
    assert {k[0] for k in runner.calls} == {"pass", "chain", "tree"}
    for call in runner.calls.values():
        assert all(b.device == meta for b in [*call.inputs.values(), *call.held.values()])


def _traced_call(self):
    """A static call as a capture runs it: its Python traced once (make_fx), the trace replayed after."""
    gm = getattr(self, "_gm", None)
    if gm is None:
        gm = self._gm = make_fx(self.fn)()  # Python runs once here, as inside torch.cuda.graph
        self.runner.stats["captures"] += 1
    self.runner.stats["replays"] = self.runner.stats.get("replays", 0) + 1
    return gm()


def _decodings(target, draft):
    return {
        "plain": autoregressive_generate(target, PROMPTS, 12).tokens,
        "draft": speculative_generate(target, draft, PROMPTS, 3, 12).tokens,
        "early exit": speculative_generate(target, 2, PROMPTS, 3, 12).tokens,
        "tree": speculative_generate(target, draft, PROMPTS, TREE, 12).tokens,
        "sampled chain": speculative_generate(target, draft, PROMPTS, 3, 12, SAMPLED, seed=5).tokens,
        "sampled early-exit tree": speculative_generate(target, 2, PROMPTS, TREE, 12, SAMPLED, seed=5).tokens,
    }


@pytest.mark.slow
def test_a_trace_replayed_decodes_exactly_as_eager(monkeypatch):
    eager = _decodings(*_pair())
    monkeypatch.setattr(graphs.StaticCall, "__call__", _traced_call)
    target, draft = _pair()
    graphs.attach(target, capture=False)
    graphs.attach(draft, capture=False)
    traced = _decodings(target, draft)
    for kind, tokens in eager.items():
        assert traced[kind] == tokens, kind
    # most calls replayed a trace made by an earlier one: Python ran once per shape, as in a capture
    for r in (target.runner, draft.runner):
        assert 0 < r.stats["captures"] < r.stats["replays"] / 2


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_replays_never_synchronise_the_host_on_a_gpu(monkeypatch):
    target, draft = _pair("cuda")
    eager = _decodings(target, draft)
    graphs.attach(target, capture=True)
    graphs.attach(draft, capture=True)
    for _ in range(2):  # every shape captured in the cache the last run grew to (a capture itself may synchronise)
        _decodings(target, draft)
    calls = []

    def strict(method):
        real = getattr(graphs.GraphRunner, method)

        def run(self, *a, **kw):
            # the static call whole: its input copies, its uniforms and its replay, with no capture left to do
            old = torch.cuda.get_sync_debug_mode()
            torch.cuda.set_sync_debug_mode("error")
            try:
                calls.append(method)
                return real(self, *a, **kw)
            finally:
                torch.cuda.set_sync_debug_mode(old)

        monkeypatch.setattr(graphs.GraphRunner, method, run)

    def no_capture(self):
        raise AssertionError("a shape first reached in the second decoding")

    for method in ("forward", "draft_chain", "draft_tree"):
        strict(method)
    monkeypatch.setattr(graphs.StaticCall, "_capture", no_capture)
    again = _decodings(target, draft)
    assert {"forward", "draft_chain", "draft_tree"} <= set(calls)
    for kind in ("plain", "draft", "early exit", "tree"):
        assert again[kind] == eager[kind], kind

"""Graph outputs never alias across replays, checked on the CPU.

Every graph of a :class:`measure.graphs.GraphRunner` is captured into one memory pool: a graph's outputs live
in that pool, and the next replay of ANOTHER graph of the same runner may reuse their memory. This test emulates
that on the CPU: each static call keeps its first outputs as its "graph outputs" (as a capture does), every later
call writes into them (as a replay does), and after every call the outputs of every other call of the same runner
are filled with junk, which is the worst a shared pool can do. Anything a decoding reads after another graph replayed
must then have been copied out of the pool, or the tokens and the acceptance change.

The emulation honours what :class:`measure.graphs.StaticCall` declares as ``held``: buffers allocated before
capture (outside the pool) that the graph writes into; those are not junked, because no other graph's memory
overlaps them.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from measure import graphs  # noqa: E402
from measure.decode import autoregressive_generate, speculative_generate  # noqa: E402
from measure.models import Transformer  # noqa: E402
from roofline.passes.model import ModelSpec  # noqa: E402
from roofline.speculation.trees import Tree  # noqa: E402
from roofline.speculation.verification import SamplingParams  # noqa: E402

SPEC = ModelSpec("target", 4, 64, 4, 2, 16, 128, 50, max_context=1024)
PROMPTS = [[1, 2, 3, 4, 5], [7, 8, 9], [3, 3, 3, 3, 3, 3, 3], [10, 11, 12, 10, 11, 12, 10, 11]]
TREE = Tree([-1, -1, 0, 0, 1, 2])


def _pair() -> tuple[Transformer, Transformer]:
    torch.manual_seed(0)
    target = Transformer(SPEC, dtype="fp32", init_std=0.08)
    draft = Transformer(SPEC.replace(n_layers=1, name="draft"), dtype="fp32", init_std=0.08)
    with torch.no_grad():  # a draft that shares the target's embedding and first layer agrees often
        draft.embed_tokens.weight.copy_(target.embed_tokens.weight)
        draft.lm_head.weight.copy_(target.lm_head.weight)
        draft.layers[0].load_state_dict(target.layers[0].state_dict())
    return target, draft


def _leaves(out):
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _leaves(o)]
    return []


def _junk(t: torch.Tensor) -> None:
    """Overwrite a pool tensor as a later graph's activations would: valid-looking but wrong values."""
    if t.numel() == 0:
        return
    with torch.inference_mode():
        if t.dtype.is_floating_point:
            t.copy_(torch.rand(t.shape, dtype=t.dtype) * 3.0 - 1.0)
        elif t.dtype == torch.bool:
            t.fill_(True)
        else:
            t.fill_(SPEC.vocab_size - 1)


def _emulated_call(self):
    """A static call as a shared pool runs it: outputs fixed at the first call, other graphs' outputs junked."""
    fresh = self.fn()
    if self.out is None:
        self.out = fresh  # the "capture": these tensors are the graph's outputs from now on
    else:
        for mine, new in zip(_leaves(self.out), _leaves(fresh), strict=True):
            if mine is not new:
                mine.copy_(new)  # the "replay" writes the same buffers
    for other in self.runner.calls.values():
        if other is self or other.out is None:
            continue
        kept = {b.untyped_storage().data_ptr() for b in getattr(other, "held", {}).values()}
        for t in _leaves(other.out):
            if t.untyped_storage().data_ptr() not in kept:
                _junk(t)
    return self.out


def _runs(target, draft):
    sp = SamplingParams(temperature=1.0)
    out = {}
    for kind, run in {
        "plain": lambda: autoregressive_generate(target, PROMPTS, 24),
        "draft": lambda: speculative_generate(target, draft, PROMPTS, 3, 24),
        "early exit": lambda: speculative_generate(target, 2, PROMPTS, 4, 24),
        "tree": lambda: speculative_generate(target, draft, PROMPTS, TREE, 24),
        "early-exit tree": lambda: speculative_generate(target, 2, PROMPTS, TREE, 24),
        "sampled chain": lambda: speculative_generate(target, draft, PROMPTS, 3, 24, sp, seed=3),
        "sampled early exit": lambda: speculative_generate(target, 2, PROMPTS, 3, 24, sp, seed=3),
        "sampled tree": lambda: speculative_generate(target, draft, PROMPTS, TREE, 24, sp, seed=3),
    }.items():
        res = run()
        out[kind] = (res.tokens, None if kind == "plain" else float(res.rounds["accepted"].mean()))
    return out


@pytest.fixture(scope="module")
def eager_runs():
    return _runs(*_pair())


def test_outputs_read_after_another_replay_survive_a_shared_pool(eager_runs, monkeypatch):
    monkeypatch.setattr(graphs.StaticCall, "__call__", _emulated_call)
    target, draft = _pair()
    graphs.attach(target, capture=False)
    graphs.attach(draft, capture=False)
    got = _runs(target, draft)
    changed = [
        f"{kind}: {'tokens' if got[kind][0] != tokens else 'mean accepted'} {got[kind][1]} (eager {accepted})"
        for kind, (tokens, accepted) in eager_runs.items()
        if got[kind] != (tokens, accepted)
    ]
    assert not changed, "changed under a shared pool: " + "; ".join(changed)
    # greedy speculation is plain decoding, whichever drafter
    plain = got["plain"][0]
    for kind in ("draft", "early exit", "tree", "early-exit tree"):
        assert got[kind][0] == plain, kind
    # the emulation did run graphs of several shapes on one runner (verify and the early-exit chain share one)
    kinds = {k[0] for k in target.runner.calls}
    assert {"pass", "chain", "tree"} <= kinds

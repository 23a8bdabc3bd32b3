"""Real batched speculative decoding: greedy equals the baseline exactly; sampling keeps the target's distribution."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

torch = pytest.importorskip("torch")

from measure.decode import autoregressive_generate, speculative_generate  # noqa: E402
from measure.models import Transformer  # noqa: E402
from roofline import SpecroofError  # noqa: E402
from roofline.passes.model import ModelSpec  # noqa: E402
from roofline.speculation.trees import Tree  # noqa: E402
from roofline.speculation.verification import SamplingParams  # noqa: E402

SPEC = ModelSpec("target", 4, 64, 4, 2, 16, 128, 50, max_context=1024)
PROMPTS = [[1, 2, 3, 4, 5], [7, 8, 9], [3, 3, 3, 3, 3, 3, 3], [10, 11, 12, 10, 11, 12, 10, 11]]


@pytest.fixture(scope="module")
def pair():
    torch.manual_seed(0)
    target = Transformer(SPEC, dtype="fp32", init_std=0.08)
    draft = Transformer(SPEC.replace(n_layers=1, name="draft"), dtype="fp32", init_std=0.08)
    with torch.no_grad():  # a draft that shares the target's embedding and first layer agrees often
        draft.embed_tokens.weight.copy_(target.embed_tokens.weight)
        draft.lm_head.weight.copy_(target.lm_head.weight)
        draft.layers[0].load_state_dict(target.layers[0].state_dict())
    return target, draft


@pytest.mark.parametrize("which", ["draft", "early-exit", "prompt-lookup"])
@pytest.mark.parametrize("gamma", [1, 3, 6])
def test_greedy_speculation_emits_exactly_the_baseline(pair, which, gamma):
    target, draft = pair
    base = autoregressive_generate(target, PROMPTS, 24)
    drafter = {"draft": draft, "early-exit": 2, "prompt-lookup": "prompt-lookup"}[which]
    spec = speculative_generate(target, drafter, PROMPTS, gamma, 24)
    assert spec.tokens == base.tokens
    m = spec.metrics()
    assert 1.0 <= m.mean_acceptance_length <= gamma + 1
    assert set(spec.rounds.columns) >= {"accepted", "emitted", "t_draft_s", "t_verify_s", "t_accept_s", "t_commit_s"}


def test_the_early_exit_drafter_accepts_something(pair):
    target, _ = pair
    res = speculative_generate(target, 3, PROMPTS, 4, 32)
    assert res.metrics().acceptance_rate > 0.05
    curve = res.acceptance_curve()
    assert curve.shape == (4,) and np.all((curve[np.isfinite(curve)] >= 0) & (curve[np.isfinite(curve)] <= 1))


def _first_token_pvalue(p: np.ndarray, tokens: list[list[int]]) -> float:
    """Chi-square p-value of the emitted first tokens against the target's distribution ``p``."""
    n = len(tokens)
    counts = np.bincount(np.array([t[0] for t in tokens]), minlength=p.size)
    keep = p * n >= 5  # chi-square needs enough expected counts per cell
    observed, expected = counts[keep], p[keep] * n
    if (~keep).any():
        observed, expected = np.append(observed, counts[~keep].sum()), np.append(expected, p[~keep].sum() * n)
    expected = expected * observed.sum() / expected.sum()
    return float(stats.chisquare(observed, expected).pvalue)


def _next_token_probs(target, prompt: list[int]) -> np.ndarray:
    """The target's distribution of the token after ``prompt`` (temperature 1), float64."""
    with torch.no_grad():
        target.setup_cache(1, 16)
        return torch.softmax(target(torch.as_tensor([prompt]))[0, -1].double(), -1).numpy()


@pytest.mark.parametrize("which", ["draft", "early-exit"])
def test_sampled_first_tokens_follow_the_target(pair, which):
    target, draft = pair
    prompt = [4, 9, 2, 7, 1]
    n = 4000
    p = _next_token_probs(target, prompt)
    drafter = draft if which == "draft" else 2
    res = speculative_generate(target, drafter, [prompt] * n, 3, 2, SamplingParams(temperature=1.0), seed=3)
    second = np.array([t[1] for t in res.tokens])
    assert _first_token_pvalue(p, res.tokens) > 1e-3
    assert res.metrics().acceptance_rate > 0.0 and len(set(second.tolist())) > 5


def test_eos_and_length_limits(pair):
    target, _ = pair
    base = autoregressive_generate(target, PROMPTS, 10)
    eos = base.tokens[0][3]  # the 4th token of sequence 0
    res = speculative_generate(target, 2, PROMPTS, 4, 10, eos=eos)
    assert res.tokens[0] == base.tokens[0][: base.tokens[0].index(eos) + 1]
    for t in res.tokens:
        assert len(t) <= 10 and (eos not in t[:-1])


def test_bad_input(pair):
    target, draft = pair
    with pytest.raises(SpecroofError, match="gamma must be >= 1"):
        speculative_generate(target, draft, PROMPTS, 0, 5)
    with pytest.raises(SpecroofError, match="at least 2 tokens"):
        speculative_generate(target, draft, [[1]], 2, 5)
    with pytest.raises(SpecroofError, match="early-exit layers"):
        speculative_generate(target, 9, PROMPTS, 2, 5)
    other = Transformer(SPEC.replace(vocab_size=60, name="v60"), dtype="fp32")
    with pytest.raises(SpecroofError, match="share a vocabulary"):
        speculative_generate(target, other, PROMPTS, 2, 5)


TREES = {
    "binary 2x3": Tree.kary(2, 3),
    "irregular": Tree([-1, -1, -1, 0, 0, 1, 3, 3, 6]),
    "depth-first numbered": Tree([-1, 0, 1, 0, -1, 4]),
    "chain as a tree": Tree.chain(4),
}


@pytest.mark.parametrize("which", ["draft", "early-exit"])
@pytest.mark.parametrize("shape", list(TREES))
def test_greedy_tree_speculation_emits_exactly_the_baseline(pair, which, shape):
    target, draft = pair
    base = autoregressive_generate(target, PROMPTS, 24)
    drafter = draft if which == "draft" else 2
    res = speculative_generate(target, drafter, PROMPTS, TREES[shape], 24)
    assert res.tokens == base.tokens
    tree = TREES[shape]
    assert res.gamma == tree.depth and res.drafted == tree.n_nodes
    assert 1.0 <= res.metrics().mean_acceptance_length <= tree.depth + 1
    ranks = res.rank_acceptance()
    assert ranks.shape == (int(np.bincount(tree.parents + 1).max()),)
    seen = ranks[np.isfinite(ranks)]
    assert seen.size and np.all((seen >= 0) & (seen <= 1))


def test_a_wider_tree_accepts_more_per_round_than_its_chain(pair):
    target, draft = pair
    chain = speculative_generate(target, draft, PROMPTS, Tree.chain(3), 32)
    wide = speculative_generate(target, draft, PROMPTS, Tree.kary(3, 3), 32)
    assert wide.metrics().mean_acceptance_length > chain.metrics().mean_acceptance_length
    # greedy siblings are the draft's top-k: a rank > 0 sibling gets accepted sometimes
    assert np.nansum(wide.rank_acceptance()[1:]) > 0


@pytest.mark.parametrize("variant", ["sequoia", "specinfer"])
def test_sampled_tree_first_tokens_follow_the_target(pair, variant):
    target, draft = pair
    prompt = [4, 9, 2, 7, 1]
    n = 3000
    p = _next_token_probs(target, prompt)
    res = speculative_generate(
        target, draft, [prompt] * n, Tree.kary(3, 2), 1, SamplingParams(temperature=1.0), seed=5, tree_variant=variant
    )
    assert _first_token_pvalue(p, res.tokens) > 1e-3
    assert res.metrics().acceptance_rate > 0.0


def test_trees_need_a_model_drafter(pair):
    target, _ = pair
    with pytest.raises(SpecroofError, match="chains only"):
        speculative_generate(target, "prompt-lookup", PROMPTS, Tree.kary(2, 2), 5)


def test_tree_decoding_stops_at_eos_and_length(pair):
    target, draft = pair
    base = autoregressive_generate(target, PROMPTS, 12)
    eos = base.tokens[1][4]
    res = speculative_generate(target, draft, PROMPTS, Tree.kary(2, 3), 12, eos=eos)
    assert res.tokens[1] == base.tokens[1][: base.tokens[1].index(eos) + 1]
    for t, b in zip(res.tokens, base.tokens, strict=True):
        assert len(t) <= 12 and t == b[: len(t)]


POLICIES = {
    "heuristic": "HeuristicSchedule(max_gamma=8)",
    "confidence": "ConfidenceStop(0.5, max_gamma=8)",
    "batch schedule": "BatchSchedule({1: 3, 4: 1})",
    "speculation off": "BatchSchedule({1: 0})",
}


@pytest.mark.parametrize("which", ["draft", "early-exit", "prompt-lookup"])
@pytest.mark.parametrize("policy", list(POLICIES))
def test_dynamic_gamma_keeps_the_baseline_output(pair, which, policy):
    from roofline.speculation.gamma_policies import BatchSchedule, ConfidenceStop, HeuristicSchedule  # noqa: F401

    target, draft = pair
    pol = eval(POLICIES[policy])
    base = autoregressive_generate(target, PROMPTS, 24)
    drafter = {"draft": draft, "early-exit": 2, "prompt-lookup": "prompt-lookup"}[which]
    spec = speculative_generate(target, drafter, PROMPTS, pol, 24)
    assert spec.tokens == base.tokens
    drafted = spec.rounds["drafted"]
    if policy == "batch schedule":
        assert (drafted == 1).all()  # batch 4 -> gamma 1
    if policy == "speculation off":
        assert (drafted == 0).all() and (spec.rounds["emitted"] == 1).all()
    if policy == "heuristic" and which != "prompt-lookup":
        assert drafted.nunique() > 1  # it did move
    curve = spec.acceptance_curve()
    assert np.all((curve[np.isfinite(curve)] >= 0) & (curve[np.isfinite(curve)] <= 1))


def test_every_measure_drafter_names_the_roofline_drafter_that_prices_it():
    """One vocabulary: what speculative_generate runs and what the cost model prices come from one place."""
    import measure.decode as dec
    from measure.models import Transformer
    from roofline.core.errors import SpecroofError
    from roofline.passes.model import ModelSpec
    from roofline.speculation.speculative import DraftModel, EarlyExit, PromptLookup

    target = Transformer(ModelSpec("t", 4, 64, 4, 4, 16, 128, 256), dtype="fp32")
    assert isinstance(dec.cost_model_of(target), DraftModel)
    ee = dec.cost_model_of(2)
    assert isinstance(ee, EarlyExit) and ee.layers == 2 and ee.reuse_kv is False
    assert isinstance(dec.cost_model_of("prompt-lookup"), PromptLookup)
    for d in (dec.as_drafter(target, target), dec.as_drafter(2, target), dec.as_drafter("prompt-lookup", target)):
        assert type(d.cost_model()) is type(dec.cost_model_of(d))
        d.start([[1, 2, 3]], 8)
        d.observe([[1]])  # every drafter takes the emitted tokens (a no-op for model drafters)
    with pytest.raises(SpecroofError, match="cannot draft with"):
        dec.as_drafter(3.5, target)


@pytest.fixture(scope="module")
def cuda_pair():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    torch.manual_seed(0)
    target = Transformer(SPEC, dtype="fp32", init_std=0.08, device="cuda")
    draft = Transformer(SPEC.replace(n_layers=1, name="draft"), dtype="fp32", init_std=0.08, device="cuda")
    with torch.no_grad():
        draft.embed_tokens.weight.copy_(target.embed_tokens.weight)
        draft.lm_head.weight.copy_(target.lm_head.weight)
        draft.layers[0].load_state_dict(target.layers[0].state_dict())
    return target, draft


@pytest.mark.parametrize("gamma", [2, 5, Tree.kary(2, 3), Tree([-1, -1, -1, 0, 0, 1, 3, 3, 6])], ids=str)
@pytest.mark.parametrize("which", ["draft", "early-exit"])
def test_on_cuda_greedy_speculation_of_a_ragged_batch_emits_exactly_the_baseline(cuda_pair, which, gamma):
    """The CUDA path (SDPA off cuDNN, ragged masks, index_put commits, tree paths) is as lossless as the CPU's."""
    target, draft = cuda_pair
    base = autoregressive_generate(target, PROMPTS, 32)
    res = speculative_generate(target, draft if which == "draft" else 2, PROMPTS, gamma, 32)
    assert res.tokens == base.tokens
    assert not torch.backends.cuda.cudnn_sdp_enabled()  # decoding changes shapes every pass: no per-shape plans

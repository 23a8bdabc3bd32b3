"""EAGLE-2/3 draft trees as the serving engines build them, from the engines' own knobs.

A user deploys EAGLE with an engine's flags, not with a rank-path list. This module turns
those flags into the :class:`roofline.speculation.trees.Tree` the engine verifies, so the tree can be
priced (:mod:`roofline.deploy.engine_search`) and the answer given back in the same flags
(:mod:`roofline.deploy.engine_flags`). Sources read (reimplemented, not copied):

* **SGLang** (sgl-project/sglang, ``python/sglang/srt/speculative/spec_utils.py`` /
  ``eagle_utils.py`` ``select_top_k_tokens``, ``build_eagle_tree.py``
  ``build_tree_kernel_efficient_preprocess``, ``server_args.py``
  ``auto_choose_speculative_params``): ``--speculative-num-steps S``,
  ``--speculative-eagle-topk K``, ``--speculative-num-draft-tokens N``. Step 0 takes the
  draft's top K children of the pending token; each later step expands the K kept nodes
  into K children each (K^2 candidates, score = parent score x child probability) and keeps
  the K best as the next beam. After S steps every candidate of every step
  (K + (S - 1) K^2 of them) is ranked by score and the best N - 1 are verified with the
  pending token (N tokens in the verify pass). K = 1 is a chain and needs N = S + 1
  (SGLang rewrites N to that with a warning). SGLang's default for Llama is (5, 4, 8).
* **vLLM** (vllm-project/vllm, ``vllm/config/speculative.py`` ``SpeculativeConfig``,
  ``vllm/v1/spec_decode/eagle.py``): ``speculative_config={"method": "eagle3",
  "num_speculative_tokens": k}`` drafts a chain of k. Versions with
  ``speculative_token_tree`` take a static tree as rank paths (a string of tuples,
  sorted breadth-first, with ``num_speculative_tokens == len(tree)``); its drafter gives
  every node of a level the same number of children (``child_drafts_per_level`` =
  nodes of the level / nodes of the level above, the top-c of each), so only trees whose
  levels branch uniformly are drafted as written: :func:`vllm_tree` refuses others.
* **TensorRT-LLM** (NVIDIA/TensorRT-LLM, ``tensorrt_llm/llmapi/llm_args.py``
  ``EagleDecodingConfig``): ``max_draft_len`` draft layers; a linear tree by default;
  ``use_dynamic_tree`` with ``dynamic_tree_max_topK`` K and ``max_total_draft_tokens`` M
  (``max_draft_len <= M <= K x max_draft_len``) is EAGLE-2's dynamic tree. That bound says
  the pool is the K nodes each layer keeps, so the tree here is the best M of those.

The engines rank candidates by the draft's own cumulative probability. Taking that
probability as the chance the path is accepted (a calibrated draft), the tree an engine
builds *in expectation* is the one its algorithm builds when every candidate's score is
its path probability under an acceptance model; its expected tokens per round are
``1 + sum`` of the kept scores (docs/cost-model.md, section 9). A real dynamic tree adapts
to each context, so it does at least as well as this expected tree.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from roofline.core.errors import SpecroofError
from roofline.speculation.trees import AcceptanceModel, IIDAcceptance, Tree

Array = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

#: the engines whose knobs this module reads
FRAMEWORKS = ("sglang", "vllm", "trtllm")

#: most candidates a setting may rank (S steps x K^2): the engines' own graphs stop far below this
MAX_CANDIDATES = 100_000


def _positive(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise SpecroofError(f"{name} must be a whole number >= 1 (got {value!r})")
    return int(value)


def _closed_paths(name: str, paths: Sequence[Sequence[int]]) -> tuple[tuple[int, ...], ...]:
    """Rank paths sorted breadth-first (the engines' own order), each with its parent path present."""
    try:
        keyed = sorted({tuple(int(r) for r in p) for p in paths}, key=lambda t: (len(t), t))
    except (TypeError, ValueError):
        raise SpecroofError(f"{name} must be a list of rank paths such as [(0,), (1,), (0, 0)]") from None
    if not keyed:
        raise SpecroofError(f"{name} must hold at least one rank path")
    have = set(keyed)
    for p in keyed:
        if not p or min(p) < 0:
            raise SpecroofError(f"{name}: path {p!r} must be a non-empty tuple of ranks >= 0")
        if len(p) > 1 and p[:-1] not in have:
            raise SpecroofError(f"{name}: path {p!r} has no parent path {p[:-1]!r}")
    return tuple(keyed)


def level_branching(paths: Sequence[Sequence[int]]) -> tuple[int, ...] | None:
    """Children per node at each level when every node of a level has the same top-c children, else None.

    vLLM's tree drafter can only draft such trees (every node of level d gets the top
    ``c_d`` tokens); ``(2, 1)`` is [(0,), (1,), (0, 0), (1, 0)].
    """
    keyed = _closed_paths("tree", paths)
    depth = max(len(p) for p in keyed)
    widths = [sum(1 for p in keyed if len(p) == d) for d in range(1, depth + 1)]
    branch = [widths[0]] + [widths[d] // widths[d - 1] for d in range(1, depth)]
    want: set[tuple[int, ...]] = set()
    level: set[tuple[int, ...]] = {()}
    for c in branch:
        level = {(*p, r) for p in level for r in range(c)}
        want |= level
    return tuple(branch) if want == set(keyed) else None


@dataclass(frozen=True)
class EngineSetting:
    """One speculative setting in an engine's own terms.

    ``num_steps``: draft passes per round (SGLang ``speculative_num_steps``, the depth of a
    vLLM tree or its ``num_speculative_tokens`` for a chain, TensorRT-LLM ``max_draft_len``).
    ``topk``: children drafted per expanded node (SGLang ``speculative_eagle_topk``,
    TensorRT-LLM ``dynamic_tree_max_topK``; 1 for chains; for a vLLM tree, its widest
    branching). ``num_draft_tokens``: tokens in the verify pass, the pending token
    included (SGLang's count; vLLM ``num_speculative_tokens + 1``; TensorRT-LLM
    ``max_total_draft_tokens + 1``). ``choices``: a static tree as rank paths (vLLM's
    ``speculative_token_tree``, TensorRT-LLM's ``eagle_choices``). Every engine's own constraints are checked here, so a setting that exists is one the
    engine accepts.
    """

    framework: str
    num_steps: int
    topk: int
    num_draft_tokens: int
    choices: tuple[tuple[int, ...], ...] | None = None

    def __post_init__(self) -> None:
        if self.framework not in FRAMEWORKS:
            raise SpecroofError(f"unknown engine {self.framework!r}; choose one of {', '.join(FRAMEWORKS)}")
        s = _positive("num_steps", self.num_steps)
        k = _positive("topk", self.topk)
        n = _positive("num_draft_tokens", self.num_draft_tokens)
        if n < 2:
            raise SpecroofError(f"num_draft_tokens must be >= 2: the pending token and at least one draft (got {n})")
        if self.choices is not None:
            if self.framework == "sglang":
                raise SpecroofError(
                    "a rank-path tree is a vLLM speculative_token_tree or TensorRT-LLM eagle_choices; "
                    "SGLang builds its own from --speculative-eagle-topk"
                )
            knob = "speculative_token_tree" if self.framework == "vllm" else "eagle_choices"
            paths = _closed_paths(knob, self.choices)
            branch = level_branching(paths)
            if self.framework == "trtllm":
                # TensorRT-LLM drafts a static tree level by level, whatever its shape (EagleDecodingConfig
                # eagle_choices): only its depth (max_draft_len) and node count follow from the paths
                object.__setattr__(self, "choices", paths)
                widest = max(sum(1 for q in paths if q[:-1] == p) for p in [(), *paths])
                if (s, k, n) != (max(len(p) for p in paths), widest, len(paths) + 1):
                    raise SpecroofError(
                        f"a TensorRT-LLM eagle_choices tree of {len(paths)} nodes has max_draft_len = its depth, "
                        f"topk = its widest branching and num_draft_tokens = nodes + 1 (got {s}, {k}, {n}): "
                        "build it with EngineSetting.trtllm(choices=...)"
                    )
                return
            if branch is None:
                raise SpecroofError(
                    "speculative_token_tree must give every node of a level the same top-c children (vLLM drafts "
                    "child_drafts_per_level per node): e.g. [(0,), (1,), (0, 0), (1, 0)]"
                )
            object.__setattr__(self, "choices", paths)
            if (s, k, n) != (max(len(p) for p in paths), max(branch), len(paths) + 1):
                raise SpecroofError(
                    f"a vLLM tree of {len(paths)} nodes has num_steps = its depth, topk = its widest branching and "
                    f"num_draft_tokens = nodes + 1 (got {s}, {k}, {n}): build it with EngineSetting.vllm(tree=...)"
                )
            return
        if k == 1 and n != s + 1:
            raise SpecroofError(
                f"with topk 1 the draft is a chain: num_draft_tokens must be num_steps + 1 = {s + 1} (got {n})"
            )
        if self.framework == "vllm" and k != 1:
            raise SpecroofError("vLLM drafts a chain (topk 1) unless given a speculative_token_tree")
        if self.framework == "sglang":
            pool = k + (s - 1) * k * k
            if pool > MAX_CANDIDATES:
                raise SpecroofError(f"topk {k} over {s} steps ranks {pool} candidates, over {MAX_CANDIDATES}")
            if n - 1 > pool:
                raise SpecroofError(
                    f"num_draft_tokens - 1 must be <= topk + (num_steps - 1) x topk^2 = {pool}, the candidates "
                    f"SGLang drafts at num_steps {s}, topk {k} (got num_draft_tokens {n})"
                )
        if self.framework == "trtllm" and k > 1 and not (s <= n - 1 <= k * s):
            raise SpecroofError(
                f"TensorRT-LLM's max_total_draft_tokens (num_draft_tokens - 1 = {n - 1}) must lie in "
                f"[max_draft_len, dynamic_tree_max_topK x max_draft_len] = [{s}, {k * s}]"
            )

    # -- constructors in each engine's words ------------------------------------------------
    @classmethod
    def sglang(cls, num_steps: int, topk: int, num_draft_tokens: int) -> EngineSetting:
        """``--speculative-num-steps``, ``--speculative-eagle-topk``, ``--speculative-num-draft-tokens``."""
        return cls("sglang", num_steps, topk, num_draft_tokens)

    @classmethod
    def vllm(
        cls, num_speculative_tokens: int | None = None, tree: Sequence[Sequence[int]] | None = None
    ) -> EngineSetting:
        """``num_speculative_tokens`` (a chain) or ``speculative_token_tree`` (rank paths; then its length)."""
        if tree is None:
            g = _positive("num_speculative_tokens", num_speculative_tokens)
            return cls("vllm", g, 1, g + 1)
        paths = _closed_paths("speculative_token_tree", tree)
        if num_speculative_tokens is not None and num_speculative_tokens != len(paths):
            raise SpecroofError(
                f"num_speculative_tokens must equal the tree's {len(paths)} nodes (got {num_speculative_tokens})"
            )
        branch = level_branching(paths)
        return cls("vllm", max(len(p) for p in paths), max(branch) if branch else 1, len(paths) + 1, paths)

    @classmethod
    def trtllm(
        cls,
        max_draft_len: int | None = None,
        dynamic_tree_max_topK: int | None = None,
        max_total_draft_tokens: int | None = None,
        *,
        choices: Sequence[Sequence[int]] | None = None,
    ) -> EngineSetting:
        """``max_draft_len`` alone (linear), EAGLE-2's dynamic tree with ``dynamic_tree_max_topK`` and
        ``max_total_draft_tokens`` (default K x max_draft_len, as TensorRT-LLM defaults it), or a static tree
        ``choices`` (``eagle_choices``: rank paths; ``max_draft_len`` must then be its depth when given)."""
        if choices is not None:
            paths = _closed_paths("eagle_choices", choices)
            depth = max(len(p) for p in paths)
            if max_draft_len is not None and max_draft_len != depth:
                raise SpecroofError(
                    f"max_draft_len ({max_draft_len}) must equal the eagle_choices tree's depth {depth}"
                )
            if dynamic_tree_max_topK is not None or max_total_draft_tokens is not None:
                raise SpecroofError("eagle_choices is a static tree: drop use_dynamic_tree and its knobs")
            widest = max(sum(1 for q in paths if q[:-1] == p) for p in [(), *paths])
            return cls("trtllm", depth, widest, len(paths) + 1, paths)
        s = _positive("max_draft_len", max_draft_len)
        if dynamic_tree_max_topK is None:
            if max_total_draft_tokens not in (None, s):
                raise SpecroofError(
                    "max_total_draft_tokens needs dynamic_tree_max_topK (a linear tree has max_draft_len)"
                )
            return cls("trtllm", s, 1, s + 1)
        k = _positive("dynamic_tree_max_topK", dynamic_tree_max_topK)
        m = k * s if max_total_draft_tokens is None else _positive("max_total_draft_tokens", max_total_draft_tokens)
        return cls("trtllm", s, k, m + 1)

    # -- derived -----------------------------------------------------------------------------
    @property
    def n_nodes(self) -> int:
        """Draft nodes verified per round (the pending token not counted)."""
        return self.num_draft_tokens - 1

    @property
    def is_chain(self) -> bool:
        return self.choices is None and self.topk == 1

    @property
    def draft_pass_widths(self) -> tuple[int, ...]:
        """Tokens per sequence in each draft pass of a round.

        SGLang and TensorRT-LLM's dynamic tree run the draft once on the pending token and
        then ``num_steps - 1`` times over the ``topk`` kept nodes, whatever the verified tree
        keeps; a chain runs ``num_steps`` one-token passes; a vLLM tree runs one pass per
        level over the nodes of the level above (the last level is verified, not drafted from).
        """
        if self.choices is not None:
            widths = [sum(1 for p in self.choices if len(p) == d) for d in range(1, self.num_steps + 1)]
            return (1, *widths[:-1])
        return (1,) + (self.topk,) * (self.num_steps - 1)

    def knobs(self) -> dict[str, Any]:
        """The setting under the engine's own option names."""
        if self.framework == "sglang":
            return {
                "speculative_num_steps": self.num_steps,
                "speculative_eagle_topk": self.topk,
                "speculative_num_draft_tokens": self.num_draft_tokens,
            }
        if self.framework == "vllm":
            out: dict[str, Any] = {"num_speculative_tokens": self.n_nodes}
            if self.choices is not None:
                out["speculative_token_tree"] = str(list(self.choices))
            return out
        if self.choices is not None:
            return {"max_draft_len": self.num_steps, "eagle_choices": [list(p) for p in self.choices]}
        if self.topk == 1:
            return {"max_draft_len": self.num_steps}
        return {
            "max_draft_len": self.num_steps,
            "use_dynamic_tree": True,
            "dynamic_tree_max_topK": self.topk,
            "max_total_draft_tokens": self.n_nodes,
        }

    @property
    def label(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.knobs().items())


#: SGLang's own default for Llama-architecture targets (server_args.py auto_choose_speculative_params)
SGLANG_DEFAULT = EngineSetting.sglang(5, 4, 8)


# -- the tree an engine builds in expectation -------------------------------------------------


@dataclass(frozen=True)
class EngineTree:
    """The tree a setting verifies, each node's draft-rank path and acceptance, and tokens per round."""

    setting: EngineSetting
    tree: Tree
    paths: tuple[tuple[int, ...], ...]
    path_probabilities: Array
    expected_tokens: float


def _factor(model: AcceptanceModel, depth: int, ranks: IntArray) -> Array:
    f = np.asarray(model.factor(np.full(ranks.shape, depth, dtype=np.int64), ranks), dtype=float)
    if np.any(np.diff(f) > 1e-12):
        # the engines keep the top-k by the draft's probability: a model whose rank-1 child beats rank 0
        # would have the engine drafting candidates in an order the acceptance model contradicts
        raise SpecroofError(f"acceptance factors must not increase with sibling rank (depth {depth}: {f.tolist()})")
    return f


def _beam(flat: Array, topk: int) -> IntArray:
    """The k best of a step's candidates, best first (ties to the earlier one): the nodes the next step expands."""
    return np.argsort(-flat, kind="stable")[:topk].astype(np.int64)


@dataclass(frozen=True)
class DraftCandidates:
    """Every candidate a beam-search draft scored: flat index order is SGLang's ``score_list`` order.

    ``parent[i]`` is the candidate index of i's parent (-1: the pending token), ``rank[i]``
    its sibling rank in the draft's top-k, ``step[i]`` its draft step (1 = depth 1),
    ``score[i]`` the cumulative probability, and ``beam[i]`` whether its step kept it.
    """

    parent: IntArray
    rank: IntArray
    step: IntArray
    score: Array
    beam: npt.NDArray[np.bool_]


def candidates_from_scores(score_list: Sequence[Any]) -> DraftCandidates:
    """SGLang's draft output as candidates: ``score_list[0]`` holds the pending token's top-k scores (k,),
    ``score_list[i]`` the (k, k) cumulative scores of the children of step i - 1's k best, best first.

    This is the layout ``select_top_k_tokens`` appends per step and ``build_tree_kernel_efficient_preprocess``
    flattens (sgl-project/sglang ``python/sglang/srt/speculative/``).
    """
    if not score_list:
        raise SpecroofError("score_list needs at least the first step's scores")
    first = np.asarray(score_list[0], dtype=float).reshape(-1)
    k = first.size
    parent, rank, step, score, beam = [-1] * k, list(range(k)), [1] * k, first.tolist(), [True] * k
    kept = np.arange(k)  # step 1 expands every first-step candidate, in rank order
    for i, raw in enumerate(score_list[1:], start=2):
        sc = np.asarray(raw, dtype=float)
        if sc.shape != (k, k):
            raise SpecroofError(f"score_list[{i - 1}] must be (topk, topk) = ({k}, {k}) (got {sc.shape})")
        start = len(parent)
        flat = sc.reshape(-1)
        chosen = _beam(flat, k)
        for j in range(flat.size):  # parent-major, rank-minor
            parent.append(int(kept[j // k]))
            rank.append(j % k)
            step.append(i)
            score.append(float(flat[j]))
            beam.append(False)
        for j in chosen.tolist():
            beam[start + j] = True
        kept = start + chosen
    arr = np.asarray
    return DraftCandidates(arr(parent), arr(rank), arr(step), arr(score, dtype=float), arr(beam, dtype=bool))


def expected_scores(model: AcceptanceModel, num_steps: int, topk: int) -> list[Array]:
    """SGLang's ``score_list`` when the draft's probability of every candidate is its acceptance under ``model``."""
    ranks = np.arange(topk, dtype=np.int64)
    out = [_factor(model, 1, ranks)]
    beam_scores = out[0]
    for step in range(2, num_steps + 1):
        sc = beam_scores[:, None] * _factor(model, step, ranks)[None, :]
        out.append(sc)
        beam_scores = sc.reshape(-1)[_beam(sc.reshape(-1), topk)]
    return out


def select_tree(cands: DraftCandidates, n_keep: int, *, beams_only: bool = False) -> tuple[Tree, IntArray]:
    """The best ``n_keep`` candidates by score as a tree (parents before children), and their candidate indices.

    SGLang ranks every candidate; ``beams_only`` ranks only the nodes each step kept
    (TensorRT-LLM's pool). A parent never scores below its child and comes first, so a
    stable ranking keeps it whenever it keeps the child.
    """
    pool = np.nonzero(cands.beam)[0] if beams_only else np.arange(cands.score.size)
    if n_keep > pool.size:
        raise SpecroofError(f"cannot keep {n_keep} draft nodes out of {pool.size} candidates")
    order = pool[np.argsort(-cands.score[pool], kind="stable")]
    kept = np.sort(order[:n_keep])
    new = {int(old): i for i, old in enumerate(kept.tolist())}
    parents = [-1 if cands.parent[o] < 0 else new[int(cands.parent[o])] for o in kept.tolist()]
    return Tree(parents), kept


def engine_tree(setting: EngineSetting, acceptance: AcceptanceModel) -> EngineTree:
    """The tree ``setting`` verifies when every candidate scores its path probability under ``acceptance``."""
    if not isinstance(setting, EngineSetting):
        raise SpecroofError(f"setting must be an EngineSetting (got {type(setting).__name__})")
    if not isinstance(acceptance, AcceptanceModel):
        raise SpecroofError(f"acceptance must be an AcceptanceModel such as IIDAcceptance (got {acceptance!r})")
    if setting.choices is not None or setting.is_chain:
        tree = Tree.from_paths(setting.choices) if setting.choices is not None else Tree.chain(setting.num_steps)
        probs = tree.path_probabilities(acceptance)
        return EngineTree(setting, tree, tuple(tree.paths()), probs, 1.0 + float(probs.sum()))
    cands = candidates_from_scores(expected_scores(acceptance, setting.num_steps, setting.topk))
    tree, kept = select_tree(cands, setting.n_nodes, beams_only=setting.framework == "trtllm")
    paths: list[tuple[int, ...]] = []
    for i, o in enumerate(kept.tolist()):
        par = int(tree.parents[i])
        paths.append((*(paths[par] if par >= 0 else ()), int(cands.rank[o])))
    probs = cands.score[kept]
    return EngineTree(setting, tree, tuple(paths), probs, 1.0 + float(probs.sum()))


# -- a tokens-per-round figure as an acceptance model ----------------------------------------------


def fit_acceptance(mean_accepted: float, measured_at: EngineSetting = SGLANG_DEFAULT) -> IIDAcceptance:
    """The i.i.d. acceptance under which ``measured_at`` yields ``mean_accepted`` tokens per round.

    One figure fixes one parameter: every candidate is right with the same probability p,
    so the rank-r child is the accepted one with p (1 - p)^r at every depth (the textbook
    model of :class:`roofline.speculation.trees.IIDAcceptance`). p is solved by bisection on the
    expected tokens of the tree the engine builds under p (docs/cost-model.md, section 9).
    ``measured_at`` is the setting the figure was measured with (SGLang's default by default).
    """
    m = float(mean_accepted)
    if not np.isfinite(m):
        raise SpecroofError(f"mean_accepted must be finite (got {mean_accepted!r})")
    top = engine_tree(measured_at, IIDAcceptance(1.0)).expected_tokens
    if not 1.0 < m <= top + 1e-9:
        raise SpecroofError(
            f"mean_accepted (tokens per round) must lie in (1, {top:g}] for {measured_at.framework} "
            f"{measured_at.label}: its tree has {top - 1:g} levels (got {m:g})"
        )

    def e(p: float) -> float:
        return engine_tree(measured_at, IIDAcceptance(p)).expected_tokens

    lo, hi = 0.0, 1.0
    for _ in range(40):  # p to 1e-12: far below any measured figure's precision
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if e(mid) < m else (lo, mid)
    return IIDAcceptance((lo + hi) / 2)


def default_engine_tree(mean_accepted: float, setting: EngineSetting = SGLANG_DEFAULT) -> EngineTree:
    """The tree ``setting`` builds at the acceptance that makes it yield ``mean_accepted`` tokens per round.

    What an EAGLE-2/3 drafter verifies by default: SGLang's own default setting, its tree
    shaped by the measured figure (:func:`fit_acceptance`), so ``expected_tokens`` is that figure.
    """
    return engine_tree(setting, fit_acceptance(mean_accepted, setting))

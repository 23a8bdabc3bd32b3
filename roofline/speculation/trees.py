"""Draft trees: structure, masks, position ids, expected tokens, optimal trees (sizing: roofline.deploy.tree_sizing).

One module despite its length: the optimal-tree builders (Sequoia's DP, best-first, EAGLE-2, DDTree) are read beside
the :class:`Tree` and the acceptance models whose factors they maximise.

A tree is a parent array over draft nodes; -1 means "child of the committed
prefix". Parents come before children, so every pass over nodes in index order
sees a node's parent first. Acceptance models give each node a factor
f(depth, sibling rank); the probability that a node lies on the accepted path is
the product of the factors along its path, and expected tokens per round are
1 (the bonus/correction token) plus the sum of those probabilities.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from roofline.core.errors import SpecroofError, as_array, check_min, check_range
from roofline.core.validation import RANGES, check_count, check_tree_size

IntArray = npt.NDArray[np.int64]
Array = npt.NDArray[np.float64]


# -- structure --------------------------------------------------------------------------


class TreeLevels(NamedTuple):
    """A tree's level structure in plain numbers (:meth:`Tree.levels`)."""

    n_nodes: int
    depth: int
    #: nodes per level, level 1 first
    widths: tuple[int, ...]
    #: the sum of the nodes' depths (each node's ancestors and itself: the visible pairs of a verify pass)
    depth_sum: int


class Tree:
    """A draft tree from a parent array (-1 = child of the committed prefix), validated.

    ``tokens`` optionally labels each node with a token id (for verification).
    """

    def __init__(
        self, parents: Sequence[int] | npt.ArrayLike, tokens: Sequence[int] | npt.ArrayLike | None = None
    ) -> None:
        p = np.asarray(parents)
        if p.ndim != 1 or (p.size and not np.issubdtype(p.dtype, np.integer)):
            raise SpecroofError(f"parents must be a 1-D list of integers (got {parents!r})")
        p = p.astype(np.int64)
        n = p.size
        if n > RANGES["tree_nodes"].hi:  # before the per-node loop below and the n x n masks callers build
            raise SpecroofError(f"a draft tree may have at most {int(RANGES['tree_nodes'].hi)} nodes (got {n})")
        bad = np.nonzero((p < -1) | (p >= n))[0]
        if bad.size:
            i = int(bad[0])
            raise SpecroofError(f"node {i} is an orphan: its parent {int(p[i])} is not a node (use -1 for the prefix)")
        late = np.nonzero(p >= np.arange(n))[0]
        if late.size:
            i = int(late[0])
            seen, j = set(), i
            while j != -1 and j not in seen:
                seen.add(j)
                j = int(p[j])
            if j != -1:
                raise SpecroofError(f"parents contain a cycle through node {j}")
            raise SpecroofError(f"node {i}'s parent {int(p[i])} comes after it; list parents before children")
        self.parents: IntArray = p
        depth = np.zeros(n, dtype=np.int64)
        rank = np.zeros(n, dtype=np.int64)
        counts: dict[int, int] = {}
        for i, par in enumerate(p.tolist()):
            depth[i] = 1 if par == -1 else depth[par] + 1
            rank[i] = counts.get(par, 0)
            counts[par] = rank[i] + 1
        self.depths: IntArray = depth
        self.ranks: IntArray = rank
        if tokens is not None:
            t = np.asarray(tokens, dtype=np.int64)
            if t.shape != (n,):
                raise SpecroofError(f"tokens must have one entry per node ({n}), got {t.shape}")
            self.tokens: IntArray | None = t
        else:
            self.tokens = None

    # -- constructors ----------------------------------------------------------------
    @classmethod
    def chain(cls, n: int) -> Tree:
        """A chain of ``n`` draft tokens (the causal case)."""
        n = check_count("n", n, 0, int(RANGES["tree_nodes"].hi))  # Tree.chain(10**9) is refused, not built
        return cls(np.arange(n) - 1)

    @classmethod
    def kary(cls, b: int, depth: int) -> Tree:
        """A full tree with ``b`` children per node and ``depth`` draft levels (b + b^2 + ... nodes)."""
        b = int(check_min("b", b, 1, integer=True))
        depth = int(check_min("depth", depth, 0, integer=True))
        check_tree_size(b, depth)  # Tree.kary(2, 40) would build 2.2e12 nodes: refuse it at once
        parents: list[int] = []
        level = [-1]
        for _ in range(depth):
            nxt = []
            for par in level:
                for _ in range(b):
                    parents.append(par)
                    nxt.append(len(parents) - 1)
            level = nxt
        return cls(parents)

    @classmethod
    def from_paths(cls, paths: Sequence[Sequence[int]]) -> Tree:
        """From Medusa "choices": each node is the tuple of sibling ranks on its path from the prefix."""
        keyed = sorted({tuple(int(r) for r in path) for path in paths}, key=lambda t: (len(t), t))
        index: dict[tuple[int, ...], int] = {}
        parents = []
        for path in keyed:
            if not path or min(path) < 0:
                raise SpecroofError(f"invalid path {path!r}: paths are non-empty tuples of ranks >= 0")
            if len(path) > 1 and path[:-1] not in index:
                raise SpecroofError(f"path {path!r} has no parent path {path[:-1]!r}")
            parents.append(-1 if len(path) == 1 else index[path[:-1]])
            index[path] = len(parents) - 1
        return cls(parents)

    @classmethod
    def from_sequoia(cls, growmap: dict[str, Any]) -> Tree:
        """From a Sequoia growmap (``Successors``: children of each node; node 0 is the root)."""
        if "Successors" not in growmap:
            raise SpecroofError("a Sequoia growmap needs a 'Successors' list (children of each node, root = node 0)")
        succ = [list(map(int, s)) for s in growmap["Successors"]]
        parent = {0: -1}
        for i, children in enumerate(succ):
            for c in children:
                if c in parent:
                    raise SpecroofError(f"growmap node {c} has two parents")
                parent[c] = i
        size = len(succ)
        if set(parent) != set(range(size)):
            raise SpecroofError("growmap Successors do not reach every node from the root")
        # Sequoia numbers nodes breadth-first, parents first; drop the root (our prefix)
        return cls([parent[i] - 1 if parent[i] > 0 else -1 for i in range(1, size)])

    @classmethod
    def from_json(cls, text: str) -> Tree:
        data = json.loads(text)
        if not isinstance(data, dict) or "parents" not in data:
            raise SpecroofError("tree JSON must be an object with a 'parents' list")
        return cls(data["parents"], data.get("tokens"))

    def to_json(self) -> str:
        data: dict[str, Any] = {"parents": self.parents.tolist()}
        if self.tokens is not None:
            data["tokens"] = self.tokens.tolist()
        return json.dumps(data)

    def breadth_first(self) -> Tree:
        """The same tree renumbered level by level (parents' order, then sibling rank)."""
        paths = self.paths()
        order = sorted(range(self.n_nodes), key=lambda i: (len(paths[i]), paths[i]))
        new = {old: k for k, old in enumerate(order)}
        parents = [-1 if self.parents[o] < 0 else new[int(self.parents[o])] for o in order]
        tokens = None if self.tokens is None else self.tokens[order]
        return Tree(parents, tokens)

    # -- derived structure -------------------------------------------------------------
    @property
    def n_nodes(self) -> int:
        return int(self.parents.size)

    @property
    def depth(self) -> int:
        """Draft levels (0 for an empty tree)."""
        return int(self.depths.max()) if self.n_nodes else 0

    @property
    def widths(self) -> IntArray:
        """Nodes per level, level 1 first."""
        return np.bincount(self.depths, minlength=self.depth + 1)[1:]

    def levels(self) -> TreeLevels:
        """The node count, depth, widths and sum of node depths, as plain numbers (what pricing a round reads).

        They are :attr:`n_nodes`, :attr:`depth`, :attr:`widths` and ``depths.sum()``, derived with numpy once
        per content of ``parents`` and ``depths``: the attributes are public arrays, so the summary is kept
        with their fingerprint (the node count and the depths' dtype and bytes, all it derives from) and
        derived again whenever either was replaced or written in place.
        """
        d = self.depths
        if type(d) is not np.ndarray:  # not the array __init__ made: derive, keep nothing
            return self._derive_levels()
        key = (self.parents.size, d.dtype, d.shape, d.tobytes())
        held = self.__dict__.get("_levels")
        if held is not None and held[0] == key:
            return held[1]  # type: ignore[no-any-return]
        out = self._derive_levels()
        self.__dict__["_levels"] = (key, out)
        return out

    def _derive_levels(self) -> TreeLevels:
        return TreeLevels(self.n_nodes, self.depth, tuple(self.widths.tolist()), int(self.depths.sum()))

    def children(self, node: int) -> IntArray:
        """Children of ``node`` (-1 for the prefix) in sibling-rank order."""
        return np.nonzero(self.parents == node)[0]

    def ancestors_matrix(self) -> npt.NDArray[np.bool_]:
        """``m[i, j]`` is True when j is i or an ancestor of i."""
        n = self.n_nodes
        m = np.zeros((n, n), dtype=bool)
        for i, par in enumerate(self.parents.tolist()):
            if par >= 0:
                m[i] = m[par]
            m[i, i] = True
        return m

    def attention_mask(self, prefix_len: int = 0) -> npt.NDArray[np.bool_]:
        """Ancestor-or-self mask, shape (n, prefix_len + n): every node sees the whole prefix."""
        p = int(check_min("prefix_len", prefix_len, 0, integer=True))
        return np.concatenate([np.ones((self.n_nodes, p), dtype=bool), self.ancestors_matrix()], axis=1)

    def position_ids(self, prefix_len: int = 0) -> IntArray:
        """Rotary position of each node: prefix length + depth - 1 (siblings share a position)."""
        p = int(check_min("prefix_len", prefix_len, 0, integer=True))
        return p + self.depths - 1

    def paths(self) -> list[tuple[int, ...]]:
        """Each node's path as sibling ranks from the prefix (Medusa's "choices" format)."""
        out: list[tuple[int, ...]] = []
        for i, par in enumerate(self.parents.tolist()):
            out.append((*(out[par] if par >= 0 else ()), int(self.ranks[i])))
        return out

    def node_paths(self) -> list[list[int]]:
        """Each node's path as node indices from the first level down to the node."""
        out: list[list[int]] = []
        for i, par in enumerate(self.parents.tolist()):
            out.append([*(out[par] if par >= 0 else []), i])
        return out

    def expected_tokens(self, model: AcceptanceModel) -> float:
        """Expected tokens per round under ``model``, the bonus/correction token included."""
        return 1.0 + float(self.path_probabilities(model).sum())

    def path_probabilities(self, model: AcceptanceModel) -> Array:
        """Probability that each node lies on the accepted path."""
        f = model.factor(self.depths, self.ranks)
        prob = np.empty(self.n_nodes)
        for i, par in enumerate(self.parents.tolist()):
            prob[i] = f[i] * (prob[par] if par >= 0 else 1.0)
        return prob

    def __repr__(self) -> str:
        return f"Tree(n_nodes={self.n_nodes}, depth={self.depth}, parents={self.parents.tolist()})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Tree) and np.array_equal(self.parents, other.parents)

    def __hash__(self) -> int:
        return hash(self.parents.tobytes())


# -- acceptance models -----------------------------------------------------------------------


class AcceptanceModel:
    """Gives each node a factor f(depth, sibling rank) in [0, 1]."""

    def factor(self, depth: IntArray, rank: IntArray) -> Array:
        raise NotImplementedError

    @property
    def max_rank(self) -> int | None:
        """Number of sibling ranks that can be accepted (None: unbounded)."""
        return None

    @property
    def max_depth(self) -> int | None:
        return None


def _check_vector(name: str, p: Any) -> Array:
    v = check_range(name, p, 0.0, 1.0)
    if v.ndim != 1 or v.size == 0:
        raise SpecroofError(f"{name} must be a non-empty 1-D vector")
    if v.sum() > 1.0 + 1e-9:
        raise SpecroofError(f"{name} must sum to at most 1 (one child at most is accepted); it sums to {v.sum():.4f}")
    return v


@dataclass(frozen=True)
class IIDAcceptance(AcceptanceModel):
    """Every candidate is accepted independently with probability ``p`` (the textbook model).

    The walk takes the first accepted sibling, so the rank-k child is the one
    taken with probability p (1 - p)^k and a level with b children survives with
    1 - (1 - p)^b.
    """

    p: float

    def __post_init__(self) -> None:
        check_range("p", self.p, 0.0, 1.0)

    def factor(self, depth: IntArray, rank: IntArray) -> Array:
        return self.p * (1.0 - self.p) ** np.asarray(rank, dtype=float)

    def as_sibling_rank(self, k: int) -> SiblingRankAcceptance:
        """The same model as a Sequoia vector over the first ``k`` ranks."""
        return SiblingRankAcceptance(self.factor(np.ones(k, dtype=np.int64), np.arange(k)))


@dataclass(frozen=True)
class SiblingRankAcceptance(AcceptanceModel):
    """Sequoia's vector: ``p[k]`` = probability that the k-th child (0-indexed) is the one accepted."""

    p: Any

    def __post_init__(self) -> None:
        object.__setattr__(self, "p", _check_vector("sibling-rank vector", self.p))

    @classmethod
    def from_sequoia(cls, vector: Sequence[float]) -> SiblingRankAcceptance:
        """From Sequoia's saved layout: element 0 unused, elements 1..K the ranks, last = none accepted."""
        v = as_array("Sequoia vector", vector)
        if v.ndim != 1 or v.size < 3:
            raise SpecroofError("a Sequoia acceptance vector has element 0 unused, the ranks, and a last 'none' entry")
        return cls(v[1:-1])

    def factor(self, depth: IntArray, rank: IntArray) -> Array:
        r = np.asarray(rank)
        return np.where(r < self.p.size, self.p[np.minimum(r, self.p.size - 1)], 0.0)

    @property
    def max_rank(self) -> int:
        return int(self.p.size)


@dataclass(frozen=True)
class DepthRankAcceptance(AcceptanceModel):
    """``table[d, r]``: probability that the rank-r candidate at depth d + 1 is correct (Medusa head top-k accuracies)."""

    table: Any

    def __post_init__(self) -> None:
        t = check_range("depth x rank table", self.table, 0.0, 1.0)
        if t.ndim != 2 or t.size == 0:
            raise SpecroofError("depth x rank table must be 2-D: one row per depth, one column per rank")
        if np.any(t.sum(axis=1) > 1.0 + 1e-9):
            raise SpecroofError(
                "each row of the depth x rank table must sum to at most 1 (candidates exclude each other)"
            )
        object.__setattr__(self, "table", t)

    def factor(self, depth: IntArray, rank: IntArray) -> Array:
        d, r = np.asarray(depth) - 1, np.asarray(rank)
        ok = (d < self.table.shape[0]) & (r < self.table.shape[1])
        return np.where(
            ok, self.table[np.minimum(d, self.table.shape[0] - 1), np.minimum(r, self.table.shape[1] - 1)], 0.0
        )

    @property
    def max_rank(self) -> int:
        return int(self.table.shape[1])

    @property
    def max_depth(self) -> int:
        return int(self.table.shape[0])


@dataclass(frozen=True)
class ChainCurveAcceptance(DepthRankAcceptance):
    """A measured per-position chain curve a_1..a_g: only rank 0 can be accepted at each depth."""

    def __init__(self, curve: Any) -> None:
        c = check_range("acceptance curve", curve, 0.0, 1.0)
        if c.ndim != 1 or c.size == 0:
            raise SpecroofError("acceptance curve must be a non-empty 1-D vector")
        super().__init__(c[:, None])


# -- optimal trees ------------------------------------------------------------------------------


@dataclass(frozen=True)
class OptimalTree:
    """The best tree for a budget and depth limit, and the best value for every smaller one.

    ``table[n, d]`` = best expected tokens (bonus included) with n draft nodes within
    d draft levels (NaN where infeasible).
    """

    tree: Tree
    expected_tokens: float
    table: Array
    _builder: Callable[[int, int], Tree] = field(repr=False)

    def tree_for(self, n_nodes: int, max_depth: int) -> Tree:
        """The optimal tree of ``n_nodes`` draft nodes within ``max_depth`` levels."""
        if not (0 <= n_nodes < self.table.shape[0] and 0 <= max_depth < self.table.shape[1]):
            raise SpecroofError(f"(n_nodes, max_depth) must lie within the table's {self.table.shape} range")
        if np.isnan(self.table[n_nodes, max_depth]):
            raise SpecroofError(f"no tree of {n_nodes} nodes fits within {max_depth} levels")
        return self._builder(n_nodes, max_depth)


#: most cells (budget^2 x depth x ranks) of the dense recurrence the tree DP takes on before refusing
MAX_DP_WORK = 4e10

#: slack under which a split, a rank or a level counts as "cannot win": far above the rounding of a sum
#: of a few dozen products of probabilities (~1e-15), far below any difference a table reports
_DP_SLACK = 1e-12

#: candidates (rows x splits) evaluated in one block: 1 MiB of float64, a core's cache
_DP_BLOCK = 1 << 17

#: below this many candidates a rank tries every split: finding the ones that can win costs more
_DP_SMALL = 1 << 14


def sequoia_dp_work(m_max: int, l_max: int, n_ranks: int) -> float:
    """Element operations of the dense recurrence: one (budget x budget) max-plus step per level and rank.

    :func:`sequoia_dp` bounds its input by this count; it does far less where splits, ranks
    or levels cannot win (docs/cost-model.md, section 10).
    """
    return float(m_max + 1) ** 2 * max(1, l_max - 1) * max(1, min(n_ranks, m_max))


def sequoia_dp(p: Array, m_max: int, l_max: int) -> tuple[Array, IntArray, Array]:
    """Sequoia's recurrence as max-plus convolutions, searching only what can win.

    T[m, l, b]: best expected tokens of a subtree with m nodes (root included), at
    most l levels (root included) and b root children. Returns (T, best b for each
    (m, l), F = the best over b for each (m, l)); -inf where infeasible. The split y
    behind each cell is not stored: :func:`_sequoia_tree` recovers it for the cells a
    tree visits (a few hundred), which spares an argmax over every cell.

    Every value is the max over a set of candidates that provably holds the best one, each
    candidate computed as the dense recurrence computes it, so F is the dense one bit for
    bit (a level proven not to pay is the one before it, equal in exact arithmetic); T is
    -inf for ranks proven not to win. Skipped, each with its proof in docs/cost-model.md
    section 10: sizes whose child subtrees did not change since the last level (copied),
    splits whose bound falls below a split in hand, ranks beyond the last one that can
    still beat the best root, and levels once one more cannot pay (copied). A rank whose
    acceptance is 0 (never accepted in the sample) adds nothing but stays a legal child:
    0 x (an infeasible subtree) is infeasible, never NaN.
    """
    K = min(p.size, max(1, m_max - 1))
    p = p[:K]
    work = sequoia_dp_work(m_max, l_max, K)
    if work > MAX_DP_WORK:
        fits = _largest_fitting(lambda n: sequoia_dp_work(n + 1, l_max, min(p.size, max(1, n))) <= MAX_DP_WORK)
        raise SpecroofError(
            f"an optimal tree for budget {m_max - 1}, depth {l_max - 1} and {K} ranks needs ~{work:.1e} operations "
            f"(budget^2 x depth x ranks), over the limit of {MAX_DP_WORK:.0e}: the largest budget that fits at depth "
            f"{l_max - 1} is {fits} nodes; lower the budget or depth, or raise roofline.speculation.trees.MAX_DP_WORK"
        )
    cells = float(m_max + 1) * (l_max + 1) * (K + 1)
    if cells > MAX_TREE_TABLE_CELLS:  # the table T itself, allocated below: 8 bytes a cell
        fits = _largest_fitting(
            lambda n: float(n + 2) * (l_max + 1) * (min(p.size, max(1, n)) + 1) <= MAX_TREE_TABLE_CELLS
        )
        raise SpecroofError(
            f"an optimal tree for budget {m_max - 1}, depth {l_max - 1} and {K} ranks needs a table of {cells:.1e} "
            f"cells, over the limit of {MAX_TREE_TABLE_CELLS:.0e}: the largest budget that fits at depth {l_max - 1} "
            f"is {fits} nodes"
        )
    T = np.full((m_max + 1, l_max + 1, K + 1), -np.inf)
    T[1, 1:, 0] = 1.0
    F = np.full((m_max + 1, l_max + 1), -np.inf)  # best over b
    F[1, 1:] = 1.0
    p_top = float(p.max())
    for level in range(2, l_max + 1):
        sub = F[:, level - 1]
        start = 2
        if level > 2:
            changed = sub != F[:, level - 2]  # -inf == -inf: infeasible both times is "unchanged"
            if not changed.any() or _depth_cannot_pay(sub, p_top ** (level - 1)):
                # this level equals the last one, so does every deeper one: copy, exactly
                T[:, level:, :] = T[:, level - 1 : level, :]
                F[:, level:] = F[:, level - 1 : level]
                break
            # T[m, level] reads F[s, level - 1] only for s < m: sizes up to the first changed one are unchanged
            start = int(np.argmax(changed)) + 1
            T[:start, level, :] = T[:start, level - 1, :]
        _dp_level(T[:, level, :], sub, p, start)
        T[1, level, 0] = 1.0
        F[:, level] = T[:, level, :].max(axis=1)
    B = np.argmax(T, axis=2)
    return T, B, F


def _depth_cannot_pay(sub: Array, v: float) -> bool:
    """True when one more level helps no size: F[:, l] = F[:, l - 1] everywhere (``sub`` = F[:, l - 1]).

    Dropping the j nodes on the deepest of l levels, each worth at most v = max(p)^(l - 1),
    leaves a tree of m - j nodes within l - 1 levels, so F[m, l] <= max over j of
    F[m - j, l - 1] + j v; when that never exceeds F[m, l - 1] (and every size already
    fits) the level adds nothing.
    """
    f = sub[1:]
    if not np.isfinite(f).all():
        return False
    s = np.arange(1, sub.size, dtype=np.float64)
    reach = np.maximum.accumulate(f - s * v)[:-1] + s[1:] * v  # max over s' < m of F[s'] + (m - s') v
    return bool(np.all(reach <= f[1:] - _DP_SLACK * (1.0 + np.abs(f[1:]))))


def _dp_level(Tl: Array, sub: Array, p: Array, start: int) -> None:
    """Rows m >= start of Tl = T[:, level, :], from rows < m and ``sub`` = F[:, level - 1]."""
    M = Tl.shape[0] - 1
    K = p.size
    if start > M:
        return
    finite = np.isfinite(sub)
    dmax = int(np.flatnonzero(finite)[-1])  # the largest child subtree within level - 1 levels
    stop = min(M, 1 + K * dmax)  # the largest subtree any number of ranks can hold
    sub_top = np.maximum.accumulate(sub)  # sub_top[s]: the best child of at most s nodes
    zero = np.where(finite, 0.0, -np.inf)  # a p = 0 child: adds 0 where it can exist
    # the first child leaves exactly the root on the left: one column, no search
    Tl[start:, 1] = 1.0 + (sub[start - 1 : M] * float(p[0]) if p[0] > 0 else zero[start - 1 : M])
    best = Tl[:, :2].max(axis=1)
    y = np.arange(M + 1, dtype=np.float64)
    pad = np.full(M, -np.inf)
    buf = np.empty(max(_DP_BLOCK, _DP_SMALL) + M)  # one block of candidates, reused: no fresh pages per rank
    for b in range(2, K + 1):
        lo, hi = max(start, b + 1), min(M, 1 + b * dmax)  # the root and b children of 1..dmax nodes
        if lo > hi:
            continue
        pb = float(p[b - 1])
        child = sub * pb if pb > 0 else zero  # pb x (-inf) stays -inf for pb > 0
        _dp_rank(Tl[:, b], Tl[:, b - 1], child, pb, sub_top, dmax, lo, hi, b, pad, buf)
        np.maximum(best, Tl[:, b], out=best)
        if (
            b < K
            and (hi - lo + 1) * min(dmax, hi - b) > _DP_SMALL  # else the remaining ranks are cheaper than the test
            and _later_ranks_cannot_win(Tl[:, b], best, float(p[b:].max()), y, max(start, 2), stop)
        ):
            return


def _dp_rank(
    out: Array,
    left: Array,
    child: Array,
    pb: float,
    sub_top: Array,
    dmax: int,
    lo: int,
    hi: int,
    b: int,
    pad: Array,
    buf: Array,
) -> None:
    """out[m] = max over y of left[y] + child[m - y] for m in [lo, hi], over the splits y that can win.

    ``left`` = T[:, level, b - 1] never decreases with y, so split y is worth at most
    max(left[:y + 1]) + pb x max(sub[:m]); where that is below a split in hand (the b-th
    child as one leaf), y and every smaller split cannot win.
    """
    n = hi - lo + 1
    w_full = min(dmax, hi - b)  # y >= b (b - 1 children need b nodes) and m - y <= dmax
    width: IntArray | None = None  # None: every row tries every split
    if n * w_full > _DP_SMALL:
        rows = np.arange(lo, hi + 1)
        held = left[lo - 1 : hi] + child[1]
        bar = held - pb * sub_top[lo - 1 : hi] - _DP_SLACK * (1.0 + np.abs(held))
        y_lo = np.searchsorted(np.maximum.accumulate(left), bar, side="left")
        width = np.minimum(rows - y_lo, w_full)  # row m tries y in [m - width, m - 1]
    W = w_full if width is None else int(width.max())
    if W <= 0:
        return
    A = np.concatenate((pad[:W], left[:hi]))  # A[W + y] = left[y], -inf for y < 0
    step = A.strides[0]
    r = 0
    while r < n:
        if width is None:
            k, w = n, W
        else:
            # the next rows, padded to their widest window, at most _DP_BLOCK candidates
            wmax = np.maximum.accumulate(width[r:])
            k = max(1, int(np.searchsorted(wmax * np.arange(1, n - r + 1), _DP_BLOCK, side="right")))
            w = int(wmax[k - 1])
        m0 = lo + r
        # row m's window: left[m - w .. m - 1] (a strided view, no copy) against child[w .. 1]
        win = np.ndarray((k, w), np.float64, A, offset=(W - w + m0) * step, strides=(step, step))
        cand = np.add(win, child[w:0:-1], out=buf[: k * w].reshape(k, w))
        np.max(cand, axis=1, out=out[m0 : m0 + k])
        r += k


def _later_ranks_cannot_win(col: Array, best: Array, p_rest: float, y: Array, lo: int, hi: int) -> bool:
    """True when no root with more than b children beats the best with at most b, for sizes lo..hi.

    ``col`` = T[:, level, b]. A child of rank > b and s nodes adds p_rank x F[s] <= p_rest x s
    (a subtree is worth at most one token per node), so a root with more children is worth
    at most max over y < m of T[y, b] + p_rest (m - y).
    """
    h = best[lo : hi + 1]
    if not np.isfinite(h).all():
        return False  # some size still needs more children to exist at all
    reach = np.maximum.accumulate(col[:hi] - p_rest * y[:hi])[lo - 1 :] + p_rest * y[lo : hi + 1]
    return bool(np.all(reach <= h - _DP_SLACK * (1.0 + np.abs(h))))


def _times(p: float, v: float) -> float:
    """p x v where an infeasible subtree (-inf) stays infeasible even for p = 0."""
    return v if v == float("-inf") else p * v


def sequoia_dp_reference(p: Sequence[float], m_max: int, l_max: int) -> list[list[float]]:
    """The same recurrence as a plain triple loop (for tests and the benchmark); returns best over b."""
    K = len(p)
    ninf = float("-inf")
    T = [[[ninf] * (K + 1) for _ in range(l_max + 1)] for _ in range(m_max + 1)]
    for level in range(1, l_max + 1):
        T[1][level][0] = 1.0
    for mm in range(2, m_max + 1):
        for level in range(2, l_max + 1):
            T[mm][level][1] = 1.0 + _times(p[0], max(T[mm - 1][level - 1]))
            for b in range(2, K + 1):
                best = ninf
                for yy in range(1, mm):
                    v = T[yy][level][b - 1] + _times(p[b - 1], max(T[mm - yy][level - 1]))
                    if v > best:
                        best = v
                T[mm][level][b] = best
    return [[max(T[mm][level]) for level in range(l_max + 1)] for mm in range(m_max + 1)]


def _split(T: Array, F: Array, p: Array, mm: int, ll: int, b: int) -> int:
    """The y (nodes of the root and its first b - 1 children) behind T[mm, ll, b]."""
    if b == 1:
        return 1
    y = np.arange(1, mm)
    sub = F[mm - y, ll - 1]
    child = (
        np.where(np.isfinite(sub), sub * p[b - 1], -np.inf)
        if p[b - 1] > 0
        else np.where(np.isfinite(sub), 0.0, -np.inf)
    )
    return int(y[np.argmax(T[y, ll, b - 1] + child)])


def _sequoia_tree(T: Array, B: IntArray, F: Array, p: Array, m: int, level: int) -> Tree:
    # levels past the one where the DP stopped are copies of it: build from the first level with the same
    # values, where T and F agree with the recurrence
    while level > 1 and np.array_equal(F[:, level - 1], F[:, level]):
        level -= 1
    parents: list[int] = []

    def build(node: int, mm: int, ll: int, b: int) -> None:
        # peel children off from the last rank down: child b has m - y nodes
        subtrees = []
        while b >= 1:
            y = _split(T, F, p, mm, ll, b)
            subtrees.append((mm - y, ll - 1))
            mm, b = y, b - 1
        for cm, cl in reversed(subtrees):
            parents.append(node)
            me = len(parents) - 1
            build(me, cm, cl, int(B[cm, cl]))

    build(-1, m, level, int(B[m, level]))
    return Tree(parents).breadth_first()


def _best_first(model: AcceptanceModel, n_nodes: int, max_depth: int) -> tuple[list[int], list[int], list[float]]:
    """Nodes in best-first order (parent index, depth, path probability), closed under parent and lower ranks."""
    parents: list[int] = []
    depths: list[int] = []
    values: list[float] = []
    max_rank = model.max_rank or n_nodes
    heap: list[tuple[float, int, int, int, int]] = []  # (-value, tiebreak, parent, depth, rank)
    counter = 0

    factors: dict[tuple[int, int], float] = {}  # a factor depends on (depth, rank) alone: one numpy call each

    def push(parent: int, depth: int, rank: int, parent_value: float) -> None:
        nonlocal counter
        if depth > max_depth or rank >= max_rank:
            return
        f = factors.get((depth, rank))
        if f is None:
            f = factors[depth, rank] = float(model.factor(np.array([depth]), np.array([rank]))[0])
        v = parent_value * f
        # zero-value nodes still exist (they sort last): NaN is kept for trees that cannot exist
        heapq.heappush(heap, (-v, counter, parent, depth, rank))
        counter += 1

    push(-1, 1, 0, 1.0)
    while heap and len(parents) < n_nodes:
        neg, _, par, d, r = heapq.heappop(heap)
        parents.append(par)
        depths.append(d)
        values.append(-neg)
        me = len(parents) - 1
        push(par, d, r + 1, 1.0 if par < 0 else values[par])  # next sibling
        push(me, d + 1, 0, -neg)  # first child
    return parents, depths, values


#: most node steps (budget x depth limits grown again) a best-first tree search takes on: each step is a heap
#: push and pop in Python (microseconds), so the limit is seconds of work, never minutes
MAX_BEST_FIRST_WORK = 2e6

#: most cells of a best-first search's (budget + 1) x (depth + 1) table of expected tokens (8 bytes each)
MAX_TREE_TABLE_CELLS = 5e7


def _largest_fitting(fits: Callable[[int], bool], hi: int = 2**53) -> int:
    """The largest n >= 0 with ``fits(n)`` (``fits`` true up to some n, false after), by bisection."""
    if not fits(0):
        return 0
    lo, top = 0, 1
    while top < hi and fits(top):
        lo, top = top, top * 2
    top = min(top, hi)
    while top - lo > 1:
        mid = (lo + top) // 2
        lo, top = (mid, top) if fits(mid) else (lo, mid)
    return lo


def check_best_first_size(n_nodes: int, max_depth: int) -> None:
    """Refuse, before any work, a best-first search whose budget or table is past the limits.

    The budget is at most a draft tree's most nodes (``RANGES["tree_nodes"]``), the table at most
    :data:`MAX_TREE_TABLE_CELLS`; the message names the largest budget that fits at this depth and
    the largest depth at this budget, so the next call can succeed.
    """
    top = int(RANGES["tree_nodes"].hi)

    def fits(n: int, d: int) -> bool:
        return n <= top and (n + 1) * (d + 1) <= MAX_TREE_TABLE_CELLS

    if fits(n_nodes, max_depth):
        return
    n_fit = _largest_fitting(lambda n: fits(n, max_depth), top)
    d_fit = _largest_fitting(lambda d: fits(n_nodes, d)) if n_nodes <= top else 0
    depth_hint = f", or depth {d_fit} at budget {n_nodes}" if d_fit >= 1 else ""
    raise SpecroofError(
        f"an optimal tree for budget {n_nodes} and depth {max_depth} is past the limits of {top} nodes and a table "
        f"of {MAX_TREE_TABLE_CELLS:.0e} cells: the largest that fits is budget {n_fit} at depth {max_depth}"
        f"{depth_hint}"
    )


def check_best_first_work(n_nodes: int, max_depth: int, deepest: int) -> None:
    """Refuse growing the tighter depth limits again when that is past :data:`MAX_BEST_FIRST_WORK` steps.

    Checked after the one search under the loosest limit (at most ``n_nodes`` steps) and before
    the ``deepest - 1`` searches it shows are needed; the message names the largest depth that fits.
    """
    work = float(n_nodes) * (min(deepest, max_depth) - 1)
    if work <= MAX_BEST_FIRST_WORK:
        return
    d_fit = 1 + int(MAX_BEST_FIRST_WORK // max(n_nodes, 1))
    raise SpecroofError(
        f"an optimal tree for budget {n_nodes} and depth {max_depth} grows {deepest} levels deep: the table of every "
        f"depth limit needs ~{work:.1e} node steps, over the limit of {MAX_BEST_FIRST_WORK:.0e}; the largest depth "
        f"that fits at budget {n_nodes} is {d_fit} (or raise roofline.speculation.trees.MAX_BEST_FIRST_WORK)"
    )


def optimal_tree(acceptance: AcceptanceModel | Sequence[float], n_nodes: int, max_depth: int) -> OptimalTree:
    """The tree with at most ``n_nodes`` draft nodes and ``max_depth`` levels maximising expected tokens.

    A :class:`SiblingRankAcceptance` (or a plain vector) uses Sequoia's exact dynamic
    program; Sequoia's (m, l) is (n_nodes + 1, max_depth + 1). Product-form models
    (:class:`IIDAcceptance`, :class:`DepthRankAcceptance`) use best-first growth, which
    is optimal when factors do not increase with rank (children never beat parents).
    """
    n = int(check_min("n_nodes", n_nodes, 0, integer=True))
    d = int(check_min("max_depth", max_depth, 1, integer=True))
    model = acceptance if isinstance(acceptance, AcceptanceModel) else SiblingRankAcceptance(acceptance)
    if isinstance(model, SiblingRankAcceptance):
        # a tree of n nodes is at most n levels deep: limits past n give the same trees, so the program runs to
        # depth n and the table repeats its last column (depth 1000 at 512 nodes costs what depth 512 does)
        dp = max(1, min(d, n))
        T, B, Fb = sequoia_dp(model.p, n + 1, dp + 1)
        table = Fb[1:, 1:].copy()  # Fb = T.max(axis=2)
        table[~np.isfinite(table)] = np.nan
        if d > dp:
            table = np.concatenate([table, np.repeat(table[:, -1:], d - dp, axis=1)], axis=1)

        def build(nn: int, dd: int) -> Tree:
            return _sequoia_tree(T, B, Fb, model.p[: T.shape[2] - 1], nn + 1, min(dd, dp) + 1)

        # the budget is "at most n": more nodes never hurt, but a vector may run out of ranks
        best_n = int(np.nanargmax(table[:, d]))
        return OptimalTree(build(best_n, d), float(table[best_n, d]), table, build)

    # product form: one best-first order per depth limit gives nested optimal trees for every n. Sizes are
    # checked before any work: the table is (n + 1) x (d + 1) floats and each depth limit grows up to n nodes
    # (a tree of n nodes is at most n deep, so limits past n cost nothing more)
    check_best_first_size(n, d)
    table = np.full((n + 1, d + 1), np.nan)
    table[0, :] = 1.0
    orders: dict[int, list[int]] = {}
    # the order under the loosest limit first: a limit at or above its deepest node changes nothing (nodes
    # deeper than the limit are never popped, and skipping their pushes keeps every other node's tiebreak
    # order), so only the limits below it are grown again: IID(0.5) at 5000 nodes is 13 levels deep, not 500
    par_all, dep_all, val_all = _best_first(model, n, d)
    deepest = max(dep_all, default=0)
    check_best_first_work(n, d, deepest)
    for dd in range(1, d + 1):
        if dd >= deepest:
            par, val = par_all, val_all
        else:
            par, _, val = _best_first(model, n, dd)
        orders[min(dd, max(deepest, 1))] = par
        cum = 1.0 + np.cumsum(val)
        table[1 : len(val) + 1, dd] = cum  # beyond len(val) no tree exists (rank/depth limits): NaN
        if dd >= deepest:  # every looser limit: the same column
            table[:, dd + 1 :] = table[:, dd : dd + 1]
            break

    def build_pf(nn: int, dd: int) -> Tree:
        if dd == 0:
            return Tree([])
        return Tree(orders[min(dd, max(deepest, 1))][:nn])

    best_n = int(np.nanargmax(table[:, d]))
    return OptimalTree(build_pf(best_n, d), float(table[best_n, d]), table, build_pf)


#: most candidates (depth x top_k^2) an EAGLE-2 tree ranks: EAGLE-2 itself uses depth 6, top_k 10 (600)
MAX_EAGLE2_CANDIDATES = 1e6


def eagle2_tree(
    propose: Callable[[tuple[int, ...]], Any],
    depth: int,
    top_k: int,
    n_keep: int,
) -> tuple[Tree, Array]:
    """EAGLE-2 style dynamic tree.

    ``propose(path)`` returns the draft's probabilities of the candidate children of
    the node at ``path`` (a tuple of sibling ranks; () is the prefix), best first.
    Each level expands the ``top_k`` children of the ``top_k`` best nodes by
    cumulative log-probability; at the end all candidates are reranked and the best
    ``n_keep`` are kept (ancestors always outrank descendants, so the result is a tree).
    Returns the tree and each node's cumulative probability.
    """
    depth = int(check_min("depth", depth, 1, integer=True))
    top_k = int(check_min("top_k", top_k, 1, integer=True))
    n_keep = int(check_min("n_keep", n_keep, 1, integer=True))
    # each level ranks top_k x top_k candidates and calls propose() top_k times: refused before the first call
    ranked = float(depth) * top_k * top_k
    if ranked > MAX_EAGLE2_CANDIDATES:
        d_fit = int(MAX_EAGLE2_CANDIDATES // (top_k * top_k))
        raise SpecroofError(
            f"an EAGLE-2 tree of depth {depth} and top_k {top_k} ranks {ranked:.1e} candidates, over the limit of "
            f"{MAX_EAGLE2_CANDIDATES:.0e}: the largest depth that fits at top_k {top_k} is {d_fit}"
        )
    nodes: dict[tuple[int, ...], float] = {}
    beams: list[tuple[tuple[int, ...], float]] = [((), 0.0)]
    for _ in range(depth):
        cands: list[tuple[tuple[int, ...], float]] = []
        for path, logp in beams:
            probs = as_array("proposed probabilities", propose(path))
            if np.any(probs < 0) or np.any(probs > 1):
                raise SpecroofError("propose() must return probabilities in [0, 1]")
            for r, pr in enumerate(probs[:top_k]):
                if pr > 0:
                    cands.append(((*path, r), logp + float(np.log(pr))))
        for path, lp in cands:
            nodes[path] = lp
        beams = sorted(cands, key=lambda t: -t[1])[:top_k]
    # rerank: ties prefer shorter paths so parents precede children
    kept = sorted(nodes.items(), key=lambda t: (-t[1], len(t[0])))[:n_keep]
    kept_paths = {p for p, _ in kept}
    kept = [(p, lp) for p, lp in kept if all(p[:i] in kept_paths for i in range(1, len(p)))]
    # renumber sibling ranks to be contiguous among kept children
    tree = _tree_from_ranked_paths([p for p, _ in kept])
    order = {p: lp for p, lp in kept}
    probs = np.exp([order[p] for p in _original_paths(kept)])
    return tree, probs


@dataclass(frozen=True)
class DDTree:
    """A DDTree draft: the tree, the token each node proposes, and the expected tokens per round."""

    tree: Tree
    tokens: IntArray
    expected_tokens: float
    path_probabilities: Array


def ddtree(marginals: Any, n_nodes: int, top_k: int | None = None) -> DDTree:
    """DDTree: a block drafter's per-depth marginals grown best-first into a draft tree.

    A block (parallel) drafter (DFlash-style; priced by ``roofline.speculation.speculative.ParallelBlock``:
    one pass drafts every depth) outputs, for each of D positions, a distribution over the
    vocabulary that does not depend on the tokens before it: ``marginals`` is (D, V). The
    node for the rank-r token at depth d is worth the product of the marginals along its
    path; growing the tree best-first from those values (a :class:`DepthRankAcceptance`
    over the sorted marginals) gives the tree of ``n_nodes`` nodes with the largest
    expected accepted length, taking the draft's probabilities as the chance its tokens
    are right. ``top_k`` limits the candidates per depth (default: all).
    """
    q = check_range("marginals", marginals, 0.0, 1.0)
    if q.ndim != 2 or q.shape[0] < 1 or q.shape[1] < 1:
        raise SpecroofError("marginals must be (depth, vocabulary): one distribution per drafted position")
    if np.any(q.sum(axis=1) > 1.0 + 1e-6):
        raise SpecroofError("each depth's marginal must sum to at most 1")
    order = np.argsort(-q, axis=1, kind="stable")[:, : top_k or q.shape[1]]  # token ids, best first
    table = np.take_along_axis(q, order, axis=1)
    model = DepthRankAcceptance(table)
    opt = optimal_tree(model, n_nodes, q.shape[0])
    t = opt.tree
    tokens = order[t.depths - 1, t.ranks] if t.n_nodes else np.zeros(0, dtype=np.int64)
    return DDTree(t, tokens.astype(np.int64), opt.expected_tokens, t.path_probabilities(model))


def _original_paths(kept: list[tuple[tuple[int, ...], float]]) -> list[tuple[int, ...]]:
    return sorted((p for p, _ in kept), key=lambda t: (len(t), t))


def _tree_from_ranked_paths(paths: list[tuple[int, ...]]) -> Tree:
    ordered = sorted(paths, key=lambda t: (len(t), t))
    index: dict[tuple[int, ...], int] = {}
    parents = []
    for p in ordered:
        parents.append(-1 if len(p) == 1 else index[p[:-1]])
        index[p] = len(parents) - 1
    return Tree(parents)

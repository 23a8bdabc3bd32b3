"""Acceptance read as it was measured, and carried past the measured draft length by a per-position decay taken
from published per-position counters of the same drafter class (docs/cost-model.md, section 50.1).

A mean accepted length is one number about one drafting shape: a chain of G drafts (``mean:3@3``), or the engine's
own default shape when no ``@`` is written (:func:`engine_reading`). Within the G measured positions the curve
reproduces the mean exactly; past G the conditional rate follows the class's decay factors
(:func:`decay_factors`), never a constant i.i.d. rate, and every gamma past G is *extrapolated*.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from roofline.core.errors import SpecroofError

Array = npt.NDArray[np.float64]

#: the published per-position records (one [[run]] per published run), beside the other published figures
DATA = Path(__file__).resolve().parents[2] / "published" / "acceptance" / "per_position.toml"

#: which records speak for a drafter of the grammar (its name before any ':'); a class with none takes the pool
CLASS_OF = {"eagle": "eagle3", "eagle1": "eagle3", "eagle2": "eagle3", "eagle3": "eagle3", "mtp": "mtp",
            "block": "block"}  # fmt: skip

#: vLLM drafts a chain of ``num_speculative_tokens`` and has no default for EAGLE or a draft model (its
#: SpeculativeConfig requires the number unless the draft config carries n_predict): a bare mean under vLLM is read
#: at the length vLLM's own acceptance-length test measures EAGLE-3 at (tests/v1/spec_decode/test_acceptance_length.py)
VLLM_READING_GAMMA = 3


@dataclass(frozen=True)
class Run:
    """One published per-position record: the unconditional share of rounds whose first i drafts were accepted."""

    cls: str
    target: str
    unconditional: tuple[float, ...]
    source: str

    @property
    def conditional(self) -> Array:
        u = np.asarray(self.unconditional, dtype=float)
        prev = np.concatenate([[1.0], u[:-1]])
        return np.divide(u, prev, out=np.zeros_like(u), where=prev > 0)


@lru_cache(maxsize=1)
def runs() -> tuple[Run, ...]:
    """Every record of the data file, checked (shares in [0, 1], not increasing)."""
    data = tomllib.loads(DATA.read_text())
    out = []
    for r in data.get("run", []):
        u = np.asarray(r["unconditional"], dtype=float)
        if u.ndim != 1 or u.size == 0 or np.any((u < 0) | (u > 1)) or np.any(np.diff(u) > 0):
            raise SpecroofError(f"{DATA.name}: run {r.get('source', '?')!r} is not a non-increasing list in [0, 1]")
        out.append(Run(str(r["class"]), str(r["target"]), tuple(float(x) for x in u), str(r["source"])))
    return tuple(out)


def class_runs(kind: str) -> tuple[str, tuple[Run, ...]]:
    """The records a drafter kind is priced with, and the class they speak for ('all' when pooled)."""
    cls = CLASS_OF.get(kind.split(":", 1)[0].strip().lower())
    own = tuple(r for r in runs() if r.cls == cls)
    return (cls, own) if cls and own else ("all", runs())


def decay_factors(kind: str, n: int) -> Array:
    """F_1..F_{n-1}: the factor from position i's conditional rate to position i + 1's (section 50.1).

    Per step, the geometric mean over the class's runs that reach it of c_{i+1} / c_i, capped at 1 (a rise seen in
    one published run is not carried to another pair); past the last step any run reaches, the last factor repeats.
    """
    _, rs = class_runs(kind)
    steps: list[float] = []
    depth = max(len(r.unconditional) for r in rs)
    for i in range(depth - 1):
        ratios = [
            r.conditional[i + 1] / r.conditional[i] for r in rs if len(r.unconditional) > i + 1 and r.conditional[i] > 0
        ]
        ratios = [x for x in ratios if x > 0]
        if ratios:
            steps.append(min(1.0, float(np.exp(np.mean(np.log(ratios))))))
    if not steps:
        steps = [1.0]
    out = np.ones(max(0, n - 1))
    for i in range(out.size):
        out[i] = steps[min(i, len(steps) - 1)]
    return out


def _curve(level: float, factors: Array, n: int) -> Array:
    shape = np.concatenate([[1.0], np.cumprod(factors[: n - 1])]) if n > 1 else np.ones(1)
    return np.minimum(1.0, level * shape[:n])


def _tokens(curve: Array) -> float:
    return 1.0 + float(np.sum(np.cumprod(curve)))


@dataclass(frozen=True)
class MeasuredCurve:
    """A mean accepted length measured on a chain of ``measured_at`` drafts, as a conditional curve of ``length``
    positions: exact at ``measured_at``, past it the class's decay (section 50.1)."""

    mean: float
    measured_at: int
    kind: str
    length: int

    def __post_init__(self) -> None:
        if self.measured_at < 1 or self.length < 1:
            raise SpecroofError("a measured mean needs at least one draft position")
        if not 1.0 <= self.mean <= self.measured_at + 1:
            raise SpecroofError(
                f"mean accepted length {self.mean:g} is outside [1, {self.measured_at + 1}] for {self.measured_at} "
                "drafts per round (tokens per round count the bonus token)"
            )

    def curve(self) -> Array:
        """The conditional rates a_1..a_length (bisection on the level that reproduces the mean at measured_at)."""
        n = max(self.length, self.measured_at)
        f = decay_factors(self.kind, n)
        lo, hi = 0.0, 1.0 / float(np.min(np.concatenate([[1.0], np.cumprod(f)]))) + 1.0
        for _ in range(80):  # E rises monotonically with the level, from 1 to measured_at + 1
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if _tokens(_curve(mid, f, self.measured_at)) < self.mean else (lo, mid)
        return _curve((lo + hi) / 2, f, n)[: self.length]

    def source(self) -> str:
        cls, rs = class_runs(self.kind)
        who = (
            f"{len(rs)} published {cls} runs"
            if cls != "all"
            else f"all {len(rs)} published runs (no {self.kind} record)"
        )
        return f"per-position decay from {who} ({DATA.name})"


def engine_family(engine: str | None, emit: str | None = None) -> str | None:
    """'vllm', 'sglang' or 'trtllm' when the pricing engine or --emit names one, else None."""
    for name in (emit, engine):
        n = str(name or "").lower()
        if n.endswith(".toml"):  # a profile given as its file: the family of the engine it names
            from roofline.costing.engine import load_engine

            profile = load_engine(str(name))
            n = profile.name.lower() if profile is not None else n
        for fam in ("vllm", "sglang", "trtllm"):
            if n.startswith(fam):
                return fam
    return None


#: what each engine drafts when a mean is given without its shape, as a sentence
ENGINE_READING = {
    "vllm": f"vLLM's chain of num_speculative_tokens={VLLM_READING_GAMMA} (vLLM has no default for EAGLE or a draft "
    f"model; {VLLM_READING_GAMMA} is the length its own acceptance-length test measures at)",
}


def reading_gamma(kind: str, family: str | None) -> int | None:
    """The chain length a bare mean is read at under ``family``: vLLM's reading length; None where the engine's own
    default shape is a tree (SGLang, and the engine-neutral default: SGLang's EAGLE tree for tree drafters)."""
    if family == "vllm":
        return VLLM_READING_GAMMA
    return None


def extrapolation_note(gamma: int, measured_at: int, engine: str | None) -> str | None:
    """The sentence a recommendation past the measured length opens with; None within it or one position past it."""
    if gamma <= measured_at + 1:
        return None
    flag = {"vllm": f'"num_speculative_tokens": {gamma}', "sglang": f"--speculative-num-steps {gamma}",
            "trtllm": f"max_draft_len: {gamma}"}.get(engine or "", f"gamma {gamma}")  # fmt: skip
    return (
        f"extrapolated: gamma {gamma} is {gamma - measured_at} positions past the {measured_at} measured; measure "
        f"there ({flag}) before deploying it"
    )


def describe(mc: MeasuredCurve, given: str, shape: str) -> str:
    """One line: what was given, the shape it is read under, and the curve it becomes."""
    c = mc.curve()
    head = ", ".join(f"{x:.3f}" for x in c[: min(len(c), mc.measured_at + 2)])
    return (
        f"given {given}, read as measured on {shape}: conditional per-position rates {head}{' ...' if len(c) > mc.measured_at + 2 else ''} "
        f"(exact at {mc.measured_at}; past it {mc.source()}, marked extrapolated)"
    )


def as_json(mc: MeasuredCurve) -> dict[str, Any]:
    return {"mean": mc.mean, "measured_at": mc.measured_at, "kind": mc.kind, "curve": [float(x) for x in mc.curve()]}


#: drafters whose mean, given without its shape and under no chain engine, is read on SGLang's default EAGLE tree
TREE_KINDS = ("eagle", "eagle1", "eagle2", "eagle3", "mtp")


def measured_length(key: str, acc: Any, family: str | None) -> int | None:
    """The draft positions an acceptance was measured over (None: a rate that states every position itself)."""
    kind = getattr(acc, "kind", "")
    if kind == "mean":
        if getattr(acc, "tree", False):  # mean:X@tree: SGLang's default EAGLE tree, whatever the engine
            from roofline.speculation.engine_trees import SGLANG_DEFAULT

            return int(SGLANG_DEFAULT.num_steps)
        if acc.gamma is not None:
            return int(acc.gamma)
        if acc.depth is not None:
            return int(acc.depth)
        g = reading_gamma(key, family)
        if g is not None:
            return g
        if key.split(":", 1)[0] in TREE_KINDS:
            from roofline.speculation.engine_trees import SGLANG_DEFAULT

            return int(SGLANG_DEFAULT.num_steps)
        return None
    if kind == "vllm-rate":
        return int(acc.num_speculative_tokens)
    if kind in ("curve", "counts"):
        return int(acc.length)
    return None


def read_for_plan(key: str, acc: Any, family: str | None, max_gamma: int = 16) -> tuple[Any, str] | None:
    """A chain measurement (``mean:X@G``, a bare mean under a chain engine, ``vllm-rate:R@K``) as the per-position
    curve the planner prices, and the sentence saying so; None for every other acceptance (read as before)."""
    kind = getattr(acc, "kind", "")
    name = key.split(":", 1)[0].strip().lower()
    if kind == "vllm-rate":
        g, mean, given = int(acc.num_speculative_tokens), float(acc.tokens_per_round()), acc.given()
        shape = f"a chain of {g} (num_speculative_tokens={g})"
    elif (
        kind == "mean"
        and acc.depth is None
        and not getattr(acc, "tree", False)  # mean:X@tree is read on the tree it names (the caller's tree branch)
        and (acc.gamma is not None or reading_gamma(name, family) is not None)
    ):
        g = int(acc.gamma) if acc.gamma is not None else int(reading_gamma(name, family) or 1)
        mean, given = float(acc.mean), f"mean accepted length {acc.mean:g} tokens per round"
        if acc.gamma is None:
            shape = ENGINE_READING.get(family or "", f"a chain of {g}")
        elif family == "vllm" and g == VLLM_READING_GAMMA:
            shape = f"{ENGINE_READING['vllm']}, as @{g} says"
        else:
            shape = f"a chain of {g} drafts"
    else:
        return None
    mc = MeasuredCurve(mean, g, name, max(int(max_gamma), g))
    return [float(x) for x in mc.curve()], f"{key}: {describe(mc, given, shape)}"

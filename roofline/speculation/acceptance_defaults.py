"""Each drafter class's default acceptance from a published measurement on a matched pair: the same drafter class on
a target of the same family and size class (published/acceptance/defaults.toml; docs/cost-model.md, section 50.2).

No default is borrowed across families or sizes: where no record matches, :func:`matched_default` returns None and the
plan answers with its speedup over a range of acceptance and the break-even point (:data:`CURVE_ALPHAS`).
"""

from __future__ import annotations

import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from roofline.core.errors import SpecroofError

DATA = Path(__file__).resolve().parents[2] / "published" / "acceptance" / "defaults.toml"

#: the per-token rates a plan without a matched default is answered over (its speedup curve and break-even point)
CURVE_ALPHAS = (0.3, 0.4, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95)


#: the relative speedup within which two settings are one answer (the error bands' resolution, docs/cost-model.md,
#: section 50.3): plan recommends the cheaper of two within it, and speculation pays only by more than it
RESOLUTION = 0.02


def pays(speedup: float) -> bool:
    """Whether a speedup is speculation paying: above plain decoding by more than :data:`RESOLUTION` (1.01x is the
    same answer as plain decoding, which plan would recommend instead)."""
    return bool(speedup > 1.0 + RESOLUTION)


def break_even(alphas: Sequence[float], pays: Sequence[bool]) -> float | None:
    """The break-even rate of a curve over acceptance: the lowest rate of the grid from which speculation pays at it
    and at every higher rate (None when it does not pay at the highest). One rule for every command that answers
    over acceptance (plan, serve)."""
    found = None
    for a, p in sorted(zip(alphas, pays, strict=True), reverse=True):
        if not p:
            break
        found = float(a)
    return found


def break_even_words(found: float | None, rate: str = "per-token rate") -> str:
    """The break-even rate in words, the same in every command: where it pays across the whole range, it says so
    rather than naming the range's lowest rate as if it were the break-even point."""
    if found is None:
        return "does not pay at any rate of the range"
    if found <= min(CURVE_ALPHAS):
        return f"pays at every {rate} of the range, from {found:g}"
    return f"pays from a {rate} of {found:g}"


class NoMatchedDefault(SpecroofError):
    """No published measurement of this drafter class on this target's family and size class."""


@dataclass(frozen=True)
class Pair:
    drafter: str
    family: str
    params_b: tuple[float, float]
    value: str
    measured: str
    source: str
    url: str

    def sentence(self) -> str:
        return f"{self.value} from {self.measured} ({self.source}, {self.url})"


@lru_cache(maxsize=1)
def pairs() -> tuple[Pair, ...]:
    data = tomllib.loads(DATA.read_text())
    return tuple(
        Pair(
            str(p["drafter"]),
            str(p["family"]),
            (float(p["params_b"][0]), float(p["params_b"][1])),
            str(p["value"]),
            str(p["measured"]),
            str(p["source"]),
            str(p.get("url", "")),
        )  # fmt: skip
        for p in data.get("pair", [])
    )


def _kind(drafter: str) -> str:
    k = drafter.split(":", 1)[0].strip().lower()
    return "eagle" if k == "eagle1" else k


def matched_default(drafter: str, target: Any) -> Pair | None:
    """The published record for ``drafter``'s class on ``target``'s family and size class, or None."""
    from roofline.passes.model import get_model

    spec = get_model(target)
    name = str(spec.name).lower()
    size = float(spec.total_params) / 1e9
    for p in pairs():
        if p.drafter == _kind(drafter) and name.startswith(p.family) and p.params_b[0] <= size < p.params_b[1]:
            return p
    return None


def no_match_sentence(drafter: str, target: Any) -> str:
    from roofline.passes.model import get_model

    spec = get_model(target)
    return (
        f"no published acceptance of {_kind(drafter)} drafting on a target of {spec.name}'s family and size class "
        f"({spec.total_params / 1e9:.0f}B; {DATA.name} lists the matched pairs)"
    )

"""Engine profiles measured on the user's own machine (``specroof measure engine``): their ``[measured]`` block.

A fitted engine profile is an ordinary engine TOML (``roofline.costing.engine.engine_data``'s
layout) plus a ``[measured]`` block that says where its numbers come from: the framework
and its version, torch, the device and the host CPU that launched the work, the date, the
command, and the hardware profile the fit priced the passes with. Host cost belongs to the
framework, its version and the CPU that launches, so the profile is only as good as the
match between that machine and the one it prices: pricing it through another hardware
profile than the one it was fitted against is refused, naming both.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from roofline.core.errors import SpecroofError
from roofline.costing.engine import MEASURED_FRAMEWORKS, MEASURED_REQUIRED, Engine, check_measured, engine_from_dict
from roofline.costing.hardware import Hardware

#: what every ``[measured]`` block must say, and the frameworks it may name (defined with the engine's own layout)
REQUIRED, FRAMEWORKS = MEASURED_REQUIRED, MEASURED_FRAMEWORKS


@dataclass(frozen=True)
class MeasuredEngine:
    """An engine fitted on this machine and its provenance (``[measured]``: strings and figures)."""

    engine: Engine
    measured: Mapping[str, Any] = field(default_factory=dict)

    @property
    def hardware(self) -> str:
        return str(self.measured["hardware"])

    def check_hardware(self, hw: Hardware) -> None:
        """Refuse pricing through a hardware profile other than the one the engine was fitted against."""
        names = {hw.id, hw.name, *(hw.aliases or ())}
        if hw.path:
            names |= {hw.path, Path(hw.path).name, Path(hw.path).stem}
        want = self.hardware
        if want not in names and Path(want).name not in names and Path(want).stem not in names:
            raise SpecroofError(
                f"engine {self.engine.name!r} was measured on {self.measured['device']} and fitted against hardware "
                f"{want!r}: price it with --hardware {want} (got {hw.id!r})"
            )


def split_measured(data: Mapping[str, Any], where: str) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """(the engine's own tables, the validated ``[measured]`` block or None) of a parsed engine TOML."""
    rest = {k: v for k, v in data.items() if k != "measured"}
    return rest, check_measured(data["measured"], where) if "measured" in data else None


def measured_engine_from_dict(data: Mapping[str, Any], where: str = "engine") -> MeasuredEngine:
    """A :class:`MeasuredEngine` from a parsed TOML: the engine tables and a required ``[measured]`` block."""
    rest, measured = split_measured(data, where)
    if measured is None:
        raise SpecroofError(f"{where}: a measured engine profile needs a [measured] block ({', '.join(REQUIRED)})")
    return MeasuredEngine(engine_from_dict(data, where), measured)


def load_measured_engine(path: str | Path) -> MeasuredEngine:
    """Read and validate an engine profile written by ``specroof measure engine``."""
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise SpecroofError(f"cannot read engine profile {p}: {e}") from None
    return measured_engine_from_dict(data, str(p))

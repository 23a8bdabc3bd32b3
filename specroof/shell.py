"""What every command shares: argument types that refuse bad input in one line, the common flags, and printing.

Kept apart from ``specroof.cli`` so that command modules (``specroof.commands.*``, ``specroof.measure_cli``) import
it without importing the parser that registers them.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from roofline.core.errors import SpecroofError
from roofline.core.jsonio import dumps

#: the largest integer a list flag takes, and the most values it expands to (a sweep beyond is a typo)
INT_MAX = 10**7
LIST_MAX = 100_000


def int_list(text: str) -> list[int]:
    """Parse ``'1,4,16'`` or ``'1-64'`` (inclusive range) into integers."""
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        try:
            if "-" in part[1:]:
                a, b = (int(x) for x in part.split("-", 1))
                if b < a:
                    raise argparse.ArgumentTypeError(f"empty range {part!r}: write low-high, e.g. '1-64'")
                if b - a + 1 > LIST_MAX:
                    raise argparse.ArgumentTypeError(f"range {part!r} has over {LIST_MAX} values")
                out.extend(range(a, b + 1))
            else:
                out.append(int(part))
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected integers like '1,4,16' or '1-64', got {text!r}") from None
    if any(abs(v) > INT_MAX for v in out):
        raise argparse.ArgumentTypeError(f"values must lie within +-{INT_MAX:.0e} (got {text!r})")
    return out


def bounded_int(lo: int, hi: int) -> Callable[[str], int]:
    """An argparse type: an integer in [lo, hi], else a message naming the range."""

    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"must lie in [{lo}, {hi}] (got {v})")
        return v

    return parse


def bounded_int_list(lo: int, hi: int) -> Callable[[str], list[int]]:
    """An argparse type: one integer or a list/range of them (``1,4,16``, ``1-64``), each in [lo, hi]."""
    one = bounded_int(lo, hi)

    def parse(text: str) -> list[int]:
        if "," not in text and "-" not in text.strip()[1:]:
            return [one(text)]
        values = int_list(text)
        for v in values:
            one(str(v))
        return values

    return parse


class _FlatList(argparse.Action):
    """``--batch 1,8,64`` and ``--batch 1 8 64`` alike: every value parsed by the list type, flattened."""

    def __call__(self, parser: Any, namespace: argparse.Namespace, values: Any, option_string: Any = None) -> None:
        setattr(namespace, self.dest, [v for part in values for v in part])
        namespace.given = {*getattr(namespace, "given", ()), self.dest}  # as GivenStore: a list given is a value


def add_int_list(p: argparse.ArgumentParser, flag: str, lo: int, hi: int, default: list[int], help: str) -> None:
    """A list flag that takes ``1,8,64``, ``1 8 64`` or a range ``1-64``, each value in [lo, hi]."""
    add_list_flag(p, flag, default, help, bounded_int_list(lo, hi))


def add_list_flag(
    p: argparse.ArgumentParser,
    flag: str,
    default: list[Any] | None,
    help: str,
    parse: Callable[[str], list[Any]] = int_list,
    default_text: str | None = None,
    forms: str = "1,8,64 or 1 8 64 or a range 1-64",
) -> None:
    """A list flag, ``1,8,64``, ``1 8 64`` or ``1-64`` alike (the ``forms`` its help shows), each word parsed by
    ``parse`` (the values' ranges checked there or by the command); ``default_text`` says what None means."""
    shown = default_text if default is None else ",".join(map(str, default))
    p.add_argument(
        flag,
        nargs="+",
        type=parse,
        action=_FlatList,
        default=default,
        metavar="N",
        help=f"{help}: {forms} (default {shown})",
    )


def finite_float(text: str) -> float:
    """An argparse type: a finite number (no nan/inf)."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not np.isfinite(v):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return v


def plot_path(text: str) -> str:
    """An argparse type: a PNG/SVG/PDF file whose folder exists and is writable."""
    p = Path(text)
    if p.suffix.lower() not in (".png", ".svg", ".pdf"):
        raise argparse.ArgumentTypeError(f"a plot is written as .png, .svg or .pdf (got {text!r})")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise argparse.ArgumentTypeError(f"folder {str(parent)!r} does not exist")
    if p.is_dir() or not os.access(parent, os.W_OK):
        raise argparse.ArgumentTypeError(f"cannot write {text!r}")
    return text


def float_list(text: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers like '0.6,0.8', got {text!r}") from None


#: pandas' text for a table without rows ("Empty DataFrame", its columns, "Index: []"): never shown as it is
_EMPTY_FRAME = re.compile(r"Empty DataFrame\nColumns: \[.*?\]\nIndex: \[\]", re.DOTALL)
NO_ROWS = "no rows to show: nothing was left to tabulate (the lines above say what was dropped or filtered out)"


def frame_text(df: pd.DataFrame, empty: str = NO_ROWS, **to_string: Any) -> str:
    """``df`` as a text table without its index, or the sentence ``empty`` when it has no rows."""
    if df.empty:
        return empty
    return str(df.to_string(**({"index": False} | to_string)))


def emit(args: argparse.Namespace, payload: Any, table: pd.DataFrame | str) -> None:
    """Print ``payload`` as JSON with ``--json``, else the readable ``table``.

    A table with no rows is a sentence, never pandas' raw "Empty DataFrame": a command that joined
    ``df.to_string()`` into its text gets the sentence here too.
    """
    if getattr(args, "json", False):
        print(dumps(payload))
    else:
        text = table if isinstance(table, str) else frame_text(table)
        print(_EMPTY_FRAME.sub(NO_ROWS, text))


def _note(args: argparse.Namespace, message: str) -> None:
    """A progress line on stderr (kept off stdout so --json stays parseable)."""
    print(message, file=sys.stderr, flush=True)


class GivenStore(argparse.Action):
    """``store``, and a note in ``args.given`` that the flag was on the command line: an ``--engine-config`` fills
    only the flags left out, and refuses one given with another value (a default is not a value given)."""

    def __call__(self, parser: Any, namespace: argparse.Namespace, values: Any, option_string: Any = None) -> None:
        setattr(namespace, self.dest, values)
        namespace.given = {*getattr(namespace, "given", ()), self.dest}


def was_given(args: argparse.Namespace, dest: str) -> bool:
    """Whether ``--dest`` was on the command line (a :class:`GivenStore` flag), not just its default."""
    return dest in getattr(args, "given", ())


def _add_offload(p: argparse.ArgumentParser) -> None:
    from roofline.costing.hardware import HOST_LINKS

    p.add_argument(
        "--offload",
        choices=list(HOST_LINKS),
        help="the target's weights live in host memory and stream over this link every pass (Sequoia's regime)",
    )


def _add_json(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


#: the engine every command that recommends prices under unless told otherwise (``--engine``; ``--engine none`` is
#: the datasheet roofline), and why: the answer a deployment needs is the one its software reaches
DEFAULT_ENGINE = "serving"
DEFAULT_ENGINE_WHY = (
    "the way deployments run a model (vLLM, SGLang, TensorRT-LLM: CUDA graphs for decode, fused attention "
    "over a paged KV cache, speculative rounds on the device)"
)
#: what ``--engine`` takes for the datasheet roofline (no engine)
NO_ENGINE = ("none", "roofline")


def engine_arg(text: str) -> str | None:
    """An engine name or TOML path, checked now so a typo is one line (argparse type); ``none`` is no engine."""
    from roofline.costing.engine import load_engine

    if text.strip().lower() in NO_ENGINE:
        return None
    try:
        load_engine(text)
        _has_device_table(text)
    except SpecroofError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def _has_device_table(text: str) -> None:
    """A user's engine file must say what the device does: without a [device] table every fraction would silently
    be the datasheet's (an engine that adds nothing), which is the datasheet roofline under an engine's name. A file
    that extends or aliases a shipped engine takes its [device] table from it."""
    import tomllib

    from roofline.costing.engine import list_engines

    p = Path(text)
    if text in list_engines() or not p.is_file():
        return
    try:
        data = tomllib.loads(p.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise SpecroofError(f"cannot read engine profile {text}: {e}") from None
    if "alias_of" not in data and "extends" not in data and not isinstance(data.get("device"), dict):
        raise SpecroofError(
            f"engine profile {text} has no [device] table (bandwidth_fraction, compute_fraction, pass_us, layer_us, "
            "...): see engine_profiles/compiled.toml for one"
        )


def _add_engine(p: argparse.ArgumentParser, default: str | None = DEFAULT_ENGINE) -> None:
    """``--engine`` (default ``serving``: every command that recommends prices as deployments run; ``roofline``
    passes ``None``, the datasheet roofline first) and ``--host-launch-us``."""
    from roofline.costing.engine import list_engines

    said = f"default {default}: {DEFAULT_ENGINE_WHY}" if default else "default: the datasheet roofline, no engine"
    p.add_argument(
        "--engine",
        type=engine_arg,
        action=GivenStore,
        default=default,
        help=f"price passes as this software runs them: {', '.join(list_engines())}, a TOML path, or none (the "
        f"datasheet roofline) ({said})",
    )
    p.add_argument(
        "--host-launch-us",
        type=finite_float,
        default=None,
        help="with an eager engine (hf, torch-eager): one kernel's host cost on your machine, in microseconds "
        "(measure bench's dispatch figure; default: the profile's measured one)",
    )


def engine_of(args: argparse.Namespace) -> Any:
    """The engine the flags ask for: ``--engine``, with ``--host-launch-us`` applied when it is given."""
    from roofline.costing.engine import load_engine

    engine = getattr(args, "engine", None)
    us = getattr(args, "host_launch_us", None)
    if us is None:
        return engine
    if not engine:
        raise SpecroofError(
            "--host-launch-us prices an eager engine's kernels: give --engine hf or --engine torch-eager"
        )
    eng = load_engine(engine)
    assert eng is not None
    return eng.with_host_launch(us)


def pricing_from_args(args: argparse.Namespace, hardware: Any = None) -> Any:
    """The one Pricing a command's flags describe (hardware, --engine, --dtype, --weight-dtype, --kv-dtype, --tp,
    --offload), resolved once; ``hardware`` overrides ``args.hardware`` (commands that take several GPUs)."""
    from roofline.costing.pricing import Pricing

    return Pricing.of(
        args.hardware if hardware is None else hardware,
        engine=engine_of(args),
        dtype=getattr(args, "dtype", None),
        weight_dtype=getattr(args, "weight_dtype", None),
        kv_dtype=getattr(args, "kv_dtype", None),
        tp=getattr(args, "tp", None),
        offload=getattr(args, "offload", None),
    )


def number(v: float) -> str:
    """A figure for a table: 3 significant digits, thousands written out (2,040, never 2.04e+03)."""
    if not np.isfinite(v):
        return ""
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if v == 0 or abs(v) >= 1e-3:
        return f"{v:.3g}"
    return f"{v:.1e}"


def percent(v: float, signed: bool = True) -> str:
    """A fraction as a whole percentage; one that rounds to zero is 0% (never -0%)."""
    if not np.isfinite(v):
        return ""
    r = int(round(100 * float(v)))
    if r == 0:
        return "0%"
    return f"{r:+d}%" if signed else f"{r:d}%"

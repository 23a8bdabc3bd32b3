"""``specroof acceptance import|show``: acceptance in the units people have, converted to the ones we price.

``import FILE --format vllm|sglang|spec-bench`` reads a serving stack's or benchmark's
metrics (:mod:`roofline.speculation.importers`), prints what it found and what that converts to, and
with ``--out`` writes a JSON file ``plan --acceptance KEY=FILE`` (and ``--acceptance-curve``)
read. ``show VALUE`` explains one ``--acceptance`` value (``0.7``, ``mean:3.2@5``,
``vllm-rate:0.7@5``, a file) per speculation length.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

import pandas as pd

from roofline.core.errors import SpecroofError
from roofline.core.jsonio import dumps
from roofline.speculation.acceptance import GRAMMAR, Acceptance, parse_acceptance, unconditional_from_conditional
from roofline.speculation.importers import FORMATS, import_file

#: the longest speculation length a table lists
MAX_GAMMA = 64


def _positive(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}") from None
    if not 1 <= v <= 4096:
        raise argparse.ArgumentTypeError(f"must lie in [1, 4096] (got {v})")
    return v


def positions_table(acc: Acceptance, gamma: int | None = None) -> pd.DataFrame:
    """Per position: the conditional rate, P(accepted), and tokens per round with that many drafts (tidy)."""
    g = gamma or acc.length
    if not g:
        return pd.DataFrame()
    g = min(int(g), MAX_GAMMA)
    cond = acc.curve(g)
    return pd.DataFrame(
        {
            "position": range(1, g + 1),
            "conditional_rate": cond,
            "unconditional_rate": unconditional_from_conditional(cond),
            "tokens_per_round": [acc.tokens_per_round(i) for i in range(1, g + 1)],
            "draft_acceptance_rate": [acc.draft_acceptance_rate(i) for i in range(1, g + 1)],
        }
    )


def _print(args: argparse.Namespace, acc: Acceptance, table: pd.DataFrame, notes: list[str]) -> None:
    if args.json:
        print(dumps(acc.to_json() | ({"table": table.to_dict(orient="records")} if not table.empty else {})))
        return
    lines = [acc.describe()]
    if not table.empty:
        lines += ["", table.round(4).to_string(index=False)]
    print("\n".join(lines + notes))


def _check_out(path: str) -> Path:
    """The acceptance file's path, refused before anything is read: a folder, a missing or unwritable folder."""
    p = Path(path)
    if p.is_dir():
        raise SpecroofError(f"--out {path!r} is a folder: give a file name such as curve.json")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise SpecroofError(f"--out {path!r}: the folder {str(parent)!r} does not exist")
    if not os.access(parent, os.W_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise SpecroofError(f"--out {path!r}: cannot write there (permission denied)")
    return p


def _write(path: str, acc: Acceptance) -> str:
    p = _check_out(path)
    p.write_text(dumps(acc.to_json()) + "\n")
    return str(p)


def cmd_import(args: argparse.Namespace) -> int:
    """Import one metrics file; print it and optionally write the acceptance file ``plan`` reads."""
    if args.out:
        _check_out(args.out)
    acc = import_file(
        args.file, args.format, gamma=args.gamma, depth=args.depth, model=args.model, category=args.category
    )
    notes = []
    if args.out:
        written = _write(args.out, acc)
        use = (
            f"plan --acceptance KEY={written}" if acc.length else f"speedup --mean-accepted {acc.tokens_per_round():g}"
        )
        notes.append(f"\nwrote {written} ({use})")
    _print(args, acc, positions_table(acc), notes)
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    """What one acceptance value means at each speculation length."""
    acc = parse_acceptance(args.value, gamma=args.gamma)
    table = (
        positions_table(acc, args.gamma or acc.length or 8) if (acc.length or acc.kind != "mean") else pd.DataFrame()
    )
    _print(args, acc, table, [])
    return 0


def add_parser(sub: Any) -> None:
    """Register ``specroof acceptance import|show`` on the CLI's subcommands."""
    p = sub.add_parser("acceptance", help="acceptance in every unit: import vLLM/SGLang/Spec-Bench metrics, convert")
    asub = p.add_subparsers(dest="acceptance_command", required=True, parser_class=type(p))
    imp = asub.add_parser(
        "import",
        help="read vLLM's /metrics or log, SGLang's log or Spec-Bench's answers JSONL into an acceptance file",
    )
    imp.add_argument("file", help="the metrics file")
    imp.add_argument("--format", required=True, choices=FORMATS, help="who wrote it")
    imp.add_argument(
        "--gamma", type=_positive, help="speculative tokens per round it ran with (when the file does not say)"
    )
    imp.add_argument(
        "--depth", type=_positive, help="SGLang: depth of the tree it ran with (when the log does not say)"
    )
    imp.add_argument("--model", help="vLLM: the model_name label to read when the metrics hold several")
    imp.add_argument("--category", help="Spec-Bench: only this question category (e.g. mt_bench, math_reasoning)")
    imp.add_argument("--out", help="write the acceptance (with its conditional 'curve') to this JSON file")
    imp.add_argument("--json", action="store_true", help="print JSON")
    imp.set_defaults(func=cmd_import)
    show = asub.add_parser("show", help=f"what one acceptance value means per speculation length: {GRAMMAR}")
    show.add_argument("value", help=GRAMMAR)
    show.add_argument("--gamma", type=_positive, help="speculation length (a bare mean: was measured at this gamma)")
    show.add_argument("--json", action="store_true", help="print JSON")
    show.set_defaults(func=cmd_show)

"""``specroof validate published``: predictions against published measurements, and the error bands."""

from __future__ import annotations

import argparse
from typing import Any

from roofline.errors import SpecroofError
from specroof.shell import (
    _add_json,
    emit,
    number,
    percent,
    plot_path,
)


def cmd_validate_published(args: argparse.Namespace) -> int:
    from roofline.published import calibrate, error_summary, validation_table, write_fitted

    if args.write and not args.fit:
        raise SpecroofError("--write writes a fitted engine: give --fit ENGINE")
    engines = {}
    lines = []
    if args.fit:
        fitted, _ = calibrate(args.fit)
        engines[fitted.name] = fitted
        lines.append(f"fitted {fitted.name} on its calibration rows:")
        lines += [f"  {k} = {v:.6g}" for k, v in _engine_params(fitted).items()]
        if args.write:
            for path in write_fitted(fitted):
                lines.append(f"  wrote {path}")
    table = validation_table(engines=engines)
    if args.use != "all":
        table = table[table["use"] == args.use]
    summary = error_summary(table)
    if args.plot:
        from roofline.plot import published_scatter

        published_scatter(table).savefig(args.plot, dpi=120)
    payload = {
        "rows": table.to_dict(orient="records"),
        "summary": summary.to_dict(orient="records"),
        **({"fitted": _engine_params(engines[args.fit])} if args.fit else {}),
    }
    shown = table.assign(  # 2,040 never 2.04e+03; an error that rounds to 0% is 0%, never -0%
        published=table["published"].map(number),
        roofline=table["roofline"].map(number),
        engine_aware=table["engine_aware"].map(number),
        error_roofline=table["error_roofline"].map(percent),
        error_engine=table["error_engine"].map(percent),
    )[["source", "use", "kind", "engine", "setup", "metric", "published", "roofline", "error_roofline",
       "engine_aware", "error_engine", "note"]]  # fmt: skip
    text = "\n".join(lines + [shown.to_string(index=False), "", "median and max |error| per kind:"])
    pct = summary.copy()
    for c in pct.columns:
        if "error" in c:
            pct[c] = pct[c].map(lambda v: f"{100 * v:.1f}%")
    from roofline.error_bands import band_table, write_residuals

    if args.write_bands:
        lines.append(f"wrote the held-out residuals every error band reads: {write_residuals()}")
    bands = band_table()
    payload["error_bands"] = bands.to_dict(orient="records")
    shown_bands = bands.copy()
    for c in shown_bands.columns:
        if "error" in c:
            shown_bands[c] = shown_bands[c].map(lambda v: f"{100 * v:.1f}%")
    text += "\n" + pct.to_string(index=False)
    text += "\n\nerror bands every prediction carries (held-out rows per engine, kind, calibration GPU or not):\n"
    text += shown_bands.to_string(index=False) if not bands.empty else "no held-out rows"
    emit(args, payload, text)
    return 0


def _engine_params(e: Any) -> dict[str, float]:
    from roofline.published import FIT_PARAMETERS, _get

    return {n: _get(e, n) for n in FIT_PARAMETERS.get(e.name, {})}


def add_parser(sub: Any) -> None:
    """Register ``specroof validate``."""
    p = sub.add_parser("validate", help="predictions against published measurements")
    vsub = p.add_subparsers(dest="validate_command", required=True, parser_class=type(p))
    p = vsub.add_parser(
        "published",
        help="every published row: roofline-only and engine-aware predictions and their errors",
    )
    p.add_argument("--use", choices=("calibration", "validation", "all"), default="all", help="which rows")
    p.add_argument("--fit", metavar="ENGINE", help="refit ENGINE's free parameters to its calibration rows")
    p.add_argument("--write", action="store_true", help="with --fit: write the fitted values into its profile")
    p.add_argument(
        "--write-bands",
        action="store_true",
        help="write the held-out residuals the error bands read (published/held_out_residuals.csv)",
    )
    p.add_argument("--plot", type=plot_path, help="write the predicted-vs-published scatter here")
    _add_json(p)
    p.set_defaults(func=cmd_validate_published)

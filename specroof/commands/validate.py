"""``specroof validate published``: predictions against published measurements, and the error bands."""

from __future__ import annotations

import argparse
from typing import Any

from roofline.core.errors import SpecroofError
from specroof.shell import (
    _add_json,
    emit,
    number,
    percent,
    plot_path,
)


def bucket_text(buckets: Any) -> str:
    """The per-engine, per-batch-bucket table as printed: calibration and held-out medians side by side (each with
    its rows), the bare roofline's median beside each, and whether issue 47's bound holds (10% / 15%)."""
    import pandas as pd

    from roofline.evidence.published import BATCH_BUCKETS, BUCKET_BOUNDS

    if buckets.empty:
        return "no decode, batched or speculative rows with an error"
    order = {name: i for i, (_, _, name) in enumerate(BATCH_BUCKETS)}
    rows = []
    for (engine, bucket), g in buckets.groupby(["engine", "bucket"], sort=False):
        row: dict[str, Any] = {"engine": engine, "batch": bucket}
        for use, word in (("calibration", "calibration"), ("validation", "held_out")):
            hit = g[g["use"] == use]
            if hit.empty:
                row |= {f"{word}_rows": "", f"{word}_median": "", f"{word}_roofline": "", f"{word}_max": ""}
                continue
            r = hit.iloc[0]
            ok = "" if bool(r["within_bound"]) else f" (> {BUCKET_BOUNDS[use]:.0%})"
            row |= {
                f"{word}_rows": str(int(r["rows"])),
                f"{word}_median": f"{100 * r['median_abs_error_engine']:.1f}%{ok}",
                f"{word}_roofline": f"{100 * r['median_abs_error_roofline']:.1f}%",
                f"{word}_max": f"{100 * r['max_abs_error_engine']:.1f}%",
            }
        rows.append(row)
    df = pd.DataFrame(rows)
    df = df.iloc[sorted(range(len(df)), key=lambda i: (df["engine"].iloc[i], order.get(df["batch"].iloc[i], 9)))]
    return df.to_string(index=False)


def cmd_validate_published(args: argparse.Namespace) -> int:
    from roofline.evidence.engine_fits import calibrate, write_fitted
    from roofline.evidence.error_bands import band_table, kind_band_table, write_residuals
    from roofline.evidence.published import bucket_summary, error_summary, validation_table

    if args.write and not args.fit:
        raise SpecroofError("--write writes a fitted engine: give --fit ENGINE")
    engines = {}
    lines = []
    fitted_params = None
    if args.fit:
        fitted, _ = calibrate(args.fit)
        engines[fitted.name] = fitted  # by its name, which the rows use: --fit may be a profile's TOML path
        fitted_params = _engine_params(fitted)
        lines.append(f"fitted {fitted.name} on its calibration rows:")
        lines += [f"  {k} = {v:.6g}" for k, v in fitted_params.items()]
        if args.write:
            for path in write_fitted(fitted):
                lines.append(f"  wrote {path}")
    written = write_residuals() if args.write_bands else None  # before band_table reads them
    if written is not None:
        from specroof.commands.common import BAND_CACHE

        BAND_CACHE.clear()  # the answers' bands are read from the residuals just written
    table = validation_table(engines=engines)
    if args.use != "all":
        table = table[table["use"] == args.use]
    summary = error_summary(table)
    buckets = bucket_summary(table)
    if args.plot:
        from roofline.plot import published_scatter

        published_scatter(table).savefig(args.plot, dpi=120)
    payload = {
        "rows": table.to_dict(orient="records"),
        "summary": summary.to_dict(orient="records"),
        "buckets": buckets.to_dict(orient="records"),
        **({"fitted": fitted_params} if fitted_params is not None else {}),
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
    kinds = kind_band_table()
    bands = band_table()
    payload["kind_bands"] = kinds.to_dict(orient="records")
    payload["error_bands"] = bands.to_dict(orient="records")
    text += "\n" + pct.to_string(index=False)
    text += (
        "\n\nmedian |error| per engine and batch bucket (decode, batched and speculative rows; a version counts as its "
        "engine), the bare roofline's median beside each; issue 47's bound: calibration <= 10%, held out <= 15%:\n"
    )
    text += bucket_text(buckets)
    text += (
        "\n\nerror bands every priced answer carries: held-out rows per engine, kind, batch bucket, dense/MoE, hybrid "
        "linear attention or not, and context; an answer takes the most specific group with 3 rows or more, dropping "
        "context, then dense/MoE, then the bucket, then pooling the serving engines, a hybrid's rows kept apart until "
        "the kind alone (band: the |error| 80% of the group fell within):\n"
    )
    text += _percent_table(kinds) if not kinds.empty else "no held-out rows"
    text += "\n\nwhere no such group has rows, the band per engine family, kind and calibration GPU or not:\n"
    text += _percent_table(bands) if not bands.empty else "no held-out rows"
    if args.write_bands:  # written before the band tables were read, said last
        text += f"\nwrote the held-out residuals every error band reads: {written}"
    emit(args, payload, text)
    return 0


def _percent_table(df: Any) -> str:
    shown = df.copy()
    for c in shown.columns:
        if "error" in c:
            shown[c] = shown[c].map(lambda v: f"{100 * v:.1f}%")
    return str(shown.to_string(index=False))


def _engine_params(e: Any) -> dict[str, float]:
    from roofline.evidence.engine_fits import FIT_PARAMETERS, _get

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

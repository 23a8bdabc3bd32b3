"""Predictions against published measurements: the summary of ``specroof validate published`` into BENCHMARKS.md.

Not a timing: the model is deterministic, so these figures change only when the cost
model, an engine profile or the published table does.

    python -m benchmarks.bench_published
"""

from __future__ import annotations

from benchmarks.record import record
from roofline.published import error_summary, validation_table


def main() -> None:
    table = validation_table()
    s = error_summary(table)
    lines = [
        "| rows | kind | n | median / max error, roofline only | median / max error, engine-aware |",
        "|---|---|---|---|---|",
    ]
    for r in s.itertuples():
        lines.append(
            f"| {r.use} | {r.kind} | {r.rows} | {100 * r.median_abs_error_roofline:.1f}% / "
            f"{100 * r.max_abs_error_roofline:.1f}% | {100 * r.median_abs_error_engine:.1f}% / "
            f"{100 * r.max_abs_error_engine:.1f}% |"
        )
    worst = table.dropna(subset=["error_engine"]).assign(a=lambda t: t["error_engine"].abs()).nlargest(3, "a")
    body = "\n".join(
        [
            "Every row of `published/*.toml` predicted by the datasheet roofline and by its engine "
            "(engines fitted to the calibration rows only).",
            "",
            *lines,
            "",
            "Largest engine-aware errors: "
            + "; ".join(f"{r.setup} ({r.engine}, {r.use}) {100 * r.error_engine:+.0f}%" for r in worst.itertuples()),
        ]
    )
    record("predictions against published measurements", body, "python -m benchmarks.bench_published")
    print(body)


if __name__ == "__main__":
    main()

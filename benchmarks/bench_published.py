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
    formats = _quantised_format_rows(table)
    record("quantised formats: held-out validation rows", formats, "python -m benchmarks.bench_published")
    print(formats)


#: the sources added with the weight-format grammar (docs/cost-model.md, section 16): validation only
FORMAT_SOURCES = ("exllamav2_readme", "torchao_gpt_fast")


def _quantised_format_rows(table) -> str:  # type: ignore[no-untyped-def]
    """Per-kind errors of the ExLlamaV2 and torchao rows, priced after the kernel families were set (never fitted)."""
    t = table[table["source"].isin(FORMAT_SOURCES)]
    s = error_summary(t)
    lines = [
        "| source | kind | n | median / max error, roofline only | median / max error, engine-aware |",
        "|---|---|---|---|---|",
    ]
    for src in FORMAT_SOURCES:
        for r in error_summary(t[t["source"] == src]).itertuples():
            lines.append(
                f"| {src} | {r.kind} | {r.rows} | {100 * r.median_abs_error_roofline:.1f}% / "
                f"{100 * r.max_abs_error_roofline:.1f}% | {100 * r.median_abs_error_engine:.1f}% / "
                f"{100 * r.max_abs_error_engine:.1f}% |"
            )
    for r in s.itertuples():
        lines.append(
            f"| all | {r.kind} | {r.rows} | {100 * r.median_abs_error_roofline:.1f}% / "
            f"{100 * r.max_abs_error_roofline:.1f}% | {100 * r.median_abs_error_engine:.1f}% / "
            f"{100 * r.max_abs_error_engine:.1f}% |"
        )
    worst = t.assign(a=t["error_engine"].abs()).nlargest(3, "a")
    return "\n".join(
        [
            "GPTQ and EXL2 rows of ExLlamaV2's README (RTX 3090 Ti, RTX 4090) and torchao's gpt-fast-style rows "
            "(A100, H100; bf16, int8, int4 group 64, fp6), priced with `--weight-dtype` formats under the compiled "
            "engine. All validation: the kernel families' figures (Marlin's measured dense rate, standing in for "
            "GPTQ/AWQ/EXL2, marked estimated) were set before these rows were priced, and nothing was changed after.",
            "",
            *lines,
            "",
            "Largest engine-aware errors: "
            + "; ".join(f"{r.setup} on {r.hardware} {100 * r.error_engine:+.0f}%" for r in worst.itertuples()),
        ]
    )


if __name__ == "__main__":
    main()

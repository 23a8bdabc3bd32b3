"""Predictions against published measurements: the summary of ``specroof validate published`` into BENCHMARKS.md.

Not a timing: the model is deterministic, so these figures change only when the cost
model, an engine profile or the published table does.

    python -m benchmarks.bench_published            # every section
    python -m benchmarks.bench_published prefill    # only the prefill / TTFT section
"""

from __future__ import annotations

import sys

from benchmarks.record import record
from roofline.evidence.published import error_summary, load_published, validation_table


def main() -> None:
    if sys.argv[1:] == ["prefill"]:
        body = _prefill_rows(validation_table(load_published().query("kind == 'prefill'")))
        record(PREFILL_SECTION, body, "python -m benchmarks.bench_published prefill")
        return
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
    record(PREFILL_SECTION, _prefill_rows(table), "python -m benchmarks.bench_published prefill")


PREFILL_SECTION = "prefill / time to first token: calibration and validation"

#: the one TTFT source the serving engines' prefill compute efficiency (compute_fraction) is fitted on
PREFILL_CALIBRATION_SOURCE = "splitwise_dgx_prefill"


def _prefill_rows(table) -> str:  # type: ignore[no-untyped-def]
    """Per source, use and GPU: the prefill rows' errors, roofline only and engine-aware, and every row."""
    t = table[table["kind"] == "prefill"].dropna(subset=["error_engine"])
    lines = [
        "| source | rows | GPU | n | median / max error, roofline only | median / max error, engine-aware |",
        "|---|---|---|---|---|---|",
    ]
    for (src, use, hw), g in t.groupby(["source", "use", "hardware"], sort=True):
        er, ee = g["error_roofline"].abs(), g["error_engine"].abs()
        lines.append(
            f"| {src} | {use} | {hw} | {len(g)} | {100 * er.median():.1f}% / {100 * er.max():.1f}% | "
            f"{100 * ee.median():.1f}% / {100 * ee.max():.1f}% |"
        )
    every = [
        "| source | rows | GPU | setup | metric | published | engine-aware | error |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in t.itertuples():
        every.append(
            f"| {r.source} | {r.use} | {r.hardware} | {r.setup} | {r.metric} | {r.published:.4g} | "
            f"{r.engine_aware:.4g} | {100 * r.error_engine:+.1f}% |"
        )
    return "\n".join(
        [
            "The serving engines' prefill compute efficiency (`compute_fraction`, shared by vllm, sglang and trtllm) "
            f"is fitted on one TTFT source, `{PREFILL_CALIBRATION_SOURCE}` (Splitwise's DGX-H100 prompt-phase times, "
            "Llama-2-70B fp16 TP2, batch 1, 512-4096 prompt tokens); its DGX-A100 and 128/256-token rows and "
            "torchao's vLLM prefill rows only validate. A `ttft_s` error is predicted / published - 1 on the time "
            "(+: predicted slower); a `tokens_per_s` error on the rate (+: predicted faster).",
            "",
            *lines,
            "",
            *every,
        ]
    )


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

"""The offline pair on this machine: predicted against measured speculative speedup, as a user runs it.

Runs ``specroof measure spec --pair offline --early-exit 1`` with its defaults: it looks at
the device first (dtype, threads, one-token path, the target's width for the budget),
microbenchmarks it, plans the batch sizes and gammas that fit the 300 s budget, and
decodes with every speculative run between two baseline runs. Records its tables.
``--from DIR`` re-renders the section from an earlier run's folder.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import pandas as pd

from benchmarks.record import record
from specroof import cli


def main() -> None:
    argv = ["measure", "spec", "--pair", "offline", "--early-exit", "1"]
    if len(sys.argv) > 2 and sys.argv[1] == "--from":
        out = Path(sys.argv[2])
    else:
        out = Path(tempfile.mkdtemp(prefix="specroof-spec-"))
        code = cli.main([*argv, "--out", str(out), "--json"])
        if code:
            sys.exit(code)
    summary = json.loads((out / "summary.json").read_text())
    spec = pd.read_csv(out / "speedup.csv").fillna("")
    knees = pd.DataFrame(summary["crossover"])
    cols = [
        "drafter",
        "batch",
        "gamma",
        "acceptance_rate",
        "mean_acceptance_length",
        "speedup_measured",
        "speedup_predicted",
        "rel_error",
        "speedup_wall",
        "rel_error_wall",
        "repetitions",
        "probe_spread",
        "flag",
    ]
    terms = [
        "drafter",
        "batch",
        "gamma",
        "base_ms_measured",
        "base_ms_predicted",
        "verify_ms_measured",
        "verify_ms_predicted",
        "draft_step_ms_measured",
        "draft_step_ms_predicted",
        "host_ms_per_round",
    ]
    held = summary["pair"]["held_out"]
    plan = summary["plan"]
    noise = summary["noise"]
    body = (
        f"Command: `specroof {' '.join(argv)}` (defaults: budget 300 s), {summary['seconds']:.0f} s.\n\n"
        "What the probe chose, and why: " + " ".join(summary["choice"] or []) + " " + summary["decode_path"] + "\n\n"
        f"Plan: batch {plan['batches']}, gamma {plan['gammas']}, {plan['tokens']} new tokens per sequence "
        f"(a repetition predicted at {plan['predicted_rep_s']:.0f} s with {plan['host_s_per_pass'] * 1e3:.2f} ms of "
        "host cost per pass). "
        f"Target {summary['pair']['target']} ({summary['pair']['target_params'] / 1e9:.2f}e9 weights, "
        f"{summary['dtype']}); draft: the distilled {summary['pair']['draft']}; early exit after layer 1 of the "
        f"target. Held-out cross-entropy (nats/byte): target {held['target']:.3f}, early exit "
        f"{held['early_exit']:.3f}, draft {held['draft']:.3f}. Greedy decoding of held-out prompts. Every "
        "speculative run is bracketed by two baseline runs; `speedup_measured` compares the quiet machine with the "
        "quiet machine (10th percentiles of round and step times over the steady rounds), `speedup_wall` is "
        "wall-clock against the bracketing runs (median over repetitions), `probe_spread` how far those two runs "
        f"disagreed (median {noise['probe_spread_median']:.1%}, worst {noise['probe_spread_max']:.1%} in this run).\n\n"
        f"Verify-pass fits: target MAPE {summary['fit_mape']:.1%} (a-priori, microbenchmark "
        f"ceilings only: {summary['apriori_mape']:.1%}); draft (its own fit) {summary.get('draft_fit_mape') or 0:.1%}."
        "\n\n"
        + spec[cols].to_markdown(index=False, floatfmt=".3f")
        + "\n\nPer-pass terms behind the prediction (ms; measured 10th percentiles against the fitted profile):\n\n"
        + spec[terms].to_markdown(index=False, floatfmt=".2f")
        + "\n\nCrossover K of the target's verify sweep (tokens per sequence): read off the measured curve "
        "and off the fitted model's (`measure.fit.measured_crossover`), the 10%-rise knees beside them, and the "
        "pure roofline crossovers of the fitted and a-priori profiles:\n\n"
        + knees.drop(columns=["dtype"], errors="ignore").to_markdown(index=False, floatfmt=".1f")
        + f"\n\nLargest |rel_error|: {summary['speedup_error_max']:.1%} (wall-clock: "
        f"{summary['speedup_error_max_wall']:.1%}).\n"
    )
    record(
        "offline pair: speculative speedup, predicted vs measured (CPU)", body, "python -m benchmarks.bench_spec_cpu"
    )


if __name__ == "__main__":
    main()

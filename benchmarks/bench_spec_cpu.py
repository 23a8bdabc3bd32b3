"""The offline pair on the CPU: predicted against measured speculative speedup, with a memory-bound target.

The shipped target (4 layers x d 256) fits in this CPU's 300 MiB last-level cache,
where every pass is dispatch bound. ``measure.pair.widen`` makes it memory bound
without changing what it computes (x16: 0.87e9 weights, 1.75 GB in bf16), so the
trained draft's acceptance is the real one and the target's passes stream memory
like a real LLM's. Runs ``specroof measure spec --pair offline --early-exit 1``
and records its tables.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import pandas as pd

from benchmarks.record import record
from measure.fit import validate
from measure.pair import PairConfig, widened_spec
from roofline import cli

GAMMAS = "1,2,4,6,8"
REPEATS = 5
WIDTH = 16  # the command's default --width


def main() -> None:
    """Run the command, or with ``--from DIR`` re-render the section from an earlier run's folder."""
    argv = ["measure", "spec", "--pair", "offline", "--early-exit", "1", "--gamma", GAMMAS, "--batch", "1,4"]
    argv += ["--tokens", "48", "--repeats", str(REPEATS)]
    if len(sys.argv) > 2 and sys.argv[1] == "--from":
        out = Path(sys.argv[2])
    else:
        out = Path(tempfile.mkdtemp(prefix="specroof-spec-"))
        code = cli.main([*argv, "--out", str(out), "--json"])
        if code:
            sys.exit(code)
    summary = json.loads((out / "summary.json").read_text())
    spec = pd.read_csv(out / "speedup.csv")
    # the crossover table is read again from the saved sweep and fit, so that a run's folder
    # re-renders with the current read-out (the decoding tables are the run's own)
    sweep = pd.read_csv(out / "sweep-target" / "results.csv")
    target = widened_spec(PairConfig().target_spec(), WIDTH)
    _, check = validate(
        sweep, target, out / "apriori-profile.toml", out / "fitted-profile.toml", statistic=summary["statistic"]
    )
    knees = pd.DataFrame(check["crossover"])
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
        "speedup_end_to_end",
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
    body = (
        f"Command: `specroof measure spec {' '.join(argv[2:])}`.\n\n"
        f"Target: the shipped byte-level target widened x16 ({summary['pair']['target']}, "
        f"{summary['pair']['target_params'] / 1e9:.2f}e9 weights, bf16); draft: the distilled {summary['pair']['draft']}; "
        f"early exit after layer 1 of the target. Held-out cross-entropy (nats/byte): target {held['target']:.3f}, "
        f"early exit {held['early_exit']:.3f}, draft {held['draft']:.3f}. Greedy decoding of 48 bytes per held-out "
        "prompt (4 prompts at batch 1, one batch of 4), torch.mv for one-token passes. Blocked design: "
        f"{REPEATS} repetitions, each visiting both batch sizes; before each (repetition, batch size) block one "
        "round of the target's and the draft's verify sweeps is measured (3 passes per point), then every drafter "
        "and gamma runs in a shuffled order, each "
        "speculative run bracketed by two baseline probes (autoregressive decoding of one group of prompts) and "
        "compared with their mean time per token, so a slow period of this shared machine moves both sides of a "
        "ratio. The fits use the pooled sweeps, each point's minimum (interference on this host only adds time). "
        "`speedup_measured` is the quiet machine's speedup that such a profile predicts: mean tokens per round "
        "over the 10th percentile of the round time, against the baseline's 10th-percentile step, over the steady "
        "rounds (every sequence of the batch running). `speedup_wall` is wall-clock over the same rounds, each run "
        "against the mean of its two bracketing probes, median over the repetitions; `speedup_end_to_end` includes "
        "the tail where finished sequences ride along in the static batch.\n\n"
        f"Verify-pass fits: target MAPE {summary['fit_mape']:.1%} (a-priori, microbenchmark "
        f"ceilings only: {summary['apriori_mape']:.1%}); draft (its own fit) {summary.get('draft_fit_mape') or 0:.1%}."
        "\n\n"
        + spec[cols].to_markdown(index=False, floatfmt=".3f")
        + "\n\nPer-pass terms behind the prediction (ms; measured 10th percentiles against the fitted profile):\n\n"
        + spec[terms].to_markdown(index=False, floatfmt=".2f")
        + "\n\nCrossover K of the target's verify sweep (tokens per sequence): read off the measured curve "
        "and off the fitted model's (`measure.fit.measured_crossover`), the 10%-rise knees beside them, and the "
        "pure roofline crossovers of the fitted and a-priori profiles:\n\n"
        + knees.to_markdown(index=False, floatfmt=".1f")
        + f"\n\nLargest |rel_error|: {summary['speedup_error_max']:.1%} (wall-clock: "
        f"{summary['speedup_error_max_wall']:.1%}).\n"
    )
    record(
        "offline pair: speculative speedup, predicted vs measured (CPU)", body, "python -m benchmarks.bench_spec_cpu"
    )


if __name__ == "__main__":
    main()

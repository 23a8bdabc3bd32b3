"""Real continuous batching against the serving simulator on this CPU: ``specroof measure serve`` at three rates.

Runs :func:`measure.serve_check.serve_check` (the offline pair, 4 KV slots, off and
static:3, light / near-saturation / overloaded rates; the simulator priced as the engine runs:
no chunked prefill, its host time per round) and writes the side-by-side, the
verdicts and the machine's load into BENCHMARKS.md. The machine may be shared: the load
average before and after the run is part of the figures.
"""

from __future__ import annotations

import argparse
import os

from benchmarks.record import record


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--budget", type=float, default=360.0)
    ap.add_argument("--no-record", action="store_true")
    args = ap.parse_args()
    from measure.serve_check import serve_check
    from specroof.commands.measure_serve import text

    before = os.getloadavg()
    check = serve_check(budget_s=args.budget, progress=False, log=print)
    after = os.getloadavg()
    out = text(check)
    print(out)
    t = check.table
    figs = [f"{m}_p{q}" for m in ("ttft", "tpot") for q in (50, 90)]
    errs = t[[f"{f}_rel_error" for f in figs]].abs().to_numpy()
    noisy = t[[f"{f}_noisy" for f in figs]].to_numpy(bool)
    within = int((errs <= 0.15).sum())
    judged = int((~noisy).sum())
    within_judged = int(((errs <= 0.15) & ~noisy).sum())
    agree = int(check.verdicts["agree"].sum())
    # the same figures with the simulator at each replay's own speed: the scheduling model's error alone
    m_errs = t[[f"{f}_speed_matched_rel_error" for f in figs]].abs().to_numpy()
    m_noisy = t[[f"{f}_speed_matched_noisy" for f in figs]].to_numpy(bool)
    body = (
        f"Load average (1, 5, 15 min) before: {before[0]:.2f}, {before[1]:.2f}, {before[2]:.2f}; "
        f"after: {after[0]:.2f}, {after[1]:.2f}, {after[2]:.2f}.\n\n"
        f"```\n{out}\n```\n\n"
        f"{within} of {errs.size} TTFT/TPOT p50/p90 figures within 15% of the real engine's (the mean of "
        f"{int(t['replays'].max())} replays of each trace); {errs.size - judged} noisy (the replays, or the simulator under "
        f"the calibrations before and after them, or at the calibrations' speed against the replays' own, disagreed by more than the error), and of the {judged} others {within_judged} within 15%; "
        f"verdicts agree at {agree} of {len(check.verdicts)} rates. "
        f"At each replay's own speed (the simulator's prices scaled by what the replay's steps took over them, "
        f"x{t['replay_speed'].min():.2f}..x{t['replay_speed'].max():.2f}; read off the replay, so not a prediction): "
        f"{int((m_errs <= 0.15).sum())} of {m_errs.size} within 15%; {int(m_noisy.sum())} noisy (the replays' "
        f"range exceeds the error), and of the {int((~m_noisy).sum())} others {int(((m_errs <= 0.15) & ~m_noisy).sum())} within 15%. "
        "Real: measure.serve (prefill as its own pass after each decode round, the draft model prefilled too); "
        "simulated: roofline.serving.simulate with max_seqs = slots and prefill='separate' (the decode round, then "
        "one target pass over the newcomers' whole prompts, then the draft model's when speculating), the profile "
        "fitted here unchanged, round_host_s + round_host_per_seq_s x batch = the engine's host time per decode round "
        "beyond its priced passes, a line through the per-batch medians of a calibration burst and staircase run before and after each replay (their mean; never the replays), idle_start_s = what the staircase's single-prompt prefills after an idle wait took beyond the others' residual, every price scaled by the speed those two calibrations ran at against them (calibration_speed: their steps' measured time over the simulator's price of the same steps), and the acceptance the real run measured."
    )
    if not args.no_record:
        record("measure serve: real continuous batching vs the simulator (CPU)", body,
               f"python -m benchmarks.bench_measure_serve --budget {args.budget:g}")  # fmt: skip


if __name__ == "__main__":
    main()

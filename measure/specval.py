"""Predicted against measured speculative speedup, per drafter, gamma and batch.

The prediction is the roofline speedup of ``roofline.speculative`` with the pass
times of a profile fitted to verify passes on this device, the acceptance curve
measured in the same runs, and the round's host cost outside the passes
(acceptance, commit) as measured.

The measurement is throughput against the autoregressive baseline, same prompts.
A static batch keeps running until its slowest sequence is done, so the tail of a
batched speculative run has finished sequences riding along: that is a property
of static batching, not of speculation, and the roofline speedup does not model
it. The speedups are therefore taken over the steady state (rounds where every
sequence of the batch was still running), and the acceptance curve behind the
prediction comes from those same rounds. ``speedup_measured`` compares rounds and
baseline steps at one statistic of their times (by default the 10th percentile:
the machine without interference, as the minimum-fitted profile predicts);
``speedup_wall`` is wall-clock, each run against the two baseline probes that
bracket it; ``speedup_end_to_end`` includes the tail.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from measure.decode import GenerationResult, autoregressive_generate, speculative_generate
from measure.models import Transformer
from roofline.errors import SpecroofError
from roofline.hardware import Hardware
from roofline.model import ModelSpec
from roofline.speculative import DraftModel, EarlyExit, speedup


def _steady_rounds(run: GenerationResult, batch: int) -> pd.DataFrame:
    """One row per round in which all ``batch`` sequences were running: tokens emitted and seconds per phase."""
    full = (
        _full_rounds(run.rounds, batch)
        .groupby("round")
        .agg(
            emitted=("emitted", "sum"),
            t_draft_s=("t_draft_s", "first"),
            t_verify_s=("t_verify_s", "first"),
            t_host_s=("t_accept_s", "first"),
            t_commit_s=("t_commit_s", "first"),
        )
    )
    full["t_host_s"] += full.pop("t_commit_s")
    full["t_round_s"] = full["t_draft_s"] + full["t_verify_s"] + full["t_host_s"]
    return full


def _steady(run: GenerationResult, batch: int) -> tuple[int, float]:
    """Tokens emitted and seconds spent in the rounds where all ``batch`` sequences were running."""
    full = _steady_rounds(run, batch)
    return int(full["emitted"].sum()), float(full["t_round_s"].sum())


def _full_rounds(rounds: pd.DataFrame, batch: int) -> pd.DataFrame:
    """The rows of the rounds in which all ``batch`` sequences were still running."""
    return rounds[rounds.groupby("round")["seq"].transform("size") == batch]


def _probe(target: Transformer, prompts: list[list[int]], max_new_tokens: int) -> GenerationResult:
    """A baseline run with every step timed: a probe of the machine's current speed.

    Greedy and of fixed length, the baseline's speed does not depend on the text, so
    one group of prompts is enough.
    """
    return autoregressive_generate(target, prompts, max_new_tokens, step_times=True)


#: The quantile of round and step times that stands for a pass "on the quiet machine" (statistic
#: "min"): a minimum over the hundreds of rounds of a decoding run is an extreme value, not a quiet
#: pass, while the 10th percentile is stable and still below the interference.
QUIET_QUANTILE = 0.1


def _progress(total: int, enabled: bool) -> Any:
    if enabled:
        try:
            from tqdm.auto import tqdm

            return tqdm(total=total, desc="speculative runs", unit="run")
        except ImportError:
            pass
    return None


def measure_speedups(
    target: Transformer,
    drafters: dict[str, Any],
    prompts_by_batch: dict[int, list[list[int]]],
    gammas: Sequence[int],
    *,
    max_new_tokens: int = 64,
    repeats: int = 3,
    progress: bool = False,
    before_block: Callable[[int], None] | None = None,
    seed: int = 0,
    statistic: str = "min",
) -> pd.DataFrame:
    """Measured half: one row per (drafter, batch, gamma) with the speedups, acceptance and pass times.

    ``drafters`` maps a label to a draft :class:`Transformer` or an early-exit layer
    count. ``prompts_by_batch[b]`` holds a multiple of ``b`` prompts, decoded ``b`` at a
    time (more prompts at batch 1 average acceptance over more text). Each repetition
    runs, per batch size, every drafter and gamma in a shuffled order, with a baseline
    probe (one group of prompts, decoded autoregressively, every step timed) before
    the first and after each. ``before_block(i)`` runs before each (repetition, batch
    size) block, numbered from 0 (the CLI measures a round of its verify sweeps there,
    so the fit sees the machine in the same periods as the decoding).

    Three speedups per row, all over the steady rounds (the whole batch running):

    * ``speedup_measured``: tokens per round over the round time, against the
      baseline's tokens per step over its step time, both times taken at the same
      ``statistic``: ``"min"`` (the default) uses the 10th percentile of the rounds'
      and the steps' seconds, the machine without interference, which is what a
      profile fitted to each sweep point's minimum predicts; ``"median"`` the medians.
      Speculation does not change from round to round (the same passes, a context a
      few tokens longer), so the spread of round times is the machine's, not the
      algorithm's.
    * ``speedup_wall``: wall-clock tokens per second over the steady rounds of a run,
      against the mean time per token of the two baseline probes that bracket it (a
      machine whose speed drifts over minutes moves both sides); median over
      repetitions.
    * ``speedup_end_to_end``: the same with the whole run, tail included.

    The ``curve`` column holds the pooled per-position acceptance; ``*_ms_measured``
    are per pass (draft: per step) at ``statistic``.
    """
    q = {"min": QUIET_QUANTILE, "median": 0.5}.get(statistic)
    if q is None:
        raise SpecroofError(f"statistic must be 'min' or 'median' (got {statistic!r})")
    rows = []
    configs = [(label, g) for label in drafters for g in gammas]
    total = len(prompts_by_batch) * repeats * (1 + 2 * len(configs))
    bar = _progress(total, progress)
    groups: dict[int, list[list[list[int]]]] = {}
    for batch, prompts in prompts_by_batch.items():
        if not prompts or len(prompts) % batch:
            raise SpecroofError(f"batch {batch} needs a non-zero multiple of {batch} prompts (got {len(prompts)})")
        groups[batch] = [prompts[i : i + batch] for i in range(0, len(prompts), batch)]
    rng = np.random.default_rng(seed)
    base_steps: dict[int, list[float]] = {b: [] for b in groups}
    per: dict[tuple[int, str, int], dict[str, list[Any]]] = {
        (b, label, g): {"wall": [], "e2e": [], "runs": []} for b in groups for label, g in configs
    }
    # repetitions outermost: each one visits every batch size, so a machine that drifts over the
    # run drifts under every configuration alike (and under the sweeps ``before_block`` measures)
    for rep in range(repeats):
        for k, (batch, grps) in enumerate(groups.items()):
            if before_block is not None:
                before_block(rep * len(groups) + k)
            # baseline seconds per token: one probe before the first run and one after each
            probes = [_probe(target, grps[0], max_new_tokens)]
            if bar is not None:
                bar.update(1)
            # a shuffled order per repetition: drift cannot line up with gamma
            for j in rng.permutation(len(configs)):
                label, g = configs[j]
                d = drafters[label]
                runs = [speculative_generate(target, d, grp, g, max_new_tokens) for grp in grps]
                if bar is not None:
                    bar.update(1)
                probes.append(_probe(target, grps[len(probes) % len(grps)], max_new_tokens))
                if bar is not None:
                    bar.update(1)
                # the mean of the times (not of the rates): time is what drifts with the machine's load
                base_tps = 2.0 / sum(r.decode_s / r.n_tokens for r in probes[-2:])
                tok, sec = map(sum, zip(*(_steady(r, batch) for r in runs), strict=True))
                acc = per[(batch, label, g)]
                acc["wall"].append((tok / sec) / base_tps if sec > 0 else np.nan)
                e2e_tps = sum(r.n_tokens for r in runs) / sum(r.decode_s for r in runs)
                acc["e2e"].append(e2e_tps / base_tps)
                acc["runs"].extend(runs)
            base_steps[batch].extend(t for r in probes for t in r.step_s)
    for batch, prompts in prompts_by_batch.items():
        context = int(np.mean([len(p) for p in prompts]) + max_new_tokens / 2)
        t_base = float(np.quantile(base_steps[batch], q))
        for label in drafters:
            for g in gammas:
                acc = per[(batch, label, g)]
                # The acceptance the prediction uses comes from the same rounds the measured speedup
                # does: while the whole batch runs. Easy sequences finish first, so the tail's
                # acceptance is lower, and mixing it in biased batched predictions low by 10-40%.
                rounds = pd.concat([_full_rounds(r.rounds, batch) for r in acc["runs"]], ignore_index=True)
                every = pd.concat([r.rounds for r in acc["runs"]], ignore_index=True)
                steady = GenerationResult([], 0.0, 0.0, rounds, g)  # the pooled steady rounds, as one run
                m = steady.metrics()
                curve = np.nan_to_num(steady.acceptance_curve(), nan=0.0)  # unreached positions: 0
                per_round = pd.concat([_steady_rounds(r, batch) for r in acc["runs"]], ignore_index=True)
                t = per_round[["t_round_s", "t_draft_s", "t_verify_s", "t_host_s"]].quantile(q)
                rows.append(
                    {
                        "drafter": label,
                        "batch": batch,
                        "gamma": g,
                        "context": context,
                        "acceptance_rate": m.acceptance_rate,
                        "mean_acceptance_length": m.mean_acceptance_length,
                        "acceptance_rate_all_rounds": float(every["accepted"].sum() / (len(every) * g)),
                        "curve": curve.tolist(),
                        "speedup_measured": float(per_round["emitted"].mean() / t["t_round_s"] / (batch / t_base)),
                        "speedup_wall": float(np.nanmedian(acc["wall"])),
                        "speedup_end_to_end": float(np.median(acc["e2e"])),
                        "statistic": statistic,
                        "base_ms_measured": 1e3 * t_base,
                        "verify_ms_measured": 1e3 * float(t["t_verify_s"]),
                        "draft_step_ms_measured": 1e3 * float(t["t_draft_s"]) / g,
                        "host_ms_per_round": 1e3 * float(t["t_host_s"]),
                    }
                )
    if bar is not None:
        bar.close()
    return pd.DataFrame(rows)


def predict_speedups(
    measured: pd.DataFrame,
    target: ModelSpec,
    drafters: dict[str, Any],
    fitted: Hardware,
    *,
    dtype: str = "bf16",
    draft_hardware: dict[str, Hardware] | None = None,
) -> pd.DataFrame:
    """Predicted half: the roofline speedup for every measured row, from its acceptance curve and host cost.

    ``fitted`` prices the target's passes (and an early exit's); ``draft_hardware``
    maps a drafter's label to the profile its passes are priced with (one fitted to
    that draft model's own sweep), by default ``fitted`` too.
    """
    out = []
    for row in measured.to_dict(orient="records"):
        d = drafters[row["drafter"]]
        # measure.decode's early exit recomputes every layer in verify: price exactly that
        model_drafter = DraftModel(d.spec) if isinstance(d, Transformer) else EarlyExit(int(d), reuse_kv=False)
        g = int(row["gamma"])
        pred = speedup(
            target,
            model_drafter,
            fitted,
            list(row["curve"]),
            g,
            int(row["batch"]),
            int(row["context"]),
            dtype,
            round_overhead_s=row["host_ms_per_round"] / 1e3,
            draft_hardware=(draft_hardware or {}).get(row["drafter"]),
        )
        row.update(
            speedup_predicted=float(pred.speedup),
            rel_error=float(pred.speedup) / row["speedup_measured"] - 1.0,
            rel_error_wall=float(pred.speedup) / row["speedup_wall"] - 1.0,
            base_ms_predicted=1e3 * float(pred.t_target_step_s),
            verify_ms_predicted=1e3 * float(pred.t_verify_s),
            draft_step_ms_predicted=1e3 * float(pred.t_draft_s) / g,
        )
        out.append(row)
    return pd.DataFrame(out)


def speedup_validation(
    target: Transformer,
    drafters: dict[str, Any],
    prompts_by_batch: dict[int, list[list[int]]],
    gammas: Sequence[int],
    fitted: Hardware,
    *,
    max_new_tokens: int = 64,
    dtype: str = "bf16",
    repeats: int = 3,
    progress: bool = False,
    draft_hardware: dict[str, Hardware] | None = None,
    statistic: str = "min",
) -> pd.DataFrame:
    """Measure (:func:`measure_speedups`) then predict (:func:`predict_speedups`) with an already fitted profile.

    ``statistic`` should be the one ``fitted`` was fitted with (``"min"``: the quiet machine).
    """
    measured = measure_speedups(
        target,
        drafters,
        prompts_by_batch,
        gammas,
        max_new_tokens=max_new_tokens,
        repeats=repeats,
        progress=progress,
        statistic=statistic,
    )
    return predict_speedups(measured, target.spec, drafters, fitted, dtype=dtype, draft_hardware=draft_hardware)

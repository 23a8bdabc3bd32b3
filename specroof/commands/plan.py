"""``specroof plan``: the strategy and gamma for a GPU, target and drafter(s), and the engine flags that deploy it."""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from roofline.core.errors import SpecroofError
from roofline.core.validation import check_tp
from roofline.costing.hardware import load_hardware
from roofline.costing.passtime import crossover_tokens
from roofline.deploy.memory import reserved_share
from roofline.deploy.planner import (  # what a configuration that does not fit carries no figure of
    NOT_FIT_BLANK,
    largest_for_row,
)
from roofline.passes.model import get_model
from roofline.speculation.acceptance_defaults import (
    CURVE_ALPHAS,
    RESOLUTION,
    NoMatchedDefault,
    break_even,
    break_even_words,
    pays,
)
from roofline.speculation.acceptance_positions import (
    VLLM_READING_GAMMA,
    engine_family,
    extrapolation_note,
    measured_length,
)
from specroof.commands.common import (
    DRAFTER_GRAMMAR,
    KV_DTYPE_HELP,
    PLAN_MAX_CELLS,
    PLAN_MAX_RECOMMENDATIONS,
    TREE_DRAFTER_KEYS,
    WEIGHT_DTYPE_HELP,
    acceptance_from_args,
    add_engine_config,
    apply_weight_only,
    band_for,
    config_acceptance,
    drafter_key,
    drafters_by_key,
    emit_prices,
    engine_config_from_args,
    fit_cures,
)
from specroof.shell import (
    DEFAULT_ENGINE,
    INT_MAX,
    GivenStore,
    _add_engine,
    _add_json,
    _add_offload,
    add_int_list,
    bounded_int,
    emit,
    finite_float,
    pricing_from_args,
    was_given,
)

#: the columns of the ranked table the text shows (--json has every column)
SHOWN = ["hardware", "strategy", "gamma", "batch", "context", "expected_tokens", "t_round_s", "tokens_per_s_per_user",
         "tokens_per_s_total", "speedup", "extrapolated", "kv_bound_context"]  # fmt: skip


#: what the table's last column means, printed under it (docs/cost-model.md, section 31)
KV_LEGEND = (
    "kv_bound_context: the context (tokens per sequence) from which verification is KV-bound at that batch: the "
    "verify pass of gamma + 1 tokens spends at least half its time reading and scoring the KV cache, so past it a "
    "longer draft costs little more than a plain step (-1: not within the model's context)"
)

#: the most (hardware, batch, context) cells one `plan --engine-config` compares (each searches the engine's settings)
PLAN_MAX_VERDICTS = 500

#: how each engine --emit names is written in a sentence
ENGINE_NAMES = {"sglang": "SGLang", "vllm": "vLLM", "trtllm": "TensorRT-LLM"}


def _engine_trees(args: argparse.Namespace, key: str, d: Any, acceptance: Any, hw: str, c: int) -> Any:
    """The engine's own EAGLE settings searched for one drafter (roofline.deploy.engine_search), per batch."""
    from roofline.deploy.engine_search import plan_engine
    from roofline.speculation.engine_trees import SGLANG_DEFAULT, EngineSetting
    from roofline.speculation.trees import IIDAcceptance

    kind = drafter_key(key)
    acc = getattr(args, "acceptance_kinds", {}).get(key)
    family = engine_family(args.engine, args.emit)
    value = acceptance[d.name] if isinstance(acceptance, dict) else acceptance
    if isinstance(value, list):  # a chain measurement read as a curve (section 50.1): the trees are priced on it too
        from roofline.speculation.trees import ChainCurveAcceptance

        kw: dict[str, Any] = {"acceptance": ChainCurveAcceptance(np.asarray(value, dtype=float))}
    elif acc is not None and getattr(acc, "kind", "") == "mean" and acc.gamma is None and family == "vllm":
        g = VLLM_READING_GAMMA  # a bare mean under vLLM: measured on its chain (section 50.1), as the plan read it
        kw = {"mean_accepted": acc.mean, "measured_at": EngineSetting(args.emit, g, 1, g + 1)}
    elif acc is not None and getattr(acc, "kind", "") == "mean" and acc.gamma is None:
        kw = {"mean_accepted": acc.mean, "measured_at": SGLANG_DEFAULT}
    elif acc is not None and getattr(acc, "kind", "") == "mean" and acc.gamma:
        g = int(acc.gamma)
        kw = {"mean_accepted": acc.mean, "measured_at": EngineSetting(args.emit, g, 1, g + 1)}
    else:
        a = acceptance[d.name] if isinstance(acceptance, dict) else acceptance
        kw = {"acceptance": IIDAcceptance(float(a if np.isscalar(a) else np.mean(a)))}
    return plan_engine(
        resolution=RESOLUTION,
        hardware=args.pricings[hw],
        target=args.target,
        drafter=kind if kind != "eagle1" else "eagle",
        framework=args.emit,
        batches=args.batch,
        context=c,
        **kw,
    )


def _deploy(args: argparse.Namespace, by_key: dict[str, Any], acceptance: Any, best: list[dict[str, Any]]) -> list:
    """``plan --emit ENGINE``: per recommendation, the one setting it chose, in the engine's own knobs and flags.

    The plan's best gamma is deployed as the engine's chain, with the plan's speedup, so the table, the sentence and
    the flags name one setting. For an EAGLE-family drafter the engine's own trees are searched too
    (roofline.deploy.engine_search); a tree that beats the chosen chain replaces it, and the recommendation says so.
    """
    from roofline.deploy.engine_flags import emit_flags, knobs_for
    from roofline.passes.model import hf_id
    from roofline.speculation.engine_trees import EngineSetting

    searched: dict[tuple[str, int, str], Any] = {}
    by_id = {load_hardware(h).id: h for h in args.hardware}
    out: list[dict[str, Any]] = []
    for r in best:
        hw, c = by_id[r["hardware"]], int(r["context"])
        row = {"hardware": hw, "context": c, "batch": r["batch"], "engine": args.emit}
        if not r["fits_in_memory"]:
            out.append(row | {"drafter": None, "knobs": {}, "label": "does not fit", "speedup": None,
                              "flags": "does not fit in memory here: no setting to deploy"})  # fmt: skip
            continue
        key, d = next(((k, x) for k, x in by_key.items() if x.name == r["strategy"]), (None, None))
        if key is None or int(r["gamma"]) == 0:
            out.append(row | {"drafter": None, "knobs": {}, "label": "no speculation", "speedup": 1.0,
                              "flags": "plain decoding wins here: launch without speculative flags"})  # fmt: skip
            continue
        kind = drafter_key(key)
        g = int(r["gamma"])
        setting, speedup = EngineSetting(args.emit, g, 1, g + 1), float(r["speedup"])
        if kind in TREE_DRAFTER_KEYS:
            if (hw, c, key) not in searched:
                searched[hw, c, key] = _engine_trees(args, key, d, acceptance, hw, c)
            ep = searched[hw, c, key]
            i = [int(b) for b in ep.best["batch"]].index(int(r["batch"]))
            tree_setting, tree_speedup = ep.best_settings[i], float(ep.best["speedup"].iloc[i])
            # a tree replaces the chain only past the answer's resolution: within it the chain (fewer draft tokens per
            # sequence, less KV and draft work) is the same answer at a lower cost (docs/cost-model.md, section 50.3)
            if not tree_setting.is_chain and tree_speedup > speedup * (1 + RESOLUTION):
                setting, speedup = tree_setting, tree_speedup
                r["reason"] += (
                    f"; as {ENGINE_NAMES[args.emit]} builds {kind}'s tree, {setting.label} is faster still "
                    f"({speedup:.2f}x): that is the setting deployed"
                )
        draft_model = args.draft_model
        if kind == "model" and draft_model is None:
            draft_model = hf_id(d.spec) if hasattr(d, "spec") else None
        knobs = knobs_for(setting, kind)
        label = setting.label if knobs == setting.knobs() else " ".join(f"{k}={v}" for k, v in knobs.items())
        r["deploy_setting"] = label
        out.append(
            row
            | {
                "drafter": key,
                "knobs": knobs,
                "label": label,
                "num_steps": setting.num_steps,
                "topk": setting.topk,
                "num_draft_tokens": setting.num_draft_tokens,
                "speedup": speedup,
                # the TP flag too, so the flags read back (--engine-config) price on as many GPUs as planned
                "flags": emit_flags(
                    setting,
                    target=args.target,
                    drafter=kind,
                    draft_model=draft_model,
                    tp=args.tp if args.tp > 1 else None,
                ),
            }
        )
    return out


def _add_dynamic_gamma(
    best: list[dict[str, Any]], args: argparse.Namespace, by_key: dict[str, Any], acc: Any, hws: dict[str, Any]
) -> None:
    """Each recommendation's drafter run under Hugging Face's heuristic schedule, against its best static gamma."""
    from roofline.speculation.gamma_policies import HeuristicSchedule, compare_policies

    for r in best:
        d = next((x for x in by_key.values() if x.name == r["strategy"]), None)
        if d is None:  # plain decoding won: nothing to schedule
            continue
        a = acc[d.name] if isinstance(acc, dict) else acc
        curve = list(a) if isinstance(a, (list, tuple)) else [float(a)]
        df = compare_policies(
            hws[r["hardware"]],
            args.target,
            d,
            curve,
            [HeuristicSchedule(max_gamma=args.max_gamma or 1)],
            batch=int(r["batch"]),
            context=int(r["context"]),
            max_gamma=max(1, args.max_gamma),
            rounds=5_000,
        )
        r["heuristic_speedup"] = float(df["speedup"].iloc[-1])
        r["heuristic_vs_best_static"] = float(df["vs_best_static"].iloc[-1])


def cmd_plan(args: argparse.Namespace) -> int:
    from roofline.deploy.planner import plan, recommend

    config = engine_config_from_args(args, drafter_list=True)  # read before any work
    if not args.target:
        raise SpecroofError(
            "give --target (a preset, config.json or checkpoint folder), or an --engine-config naming it"
        )
    if config is not None:
        return _plan_engine_config(args, config)
    emit_prices(args)
    by_key = drafters_by_key(args)
    try:
        acceptance: Any = acceptance_from_args(args, by_key)
    except NoMatchedDefault as e:  # no published figure for this pair: the answer is a curve over acceptance
        return _plan_over_acceptance(args, by_key, str(e))
    drafters = list(by_key.values())
    target = get_model(args.target)
    if not target.is_abstract:
        check_tp(target, args.tp)
    cells = len(args.hardware) * len(args.batch) * len(args.context) * (args.max_gamma + 1) * len(drafters)
    combos = len(args.hardware) * len(args.batch) * len(args.context)
    if combos > PLAN_MAX_RECOMMENDATIONS:
        raise SpecroofError(
            f"{combos:,} (hardware, batch, context) combinations to recommend for, over {PLAN_MAX_RECOMMENDATIONS:,}: "
            "narrow --batch/--context (a range like 1-64 is 64 values)"
        )
    if cells > PLAN_MAX_CELLS:
        raise SpecroofError(
            f"this plan has {cells:,} configurations (hardware x batch x context x gamma x drafters), over "
            f"{PLAN_MAX_CELLS:,}: narrow --batch/--context or lower --max-gamma"
        )
    apply_weight_only(args)
    gammas = range(0, args.max_gamma + 1)
    pricings = [pricing_from_args(args, h) for h in args.hardware]  # each GPU's pricing resolved once
    args.pricings = dict(zip(args.hardware, pricings, strict=True))
    table = plan(pricings, args.target, drafters, acceptance, batch=args.batch, context=args.context, gammas=gammas)
    family = engine_family(args.engine, args.emit)
    share, share_why = reserved_share(family, args.tp, args.memory_fraction)
    caps = {pr.hardware.id: (pr.hardware.memory_bytes or float("inf")) * share for pr in pricings}
    # a row fits when its footprint per device is within the engine's reserved share of one device (section 50.4)
    table["fits_in_memory"] = table["memory_bytes"] <= table["hardware"].map(caps)
    table = table.sort_values(["fits_in_memory", "speedup", "gamma"], ascending=[False, False, True], kind="stable")
    table = table.reset_index(drop=True)
    measured = {by_key[k].name: measured_length(k, a, family) for k, a in args.acceptance_kinds.items()}
    table["extrapolated"] = [
        bool(measured.get(st) is not None and int(g) > int(measured[st] or 0)) for st, g in
        zip(table["strategy"], table["gamma"], strict=True)
    ]  # fmt: skip
    best = []
    # each recommendation reads its own cell: split once, not one filter of the whole table per cell (at --max-gamma 140,
    # 1,280 cells times 180,000 rows of string comparisons took most of the command's time)
    cells = dict(tuple(table.groupby(["hardware", "batch", "context"], sort=False)))
    for pr in pricings:
        ks = crossover_tokens(args.target, pr, np.asarray(args.batch)[:, None], np.asarray(args.context)[None, :])
        for i, b in enumerate(args.batch):
            for j, c in enumerate(args.context):
                cell = cells.get((pr.hardware.id, b, c), table.iloc[:0])
                rec = recommend(pr, args.target, drafters, acceptance, batch=b, context=c, table=cell, gammas=gammas,
                                resolution=RESOLUTION, crossover_k=int(ks[i, j]))  # fmt: skip
                row = {"hardware": pr.hardware.id, "batch": b, "context": c, **rec.row, "reason": rec.reason}
                _mark_extrapolated(row, measured, family)
                if not rec.row["fits_in_memory"]:  # marked and not ranked: no strategy is an answer on this GPU
                    top = {str(k): v for k, v in rec.table.iloc[0].items()}  # its setting, before the speeds blank
                    row["reason"] = _does_not_fit(args, pr, target, b, c, top, caps[pr.hardware.id], share_why)
                    row["largest_batch"], row["largest_context"] = _largest(args, pr, top, caps[pr.hardware.id])
                    row |= {k: None for k in NOT_FIT_BLANK}
                best.append(row)
    if args.dynamic_gamma:
        _add_dynamic_gamma(best, args, by_key, acceptance, {pr.hardware.id: pr for pr in pricings})
    payload = {
        "recommendations": best,
        "table": [
            r if r["fits_in_memory"] else r | {k: None for k in NOT_FIT_BLANK}
            for r in table.head(args.top).to_dict(orient="records")
        ],
        "acceptance": getattr(args, "acceptance_notes", []),
        "memory_share": {"fraction": share, "source": share_why},
    }
    if args.emit:  # before the sentences: a tree the engine builds may replace the chosen chain, and says so
        payload["deploy"] = _deploy(args, by_key, acceptance, best)
    lines = [f"{r['hardware']}  batch {r['batch']:>4}  context {r['context']:>6}:  {r['reason']}" for r in best]
    payload["engine"] = args.engine
    pr_of = {pr.hardware.id: pr for pr in pricings}  # by the rows' ids: an offloaded GPU's carries +offload-<link>
    for r in best:  # each answer carries the band of its own group: engine, batch bucket, dense/MoE, context
        r["error_band"], r["error_band_note"] = band_for(args.engine, pr_of[r["hardware"]].hardware, speculative=True,
                                                         batch=r["batch"], model=target, context=r["context"])  # fmt: skip
    payload["error_bands"] = [{k: r[k] for k in ("hardware", "batch", "context", "error_band", "error_band_note")}
                              for r in best]  # fmt: skip
    payload["notes"] = list(table.attrs.get("notes", []))
    lines = [_priced_under(args), *_band_lines(best), "", *lines]
    if getattr(args, "acceptance_notes", None):
        lines = ["acceptance, as given and as priced:", *(f"  {n}" for n in args.acceptance_notes), "", *lines]
    payload["batch_notes"] = _batch_notes(best, table) + _graph_notes(best, pr_of)
    lines += [f"note: {n}" for n in payload["notes"] + payload["batch_notes"]]
    if args.emit:
        lines += [
            "",
            f"deploying it with {ENGINE_NAMES[args.emit]} (the engine's own knobs; the setting chosen above):",
        ]
        for r in payload["deploy"]:
            who = f" {r['drafter']}" if r["drafter"] else ""
            fast = f" ({r['speedup']:.2f}x)" if r["speedup"] is not None else ""
            lines += [f"  {r['hardware']} batch {r['batch']} context {r['context']}{who}: {r['label']}{fast}"]
            lines += [f"    {line}" for line in str(r["flags"]).splitlines()]
    if args.dynamic_gamma:
        lines += [
            f"  Hugging Face's heuristic schedule instead: {r['heuristic_speedup']:.2f}x "
            f"({r['heuristic_vs_best_static']:+.1%} against the best static gamma)"
            for r in best
            if "heuristic_speedup" in r
        ]
    fits = table["fits_in_memory"].astype(bool)
    if not fits.all():  # rows that do not fit are listed apart, never ranked among those that do
        lines += ["", f"{int((~fits).sum())} configurations do not fit in memory: not ranked (--json lists them)"]
    # a hybrid model's verify writes a state checkpoint per position (cost-model section 52): shown beside the round
    cols = SHOWN[:7] + ["t_checkpoint_s"] + SHOWN[7:] if table["t_checkpoint_s"].astype(float).any() else SHOWN
    shown = table[fits].head(args.top)[cols]
    shown = shown.round({c: 4 if c != "t_checkpoint_s" else 6 for c in cols})  # checkpoints take microseconds
    emit(args, payload, "\n".join(lines) + "\n\n" + shown.to_string(index=False) + "\n" + KV_LEGEND)
    return 0


def _plan_over_acceptance(args: argparse.Namespace, by_key: dict[str, Any], why: str) -> int:
    """No matched published acceptance: per (GPU, batch, context), the best speedup over a range of per-token rates
    and the break-even rate (docs/cost-model.md, section 50.2), instead of one number borrowed from another pair."""
    from roofline.deploy.planner import plan

    target = get_model(args.target)
    if not target.is_abstract:
        check_tp(target, args.tp)
    apply_weight_only(args)
    pricings = [pricing_from_args(args, h) for h in args.hardware]
    drafters = list(by_key.values())
    gammas = range(0, max(1, args.max_gamma) + 1)
    share, share_why = reserved_share(engine_family(args.engine, args.emit), args.tp, args.memory_fraction)
    caps = {pr.hardware.id: (pr.hardware.memory_bytes or float("inf")) * share for pr in pricings}
    rows: list[dict[str, Any]] = []
    for a in CURVE_ALPHAS:
        t = plan(pricings, args.target, drafters, float(a), batch=args.batch, context=args.context, gammas=gammas)
        t = t[t["memory_bytes"] <= t["hardware"].map(caps)]  # what the engine's share holds (section 50.4)
        for (hw, b, c), g in t.groupby(["hardware", "batch", "context"], sort=False):
            top = g.iloc[0]  # plan() ranked it: the fastest setting first (gamma 0 when nothing pays)
            rows.append({"hardware": hw, "batch": int(b), "context": int(c), "alpha": float(a),
                         "strategy": str(top["strategy"]), "gamma": int(top["gamma"]), "speedup": float(top["speedup"])})  # fmt: skip
    cells: dict[tuple[str, int, int], list[dict[str, Any]]] = {}
    for r in rows:
        cells.setdefault((r["hardware"], r["batch"], r["context"]), []).append(r)
    lines = [
        f"acceptance: {why}; the answer is the speedup over a range of per-token rates, with the break-even rate",
        "",
    ]
    for pr in pricings:  # a cell nothing fits in gets no curve, only the reason
        for b in args.batch:
            for c in args.context:
                if (pr.hardware.id, int(b), int(c)) not in cells:
                    lines.append(
                        f"{pr.hardware.id}  batch {b:>4}  context {c:>6}:  does not fit in memory ({share_why})"
                    )
    breakeven = []
    for (hw, b, c), rs in cells.items():
        be = break_even([r["alpha"] for r in rs], [r["gamma"] > 0 and pays(r["speedup"]) for r in rs])
        breakeven.append({"hardware": hw, "batch": b, "context": c, "break_even_alpha": be})
        where = f"speculation {break_even_words(be)}"
        curve = ", ".join(f"{r['alpha']:g}: {r['speedup']:.2f}x@{r['gamma']}" for r in rs)
        lines.append(f"{hw}  batch {b:>4}  context {c:>6}:  {where}; best speedup (at gamma) by rate: {curve}")
    payload = {"recommendations": [], "acceptance": [why], "break_even": breakeven, "curve": rows,
               "engine": args.engine, "memory_share": {"fraction": share, "source": share_why}}  # fmt: skip
    emit(args, payload, "\n".join([lines[0], _priced_under(args), *lines[1:]]))
    return 0


def _largest(args: argparse.Namespace, pr: Any, row: dict[str, Any], cap: float) -> tuple[int, int]:
    """The largest batch at this context and the longest context at this batch that fit the row's setting, its
    drafter's own memory included (section 50.4; roofline.deploy.planner.largest_for_row)."""
    got = largest_for_row(pr, args.target, list(drafters_by_key(args).values()), row, cap)
    return got.batch, got.context


def _does_not_fit(args: argparse.Namespace, pr: Any, target: Any, b: int, c: int, row: dict[str, Any], cap: float,
                  share_why: str) -> str:  # fmt: skip
    """The one sentence a configuration that does not fit gets: per device, against the engine's share, what fits."""
    lb, lc = _largest(args, pr, row, cap)
    dev = pr.hardware.memory_bytes or float("nan")
    per = f" per device (TP {args.tp})" if args.tp > 1 else ""
    fits = (
        f"the largest batch that fits at context {c} is {lb}, the longest context at batch {b} is {lc:,}"
        if lb or lc
        else "not even one sequence fits"
    )
    return (
        f"does not fit in memory: needs {row['memory_bytes'] / 1e9:.1f} GB{per} (weights + KV + activations), over the "
        f"{cap / 1e9:.1f} GB the engine may use of each {dev / 1e9:.0f} GB device ({share_why}); {fits}"
        f"{'; or' if lb or lc else ':'} {fit_cures(pr.hardware, args.tp)}"
    )


def _mark_extrapolated(row: dict[str, Any], measured: dict[str, int | None], family: str | None) -> None:
    """A recommendation past the measured draft length says so (first when more than one position past it)."""
    g, at = row.get("gamma"), measured.get(str(row.get("strategy")))
    row["measured_at"] = at
    row["extrapolated"] = bool(at is not None and g is not None and int(g) > at)
    if not row["extrapolated"] or at is None or g is None:
        return
    first = extrapolation_note(int(g), at, family)
    if first is not None:
        row["reason"] = f"{first}. {row['reason']}"
    else:
        row["reason"] += f" (extrapolated: one position past the {at} measured)"


def _batch_notes(best: list[dict[str, Any]], table: Any = None) -> list[str]:
    """Where a larger batch's speedup is above a smaller one's, why: the plain step grows more than the round."""
    out = []
    rows = [r for r in best if r.get("speedup") and r.get("gamma")]
    for a in rows:
        for b in rows:
            if (a["hardware"], a["context"]) != (b["hardware"], b["context"]) or not b["batch"] > a["batch"]:
                continue
            if b["speedup"] <= a["speedup"]:
                continue
            step_a = a["t_round_s"] * a["speedup"] / a["expected_tokens"]
            step_b = b["t_round_s"] * b["speedup"] / b["expected_tokens"]
            out.append(
                f"at batch {b['batch']} the speedup ({b['speedup']:.2f}x) is above batch {a['batch']}'s "
                f"({a['speedup']:.2f}x): a plain step grows {step_b / step_a - 1:+.0%} ({step_a * 1e3:.2f} -> "
                f"{step_b * 1e3:.2f} ms, more KV and activations to read) while the round grows only "
                f"{b['t_round_s'] / a['t_round_s'] - 1:+.0%} (its draft passes {a['t_draft_s'] * 1e3:.2f} -> "
                f"{b['t_draft_s'] * 1e3:.2f} ms, verify {a['t_verify_s'] * 1e3:.2f} -> {b['t_verify_s'] * 1e3:.2f} ms): "
                "the fixed part of a round weighs less at the larger batch"
            )
            break
    if table is not None:
        out += _pays_only_at_larger_batch(best, table)
    return out


def _graph_notes(best: list[dict[str, Any]], pricings: dict[str, Any]) -> list[str]:
    """Where a recommended verify pass is larger than the engine captures in a CUDA graph by default (cost-model
    section 62): the engine runs it without graphs, which the answer does not price."""
    out: list[str] = []
    for r in best:
        eng = pricings[r["hardware"]].engine
        if eng is None or not r.get("gamma"):
            continue
        note = eng.graph_note(r["hardware"], eng.spec_batch(int(r["batch"])), int(r["gamma"]) + 1)
        if note and note not in out:
            out.append(note)
    return out


def _pays_only_at_larger_batch(best: list[dict[str, Any]], table: Any) -> list[str]:
    """Where speculation pays at a larger batch and not at a smaller one, why, in the priced times: the larger
    batch's setting at the smaller batch, its verify against a plain step at both (a sparse MoE's plain step at a
    small batch reads few experts, the verify of every draft token reads more of them)."""
    out = []
    for a in best:
        if a.get("gamma") != 0 or a.get("speedup") is None:
            continue
        for b in best:
            same = (a["hardware"], a["context"]) == (b["hardware"], b["context"])
            if not same or b["batch"] <= a["batch"] or not b.get("gamma") or not (b.get("speedup") or 0) > 1.0:
                continue
            at = table[(table["hardware"] == a["hardware"]) & (table["context"] == a["context"])
                       & (table["batch"] == a["batch"]) & (table["strategy"] == b["strategy"])
                       & (table["gamma"] == b["gamma"])]  # fmt: skip
            if at.empty:
                continue
            r = at.iloc[0]
            step_a = float(r["t_round_s"]) * float(r["speedup"]) / float(r["expected_tokens"])
            step_b = b["t_round_s"] * b["speedup"] / b["expected_tokens"]
            da, va, ra = float(r["t_draft_s"]), float(r["t_verify_s"]), float(r["t_round_s"])
            db, vb, rb = b["t_draft_s"], b["t_verify_s"], b["t_round_s"]
            ha, hb = float(r["t_round_host_s"]), float(b["t_round_host_s"])
            out.append(
                f"speculation pays at batch {b['batch']} ({b['speedup']:.2f}x) and not at batch {a['batch']}, where "
                f"the same setting ({b['strategy']}, gamma {b['gamma']}) gives {float(r['speedup']):.2f}x: its round "
                f"(draft {da * 1e3:.2f} + verify {va * 1e3:.2f} + host {ha * 1e3:.2f} ms) is {ra / step_a:.1f}x a plain step of "
                f"{step_a * 1e3:.2f} ms at batch {a['batch']}, {rb / step_b:.1f}x one of {step_b * 1e3:.2f} ms at batch "
                f"{b['batch']} (draft {db * 1e3:.2f} + verify {vb * 1e3:.2f} + host {hb * 1e3:.2f} ms): from batch {a['batch']} to "
                f"{b['batch']} the plain step grows {step_b / step_a:.1f}x, the draft passes {db / max(da, 1e-12):.1f}x, "
                f"the verify {vb / max(va, 1e-12):.1f}x and the host {hb / max(ha, 1e-12):.1f}x"
            )
            break
    return out


def _priced_under(args: argparse.Namespace) -> str:
    """The line saying what the plan's figures are priced under."""
    if not args.engine:
        return "priced on the datasheet roofline (no engine: an upper bound)"
    why = ""
    if getattr(args, "engine_from_emit", False):
        why = f" (--emit {args.emit}'s own costs; --engine names another)"
    elif getattr(args, "engine_config_read", None) is not None and not was_given(args, "engine"):
        why = " (the engine configuration's; --engine names a version of it)"
    elif args.engine == DEFAULT_ENGINE:
        why = " (the default; --engine none: the datasheet roofline)"
    elif args.engine in ("hf", "eager") and args.target and getattr(get_model(args.target), "is_moe", False):
        from roofline.costing.engine import hf_version_text

        why = f" ({hf_version_text()})"
    return f"priced under the {args.engine} engine{why}"


def _band_lines(cells: list[dict[str, Any]]) -> list[str]:
    """The error bands of a plan's answers, one line per band with the batches and contexts it covers."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in cells:
        groups.setdefault(r["error_band_note"], []).append(r)
    if len(groups) == 1:
        return [f"  error band: {next(iter(groups))}"]
    out = []
    for note, rs in groups.items():
        bs = ",".join(str(b) for b in sorted({int(r["batch"]) for r in rs}))
        cs = ",".join(str(c) for c in sorted({int(r["context"]) for r in rs}))
        out.append(f"  error band at batch {bs}, context {cs}: {note}")
    return out


def _plan_engine_config(args: argparse.Namespace, config: Any) -> int:
    """``plan --engine-config``: per (GPU, batch, context), your engine's setting priced beside the best setting of the
    same engine, "yours gives X; the best setting gives Y, with these flags" (roofline.deploy.planner.compare_engine_config);
    the table ranks every setting searched, yours marked."""
    import pandas as pd

    from roofline.costing.passtime import kv_bound_context
    from roofline.deploy.planner import compare_engine_config

    if args.dynamic_gamma:
        raise SpecroofError(
            "--dynamic-gamma prices Hugging Face's schedule against the plan's chains: not with --engine-config"
        )
    if args.emit is not None and args.emit != config.engine:
        raise SpecroofError(
            f"--emit {args.emit} and the engine configuration's {config.engine} differ: the answer is in your "
            "engine's flags (give one)"
        )
    by_key = drafters_by_key(args)  # the configuration's drafter (or --drafter naming the same one)
    acceptance: Any = acceptance_from_args(args, by_key)
    key, d = next(iter(by_key.items()))
    target = get_model(args.target)
    check_tp(target, args.tp)
    combos = len(args.hardware) * len(args.batch) * len(args.context)
    if combos > PLAN_MAX_VERDICTS:
        raise SpecroofError(
            f"{combos:,} (hardware, batch, context) combinations, over {PLAN_MAX_VERDICTS:,} for --engine-config (each "
            "searches the engine's settings): narrow --batch/--context"
        )
    apply_weight_only(args)
    kind = args.acceptance_kinds.get(key)
    value = acceptance[d.name] if isinstance(acceptance, dict) else acceptance
    note = args.acceptance_notes[0] if args.acceptance_notes else ""
    kw, note = config_acceptance(config, kind, value, note) if kind is not None else ({"acceptance": value}, note)
    pricings = [pricing_from_args(args, h) for h in args.hardware]
    cells: list[dict[str, Any]] = []
    frames = []
    lines: list[str] = []
    notes = list(config.notes)
    for pr in pricings:
        for b in args.batch:
            for c in args.context:
                v = compare_engine_config(config, pr, target=target, batch=b, context=c,
                                          max_gamma=max(1, args.max_gamma), resolution=RESOLUTION, **kw)  # fmt: skip
                n = v.table["num_draft_tokens"].to_numpy()
                t = v.table.assign(hardware=pr.hardware.id, kv_bound_context=kv_bound_context(target, pr, b, n),
                                   yours=v.table["label"] == v.yours["label"])  # fmt: skip
                frames.append(pd.concat([t.head(args.top), t[t["yours"]].iloc[:1]]).drop_duplicates(subset="label"))
                kv = int(kv_bound_context(target, pr, b, config.setting.num_draft_tokens))
                band = band_for(args.engine, pr.hardware, speculative=True, batch=b, model=target, context=c)
                cells.append({"hardware": pr.hardware.id, "batch": b, "context": c, **v.to_json(),
                              "kv_bound_context": kv, "error_band": band[0], "error_band_note": band[1]})  # fmt: skip
                sentence = v.sentence().splitlines()
                lines += [f"{pr.hardware.id}  batch {b:>4}  context {c:>6}:  {sentence[0]}",
                          *(f"    {x}" for x in sentence[1:])]  # fmt: skip
                notes += [x for x in v.notes if x not in notes]
    table = pd.concat(frames, ignore_index=True)
    cols = ["hardware", "batch", "context", "label", "num_draft_tokens", "expected_tokens", "t_round_s", "speedup",
            "kv_bound_context", "yours"]  # fmt: skip
    head = [
        f"acceptance: {note}",
        f"your setting: {config.label} (read from {config.source})",
        _priced_under(args),
        *_band_lines(cells),
        "",
    ]
    text = "\n".join([*head, *lines, *(f"note: {x}" for x in notes)])
    text += (
        "\n\n"
        + table[cols].round(4).to_string(index=False)
        + "\n"
        + KV_LEGEND.replace("of gamma + 1 tokens", "of the setting's num_draft_tokens")
    )
    payload = {
        "engine_config": config.to_json(),
        "verdicts": cells,
        "table": table.drop(columns=[c for c in ("setting", "best") if c in table]).to_dict(orient="records"),
        "acceptance": [note],
        "engine": args.engine,
        "notes": notes,
    }
    emit(args, payload, text)
    return 0


def add_parser(sub: Any) -> None:
    """Register ``specroof plan``."""
    p = sub.add_parser("plan", help="choose strategy and gamma for a GPU, target and drafter(s)")
    p.add_argument("--hardware", nargs="+", required=True)
    p.add_argument(
        "--target",
        "--model",
        dest="target",
        help="target model: preset, config.json or checkpoint folder (required unless --engine-config names it)",
    )
    p.add_argument(
        "--drafter",
        action="append",
        metavar="SPEC",
        help=f"a drafter, repeat to compare: {DRAFTER_GRAMMAR}",
    )
    p.add_argument("--draft", help="same as --drafter model:NAME (a separate draft model)")
    p.add_argument("--early-exit", type=bounded_int(1, 10_000), help="same as --drafter early-exit:L")
    p.add_argument("--heads", type=bounded_int(1, 1024), help="same as --drafter medusa:HEADS")
    p.add_argument("--block", help="same as --drafter block:NAME (a DFlash-style parallel block drafter)")
    p.add_argument("--window", type=bounded_int(1, INT_MAX), help="same as --drafter window:W")
    p.add_argument("--prompt-lookup", action="store_true", help="same as --drafter prompt-lookup")
    p.add_argument(
        "--acceptance",
        action="append",
        metavar="KEY=VALUE",
        help="acceptance of one drafter (repeat per drafter): KEY is the drafter's name before any ':' (model, eagle3, "
        "mtp, early-exit, ...), VALUE 0.7 or alpha:0.7 (per-token), mean:3.2[@G] (tokens per round), vllm-rate:0.7@K "
        "(vLLM's accepted/drafted at K speculative tokens), curve:0.9,0.8,... or a file (curve, counts, or a vLLM, "
        "SGLang or Spec-Bench metrics file)",
    )
    p.add_argument("--alpha", type=finite_float, help="one per-token acceptance rate (one drafter, or --same-alpha)")
    p.add_argument("--acceptance-curve", help="JSON/text file with per-position acceptance a_1..a_g (one drafter)")
    p.add_argument("--same-alpha", action="store_true", help="compare several drafters at one shared acceptance")
    p.add_argument(
        "--dynamic-gamma",
        action="store_true",
        help="also price Hugging Face's heuristic schedule (gamma +2 / -1 per round) against the best static gamma",
    )
    _add_offload(p)
    add_int_list(p, "--batch", 1, INT_MAX, [1], "sequences per pass")
    add_int_list(p, "--context", 0, INT_MAX, [1024], "tokens already in each KV cache")
    p.add_argument("--max-gamma", type=bounded_int(0, 256), default=16)
    p.add_argument("--dtype", action=GivenStore, default="bf16", help="compute/activation dtype (default bf16)")
    p.add_argument("--weight-dtype", default=None, help=WEIGHT_DTYPE_HELP)
    p.add_argument("--kv-dtype", default=None, help=KV_DTYPE_HELP)
    p.add_argument(
        "--tp", type=bounded_int(1, 1024), action=GivenStore, default=1, help="tensor-parallel degree of the target"
    )
    _add_engine(p)
    add_engine_config(p)
    p.add_argument("--top", type=bounded_int(1, 10**6), default=10, help="rows of the ranked table to show")
    p.add_argument(
        "--emit",
        choices=("sglang", "vllm", "trtllm"),
        help="also answer in this engine's own flags: EAGLE/MTP searched over its tree knobs, chains at the best gamma "
        "(priced under this engine's profile unless --engine names another)",
    )
    p.add_argument("--draft-model", help="with --emit: the draft checkpoint to name (a Hugging Face id or a path)")
    p.add_argument(
        "--memory-fraction",
        type=finite_float,
        default=None,
        help="the share of each device the engine may use (vLLM's --gpu-memory-utilization, SGLang's "
        "--mem-fraction-static; default: that engine's default when --emit or --engine names it, else the whole device)",
    )
    _add_json(p)
    p.set_defaults(func=cmd_plan)

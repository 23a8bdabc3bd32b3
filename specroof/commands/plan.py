"""``specroof plan``: the strategy and gamma for a GPU, target and drafter(s), and the engine flags that deploy it."""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from roofline.errors import SpecroofError
from roofline.hardware import load_hardware
from roofline.model import get_model
from roofline.validation import check_tp
from specroof.commands.common import (
    DRAFTER_GRAMMAR,
    KV_DTYPE_HELP,
    PLAN_MAX_CELLS,
    PLAN_MAX_RECOMMENDATIONS,
    TREE_DRAFTER_KEYS,
    WEIGHT_DTYPE_HELP,
    acceptance_from_args,
    apply_weight_only,
    band_for,
    drafter_key,
    drafters_by_key,
)
from specroof.shell import (
    DEFAULT_ENGINE,
    INT_MAX,
    _add_engine,
    _add_json,
    _add_offload,
    add_int_list,
    bounded_int,
    emit,
    finite_float,
    pricing_from_args,
)


def _engine_trees(args: argparse.Namespace, key: str, d: Any, acceptance: Any, hw: str, c: int) -> Any:
    """The engine's own EAGLE settings searched for one drafter (roofline.engine_search), per batch."""
    from roofline.engine_search import plan_engine
    from roofline.engine_trees import SGLANG_DEFAULT, EngineSetting
    from roofline.trees import IIDAcceptance

    kind = drafter_key(key)
    acc = getattr(args, "acceptance_kinds", {}).get(key)
    if acc is not None and getattr(acc, "kind", "") == "mean" and acc.gamma is None:
        kw: dict[str, Any] = {"mean_accepted": acc.mean, "measured_at": SGLANG_DEFAULT}
    elif acc is not None and getattr(acc, "kind", "") == "mean" and acc.gamma:
        g = int(acc.gamma)
        kw = {"mean_accepted": acc.mean, "measured_at": EngineSetting(args.emit, g, 1, g + 1)}
    else:
        a = acceptance[d.name] if isinstance(acceptance, dict) else acceptance
        kw = {"acceptance": IIDAcceptance(float(a if np.isscalar(a) else np.mean(a)))}
    return plan_engine(
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
    (roofline.engine_search); a tree that beats the chosen chain replaces it, and the recommendation says so.
    """
    from roofline.engine_flags import emit_flags
    from roofline.engine_trees import EngineSetting
    from roofline.model import hf_id

    names = {"sglang": "SGLang", "vllm": "vLLM", "trtllm": "TensorRT-LLM"}
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
            if not tree_setting.is_chain and tree_speedup > speedup:
                setting, speedup = tree_setting, tree_speedup
                r["reason"] += (
                    f"; as {names[args.emit]} builds {kind}'s tree, {setting.label} is faster still "
                    f"({speedup:.2f}x): that is the setting deployed"
                )
        draft_model = args.draft_model
        if kind == "model" and draft_model is None:
            draft_model = hf_id(d.spec) if hasattr(d, "spec") else None
        r["deploy_setting"] = setting.label
        out.append(
            row
            | {
                "drafter": key,
                "knobs": setting.knobs(),
                "label": setting.label,
                "num_steps": setting.num_steps,
                "topk": setting.topk,
                "num_draft_tokens": setting.num_draft_tokens,
                "speedup": speedup,
                "flags": emit_flags(setting, target=args.target, drafter=kind, draft_model=draft_model),
            }
        )
    return out


def _add_dynamic_gamma(
    best: list[dict[str, Any]], args: argparse.Namespace, by_key: dict[str, Any], acc: Any, hws: dict[str, Any]
) -> None:
    """Each recommendation's drafter run under Hugging Face's heuristic schedule, against its best static gamma."""
    from roofline.gamma_policies import HeuristicSchedule, compare_policies

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
    from roofline.planner import plan, recommend

    by_key = drafters_by_key(args)
    acceptance: Any = acceptance_from_args(args, by_key)
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
    best = []
    for pr in pricings:
        for b in args.batch:
            for c in args.context:
                rec = recommend(pr, args.target, drafters, acceptance, batch=b, context=c, table=table, gammas=gammas)
                row = {"hardware": pr.hardware.id, "batch": b, "context": c, **rec.row, "reason": rec.reason}
                if not rec.row["fits_in_memory"]:  # marked and not ranked: no strategy is an answer on this GPU
                    cap = pr.hardware.memory_bytes * max(1, args.tp) if pr.hardware.memory_bytes else float("nan")
                    row |= {"strategy": None, "gamma": None, "speedup": None}
                    row["reason"] = (
                        f"does not fit in memory: needs {rec.row['memory_bytes'] / 1e9:.0f} GB (weights + KV), the "
                        f"{'device holds' if args.tp == 1 else f'{args.tp} devices hold'} {cap / 1e9:.0f} GB: raise "
                        "--tp, store the weights in "
                        "fewer bits (--weight-dtype) or shorten --context"
                    )
                best.append(row)
    if args.dynamic_gamma:
        _add_dynamic_gamma(best, args, by_key, acceptance, {pr.hardware.id: pr for pr in pricings})
    payload = {
        "recommendations": best,
        "table": table.head(args.top).to_dict(orient="records"),
        "acceptance": getattr(args, "acceptance_notes", []),
    }
    if args.emit:  # before the sentences: a tree the engine builds may replace the chosen chain, and says so
        payload["deploy"] = _deploy(args, by_key, acceptance, best)
    lines = [f"{r['hardware']}  batch {r['batch']:>4}  context {r['context']:>6}:  {r['reason']}" for r in best]
    priced = (
        f"priced under the {args.engine} engine" + (" (the default; --engine none: the datasheet roofline)"
                                                    if args.engine == DEFAULT_ENGINE else "")
        if args.engine else "priced on the datasheet roofline (no engine: an upper bound)"
    )  # fmt: skip
    payload["engine"] = args.engine
    bands = {pr.hardware.id: band_for(args.engine, pr.hardware, speculative=True) for pr in pricings}
    payload["error_bands"] = {h: {"error_band": b[0], "error_band_note": b[1]} for h, b in bands.items()}
    lines = [priced, *(f"  {h}: {b[1]}" for h, b in bands.items()), "", *lines]
    if getattr(args, "acceptance_notes", None):
        lines = ["acceptance, as given and as priced:", *(f"  {n}" for n in args.acceptance_notes), "", *lines]
    if args.emit:
        names = {"sglang": "SGLang", "vllm": "vLLM", "trtllm": "TensorRT-LLM"}
        lines += ["", f"deploying it with {names[args.emit]} (the engine's own knobs; the setting chosen above):"]
        for r in payload["deploy"]:
            who = f" {r['drafter']}" if r["drafter"] else ""
            fast = f" ({r['speedup']:.2f}x)" if r["speedup"] is not None else ""
            lines += [f"  {r['hardware']} batch {r['batch']}{who}: {r['label']}{fast}"]
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
    shown = table[fits].head(args.top)[
        [
            "hardware",
            "strategy",
            "gamma",
            "batch",
            "context",
            "expected_tokens",
            "t_round_s",
            "tokens_per_s_per_user",
            "tokens_per_s_total",
            "speedup",
        ]
    ]
    emit(args, payload, "\n".join(lines) + "\n\n" + shown.round(4).to_string(index=False))
    return 0


def add_parser(sub: Any) -> None:
    """Register ``specroof plan``."""
    p = sub.add_parser("plan", help="choose strategy and gamma for a GPU, target and drafter(s)")
    p.add_argument("--hardware", nargs="+", required=True)
    p.add_argument(
        "--target",
        "--model",
        dest="target",
        required=True,
        help="target model: preset, config.json or checkpoint folder",
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
    p.add_argument("--dtype", default="bf16", help="compute/activation dtype (default bf16)")
    p.add_argument("--weight-dtype", default=None, help=WEIGHT_DTYPE_HELP)
    p.add_argument("--kv-dtype", default=None, help=KV_DTYPE_HELP)
    p.add_argument("--tp", type=bounded_int(1, 1024), default=1, help="tensor-parallel degree of the target")
    _add_engine(p)
    p.add_argument("--top", type=bounded_int(1, 10**6), default=10, help="rows of the ranked table to show")
    p.add_argument(
        "--emit",
        choices=("sglang", "vllm", "trtllm"),
        help="also answer in this engine's own flags: EAGLE/MTP searched over its tree knobs, chains at the best gamma",
    )
    p.add_argument("--draft-model", help="with --emit: the draft checkpoint to name (a Hugging Face id or a path)")
    _add_json(p)
    p.set_defaults(func=cmd_plan)

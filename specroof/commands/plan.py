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
    drafter_key,
    drafters_by_key,
)
from specroof.shell import (
    INT_MAX,
    _add_engine,
    _add_json,
    _add_offload,
    bounded_int,
    emit,
    finite_float,
    int_list,
    pricing_from_args,
)


def _deploy(args: argparse.Namespace, by_key: dict[str, Any], acceptance: Any, best: list[dict[str, Any]]) -> list:
    """``plan --emit ENGINE``: per batch and drafter, the best setting in the engine's own knobs and its launch flags.

    EAGLE-family drafters are searched over the engine's own tree knobs (roofline.engine_search); chain drafters
    (a draft model, prompt lookup, Medusa in vLLM) deploy the plan's best gamma as that engine's chain.
    """
    from roofline.engine_flags import emit_flags
    from roofline.engine_search import plan_engine
    from roofline.engine_trees import SGLANG_DEFAULT, EngineSetting
    from roofline.model import hf_id
    from roofline.trees import IIDAcceptance

    out: list[dict[str, Any]] = []
    for hw in args.hardware:
        for c in args.context:
            for key, d in by_key.items():
                kind = drafter_key(key)
                if kind in TREE_DRAFTER_KEYS:
                    acc = getattr(args, "acceptance_kinds", {}).get(key)
                    if acc is not None and getattr(acc, "kind", "") == "mean" and acc.gamma is None:
                        kw: dict[str, Any] = {"mean_accepted": acc.mean, "measured_at": SGLANG_DEFAULT}
                    elif acc is not None and getattr(acc, "kind", "") == "mean" and acc.gamma:
                        g = int(acc.gamma)
                        kw = {"mean_accepted": acc.mean, "measured_at": EngineSetting(args.emit, g, 1, g + 1)}
                    else:
                        a = acceptance[d.name] if isinstance(acceptance, dict) else acceptance
                        alpha = float(a if np.isscalar(a) else np.mean(a))
                        kw = {"acceptance": IIDAcceptance(alpha)}
                    plan = plan_engine(
                        hardware=args.pricings[hw],
                        target=args.target,
                        drafter=kind if kind != "eagle1" else "eagle",
                        framework=args.emit,
                        batches=args.batch,
                        context=c,
                        **kw,
                    )
                    for r in plan.records(target=args.target, drafter=kind, draft_model=args.draft_model):
                        out.append({"hardware": hw, "context": c, "drafter": key, "engine": args.emit, **r})
                    continue
                for r in best:
                    if r["hardware"] != load_hardware(hw).id or r["context"] != c or r["strategy"] != d.name:
                        continue
                    g = int(r["gamma"])
                    setting = EngineSetting(args.emit, g, 1, g + 1)
                    draft_model = args.draft_model
                    if kind == "model" and draft_model is None:
                        draft_model = hf_id(d.spec) if hasattr(d, "spec") else None
                    flags = emit_flags(setting, target=args.target, drafter=kind, draft_model=draft_model)
                    out.append(
                        {
                            "hardware": hw,
                            "context": c,
                            "drafter": key,
                            "engine": args.emit,
                            "batch": r["batch"],
                            "knobs": setting.knobs(),
                            "label": setting.label,
                            "speedup": r["speedup"],
                            "flags": flags,
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
                best.append({"hardware": pr.hardware.id, "batch": b, "context": c, **rec.row, "reason": rec.reason})
    if args.dynamic_gamma:
        _add_dynamic_gamma(best, args, by_key, acceptance, {pr.hardware.id: pr for pr in pricings})
    payload = {
        "recommendations": best,
        "table": table.head(args.top).to_dict(orient="records"),
        "acceptance": getattr(args, "acceptance_notes", []),
    }
    lines = [f"{r['hardware']}  batch {r['batch']:>4}  context {r['context']:>6}:  {r['reason']}" for r in best]
    if getattr(args, "acceptance_notes", None):
        lines = ["acceptance, as given and as priced:", *(f"  {n}" for n in args.acceptance_notes), "", *lines]
    if args.emit:
        payload["deploy"] = _deploy(args, by_key, acceptance, best)
        names = {"sglang": "SGLang", "vllm": "vLLM", "trtllm": "TensorRT-LLM"}
        lines += ["", f"deploying it with {names[args.emit]} (the engine's own knobs; best setting per batch):"]
        for r in payload["deploy"]:
            lines += [f"  {r['hardware']} batch {r['batch']} {r['drafter']}: {r['label']} ({r['speedup']:.2f}x)"]
            lines += [f"    {line}" for line in str(r["flags"]).splitlines()]
    if args.dynamic_gamma:
        lines += [
            f"  Hugging Face's heuristic schedule instead: {r['heuristic_speedup']:.2f}x "
            f"({r['heuristic_vs_best_static']:+.1%} against the best static gamma)"
            for r in best
            if "heuristic_speedup" in r
        ]
    shown = table.head(args.top)[
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
    p.add_argument("--target", required=True, help="target model: preset, config.json or checkpoint folder")
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
    p.add_argument("--batch", type=int_list, default=[1])
    p.add_argument("--context", type=int_list, default=[1024])
    p.add_argument("--max-gamma", type=bounded_int(0, 256), default=16)
    p.add_argument("--dtype", default="bf16")
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

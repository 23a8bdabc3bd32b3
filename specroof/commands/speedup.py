"""``specroof speedup``: the speedup of one configuration, idealised (alpha, c) or priced on a GPU."""

from __future__ import annotations

import argparse
from typing import Any

from roofline.errors import SpecroofError
from roofline.hardware import load_hardware
from roofline.model import get_model
from roofline.validation import check_gamma, check_tp, not_both
from specroof.commands.common import (
    KV_DTYPE_HELP,
    WEIGHT_DTYPE_HELP,
    apply_weight_only,
    band_for,
)
from specroof.shell import (
    INT_MAX,
    _add_engine,
    _add_json,
    bounded_int,
    emit,
    finite_float,
    pricing_from_args,
)


def cmd_speedup(args: argparse.Namespace) -> int:
    from roofline.speculative import expected_tokens, ideal_speedup, optimal_gamma

    not_both({"--c (the idealised form)": args.c, "--hardware (the priced form)": args.hardware})
    if args.target is not None or args.drafter is not None:
        return _speedup_priced(args)
    if args.alpha is None or args.c is None:
        raise SpecroofError(
            "give --alpha and --c (the idealised form), or --hardware --target --drafter --mean-accepted (a priced one)"
        )
    if args.gamma is None:
        args.gamma = "auto"
    if args.gamma == "auto":
        g, s = optimal_gamma(args.alpha, args.c, args.max_gamma)
        gamma, sp = int(g), float(s)
    else:
        try:
            gamma = int(args.gamma)
        except ValueError:
            raise SpecroofError(f"--gamma must be a whole number or 'auto' (got {args.gamma!r})") from None
        gamma = check_gamma(gamma, "--gamma")
        sp = float(ideal_speedup(args.alpha, gamma, args.c))
    e = float(expected_tokens(args.alpha, gamma))
    payload = {"alpha": args.alpha, "c": args.c, "gamma": gamma, "expected_tokens": e, "speedup": sp}
    emit(args, payload, f"alpha {args.alpha}, c {args.c}: gamma {gamma} -> {e:.3f} tokens per round, speedup {sp:.3f}x")
    return 0


def _speedup_priced(args: argparse.Namespace) -> int:
    """``speedup --hardware --target --drafter --mean-accepted``: one configuration priced by the cost model."""
    from roofline.speculative import predict_speedup

    missing = [f for f in ("hardware", "target", "drafter") if getattr(args, f) is None]
    if missing:
        raise SpecroofError("a priced speedup needs " + ", ".join(f"--{m}" for m in missing))
    not_both({"--c (the idealised form)": args.c, "--hardware (the priced form)": args.hardware})
    not_both({"--alpha": args.alpha, "--mean-accepted": args.mean_accepted})
    check_tp(get_model(args.target), args.tp)
    if args.mean_accepted is None and args.alpha is None:
        raise SpecroofError("give --mean-accepted (tokens per round, bonus included) or --alpha")
    if args.tree is not None and args.gamma is not None:
        raise SpecroofError("--gamma and --tree exclude each other")
    apply_weight_only(args)
    gamma: int | str | None = args.gamma
    if gamma not in (None, "heuristic"):
        try:
            gamma = check_gamma(int(gamma), "--gamma")
        except ValueError:
            raise SpecroofError(f"--gamma must be a whole number or 'heuristic' (got {args.gamma!r})") from None
    r = predict_speedup(
        hardware=pricing_from_args(args),
        target=args.target,
        drafter=args.drafter,
        mean_accepted=args.mean_accepted,
        alpha=args.alpha,
        gamma=gamma,
        tree=args.tree,
        batch=args.batch,
        context=args.context,
    )
    payload = r.to_dict() | {"hardware": args.hardware, "target": args.target}
    band = band_for(args.engine, load_hardware(args.hardware), speculative=True)
    payload["error_band"], payload["error_band_note"] = band
    shape = f"tree of {r.tree_nodes} nodes" if r.tree_nodes else f"gamma {r.gamma:g}"
    text = "\n".join(
        [
            f"{args.target} + {r.drafter} ({shape}) on {args.hardware}, engine {r.engine}: speedup {r.speedup:.2f}x"
            f" ({band[1]})",
            f"  {r.mean_accepted:.2f} tokens per round of {r.t_round_s * 1e3:.2f} ms "
            f"(draft {r.t_draft_s * 1e3:.2f}, verify {r.t_verify_s * 1e3:.2f}, host {r.t_round_host_s * 1e3:.2f})"
            f" against one token per {r.t_base_s * 1e3:.2f} ms",
            f"  {r.tokens_per_s:.1f} tokens/s against {r.baseline_tokens_per_s:.1f}",
        ]
    )
    emit(args, payload, text)
    return 0


def add_parser(sub: Any) -> None:
    """Register ``specroof speedup``."""
    p = sub.add_parser(
        "speedup",
        help="speedup of one configuration: priced (--hardware --target --drafter --mean-accepted [--engine]) "
        "or idealised E / (gamma c + 1) (--alpha --c)",
    )
    p.add_argument("--alpha", type=finite_float, help="per-token acceptance rate in [0, 1]")
    p.add_argument("--gamma", default=None, help="speculation length; 'auto' (idealised), 'heuristic' (priced: HF's)")
    p.add_argument("--c", type=finite_float, help="idealised form: draft step cost over target step cost")
    p.add_argument("--max-gamma", type=bounded_int(1, 4096), default=64)
    p.add_argument("--hardware", help="priced form: profile id, alias or .toml path")
    p.add_argument("--target", help="priced form: target model preset or config.json")
    p.add_argument(
        "--drafter", help="eagle, eagle2, eagle3, mtp, medusa, hydra, prompt-lookup, early-exit:L or model:NAME"
    )
    p.add_argument(
        "--mean-accepted",
        type=finite_float,
        help="measured tokens per round, bonus included (Spec-Bench's #mean accepted tokens, vLLM's mean acceptance length)",
    )
    p.add_argument(
        "--tree",
        help="a named tree (eagle, eagle2, eagle3, medusa, hydra), an inline parent array (parents:-1,0,0,1), "
        "rank paths ([[0],[1],[0,0]]: Medusa choices, vLLM's speculative_token_tree) or a JSON file with a parent "
        "array, rank paths or a Sequoia growmap (default: the drafter's own, if any)",
    )
    p.add_argument("--batch", type=bounded_int(1, INT_MAX), default=1)
    p.add_argument("--context", type=bounded_int(0, INT_MAX), default=1024)
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--weight-dtype", default=None, help=WEIGHT_DTYPE_HELP)
    p.add_argument("--kv-dtype", default=None, help=KV_DTYPE_HELP)
    p.add_argument("--tp", type=bounded_int(1, 1024), default=1)
    _add_engine(p)
    _add_json(p)
    p.set_defaults(func=cmd_speedup)

"""``specroof speedup``: the speedup of one configuration, idealised (alpha, c) or priced on a GPU."""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from roofline.core.errors import SpecroofError
from roofline.core.validation import check_gamma, check_tp, not_both
from roofline.costing.hardware import load_hardware
from roofline.passes.model import get_model
from specroof.commands.common import (
    KV_DTYPE_HELP,
    WEIGHT_DTYPE_HELP,
    add_engine_config,
    apply_weight_only,
    band_for,
    config_acceptance,
    drafter_key,
    engine_config_from_args,
    fit_cures,
    single_acceptance,
)
from specroof.shell import (
    DEFAULT_ENGINE,
    INT_MAX,
    GivenStore,
    _add_engine,
    _add_json,
    bounded_int,
    emit,
    finite_float,
    pricing_from_args,
)


def cmd_speedup(args: argparse.Namespace) -> int:
    from roofline.speculation.speculative import expected_tokens, ideal_speedup, optimal_gamma

    not_both({"--c (the idealised form)": args.c, "--hardware (the priced form)": args.hardware})
    if args.engine_config is not None:
        return _speedup_engine_config(args)
    if args.target is not None or args.drafter is not None:
        return _speedup_priced(args)
    if args.alpha is None or args.c is None:
        raise SpecroofError(
            "give --alpha and --c (the idealised form), or --hardware --target --drafter --mean-accepted (a priced one)"
        )
    if not 0.0 <= args.c <= 1.0:  # a draft step that costs more than a target step never pays
        raise SpecroofError(
            f"--c must lie in [0, 1]: a draft step's cost over a target step's (got {args.c:g}); at c >= 1 "
            "speculation cannot pay"
        )
    if not 0.0 <= args.alpha <= 1.0:
        raise SpecroofError(f"--alpha must lie in [0, 1]: a per-token acceptance rate (got {args.alpha:g})")
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


def _acceptance(args: argparse.Namespace, gamma: int | str | None) -> tuple[float | None, float | None, str]:
    """(mean_accepted, alpha, what it was read as) for the priced form: --mean-accepted or --alpha as given, else
    ``--acceptance [KEY=]VALUE`` in the grammar every command shares, else the drafter's published figure.

    A per-token rate priced on a tree (the drafter's own, or ``--tree``) is read as i.i.d. candidates (section 9 of
    docs/cost-model.md): the tree's expected tokens under it are the round's tokens."""
    if args.mean_accepted is not None or (args.alpha is not None and gamma is not None):
        return args.mean_accepted, args.alpha, ""
    from roofline.speculation.acceptance import MeanAccepted

    if args.alpha is not None:  # a rate on the drafter's tree: read as i.i.d. candidates, as --acceptance RATE is
        acc, value, note = None, args.alpha, f"{drafter_key(args.drafter)}: given rate {args.alpha:g}"
    else:
        acc, value, note = single_acceptance(args.acceptance, args.drafter, args.target)
    if isinstance(acc, MeanAccepted) and (acc.gamma is None or acc.gamma == gamma or gamma is None):
        # tokens per round as measured: the round priced is taken to be the one it was measured on
        return acc.mean, None, f"{drafter_key(args.drafter)}: given {acc.given()}, priced as the round's tokens"
    if isinstance(acc, MeanAccepted) and acc.gamma is not None and isinstance(gamma, int):
        # a chain mean at another gamma: its class's per-position decay, not an i.i.d. rate (docs/cost-model.md, 50.1)
        from roofline.speculation.acceptance_positions import MeasuredCurve

        curve = MeasuredCurve(acc.mean, acc.gamma, drafter_key(args.drafter), max(gamma, acc.gamma)).curve()
        mean = 1.0 + float(np.sum(np.cumprod(curve[:gamma])))
        past = (
            f", extrapolated {gamma - acc.gamma} positions past the {acc.gamma} measured" if gamma > acc.gamma else ""
        )
        return mean, None, f"{note}; at gamma {gamma}: {mean:.3f} tokens per round{past}"
    if getattr(acc, "kind", "") in ("curve", "counts") and isinstance(gamma, int):
        # a measured per-position curve prices the chain position by position (no rate stretched over it): an MTP
        # module reused past its step is what a curve is asked for
        mean = acc.tokens_per_round(gamma)
        return mean, None, f"{note}; at gamma {gamma}: {mean:.3f} tokens per round, position by position"
    rate = float(value) if isinstance(value, (int, float)) else float(acc.alpha())
    if gamma is None:
        from roofline.speculation.drafters import as_drafter, default_tree, tree_preset
        from roofline.speculation.trees import IIDAcceptance

        tree = tree_preset(args.tree) if args.tree is not None else default_tree(as_drafter(args.drafter, args.target))
        if tree is not None:
            mean = float(tree.expected_tokens(IIDAcceptance(rate)))
            return (
                mean,
                None,
                f"{note}; on its {tree.n_nodes}-node tree, i.i.d. candidates: {mean:.3f} tokens per round",
            )
    return None, rate, note


def _speedup_priced(args: argparse.Namespace) -> int:
    """``speedup --hardware --target --drafter --mean-accepted``: one configuration priced by the cost model."""
    from roofline.speculation.speculative import predict_speedup

    missing = [f for f in ("hardware", "target", "drafter") if getattr(args, f) is None]
    if missing:
        raise SpecroofError("a priced speedup needs " + ", ".join(f"--{m}" for m in missing))
    not_both({"--c (the idealised form)": args.c, "--hardware (the priced form)": args.hardware})
    not_both({"--alpha": args.alpha, "--mean-accepted": args.mean_accepted, "--acceptance": args.acceptance})
    check_tp(get_model(args.target), args.tp)
    if args.tree is not None and args.gamma is not None:
        raise SpecroofError("--gamma and --tree exclude each other")
    apply_weight_only(args)
    gamma: int | str | None = args.gamma
    if gamma not in (None, "heuristic"):
        try:
            gamma = check_gamma(int(gamma), "--gamma")
        except ValueError:
            raise SpecroofError(f"--gamma must be a whole number or 'heuristic' (got {args.gamma!r})") from None
    from roofline.speculation.acceptance_defaults import matched_default

    # no acceptance given and none published for this drafter class on this target: answered over acceptance
    unmatched = (
        args.acceptance is None
        and args.mean_accepted is None
        and args.alpha is None
        and matched_default(drafter_key(args.drafter), args.target) is None
    )
    chain_note = ""
    if gamma is None and args.tree is None:
        from roofline.speculation.acceptance_positions import VLLM_READING_GAMMA, engine_family

        if engine_family(args.engine) == "vllm":  # vLLM drafts a chain: its shape, not the drafter's own tree
            from roofline.speculation.acceptance_positions import measured_length

            acc = None
            if args.mean_accepted is None and args.alpha is None and not unmatched:
                acc = single_acceptance(args.acceptance, args.drafter, args.target)[0]
            gamma = (measured_length(drafter_key(args.drafter), acc, "vllm") if acc is not None else None) or (
                VLLM_READING_GAMMA
            )
            chain_note = (
                f"vLLM drafts a chain: priced at num_speculative_tokens={gamma}, as measured (--gamma for another)"
            )
    if gamma is None and args.tree is None and args.mean_accepted is None and args.alpha is None and not unmatched:
        acc0 = single_acceptance(args.acceptance, args.drafter, args.target, args)[0]
        if getattr(acc0, "kind", "") == "mean" and acc0.gamma is not None:  # a chain's mean: priced on that chain
            gamma = int(acc0.gamma)
            chain_note = f"measured on a chain of {gamma}: priced there, not on the drafter's tree (--gamma, --tree)"
    if unmatched:
        return _speedup_curve(args, gamma)  # no matched figure: the answer over acceptance, not one number
    mean_accepted, alpha, note = _acceptance(args, gamma)
    note = "; ".join(x for x in (note, chain_note) if x)
    r = predict_speedup(
        hardware=pricing_from_args(args),
        target=args.target,
        drafter=args.drafter,
        mean_accepted=mean_accepted,
        alpha=alpha,
        gamma=gamma,
        tree=args.tree,
        batch=args.batch,
        context=args.context,
    )
    # the engine as asked (serving by default) and the profile it resolved to (serving is an alias of vLLM's)
    asked = args.engine or "roofline"
    unfit = _does_not_fit(args, r)
    if unfit is not None:  # no speedup for a configuration the engine cannot hold (docs/cost-model.md, 50.4)
        payload = {"hardware": args.hardware, "target": args.target, "drafter": r.drafter, "engine": asked,
                   "fits_in_memory": False, "speedup": None, **unfit}  # fmt: skip
        emit(args, payload, f"{args.target} + {r.drafter} on {args.hardware}: {unfit['reason']}")
        return 0
    payload = r.to_dict() | {"hardware": args.hardware, "target": args.target, "engine": asked}
    payload["engine_profile"] = r.engine
    # the band of this answer's own group: its batch bucket, a dense or MoE target, its context class
    band = band_for(args.engine, load_hardware(args.hardware), speculative=True, batch=args.batch,
                    model=args.target, context=args.context)  # fmt: skip
    payload["error_band"], payload["error_band_note"] = band
    shape = f"tree of {r.tree_nodes} nodes" if r.tree_nodes else f"gamma {r.gamma:g}"
    text = "\n".join(
        [
            f"{args.target} + {r.drafter} ({shape}) on {args.hardware}, engine {asked}"
            + (" (the default)" if args.engine == DEFAULT_ENGINE else "")
            + f": speedup {r.speedup:.2f}x"
            f" ({band[1]})",
            f"  {r.mean_accepted:.2f} tokens per round of {r.t_round_s * 1e3:.2f} ms "
            f"(draft {r.t_draft_s * 1e3:.2f}, verify {r.t_verify_s * 1e3:.2f}, host {r.t_round_host_s * 1e3:.2f})"
            f" against one token per {r.t_base_s * 1e3:.2f} ms",
            f"  {r.tokens_per_s:.1f} tokens/s against {r.baseline_tokens_per_s:.1f}",
            *([f"  acceptance: {note}"] if note else []),
        ]
    )
    if note:
        payload["acceptance"] = note
    emit(args, payload, text)
    return 0


def _speedup_curve(args: argparse.Namespace, gamma: int | str | None) -> int:
    """No published acceptance of this drafter class on the target's family and size class: the speedup over the
    range of per-token rates every command answers over, with the break-even rate (a tree's rate is read as
    i.i.d. candidates, as ``--alpha`` on a tree is), never one number priced at a borrowed figure."""
    from roofline.speculation.acceptance_defaults import (
        CURVE_ALPHAS,
        break_even,
        break_even_words,
        no_match_sentence,
        pays,
    )
    from roofline.speculation.drafters import as_drafter, default_tree, tree_preset
    from roofline.speculation.speculative import predict_speedup
    from roofline.speculation.trees import IIDAcceptance

    pr = pricing_from_args(args)
    tree = None
    if gamma is None:
        tree = tree_preset(args.tree) if args.tree is not None else default_tree(as_drafter(args.drafter, args.target))
    points = []
    for a in CURVE_ALPHAS:
        kw: dict[str, Any] = (
            {"alpha": a} if tree is None else {"mean_accepted": float(tree.expected_tokens(IIDAcceptance(a)))}
        )
        r = predict_speedup(hardware=pr, target=args.target, drafter=args.drafter, gamma=gamma, tree=args.tree,
                            batch=args.batch, context=args.context, **kw)  # fmt: skip
        points.append(r)
    asked = args.engine or "roofline"
    first = points[0]
    unfit = _does_not_fit(args, first)
    rate = "per-token rate" if tree is None else "per-candidate rate"
    sentence = (
        f"{no_match_sentence(drafter_key(args.drafter), args.target)}: give --acceptance "
        f"{drafter_key(args.drafter)}=VALUE for one answer; the answer is the speedup over a range of {rate}s"
        + (" (i.i.d. candidates on its tree)" if tree is not None else "")
        + ", with the break-even rate"
    )
    if unfit is not None:
        payload = {"hardware": args.hardware, "target": args.target, "drafter": first.drafter, "engine": asked,
                   "fits_in_memory": False, "speedup": None, "acceptance": sentence, **unfit}  # fmt: skip
        emit(args, payload, f"acceptance: {sentence}\n{args.target} + {first.drafter} on {args.hardware}: "
             f"{unfit['reason']}")  # fmt: skip
        return 0
    be = break_even(list(CURVE_ALPHAS), [pays(p.speedup) for p in points])
    shape = f"tree of {first.tree_nodes} nodes" if first.tree_nodes else f"gamma {first.gamma:g}"
    curve = [{"alpha": a, "mean_accepted": p.mean_accepted, "speedup": p.speedup, "t_round_s": p.t_round_s}
             for a, p in zip(CURVE_ALPHAS, points, strict=True)]  # fmt: skip
    payload = {"hardware": args.hardware, "target": args.target, "drafter": first.drafter, "engine": asked,
               "engine_profile": first.engine, "gamma": first.gamma, "tree_nodes": first.tree_nodes,
               "acceptance": sentence, "curve": curve, "break_even_alpha": be, "t_base_s": first.t_base_s}  # fmt: skip
    text = "\n".join(
        [
            f"acceptance: {sentence}",
            f"{args.target} + {first.drafter} ({shape}) on {args.hardware}, engine {asked}: speculation "
            f"{break_even_words(be, rate)}",
            "  speedup by rate: "
            + ", ".join(f"{a:g}: {p.speedup:.2f}x" for a, p in zip(CURVE_ALPHAS, points, strict=True)),
        ]
    )
    emit(args, payload, text)
    return 0


def _does_not_fit(args: argparse.Namespace, r: Any) -> dict[str, Any] | None:
    """None when the configuration fits the engine's share of each device; else the reason, per device, and the
    largest batch and context that fit it (roofline.deploy.memory; docs/cost-model.md, section 50.4)."""
    from roofline.deploy.memory import largest_fit, per_device_bytes, reserved_share
    from roofline.speculation.acceptance_positions import engine_family
    from roofline.speculation.drafters import as_drafter
    from roofline.speculation.predict import configuration_bytes, device_bytes

    pr = pricing_from_args(args)
    dev = pr.hardware.memory_bytes
    if dev is None:
        return None
    k = int(r.tree_nodes or r.gamma or 0)
    # the bytes speedup reports for this configuration, without pricing a round: no acceptance is asked of it (a
    # reused MTP module's k drafts would be refused one rate) and the target names its published drafter (dflash)
    spec = get_model(args.target)
    on_device, extra = configuration_bytes(pr, spec, as_drafter(args.drafter, spec), args.batch, args.context, k + 1)
    mem = device_bytes(on_device, float(extra), pr.tp)
    share, why = reserved_share(engine_family(args.engine), args.tp, getattr(args, "memory_fraction", None))
    cap = dev * share
    if mem <= cap:
        return None
    kw = {"weight_dtype": pr.stored_weight_dtype, "kv_dtype": pr.kv_dtype, "act_dtype": pr.dtype}
    extra = max(0.0, mem - per_device_bytes(args.target, args.batch, args.context, k + 1, args.tp, **kw))
    fit = largest_fit(args.target, cap, batch=args.batch, context=args.context, new_tokens=k + 1, tp=args.tp,
                      extra_bytes=extra, **kw)  # fmt: skip
    per = f" per device (TP {args.tp})" if args.tp > 1 else ""
    what = (
        f"the largest batch that fits at context {args.context} is {fit.batch}, the longest context at batch "
        f"{args.batch} is {fit.context:,}"
        if fit.batch or fit.context
        else "not even one sequence fits"
    )
    return {
        "reason": f"does not fit in memory: needs {mem / 1e9:.1f} GB{per}, over the {cap / 1e9:.1f} GB the engine may "
        f"use of each {dev / 1e9:.0f} GB device ({why}); {what}: {fit_cures(pr.hardware, args.tp)}",
        "memory_bytes": mem,
        "largest_batch": fit.batch,
        "largest_context": fit.context,
        "memory_share": {"fraction": share, "source": why},
    }


def _speedup_engine_config(args: argparse.Namespace) -> int:
    """``speedup --engine-config TEXT``: the engine's own setting priced on the GPU (roofline.deploy.planner.
    price_engine_config: EAGLE-family drafters on the tree the engine builds, the others as its chain)."""
    from roofline.deploy.planner import price_engine_config
    from roofline.speculation.acceptance import MeanAccepted

    if args.c is not None:
        raise SpecroofError("--engine-config prices an engine's setting on a GPU: drop --c (the idealised form)")
    if args.tree is not None:
        raise SpecroofError("--tree and --engine-config both give the draft's shape: give one (the engine's knobs)")
    config = engine_config_from_args(args, fill_hardware=True)
    s = config.setting
    if args.gamma is not None and not (s.is_chain and str(args.gamma).strip() == str(s.num_steps)):
        raise SpecroofError(f"--gamma {args.gamma} and the engine configuration's setting ({s.label}) differ: give one")
    if args.hardware is None:
        raise SpecroofError("a priced speedup needs --hardware (the engine configuration names no GPU)")
    not_both({"--alpha": args.alpha, "--mean-accepted": args.mean_accepted, "--acceptance": args.acceptance})
    check_tp(get_model(args.target), args.tp)
    apply_weight_only(args)
    if args.mean_accepted is not None:
        kw, note = config_acceptance(config, MeanAccepted(args.mean_accepted), None, f"{config.drafter}: ")
    elif args.alpha is not None:
        unit = "per token" if s.is_chain else "per candidate (i.i.d. over the engine's tree)"
        kw, note = {"acceptance": args.alpha}, f"{config.drafter}: given rate {args.alpha:g} {unit}"
    else:
        acc, value, note = single_acceptance(args.acceptance, config.drafter, args.target)
        kw, note = config_acceptance(config, acc, value, note)
    pricing = pricing_from_args(args)
    row = price_engine_config(config, pricing, target=args.target, batch=args.batch, context=args.context, **kw)
    asked = args.engine or "roofline"
    band = band_for(args.engine, load_hardware(args.hardware), speculative=True, batch=args.batch,
                    model=args.target, context=args.context)  # fmt: skip
    payload = dict(row) | {
        "hardware": args.hardware, "target": args.target, "engine": asked, "mean_accepted": row["expected_tokens"],
        "engine_config": config.to_json(), "acceptance": note, "error_band": band[0], "error_band_note": band[1],
    }  # fmt: skip
    dep = getattr(args, "engine_config_deployment", None)
    base_tps = row["tokens_per_s"] / row["speedup"]
    text = [
        f"{args.target} + {config.drafter} as {config.engine} runs it ({s.label}) on {args.hardware}, "
        f"engine {asked}: speedup {row['speedup']:.2f}x ({band[1]})",
        f"  {row['expected_tokens']:.2f} tokens per round of {row['t_round_s'] * 1e3:.2f} ms (draft "
        f"{row['t_draft_s'] * 1e3:.2f}, verify {row['t_verify_s'] * 1e3:.2f} for {s.num_draft_tokens} tokens, host "
        f"{row['t_round_host_s'] * 1e3:.2f}) against one token per {row['t_base_s'] * 1e3:.2f} ms",
        f"  {row['tokens_per_s']:.1f} tokens/s against {base_tps:.1f} at batch {args.batch}",
        f"  acceptance: {note}",
        f"  read from: {config.source}"
        + (f" (plan's deployment on {dep.hardware} at batch {dep.batch}, context {dep.context})" if dep else ""),
        *(f"  note: {n}" for n in config.notes),
    ]
    emit(args, payload, "\n".join(text))
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
    p.add_argument("--target", "--model", dest="target", help="priced form: target model preset or config.json")
    p.add_argument(
        "--drafter", help="eagle, eagle2, eagle3, mtp, medusa, hydra, prompt-lookup, early-exit:L or model:NAME"
    )
    p.add_argument(
        "--mean-accepted",
        type=finite_float,
        help="measured tokens per round, bonus included (Spec-Bench's #mean accepted tokens, vLLM's mean acceptance length)",
    )
    p.add_argument(
        "--acceptance",
        metavar="[KEY=]VALUE",
        help="priced form: the drafter's acceptance as plan and serve take it (0.7, mean:3.2@G, vllm-rate:0.7@K, "
        "curve:..., a metrics file; default: the drafter's published figure, named on the output)",
    )
    p.add_argument(
        "--tree",
        help="a named tree (eagle, eagle2, eagle3, medusa, hydra), an inline parent array (parents:-1,0,0,1), "
        "rank paths ([[0],[1],[0,0]]: Medusa choices, vLLM's speculative_token_tree) or a JSON file with a parent "
        "array, rank paths or a Sequoia growmap (default: the drafter's own, if any)",
    )
    p.add_argument("--batch", type=bounded_int(1, INT_MAX), action=GivenStore, default=1)
    p.add_argument("--context", type=bounded_int(0, INT_MAX), action=GivenStore, default=1024)
    p.add_argument("--dtype", action=GivenStore, default="bf16", help="compute/activation dtype (default bf16)")
    p.add_argument("--weight-dtype", default=None, help=WEIGHT_DTYPE_HELP)
    p.add_argument("--kv-dtype", default=None, help=KV_DTYPE_HELP)
    p.add_argument("--tp", type=bounded_int(1, 1024), action=GivenStore, default=1)
    p.add_argument(
        "--memory-fraction",
        type=finite_float,
        default=None,
        help="the share of each device the engine may use (vLLM's --gpu-memory-utilization, SGLang's "
        "--mem-fraction-static; default: that engine's default when --engine names it, else the whole device)",
    )
    _add_engine(p)
    add_engine_config(p)
    _add_json(p)
    p.set_defaults(func=cmd_speedup)

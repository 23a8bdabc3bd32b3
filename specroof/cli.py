"""The ``specroof`` command line. Every command prints a table and takes ``--json``.

Bad input exits with status 2 and a one-line message, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from roofline import interrupts
from roofline.errors import SpecroofError
from roofline.hardware import list_hardware, load_hardware, weight_only
from roofline.model import PRESETS, ModelSpec, get_model
from roofline.passtime import crossover_tokens, memory_footprint, pass_time, weights_only_crossover
from roofline.units import format_quantity
from roofline.validation import check_gamma, check_tp, not_both
from specroof.shell import (
    INT_MAX,
    _add_engine,
    _add_json,
    _add_offload,
    _note,
    bounded_int,
    bounded_int_list,
    emit,
    engine_arg,
    engine_of,
    finite_float,
    int_list,
    plot_path,
    pricing_from_args,
)

Handler = Callable[[argparse.Namespace], int]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse's own exit code is already 2
        # one line, as for every other bad input; the usage is one --help away
        self.exit(2, f"specroof: error: {message} (see `{self.prog} --help`)\n")


def model_from_args(args: argparse.Namespace) -> ModelSpec:
    if getattr(args, "params", None) is not None:
        if not args.params > 0:
            raise SpecroofError(f"--params must be a positive number of weights (got {args.params})")
        return ModelSpec.from_params(args.params)
    if getattr(args, "model", None):
        return get_model(args.model)
    raise SpecroofError("give a model: --model PRESET (or a config.json path) or --params N")


# -- hardware -------------------------------------------------------------------


def cmd_hardware_list(args: argparse.Namespace) -> int:
    df = list_hardware()
    cols = [
        "id",
        "name",
        "memory_GB",
        "bandwidth_GB_per_s",
        "bf16_TFLOP_per_s",
        "fp8_TFLOP_per_s",
        "ridge_bf16_flop_per_byte",
    ]
    emit(args, df.to_dict(orient="records"), df[cols].round(1).astype(object).where(df[cols].notna(), "-"))
    return 0


def cmd_hardware_show(args: argparse.Namespace) -> int:
    hw = load_hardware(args.name)
    info = hw.summary() | {
        "ridge_flop_per_byte": hw.ridge_points(),
        "sources": hw.sources,
        "notes": hw.notes,
        "aliases": list(hw.aliases),
    }
    lines = [f"{hw.name} ({hw.id})"]
    if hw.memory_bytes:
        lines.append(f"  memory      {format_quantity(hw.memory_bytes, 'B')}")
    lines.append(f"  bandwidth   {format_quantity(hw.bandwidth(), 'B/s')}")
    for d in hw.dtypes:
        lines.append(f"  {d:<5} peak  {format_quantity(hw.peak(d), 'FLOP/s'):>14}   ridge {hw.ridge(d):7.1f} FLOP/byte")
    if hw.interconnect_bytes_per_s:
        lines.append(f"  link        {format_quantity(hw.interconnect_bytes_per_s, 'B/s')} per direction")
    if hw.tdp_w:
        lines.append(f"  power       {hw.tdp_w:g} W (TDP)")
    for block, src in hw.sources.items():
        lines.append(f"  source[{block}]: {src}")
    if hw.notes:
        lines.append(f"  note: {hw.notes}")
    emit(args, info, "\n".join(lines))
    return 0


# -- roofline ------------------------------------------------------------------


def cmd_roofline(args: argparse.Namespace) -> int:
    _weight_only(args)
    spec = model_from_args(args)
    if not spec.is_abstract:
        check_tp(spec, args.tp)
    hw = load_hardware(args.hardware)
    if max(len(args.batch), len(args.tokens), len(args.context)) > 1:
        return _roofline_sweep(args, spec, hw)
    batch, tokens, context = args.batch[0], args.tokens[0], args.context[0]
    st = pass_time(
        spec,
        hw,
        batch,
        tokens,
        context,
        args.dtype,
        weight_dtype=args.weight_dtype,
        kv_dtype=args.kv_dtype,
        tp=args.tp,
        engine=engine_of(args),
    )
    k = int(
        crossover_tokens(
            spec,
            hw,
            batch,
            context,
            args.dtype,
            weight_dtype=args.weight_dtype,
            kv_dtype=args.kv_dtype,
            engine=engine_of(args),
        )
    )
    from roofline.cost import forward_cost

    cost = forward_cost(
        spec,
        batch,
        tokens,
        context,
        weight_dtype=args.weight_dtype or args.dtype,
        kv_dtype=args.kv_dtype,
        act_dtype=args.dtype,
    )
    fp = memory_footprint(
        spec,
        batch,
        context,
        weight_dtype=args.weight_dtype or args.dtype,
        kv_dtype=args.kv_dtype,
        act_dtype=args.dtype,
        new_tokens=tokens,
    )
    payload = {
        "hardware": hw.id,
        "model": spec.name,
        "engine": args.engine or "roofline",
        "dtype": args.dtype,
        "weight_dtype": args.weight_dtype or args.dtype,
        "tp": args.tp,
        "batch": batch,
        "new_tokens": tokens,
        "context": context,
        "params": spec.total_params,
        "weight_bytes": float(cost.weight_bytes),
        "kv_read_bytes": float(cost.kv_read_bytes),
        "total_bytes": float(cost.total_bytes),
        "flops": float(cost.total_flops),
        "t_memory_s": float(st.t_memory_s),
        "t_compute_s": float(st.t_compute_s),
        "t_step_s": float(st.t_step_s),
        "tokens_per_s": float(st.tokens_per_s),
        "arithmetic_intensity": float(st.intensity),
        "ridge_flop_per_byte": float(st.ridge),
        "bound": str(st.bound),
        "crossover_tokens": k,
        "weights_only_crossover": weights_only_crossover(spec, hw, args.dtype),
        "memory_footprint_bytes": float(fp.total_bytes),
    }
    capacity = (hw.memory_bytes or float("inf")) * args.tp
    payload["fits_in_memory"] = bool(fp.total_bytes <= capacity)
    band = _band(args.engine, hw, batch=batch, tp=args.tp, weight_dtype=args.weight_dtype)
    payload["error_band"], payload["error_band_note"] = band
    table = "\n".join(
        [
            f"{spec.name} on {hw.name}, {args.dtype}"
            + (f" (weights {args.weight_dtype})" if args.weight_dtype else "")
            + (f", TP{args.tp}" if args.tp > 1 else "")
            + f", batch {batch}, {tokens} new token(s), context {context}"
            + (f", engine {args.engine}" if args.engine else " (datasheet roofline, no engine)"),
            f"  bytes moved        {format_quantity(payload['total_bytes'], 'B')}"
            f"  (weights {format_quantity(payload['weight_bytes'], 'B')}, KV read {format_quantity(payload['kv_read_bytes'], 'B')})",
            f"  FLOPs              {format_quantity(payload['flops'], 'FLOP')}",
            f"  memory time        {format_quantity(payload['t_memory_s'], 's')}",
            f"  compute time       {format_quantity(payload['t_compute_s'], 's')}",
            f"  pass time          {format_quantity(payload['t_step_s'], 's')}  ({payload['bound']} bound)",
            f"  tokens/s           {payload['tokens_per_s']:.1f}  ({band[1]})",
            f"  intensity          {payload['arithmetic_intensity']:.2f} FLOP/byte (ridge {payload['ridge_flop_per_byte']:.1f})",
            f"  crossover K        {k} new tokens per sequence stay memory bound",
            f"  memory footprint   {format_quantity(payload['memory_footprint_bytes'], 'B')}"
            + (
                ""
                if payload["fits_in_memory"]
                else f"  DOES NOT FIT in {format_quantity(capacity, 'B')}: the figures above are for a GPU that "
                "does not exist (raise --tp, quantise the weights or shorten the context)"
            ),
        ]
    )
    if not payload["fits_in_memory"] and not args.json:
        print(
            f"specroof: warning: {spec.name} needs {format_quantity(fp.total_bytes, 'B')} "
            f"(weights + KV) but {hw.name} x{args.tp} holds {format_quantity(capacity, 'B')}",
            file=sys.stderr,
        )
    if args.plot:
        from roofline.plot import roofline_chart

        fig = roofline_chart(
            hw,
            [args.dtype],
            spec=spec,
            points=[
                {
                    "label": "this pass",
                    "intensity": payload["arithmetic_intensity"],
                    "flop_per_s": payload["flops"] / payload["t_step_s"],
                }
            ],
        )
        fig.savefig(args.plot, dpi=120)
    emit(args, payload, table)
    return 0


def _band(engine: Any, hw: Any, **kind: Any) -> tuple[dict[str, Any] | None, str]:
    """The error band of a prediction (held-out published rows of its kind) and the sentence that states it."""
    import dataclasses

    from roofline.error_bands import band_sentence, error_band, prediction_kind

    if not engine:
        return None, "datasheet roofline: an upper bound; no error band (price it under an engine for one)"
    k = prediction_kind(**kind)
    band = error_band(engine, k, hw)
    return (dataclasses.asdict(band) if band else None), band_sentence(engine, k, hw)


def _roofline_sweep(args: argparse.Namespace, spec: ModelSpec, hw: Any) -> int:
    """``roofline`` over lists of batch, tokens and context: one vectorised call, one row per configuration."""
    cells = len(args.batch) * len(args.tokens) * len(args.context)
    if cells > PLAN_MAX_CELLS:
        raise SpecroofError(f"{cells:,} configurations, over {PLAN_MAX_CELLS:,}: narrow --batch/--tokens/--context")
    B, n, L = np.meshgrid(args.batch, args.tokens, args.context, indexing="ij")
    st = pass_time(
        spec, hw, B, n, L, args.dtype, weight_dtype=args.weight_dtype, kv_dtype=args.kv_dtype, tp=args.tp,
        engine=engine_of(args),
    )  # fmt: skip
    df = pd.DataFrame(
        {
            "batch": B.ravel(),
            "new_tokens": n.ravel(),
            "context": L.ravel(),
            "t_memory_s": np.broadcast_to(st.t_memory_s, B.shape).ravel(),
            "t_compute_s": np.broadcast_to(st.t_compute_s, B.shape).ravel(),
            "t_step_s": np.broadcast_to(st.t_step_s, B.shape).ravel(),
            "tokens_per_s": np.broadcast_to(st.tokens_per_s, B.shape).ravel(),
            "intensity_flop_per_byte": np.broadcast_to(st.intensity, B.shape).ravel(),
            "bound": np.broadcast_to(st.bound, B.shape).ravel(),
        }
    )
    head = (
        f"{spec.name} on {hw.name}, {args.dtype}" + (f" (weights {args.weight_dtype})" if args.weight_dtype else "")
        + (f", engine {args.engine}" if args.engine else " (datasheet roofline, no engine)")
        + f": {len(df)} configurations (ridge {float(st.ridge):.1f} FLOP/byte)"
    )  # fmt: skip
    shown = df.assign(
        t_step_ms=df["t_step_s"] * 1e3, t_memory_ms=df["t_memory_s"] * 1e3, t_compute_ms=df["t_compute_s"] * 1e3
    )[["batch", "new_tokens", "context", "t_memory_ms", "t_compute_ms", "t_step_ms", "tokens_per_s", "bound"]]
    emit(args, {"hardware": hw.id, "model": spec.name, "engine": args.engine or "roofline", "rows": df.to_dict(orient="records")},
         head + "\n" + shown.to_string(index=False, float_format=lambda v: f"{v:.4g}"))  # fmt: skip
    return 0


# -- speculation ---------------------------------------------------------------------


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
    _weight_only(args)
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
    band = _band(args.engine, load_hardware(args.hardware), speculative=True)
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


def _read_text(p: Path) -> str:
    try:
        return p.read_text()
    except UnicodeDecodeError:
        raise SpecroofError(f"{str(p)!r} is not a text file (expected UTF-8 JSON or text)") from None


def read_curve(path: str) -> list[float]:
    """An acceptance curve from JSON (a list, or {"curve": [...]}) or whitespace/comma separated text."""
    p = Path(path)
    if not p.is_file():
        raise SpecroofError(f"acceptance-curve file {path!r} does not exist")
    text = _read_text(p)
    try:
        data = json.loads(text)
        values = data["curve"] if isinstance(data, dict) else data
    except (json.JSONDecodeError, KeyError):
        values = text.replace(",", " ").split()
    try:
        return [float(v) for v in values]
    except (TypeError, ValueError):
        raise SpecroofError(f"{path}: expected a list of acceptance probabilities") from None


#: the per-kind drafter flags `plan` had before the drafter grammar, and the grammar each one stands for
LEGACY_DRAFTER_FLAGS = {
    "draft": "model:{}",
    "early_exit": "early-exit:{}",
    "heads": "medusa:{}",
    "block": "block:{}",
    "window": "window:{}",
    "prompt_lookup": "prompt-lookup",
}
#: old `--acceptance` keys, kept as aliases of the grammar's names
ACCEPTANCE_KEY_ALIASES = {"draft": "model", "heads": "medusa"}
DRAFTER_GRAMMAR = "eagle|eagle2|eagle3|mtp[:N]|medusa[:HEADS]|hydra|model:NAME_OR_CONFIG|early-exit:L|prompt-lookup|block:NAME|window:W"


#: the drafter grammar's method names (what comes before any ``:``)
GRAMMAR_NAMES = ("eagle", "eagle1", "eagle2", "eagle3", "mtp", "medusa", "hydra", "model", "early-exit", "prompt-lookup",
                 "block", "window")  # fmt: skip


def _draft_spec(value: str) -> str:
    """``--draft X``: a drafter of the grammar when X names one (``eagle2``), else a separate draft model."""
    return value if drafter_key(value) in GRAMMAR_NAMES else f"model:{value}"


def drafter_specs(args: argparse.Namespace) -> list[str]:
    """Every drafter the command line names, in the drafter grammar (``--drafter``, then the old flags)."""
    specs = [s.strip() for s in (getattr(args, "drafter", None) or [])]
    for attr, form in LEGACY_DRAFTER_FLAGS.items():
        value = getattr(args, attr, None)
        if value is None or value is False:
            continue
        specs.append(_draft_spec(value) if attr == "draft" else form if value is True else form.format(value))
    return specs


def drafter_key(spec: str) -> str:
    """The name ``--acceptance KEY=...`` gives a drafter: its grammar name before any ``:``."""
    return spec.split(":", 1)[0].strip().lower()


def resolve_drafter(spec: str, target: Any = None) -> Any:
    """One drafter from the grammar (``roofline.speculative.as_drafter`` is the only resolver)."""
    from roofline.speculative import as_drafter

    return as_drafter(spec)


def drafters_by_key(args: argparse.Namespace) -> dict[str, Any]:
    """The drafters the flags ask for, keyed by their grammar name (``model``, ``eagle3``, ``early-exit``, ...).

    Two drafters of one kind (``--drafter model:a --drafter model:b``) are keyed by their whole spec.
    """
    specs = drafter_specs(args)
    if not specs:
        raise SpecroofError(f"choose a drafter: --drafter {DRAFTER_GRAMMAR} (repeat to compare)")
    keys = [drafter_key(s) for s in specs]
    chosen: dict[str, Any] = {}
    for spec, key in zip(specs, keys, strict=True):
        if keys.count(key) > 1:
            key = spec.lower()
        if key in chosen:
            raise SpecroofError(f"drafter {spec!r} is asked for twice")
        chosen[key] = resolve_drafter(spec, getattr(args, "target", None))
    return chosen


def drafter_from_args(args: argparse.Namespace) -> Any:
    return list(drafters_by_key(args).values())


#: drafters whose mean accepted length, given without the gamma it was measured at, refers to the engine's own
#: default tree (SGLang's 5 steps, top-k 4, 8 draft tokens) rather than to a chain
TREE_DRAFTER_KEYS = ("eagle", "eagle1", "eagle2", "eagle3", "mtp")


def _for_plan(key: str, acc: Any) -> tuple[Any, str]:
    """What the planner takes for one drafter's acceptance (an alpha or a curve), and the sentence saying so."""
    from roofline.acceptance import MeanAccepted

    if (
        isinstance(acc, MeanAccepted)
        and acc.gamma is None
        and acc.depth is None
        and drafter_key(key) in TREE_DRAFTER_KEYS
    ):
        from roofline.engine_trees import SGLANG_DEFAULT, fit_acceptance

        p = float(fit_acceptance(acc.mean, SGLANG_DEFAULT).p)
        return p, (
            f"{key}: given {acc.given()}, read as measured on SGLang's default EAGLE tree ({SGLANG_DEFAULT.label}): "
            f"each candidate accepted with p = {p:.3f}"
        )
    return acc.for_plan(), f"{key}: {acc.describe()}"


def acceptance_from_args(args: argparse.Namespace, drafters: dict[str, Any]) -> Any:
    """Acceptance per drafter (``--acceptance KEY=VALUE``, repeated; VALUE in any kind of roofline.acceptance), or one
    shared value only with --same-alpha. Returns what the planner takes, keyed by drafter name; the sentences saying
    what each value was read as go to ``args.acceptance_notes``.

    Drafters differ in how often their tokens are accepted (a trained draft model, an
    early exit and prompt lookup are not alike), so a plan that compares several with
    one shared alpha favours whichever is cheapest: it must be asked for explicitly.
    """
    from roofline.acceptance import GRAMMAR, parse_acceptance_items

    args.acceptance_notes = []
    args.acceptance_kinds = {}
    shared = args.alpha is not None or args.acceptance_curve is not None
    if args.acceptance_curve and args.alpha is not None:
        raise SpecroofError("give --alpha or --acceptance-curve, not both")
    if args.acceptance:
        if shared:
            raise SpecroofError("give --acceptance per drafter, or one shared --alpha/--acceptance-curve, not both")
        aliases = {alias: key for alias, key in ACCEPTANCE_KEY_ALIASES.items() if key in drafters}
        aliases |= {d.name: k for k, d in drafters.items()}
        kinds = parse_acceptance_items(args.acceptance, list(drafters), aliases=aliases)
        out: dict[str, Any] = {}
        for key, acc in kinds.items():
            out[drafters[key].name], note = _for_plan(key, acc)
            args.acceptance_notes.append(note)
            args.acceptance_kinds[key] = acc
        return out
    if not shared:
        raise SpecroofError(f"give --acceptance KEY=VALUE for each drafter (VALUE {GRAMMAR}), or --alpha A")
    if len(drafters) > 1 and not args.same_alpha:
        raise SpecroofError(
            f"{len(drafters)} drafters with one shared acceptance would favour the cheapest: give --acceptance KEY=VALUE "
            f"per drafter ({', '.join(drafters)}), or --same-alpha to compare them at one rate on purpose"
        )
    from roofline.acceptance import PerToken, parse_acceptance

    acc = parse_acceptance(args.acceptance_curve) if args.acceptance_curve else PerToken(args.alpha)
    value, note = _for_plan(next(iter(drafters)), acc) if len(drafters) == 1 else (acc.for_plan(), acc.describe())
    args.acceptance_notes.append(note if len(drafters) == 1 else f"every drafter (--same-alpha): {note}")
    return value


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


#: the most configurations one `specroof plan` prices (each takes a few hundred bytes of the table)
PLAN_MAX_CELLS = 2_000_000
#: the most (hardware, batch, context) recommendations one plan prints
PLAN_MAX_RECOMMENDATIONS = 2_000


def _with_offload(name: str, link: str | None) -> Any:
    """The profile ``name``, with its weights offloaded over ``link`` when one is given."""
    hw = load_hardware(name)
    return hw.offloaded(link) if link else hw


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
    _weight_only(args)
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


# -- trees -----------------------------------------------------------------------------


def read_acceptance_vector(path: str) -> Any:
    """A Sequoia sibling-rank vector from JSON: a list (rank 0 first, or Sequoia's saved layout with its leading 0,
    detected and said so, never shifted), {"p": [...]} or {"sequoia": [...]}."""
    from roofline.acceptance import read_sibling_vector

    return read_sibling_vector(path)


def _tree_lines(t: Any) -> list[str]:
    """A tree's shape in words: nodes, depth, nodes per level, and its paths as sibling ranks."""
    return [
        f"  {t.n_nodes} nodes, depth {t.depth}, nodes per level {t.widths.tolist()}",
        "  paths (sibling ranks, 0 = the draft's top choice): " + " ".join("".join(map(str, p)) for p in t.paths()),
    ]


def _tree_payload(t: Any) -> dict[str, Any]:
    return {
        "n_nodes": t.n_nodes,
        "depth": t.depth,
        "parents": t.parents.tolist(),
        "paths": [list(p) for p in t.paths()],
        "widths": t.widths.tolist(),
    }


def _tree_deploy(args: argparse.Namespace, drafter: str | None, acc: Any) -> dict[str, Any]:
    """``tree --emit ENGINE``: the engine's own tree knobs searched for this acceptance vector, and their flags."""
    from roofline.engine_search import plan_engine

    if not (args.hardware and args.target and drafter):
        raise SpecroofError("--emit prices the engine's trees on a GPU: give --hardware, --target and --drafter")
    kind = drafter_key(drafter)
    if kind not in TREE_DRAFTER_KEYS:
        raise SpecroofError(
            f"--emit searches the tree knobs of EAGLE-family drafters ({', '.join(TREE_DRAFTER_KEYS)}); for {drafter!r} "
            "use specroof plan --emit, which deploys its best chain"
        )
    plan = plan_engine(
        hardware=pricing_from_args(args),
        target=args.target,
        drafter="eagle" if kind == "eagle1" else kind,
        framework=args.emit,
        acceptance=acc,
        batches=[args.batch],
        context=args.context,
    )
    return plan.records(target=args.target, drafter=kind, draft_model=args.draft_model)[0]


def cmd_tree(args: argparse.Namespace) -> int:
    from roofline.tree_sizing import best_tree_size
    from roofline.trees import optimal_tree

    _weight_only(args)
    if args.drafter and args.draft:
        raise SpecroofError("give --drafter SPEC or --draft NAME (the same as --drafter model:NAME), not both")
    drafter = args.drafter or (_draft_spec(args.draft) if args.draft else None)
    if (args.target or drafter) and not args.hardware:
        raise SpecroofError("--target and --drafter choose a tree size for a GPU: give --hardware too")
    vec = read_acceptance_vector(args.acceptance_vector)
    acc = vec.model()
    opt = optimal_tree(acc, args.budget, args.max_depth)
    t = opt.tree
    payload: dict[str, Any] = {"expected_tokens": opt.expected_tokens, **_tree_payload(t), "acceptance": vec.to_json()}
    lines = [
        f"acceptance: {vec.describe()}",
        f"the tree with the most expected tokens for {args.budget} draft nodes, depth <= {args.max_depth} "
        f"(no hardware: the largest tree always wins on tokens):",
        *_tree_lines(t),
        f"  expected tokens per round: {opt.expected_tokens:.4f} (bonus included)",
    ]
    if args.hardware:
        if not (args.target and drafter):
            raise SpecroofError("--hardware needs --target and --drafter as well")
        choice = best_tree_size(
            _with_offload(args.hardware, args.offload),
            args.target,
            resolve_drafter(drafter, args.target),
            acc,
            args.batch,
            args.context,
            budgets=sorted({b for b in (1, 2, 4, 8, 16, 32, 64, 128) if b < args.budget} | {args.budget}),
            max_depth=args.max_depth,
            dtype=args.dtype,
            engine=engine_of(args),
            weight_dtype=args.weight_dtype,
            kv_dtype=args.kv_dtype,
        )
        b = choice.best
        payload["hardware_choice"] = {
            k: (float(v) if isinstance(v, (int, float, np.floating, np.integer)) else v) for k, v in b.items()
        } | _tree_payload(choice.tree)
        engine = f", engine {args.engine}" if args.engine else " (datasheet roofline, no engine)"
        lines += [
            "",
            f"on {args.hardware}: best tree (the fastest, not the largest) for {args.target} + {drafter}, "
            f"batch {args.batch}, context {args.context}{engine}: speedup {b['speedup']:.2f}x",
            *_tree_lines(choice.tree),
            f"  {b['expected_tokens']:.3f} tokens per {b['t_round_s'] * 1e3:.2f} ms round",
        ]
    if args.emit:
        payload["deploy"] = _tree_deploy(args, drafter, acc)
        names = {"sglang": "SGLang", "vllm": "vLLM", "trtllm": "TensorRT-LLM"}
        r = payload["deploy"]
        lines += [
            "",
            f"as {names[args.emit]} builds {drafter}'s tree, its best setting on {args.hardware} at batch {args.batch}: "
            f"{r['label']} ({r['n_nodes']} nodes, depth {r['depth']}, {r['expected_tokens']:.3f} tokens per round, "
            f"{r['speedup']:.2f}x)",
            *(f"  {line}" for line in str(r["flags"]).splitlines()),
        ]
    if args.plot:
        from roofline.plot import tree_chart

        fig = tree_chart(opt.tree, values=opt.tree.path_probabilities(acc))
        fig.savefig(args.plot, dpi=110)
    emit(args, payload, "\n".join(lines))
    return 0


# -- validation against published measurements ---------------------------------------


def cmd_validate_published(args: argparse.Namespace) -> int:
    from roofline.published import calibrate, error_summary, validation_table, write_fitted

    if args.write and not args.fit:
        raise SpecroofError("--write writes a fitted engine: give --fit ENGINE")
    engines = {}
    lines = []
    if args.fit:
        fitted, _ = calibrate(args.fit)
        engines[fitted.name] = fitted
        lines.append(f"fitted {fitted.name} on its calibration rows:")
        lines += [f"  {k} = {v:.6g}" for k, v in _engine_params(fitted).items()]
        if args.write:
            for path in write_fitted(fitted):
                lines.append(f"  wrote {path}")
    table = validation_table(engines=engines)
    if args.use != "all":
        table = table[table["use"] == args.use]
    summary = error_summary(table)
    if args.plot:
        from roofline.plot import published_scatter

        published_scatter(table).savefig(args.plot, dpi=120)
    payload = {
        "rows": table.to_dict(orient="records"),
        "summary": summary.to_dict(orient="records"),
        **({"fitted": _engine_params(engines[args.fit])} if args.fit else {}),
    }
    shown = table.assign(
        published=table["published"].map(lambda v: f"{v:.3g}"),
        roofline=table["roofline"].map(lambda v: "" if pd.isna(v) else f"{v:.3g}"),
        engine_aware=table["engine_aware"].map(lambda v: "" if pd.isna(v) else f"{v:.3g}"),
        error_roofline=table["error_roofline"].map(lambda v: "" if pd.isna(v) else f"{100 * v:+.0f}%"),
        error_engine=table["error_engine"].map(lambda v: "" if pd.isna(v) else f"{100 * v:+.0f}%"),
    )[["source", "use", "kind", "engine", "setup", "metric", "published", "roofline", "error_roofline",
       "engine_aware", "error_engine", "note"]]  # fmt: skip
    text = "\n".join(lines + [shown.to_string(index=False), "", "median and max |error| per kind:"])
    pct = summary.copy()
    for c in pct.columns:
        if "error" in c:
            pct[c] = pct[c].map(lambda v: f"{100 * v:.1f}%")
    from roofline.error_bands import band_table, write_residuals

    if args.write_bands:
        lines.append(f"wrote the held-out residuals every error band reads: {write_residuals()}")
    bands = band_table()
    payload["error_bands"] = bands.to_dict(orient="records")
    shown_bands = bands.copy()
    for c in shown_bands.columns:
        if "error" in c:
            shown_bands[c] = shown_bands[c].map(lambda v: f"{100 * v:.1f}%")
    text += "\n" + pct.to_string(index=False)
    text += "\n\nerror bands every prediction carries (held-out rows per engine, kind, calibration GPU or not):\n"
    text += shown_bands.to_string(index=False) if not bands.empty else "no held-out rows"
    emit(args, payload, text)
    return 0


def _engine_params(e: Any) -> dict[str, float]:
    from roofline.published import FIT_PARAMETERS, _get

    return {n: _get(e, n) for n in FIT_PARAMETERS.get(e.name, {})}


# -- report ----------------------------------------------------------------------


def cmd_report(args: argparse.Namespace) -> int:
    import time

    from specroof.report import DEFAULT_PAIRING, analytic_sections, validate_inputs, write_report

    if args.budget is not None and not args.budget > 0:
        raise SpecroofError(f"--budget must be > 0 seconds (got {args.budget})")
    if Path(args.out).exists() and not Path(args.out).is_dir():
        raise SpecroofError(f"--out {args.out!r} is a file: the report is a folder (index.html, PNGs, CSVs)")
    if args.alpha is not None and not 0.0 <= args.alpha < 1.0:
        raise SpecroofError(f"--alpha must lie in [0, 1) (got {args.alpha})")
    extra: list[Any] = []
    measured = not args.skip_measure
    if measured:
        import importlib.util

        if importlib.util.find_spec("torch") is None:  # checked without importing: roofline stays torch-free
            print(
                "torch is not installed: the measured section is skipped (pip install 'specroof[measure]')",
                file=sys.stderr,
            )
            measured = False
    if measured:

        def measured_section(w: Any) -> Any:
            from specroof.measure_report import measurement_section

            return measurement_section(
                w, quick=args.quick, budget_s=args.budget, progress=not args.json, log=lambda m: _note(args, m)
            )

        extra.append(("Measured on this device", measured_section))
    pairing = dict(DEFAULT_PAIRING)
    for spec in args.drafter or []:  # the drafter grammar: the page compares one draft model and one early exit
        kind, _, value = spec.partition(":")
        kind = kind.strip().lower()
        if kind == "model" and value and args.draft is None:
            args.draft = value.strip()
        elif kind == "early-exit" and value.strip().isdigit() and args.early_exit is None:
            args.early_exit = int(value)
        else:
            raise SpecroofError(
                f"--drafter {spec!r}: the page compares one draft model (model:NAME) and one early exit (early-exit:L), "
                "each once; price other drafters with specroof plan --drafter SPEC"
            )
    if args.target or args.draft or args.alpha is not None or args.early_exit is not None:
        draft = args.draft or DEFAULT_PAIRING["drafters"][0]
        exit_layer = args.early_exit if args.early_exit is not None else DEFAULT_PAIRING["drafters"][1]
        pairing = {
            "target": args.target or DEFAULT_PAIRING["target"],
            "drafters": (draft, exit_layer),
            "acceptance": {
                f"draft {draft}": args.alpha if args.alpha is not None else 0.75,
                f"early exit @{exit_layer}": 0.5,
            },
        }
    pairing["engine"] = None if args.engine == "none" else args.engine
    t0 = time.perf_counter()
    n_sections = len(analytic_sections()) + len(extra)
    done = {"n": 0}

    def on_section(sec: Any) -> None:
        done["n"] += 1
        state = "FAILED: " + sec.error if sec.error else "done"
        _note(args, f"[{done['n']}/{n_sections}] {sec.title}: {state} ({time.perf_counter() - t0:.0f} s)")

    validate_inputs(args.hardware, pairing)  # every check before the first line of work is printed
    _note(args, f"writing {args.out}/index.html section by section ...")
    try:
        summary = write_report(args.out, args.hardware, extra, pairing, debug=args.debug, on_section=on_section)
    except KeyboardInterrupt:
        interrupts.handled()
        print(f"\ninterrupted: the finished sections are in {args.out}/index.html", file=sys.stderr)
        return 130
    summary["seconds"] = time.perf_counter() - t0
    how = f"roofline + {pairing['engine']} engine" if pairing["engine"] else "datasheet roofline, no engine"
    lines = [f"The answer ({how}, batch 1): best strategy and gamma per GPU, and the best draft-tree size"]
    if "answer" in summary:
        table = pd.DataFrame(summary["answer"])
        deploy = [c for c in table.columns if c.startswith("deploy_")]
        lines.append(table.drop(columns=deploy).round(2).to_string(index=False))
        if "deploy_vllm" in table:
            lines.append("deploy the chain answer with vLLM:")
            lines += [
                f"  {r['hardware']}: {r['deploy_vllm']}"
                for _, r in table.iterrows()
                if isinstance(r["deploy_vllm"], str)
            ]
    meas = summary.get("measurement")
    if meas:
        lines.append(
            f"\nmeasured on {meas['device']} ({meas['dtype']}): verify-pass error a-priori {meas['apriori_mape']:.1%}, "
            f"fitted {meas['fit_mape']:.1%}; best gamma measured here: "
            + ", ".join(
                f"{b['drafter']} batch {b['batch']}: {b['gamma']} ({b['speedup_measured']:.2f}x)"
                for b in meas["best_measured"]
            )
        )
    lines.append(f"\nreport written to {args.out}/index.html in {summary['seconds']:.0f} s")
    emit(args, summary, "\n".join(lines))
    if summary["failed"]:
        names = "; ".join(f"{f['section']} ({f['error']})" for f in summary["failed"])
        print(f"specroof: error: section(s) failed: {names}", file=sys.stderr)
        return 1
    return 0


# -- parser ----------------------------------------------------------------------

#: the weight format grammar and the KV rule, as every pricing command's help states them (roofline.dtypes)
WEIGHT_DTYPE_HELP = (
    "weights stored as int8|int4|fp8|bits:B[,group:G][,kernel:gptfast|torchao|marlin|gptq|awq|exl2] "
    "(weight-only; e.g. int4,group:128,kernel:marlin or bits:2.5,kernel:exl2)"
)
KV_DTYPE_HELP = (
    "KV-cache dtype (default: the activations' dtype; bf16 under --dtype fp8/int8: fp8 KV is --kv-dtype fp8)"
)


def _weight_only(args: argparse.Namespace) -> None:
    """--dtype int4 alone is weight-only int4 with bf16 arithmetic (GPUs multiply in bf16); under an 8-bit
    --dtype the KV cache stays bf16 unless --kv-dtype says otherwise (roofline.dtypes.default_kv_dtype)."""
    from roofline.dtypes import default_kv_dtype

    args.dtype, args.weight_dtype = weight_only(args.dtype, getattr(args, "weight_dtype", None))
    if getattr(args, "kv_dtype", None) is None:
        args.kv_dtype = default_kv_dtype(args.dtype)


def _hardware_command(sub: Any) -> None:
    """Register ``specroof hardware``."""
    hw = sub.add_parser("hardware", help="list or show hardware profiles")
    hw_sub = hw.add_subparsers(dest="hw_command", required=True, parser_class=_Parser)
    p = hw_sub.add_parser("list", help="all built-in profiles")
    _add_json(p)
    p.set_defaults(func=cmd_hardware_list)
    p = hw_sub.add_parser("show", help="one profile with its sources")
    p.add_argument("name")
    _add_json(p)
    p.set_defaults(func=cmd_hardware_show)


def _roofline_command(sub: Any) -> None:
    """Register ``specroof roofline``."""
    p = sub.add_parser("roofline", help="cost of one forward pass: bytes, FLOPs, time, bound, crossover K")
    p.add_argument("--hardware", required=True, help="profile id, alias or .toml path")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--model", help=f"preset ({', '.join(PRESETS)}) or a config.json path")
    g.add_argument("--params", type=finite_float, help="abstract model with this many weights, e.g. 13e9")
    p.add_argument("--dtype", default="fp16", help="compute/activation dtype (default fp16)")
    p.add_argument("--weight-dtype", default=None, help=WEIGHT_DTYPE_HELP)
    p.add_argument("--kv-dtype", default=None, help=KV_DTYPE_HELP)
    p.add_argument(
        "--batch",
        type=bounded_int_list(1, INT_MAX),
        default=[1],
        help="sequences per pass; a list sweeps (1,4,16, 1-64)",
    )
    p.add_argument(
        "--tokens", type=bounded_int_list(1, INT_MAX), default=[1], help="new tokens per sequence (a list sweeps)"
    )
    p.add_argument(
        "--context",
        type=bounded_int_list(0, INT_MAX),
        default=[0],
        help="tokens already in each KV cache (a list sweeps)",
    )
    p.add_argument("--tp", type=bounded_int(1, 1024), default=1, help="tensor-parallel degree")
    _add_engine(p)
    p.add_argument("--plot", type=plot_path, default=None, help="write a roofline chart here (.png, .svg, .pdf)")
    _add_json(p)
    p.set_defaults(func=cmd_roofline)


def _speedup_command(sub: Any) -> None:
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


def _plan_command(sub: Any) -> None:
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


def _tree_command(sub: Any) -> None:
    """Register ``specroof tree``."""
    p = sub.add_parser("tree", help="optimal draft tree for a sibling-rank acceptance vector (and its size for a GPU)")
    p.add_argument("--acceptance-vector", required=True, help="JSON: [p0, p1, ...], {'p': [...]} or {'sequoia': [...]}")
    p.add_argument(
        "--budget", type=bounded_int(1, 100_000), required=True, help="draft nodes per round (not counting the root)"
    )
    p.add_argument("--max-depth", type=bounded_int(1, 10_000), default=8, help="draft levels")
    p.add_argument("--hardware", help="also choose the tree size for this GPU")
    p.add_argument("--target", help="target model (with --hardware): preset, config.json or folder")
    p.add_argument("--drafter", metavar="SPEC", help=f"the drafter (with --hardware): {DRAFTER_GRAMMAR}")
    p.add_argument("--draft", help="same as --drafter model:NAME")
    p.add_argument("--batch", type=bounded_int(1, INT_MAX), default=1)
    p.add_argument("--context", type=bounded_int(0, INT_MAX), default=1024)
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--weight-dtype", default=None, help=WEIGHT_DTYPE_HELP)
    p.add_argument("--kv-dtype", default=None, help=KV_DTYPE_HELP)
    p.add_argument("--plot", type=plot_path, help="write a drawing of the tree (.png, .svg, .pdf)")
    p.add_argument(
        "--emit",
        choices=("sglang", "vllm", "trtllm"),
        help="also search this engine's own tree knobs for an EAGLE-family --drafter and print the flags",
    )
    p.add_argument("--draft-model", help="with --emit: the draft checkpoint to name (a Hugging Face id or a path)")
    _add_engine(p)
    _add_offload(p)
    _add_json(p)
    p.set_defaults(func=cmd_tree)


def _validate_command(sub: Any) -> None:
    """Register ``specroof validate``."""
    p = sub.add_parser("validate", help="predictions against published measurements")
    vsub = p.add_subparsers(dest="validate_command", required=True, parser_class=_Parser)
    p = vsub.add_parser(
        "published",
        help="every published row: roofline-only and engine-aware predictions and their errors",
    )
    p.add_argument("--use", choices=("calibration", "validation", "all"), default="all", help="which rows")
    p.add_argument("--fit", metavar="ENGINE", help="refit ENGINE's free parameters to its calibration rows")
    p.add_argument("--write", action="store_true", help="with --fit: write the fitted values into its profile")
    p.add_argument(
        "--write-bands",
        action="store_true",
        help="write the held-out residuals the error bands read (published/held_out_residuals.csv)",
    )
    p.add_argument("--plot", type=plot_path, help="write the predicted-vs-published scatter here")
    _add_json(p)
    p.set_defaults(func=cmd_validate_published)


def _report_command(sub: Any) -> None:
    """Register ``specroof report``."""
    from specroof.report import DEFAULT_ENGINE, DEFAULT_GPUS

    p = sub.add_parser(
        "report", help="the main job: which gamma and tree size per GPU, rooflines, plans, and a measurement here"
    )
    p.add_argument("--out", default="specroof-report", help="output folder (default ./specroof-report)")
    p.add_argument("--hardware", nargs="+", default=list(DEFAULT_GPUS), help="GPUs to cover")
    p.add_argument(
        "--quick",
        action="store_true",
        help="a small measured section: a 12 s budget that counts every step (torch import, microbenchmarks, fit)",
    )
    p.add_argument(
        "--budget",
        type=float,
        default=None,
        help="seconds the measured section may take, every step included (default 60, --quick 12)",
    )
    p.add_argument("--skip-measure", action="store_true", help="analytic sections only")
    p.add_argument("--target", help="target preset for the plans (default llama-3.1-8b)")
    p.add_argument(
        "--drafter",
        action="append",
        metavar="SPEC",
        help="model:NAME (the draft model) and/or early-exit:L (the self-drafter), in the drafter grammar",
    )
    p.add_argument("--draft", help="same as --drafter model:NAME (default llama-3.2-1b)")
    p.add_argument("--early-exit", type=int, default=None, help="early-exit layer of the self-drafter (default 8)")
    p.add_argument("--alpha", type=float, help="acceptance rate of the draft model (default 0.75)")
    p.add_argument("--debug", action="store_true", help="tracebacks of failed sections on the page")
    p.add_argument(
        "--engine",
        type=lambda text: text if text.strip().lower() == "none" else engine_arg(text),
        default=DEFAULT_ENGINE,
        help=f"price the answers as this software runs them (default {DEFAULT_ENGINE}: what deployments run; "
        "'none' is the datasheet roofline)",
    )
    _add_json(p)
    p.set_defaults(func=cmd_report)


#: commands that live in a module of their own (specroof/commands/NAME.py, each with ``add_parser(sub)``)
COMMAND_MODULES = ("acceptance", "serve")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="specroof", description="How much does speculative decoding buy on this GPU?")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    _hardware_command(sub)
    _roofline_command(sub)
    _speedup_command(sub)
    _plan_command(sub)
    _tree_command(sub)
    for name in COMMAND_MODULES:
        importlib.import_module(f"specroof.commands.{name}").add_parser(sub)
    _validate_command(sub)
    _register_measure(sub)
    _report_command(sub)
    return parser


def _register_measure(sub: Any) -> None:
    """``specroof measure ...`` comes from ``specroof.measure_cli`` when torch is installed, else a clear refusal."""
    import importlib.util

    if importlib.util.find_spec("torch") is not None:  # found without importing it: roofline stays torch-free
        from specroof.measure_cli import register

        register(sub, _Parser)
        return

    def refuse(args: argparse.Namespace) -> int:
        raise SpecroofError("measurement needs torch: pip install 'specroof[measure]'")

    p = sub.add_parser("measure", help="measure this device (needs specroof[measure]: not installed)")
    p.add_argument("rest", nargs=argparse.REMAINDER)
    p.set_defaults(func=refuse)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command. The one error boundary: bad input of any kind exits 2 with one line; a bug exits 1."""
    parser = build_parser()
    args = parser.parse_args(argv)
    interrupts.install()
    try:
        _refuse_repeats(parser, sys.argv[1:] if argv is None else list(argv))
        return int(args.func(args))
    except SpecroofError as exc:
        return _fail(str(exc))
    except BrokenPipeError:
        # the reader went away (`specroof ... | head`): not an error of ours; silence the flush at exit
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        interrupts.handled()
        print("\nspecroof: interrupted", file=sys.stderr)
        return 130
    except MemoryError:
        return _fail("out of memory: ask for a smaller sweep (fewer batch, context or gamma values)")
    except OSError as exc:
        # an output or input path the checks could not foresee (a read-only mount, a full disk, a vanished folder)
        return _fail(os_error_message(exc))
    except Exception as exc:  # the boundary: classify, never let a traceback out
        if _is_bad_data(exc):
            return _fail(f"{_one_line(exc)}{_inputs_named(args)}", exc)
        return _bug(exc)


def _refuse_repeats(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    """A single-valued option given twice is a contradiction, not "the last one wins" (argparse's rule)."""
    repeatable: set[str] = set()
    stack = [parser]
    while stack:
        p = stack.pop()
        for action in p._actions:  # argparse keeps no public list of a parser's actions
            if isinstance(action, argparse._SubParsersAction):
                stack.extend(action.choices.values())
            elif isinstance(action, (argparse._AppendAction, argparse._CountAction, argparse._ExtendAction)):
                repeatable.update(action.option_strings)
    head = argv[: argv.index("--")] if "--" in argv else argv
    flags = [a.split("=", 1)[0] for a in head if a.startswith("--") and len(a) > 2]
    for flag in dict.fromkeys(flags):
        if flags.count(flag) > 1 and flag not in repeatable:
            raise SpecroofError(f"{flag} was given {flags.count(flag)} times: give it once")


def _one_line(exc: BaseException | str) -> str:
    text = str(exc) if not isinstance(exc, BaseException) or str(exc) else type(exc).__name__
    return " ".join(part.strip() for part in text.splitlines() if part.strip()) or "error"


def _fail(message: str, exc: BaseException | None = None) -> int:
    """Bad input: one line on stderr and exit status 2 (the traceback too with SPECROOF_DEBUG=1)."""
    if exc is not None and os.environ.get("SPECROOF_DEBUG") == "1":
        import traceback

        traceback.print_exception(exc, file=sys.stderr)
    print(f"specroof: error: {_one_line(message)}", file=sys.stderr)
    return 2


def _bug(exc: BaseException) -> int:
    """A failure no input explains: exit 1, ask for a report; the traceback only with SPECROOF_DEBUG=1."""
    if os.environ.get("SPECROOF_DEBUG") == "1":
        import traceback

        traceback.print_exception(exc, file=sys.stderr)
        hint = "the traceback is above"
    else:
        hint = "rerun with SPECROOF_DEBUG=1 for the traceback"
    print(
        f"specroof: internal error ({type(exc).__name__}: {_one_line(exc)}): this is a bug, please report it "
        f"with the command line; {hint}",
        file=sys.stderr,
    )
    return 1


def os_error_message(exc: OSError) -> str:
    """One line for a failed file operation, naming the file and, for a full disk, what to do."""
    import errno

    where = f" {exc.filename!r}" if exc.filename is not None else ""
    if exc.filename2 is not None:
        where += f" -> {exc.filename2!r}"
    if exc.errno == errno.ENOSPC:
        return f"no space left on the device writing{where}: free some space (or choose another --out) and rerun"
    if exc.errno == errno.EROFS:
        return f"read-only file system: cannot write{where}; choose another --out"
    if exc.errno == errno.EDQUOT:
        return f"disk quota exceeded writing{where}: free some space and rerun"
    if isinstance(exc, FileExistsError):
        return f"{where.strip()} already exists and is not a folder this command can use; choose another path"
    return f"{exc.strerror or _one_line(exc)}:{where}" if where else _one_line(exc)


def _is_bad_data(exc: BaseException) -> bool:
    """Errors that bad input produces: numbers out of range, undecodable JSON/TOML/text, a damaged checkpoint."""
    if isinstance(exc, (ValueError, ArithmeticError, UnicodeError)):  # JSON/TOML decode errors are ValueErrors
        return True
    # safetensors' error type lives in a compiled module: matched by name, without importing it
    return type(exc).__name__ in ("SafetensorError", "HeaderTooLarge", "HeaderTooSmall", "InvalidHeader")


def _inputs_named(args: argparse.Namespace) -> str:
    """' (inputs: --model c.json, ...)': the files among the arguments, so a decode error names its file."""
    named = []
    for key, value in sorted(vars(args).items()):
        values = value if isinstance(value, list) else [value]
        for v in values:
            if isinstance(v, str) and len(v) < 4096 and ("/" in v or "." in v) and Path(v).exists():
                named.append(f"--{key.replace('_', '-')} {v}")
    return f" (inputs: {', '.join(named)})" if named else " (check the numbers given)"


if __name__ == "__main__":
    sys.exit(main())

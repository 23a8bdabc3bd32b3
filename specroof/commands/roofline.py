"""``specroof roofline``: the cost of one forward pass (bytes, FLOPs, time, bound, crossover K), or a sweep of them."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np
import pandas as pd

from roofline.core.errors import SpecroofError
from roofline.core.units import format_quantity
from roofline.core.validation import check_tp
from roofline.costing.collectives import allreduce_label
from roofline.costing.engine import load_engine
from roofline.costing.hardware import load_hardware
from roofline.costing.passtime import crossover_tokens, memory_footprint, pass_cost, pass_time, weights_only_crossover
from roofline.costing.pricing import pricing_of
from roofline.passes.model import PRESETS, ModelSpec
from specroof.commands.common import (
    KV_DTYPE_HELP,
    PLAN_MAX_CELLS,
    WEIGHT_DTYPE_HELP,
    apply_weight_only,
    band_for,
    fit_cures,
    model_from_args,
)
from specroof.shell import (
    DEFAULT_ENGINE,
    INT_MAX,
    _add_engine,
    _add_json,
    add_int_list,
    bounded_int,
    emit,
    engine_of,
    finite_float,
    plot_path,
)


def cmd_roofline(args: argparse.Namespace) -> int:
    apply_weight_only(args)
    spec = model_from_args(args)
    if not spec.is_abstract:
        check_tp(spec, args.tp)
    hw = load_hardware(args.hardware)
    if max(len(args.batch), len(args.tokens), len(args.context)) > 1:
        return _roofline_sweep(args, spec, hw)
    batch, tokens, context = args.batch[0], args.tokens[0], args.context[0]
    # one pricing for every figure of the answer: the pass time, its cost (flops / total_bytes = intensity, the fused
    # MoE kernel's padding included) and the crossover K, all under the same engine, dtypes and TP
    pr = pricing_of(
        hw, dtype=args.dtype, weight_dtype=args.weight_dtype, kv_dtype=args.kv_dtype, tp=args.tp, engine=engine_of(args)
    )
    st = pass_time(spec, pr, batch, tokens, context)
    k = int(crossover_tokens(spec, pr, batch, context))
    cost = pass_cost(spec, pr, batch, tokens, context)
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
        "t_allreduce_s": float(st.t_allreduce_s),
        "tokens_per_s": float(st.tokens_per_s),
        "arithmetic_intensity": float(st.intensity),
        "ridge_flop_per_byte": float(st.ridge),
        # the ridge this pass's bound is read against (an engine's rates per operator move it off the GEMMs')
        "pass_ridge_flop_per_byte": None if np.isnan(st.pass_ridge) else float(st.pass_ridge),
        "bound": str(st.bound),
        "crossover_tokens": k,
        "weights_only_crossover": weights_only_crossover(spec, hw, args.dtype),
        "memory_footprint_bytes": float(fp.total_bytes),
    }
    capacity = (hw.memory_bytes or float("inf")) * args.tp
    payload["fits_in_memory"] = bool(fp.total_bytes <= capacity)
    band = band_for(args.engine, hw, batch=batch, tp=args.tp, weight_dtype=args.weight_dtype, model=spec,
                    context=context)  # fmt: skip
    payload["error_band"], payload["error_band_note"] = band
    beside = []
    if not args.engine:  # the datasheet roofline first (the worked example's figures); the engine's time beside it
        sb = pass_time(
            spec, hw, batch, tokens, context, args.dtype, weight_dtype=args.weight_dtype, kv_dtype=args.kv_dtype,
            tp=args.tp, engine=DEFAULT_ENGINE,
        )  # fmt: skip
        bb = band_for(DEFAULT_ENGINE, hw, batch=batch, tp=args.tp, weight_dtype=args.weight_dtype, model=spec,
                      context=context)  # fmt: skip
        payload["engine_beside"] = {
            "engine": DEFAULT_ENGINE,
            "t_step_s": float(sb.t_step_s),
            "tokens_per_s": float(sb.tokens_per_s),
            "error_band": bb[0],
            "error_band_note": bb[1],
        }
        beside = [
            f"  under {DEFAULT_ENGINE:<12} pass time {format_quantity(float(sb.t_step_s), 's')}, "
            f"{float(sb.tokens_per_s):.1f} tokens/s ({bb[1]}; the engine plan, tree, speedup, serve and report "
            "price under by default)"
        ]
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
            *(
                [
                    f"  all-reduces        {format_quantity(payload['t_allreduce_s'], 's')} of device time, "
                    f"{2 * spec.n_layers} a pass: {allreduce_label(hw.id, load_engine(engine_of(args)))}"
                ]
                if args.tp > 1
                else []
            ),
            f"  tokens/s           {payload['tokens_per_s']:.1f}  ({band[1]})",
            *beside,
            f"  intensity          {payload['arithmetic_intensity']:.2f} FLOP/byte (ridge {payload['ridge_flop_per_byte']:.1f}"
            + _pass_ridge_words(payload, args.engine)
            + ")",
            f"  crossover K        {k} new tokens per sequence stay memory bound",
            f"  memory footprint   {format_quantity(payload['memory_footprint_bytes'], 'B')}"
            + (
                ""
                if payload["fits_in_memory"]
                else f"  DOES NOT FIT in {format_quantity(capacity, 'B')}: the figures above are for a GPU that "
                f"does not exist ({fit_cures(hw, args.tp)}, or shorten the context)"
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
            "pass_ridge_flop_per_byte": np.broadcast_to(st.pass_ridge, B.shape).ravel(),  # its bound's own ridge
            "t_allreduce_s": np.broadcast_to(st.t_allreduce_s, B.shape).ravel(),
        }
    )
    # each row's footprint against the devices, as one configuration's answer says it (a sweep priced a GPU that
    # does not exist without a word)
    fp = memory_footprint(spec, B, L, weight_dtype=args.weight_dtype or args.dtype, kv_dtype=args.kv_dtype,
                          act_dtype=args.dtype, new_tokens=n)  # fmt: skip
    capacity = (hw.memory_bytes or float("inf")) * args.tp
    df["memory_footprint_bytes"] = np.broadcast_to(fp.total_bytes, B.shape).ravel().astype(float)
    df["fits_in_memory"] = df["memory_footprint_bytes"] <= capacity
    cols = ["batch", "new_tokens", "context", "t_memory_ms", "t_compute_ms", "t_step_ms", "tokens_per_s", "bound"]
    misfits = int((~df["fits_in_memory"]).sum())
    if misfits:
        cols.append("fits_in_memory")
    if not args.engine:  # the engine's time beside the datasheet's, as for one configuration
        sb = pass_time(
            spec, hw, B, n, L, args.dtype, weight_dtype=args.weight_dtype, kv_dtype=args.kv_dtype, tp=args.tp,
            engine=DEFAULT_ENGINE,
        )  # fmt: skip
        df[f"t_step_{DEFAULT_ENGINE}_s"] = np.broadcast_to(sb.t_step_s, B.shape).ravel()
        df[f"t_step_{DEFAULT_ENGINE}_ms"] = df[f"t_step_{DEFAULT_ENGINE}_s"] * 1e3
        cols.insert(6, f"t_step_{DEFAULT_ENGINE}_ms")
    if args.tp > 1:  # the collectives' share of the pass, NCCL's or the engine's kernel (cost model, section 60)
        cols.insert(cols.index("t_step_ms") + 1, "t_allreduce_ms")
    # each row's error band: its group (engine, kind, batch bucket, dense/MoE, context), one line per band
    from roofline.evidence.published import batch_bucket, context_class

    bands, by_group = {}, {}  # a band depends on the batch's bucket and the context's class: looked up once per group
    for b, c in {(int(b), int(c)) for b, c in zip(df["batch"], df["context"], strict=True)}:
        g = (batch_bucket(b), context_class(c))
        if g not in by_group:
            by_group[g] = band_for(args.engine or DEFAULT_ENGINE, hw, batch=b, tp=args.tp,
                                   weight_dtype=args.weight_dtype, model=spec, context=c)  # fmt: skip
        bands[b, c] = by_group[g]
    df["error_band_pct"] = [_band_pct(bands[int(b), int(c)][0]) for b, c in zip(df["batch"], df["context"],
                                                                                 strict=True)]  # fmt: skip
    by_note: dict[str, list[tuple[int, int]]] = {}
    for key, (_, note) in sorted(bands.items()):
        by_note.setdefault(note, []).append(key)
    whose = "" if args.engine else f" (of {DEFAULT_ENGINE}'s time beside it)"
    band_lines = [
        f"  error band{whose}"
        + (
            ""
            if len(by_note) == 1
            else f" at batch {','.join(map(str, sorted({k[0] for k in keys})))}, context "
            f"{','.join(map(str, sorted({k[1] for k in keys})))}"
        )
        + f": {note}"
        for note, keys in by_note.items()
    ]
    head = (
        f"{spec.name} on {hw.name}, {args.dtype}" + (f" (weights {args.weight_dtype})" if args.weight_dtype else "")
        + (f", engine {args.engine}" if args.engine else " (datasheet roofline, no engine)")
        + f": {len(df)} configurations (ridge {float(st.ridge):.1f} FLOP/byte)\n" + "\n".join(band_lines)
        + (f"\n  t_allreduce_ms: the {2 * spec.n_layers} all-reduces of a pass, "
           f"{allreduce_label(hw.id, load_engine(engine_of(args)))}" if args.tp > 1 else "")
    )  # fmt: skip
    shown = df.assign(
        t_step_ms=df["t_step_s"] * 1e3,
        t_memory_ms=df["t_memory_s"] * 1e3,
        t_compute_ms=df["t_compute_s"] * 1e3,
        t_allreduce_ms=df["t_allreduce_s"] * 1e3,
    )[cols]
    rows = df.drop(columns=[c for c in df.columns if c.endswith("_ms")]).to_dict(orient="records")
    if misfits:
        worst = float(df["memory_footprint_bytes"].max())
        head += (
            f"\n  {misfits} of {len(df)} configurations DO NOT FIT in {format_quantity(capacity, 'B')} (fits_in_memory "
            f"False; up to {format_quantity(worst, 'B')} needed): their figures are for a GPU that does not exist "
            f"({fit_cures(hw, args.tp)}, or shorten the context)"
        )
        if not args.json:
            print(f"specroof: warning: {misfits} of {len(df)} configurations of {spec.name} need more than the "
                  f"{format_quantity(capacity, 'B')} {hw.name} x{args.tp} holds", file=sys.stderr)  # fmt: skip
    emit(args, {"hardware": hw.id, "model": spec.name, "engine": args.engine or "roofline", "rows": rows},
         head + "\n" + shown.to_string(index=False, float_format=lambda v: f"{v:.4g}"))  # fmt: skip
    return 0


def _pass_ridge_words(payload: dict[str, Any], engine: str | None) -> str:
    """Where an engine's per-operator rates move this pass's ridge off the GEMMs' ridge by more than 1%: both, so the
    bound printed above agrees with the intensity against the ridge printed beside it."""
    ridge, own = payload["ridge_flop_per_byte"], payload["pass_ridge_flop_per_byte"]
    if not engine or own is None or abs(own - ridge) <= 0.01 * ridge:
        return ""
    return f" for the GEMMs, {own:.1f} for this pass at {engine}'s rates per operator"


def _band_pct(band: dict[str, Any] | None) -> float:
    """A band's width in percent (a kind band's coverage edge, or the old per-kind median); NaN: none."""
    if band is None:
        return float("nan")
    return float(band.get("band_pct", band.get("median_abs_pct", float("nan"))))


def add_parser(sub: Any) -> None:
    """Register ``specroof roofline``."""
    p = sub.add_parser("roofline", help="cost of one forward pass: bytes, FLOPs, time, bound, crossover K")
    p.add_argument("--hardware", required=True, help="profile id, alias or .toml path")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument(
        "--target", "--model", dest="model", help=f"the model: preset ({', '.join(PRESETS)}) or a config.json path"
    )
    g.add_argument("--params", type=finite_float, help="abstract model with this many weights, e.g. 13e9")
    p.add_argument("--dtype", default="bf16", help="compute/activation dtype (default bf16)")
    p.add_argument("--weight-dtype", default=None, help=WEIGHT_DTYPE_HELP)
    p.add_argument("--kv-dtype", default=None, help=KV_DTYPE_HELP)
    add_int_list(p, "--batch", 1, INT_MAX, [1], "sequences per pass; several sweep")
    add_int_list(p, "--tokens", 1, INT_MAX, [1], "new tokens per sequence; several sweep")
    add_int_list(p, "--context", 0, INT_MAX, [0], "tokens already in each KV cache; several sweep")
    p.add_argument("--tp", type=bounded_int(1, 1024), default=1, help="tensor-parallel degree")
    _add_engine(p, default=None)
    p.add_argument("--plot", type=plot_path, default=None, help="write a roofline chart here (.png, .svg, .pdf)")
    _add_json(p)
    p.set_defaults(func=cmd_roofline)

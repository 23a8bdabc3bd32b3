"""``specroof hardware list|show``: the built-in GPU profiles and their sources."""

from __future__ import annotations

import argparse
from typing import Any

from roofline.core.units import format_quantity
from roofline.costing.hardware import builtin_profile_dir, list_hardware, load_hardware
from specroof.shell import (
    _add_json,
    emit,
)


def _sources_table(ids: list[str]) -> tuple[list[dict[str, str]], str]:
    """One row per profile and block: where each block's figures come from (``hardware list --sources``)."""
    rows = [
        {"id": i, "block": block, "source": src}
        for i in ids
        for block, src in load_hardware(f"{builtin_profile_dir()}/{i}.toml").sources.items()
    ]
    width = max(len(r["id"]) for r in rows)
    # left-aligned: a source is prose, read from its start
    text = "\n".join(f"{r['id']:<{width}}  {r['block']:<12}  {r['source']}" for r in rows)
    return rows, text


def cmd_hardware_list(args: argparse.Namespace) -> int:
    df = list_hardware()
    if getattr(args, "sources", False):
        rows, table = _sources_table(list(df["id"]))
        emit(args, rows, table)
        return 0
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
        # a GPU's link joins one node, the widest TP priced (docs/cost-model.md, section 63)
        node = f", {hw.max_tp} GPUs a node (the widest --tp priced)" if hw.max_tp is not None else ""
        lines.append(f"  link        {format_quantity(hw.interconnect_bytes_per_s, 'B/s')} per direction{node}")
    if hw.tdp_w:
        lines.append(f"  power       {hw.tdp_w:g} W (TDP)")
    for block, src in hw.sources.items():
        lines.append(f"  source[{block}]: {src}")
    if hw.notes:
        lines.append(f"  note: {hw.notes}")
    emit(args, info, "\n".join(lines))
    return 0


def add_parser(sub: Any) -> None:
    """Register ``specroof hardware``."""
    hw = sub.add_parser("hardware", help="list or show hardware profiles")
    hw_sub = hw.add_subparsers(dest="hw_command", required=True, parser_class=type(hw))
    p = hw_sub.add_parser("list", help="all built-in profiles")
    p.add_argument(
        "--sources", action="store_true", help="list where each profile's blocks come from, one row per block"
    )
    _add_json(p)
    p.set_defaults(func=cmd_hardware_list)
    p = hw_sub.add_parser("show", help="one profile with its sources")
    p.add_argument("name")
    _add_json(p)
    p.set_defaults(func=cmd_hardware_show)

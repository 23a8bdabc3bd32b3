"""``specroof tree``: the optimal draft tree for a sibling-rank acceptance vector, and its size for a GPU."""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from roofline.errors import SpecroofError
from specroof.commands.common import (
    DRAFTER_GRAMMAR,
    KV_DTYPE_HELP,
    TREE_DRAFTER_KEYS,
    WEIGHT_DTYPE_HELP,
    apply_weight_only,
    draft_spec,
    drafter_key,
    resolve_drafter,
    with_offload,
)
from specroof.shell import (
    INT_MAX,
    _add_engine,
    _add_json,
    _add_offload,
    bounded_int,
    emit,
    engine_of,
    plot_path,
    pricing_from_args,
)


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

    apply_weight_only(args)
    if args.drafter and args.draft:
        raise SpecroofError("give --drafter SPEC or --draft NAME (the same as --drafter model:NAME), not both")
    drafter = args.drafter or (draft_spec(args.draft) if args.draft else None)
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
            with_offload(args.hardware, args.offload),
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


def add_parser(sub: Any) -> None:
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

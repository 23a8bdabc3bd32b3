"""``specroof tree``: the optimal draft tree for a sibling-rank acceptance vector, and its size for a GPU."""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from roofline.core.errors import SpecroofError
from roofline.costing.hardware import load_hardware
from roofline.speculation.acceptance_defaults import CURVE_ALPHAS, NoMatchedDefault, break_even, break_even_words, pays
from specroof.commands.common import (
    DRAFTER_GRAMMAR,
    KV_DTYPE_HELP,
    TREE_BUDGETS,
    TREE_DEPTH,
    TREE_DRAFTER_KEYS,
    WEIGHT_DTYPE_HELP,
    add_engine_config,
    apply_weight_only,
    band_for,
    draft_spec,
    drafter_key,
    emit_prices,
    engine_config_from_args,
    published_acceptance,
    resolve_drafter,
    with_offload,
)
from specroof.shell import (
    INT_MAX,
    GivenStore,
    _add_engine,
    _add_json,
    _add_offload,
    add_int_list,
    bounded_int,
    emit,
    engine_of,
    plot_path,
    pricing_from_args,
)


def read_acceptance_vector(path: str) -> Any:
    """A Sequoia sibling-rank vector from JSON: a list (rank 0 first, or Sequoia's saved layout with its leading 0,
    detected and said so, never shifted), {"p": [...]} or {"sequoia": [...]}."""
    from roofline.speculation.acceptance import read_sibling_vector

    return read_sibling_vector(path)


def tree_acceptance(args: argparse.Namespace, drafter: str | None) -> tuple[Any, dict[str, Any], str]:
    """The tree's acceptance model, its JSON and the line that says where it came from.

    ``--acceptance-vector`` when given; else the drafter's published figure, as ``plan`` takes it when none is
    given (``published_acceptance``: Spec-Bench's tokens per round read on the tree that run verified, or
    DeepSeek-V3's MTP rate), as an i.i.d. per-candidate rate: one number says nothing of how acceptance falls
    with sibling rank beyond the i.i.d. model's own (1 - p)^k.
    """
    if args.acceptance_vector is not None:
        vec = read_acceptance_vector(args.acceptance_vector)
        return vec.model(), vec.to_json(), f"acceptance: {vec.describe()}"
    if drafter is None:
        raise SpecroofError(
            "give --acceptance-vector FILE (a sibling-rank vector), or --hardware --target --drafter to use the "
            "drafter's published acceptance"
        )
    from roofline.speculation.trees import IIDAcceptance

    key = drafter_key(drafter)
    try:  # the target's matched pair only, as plan takes it (docs/cost-model.md, 50.2); NoMatchedDefault goes up
        acc, source = published_acceptance(key, getattr(args, "target", None))
    except NoMatchedDefault:
        raise
    except SpecroofError:
        raise SpecroofError(
            f"no published acceptance for {key} drafters: give --acceptance-vector FILE (a sibling-rank vector)"
        ) from None
    p = float(acc.alpha())
    read = (
        f"; read per candidate at the chain's per-token rate over its {acc.gamma} measured drafts, {p:.3f}"
        if getattr(acc, "gamma", None)
        else ""
    )
    note = f"{key}: none given: {source}{read}; each candidate accepted i.i.d. (--acceptance-vector FILE for yours)"
    return IIDAcceptance(p), {"iid_p": p, "given": False, "source": source}, f"acceptance: {note}"


def _tree_over_acceptance(
    args: argparse.Namespace, drafter: str, why: str, budgets: list[int], batches: list[int]
) -> int:
    """No matched published acceptance: per batch, the fastest tree's speedup over a range of per-candidate rates
    and the break-even rate (the rule plan and serve answer with: roofline.speculation.acceptance_defaults), instead
    of one tree sized at a figure borrowed from another pair. No flags: no one setting is the answer."""
    from roofline.deploy.tree_sizing import best_tree_size
    from roofline.speculation.trees import IIDAcceptance

    why = why.partition(": give")[0] + ": give --acceptance-vector FILE for one answer"
    lines = [
        f"acceptance: {why}; the answer is the fastest tree's speedup over a range of per-candidate rates (i.i.d.), "
        "with the break-even rate",
    ]
    rows, breakeven = [], []
    for batch in batches:
        args.batch = batch  # the fit check reads one batch
        cell = []
        for a in CURVE_ALPHAS:
            choice = best_tree_size(
                with_offload(args.hardware, args.offload), args.target, resolve_drafter(drafter, args.target),
                IIDAcceptance(float(a)), batch, args.context, budgets=budgets, max_depth=args.max_depth,
                dtype=args.dtype, engine=engine_of(args), weight_dtype=args.weight_dtype, kv_dtype=args.kv_dtype,
                tp=args.tp,
            )  # fmt: skip
            cell.append({"batch": batch, "iid_p": float(a), "speedup": float(choice.best["speedup"]),
                         "n_nodes": int(choice.tree.n_nodes), "depth": int(choice.tree.depth),
                         "expected_tokens": float(choice.best["expected_tokens"])})  # fmt: skip
        unfit = _does_not_fit(args, drafter, max(r["n_nodes"] for r in cell))
        if unfit is not None:  # the largest tree of the range does not fit: no speedup, only the reason
            lines.append(f"on {args.hardware}, batch {batch}, context {args.context}: {unfit['reason']}")
            breakeven.append({"batch": batch, "break_even_p": None, "fits_in_memory": False, **unfit})
            continue
        rows += cell
        be = break_even([r["iid_p"] for r in cell], [pays(r["speedup"]) for r in cell])
        breakeven.append({"batch": batch, "break_even_p": be})
        where = break_even_words(be, "per-candidate rate")
        curve = ", ".join(f"{r['iid_p']:g}: {r['speedup']:.2f}x@{r['n_nodes']}" for r in cell)
        lines.append(
            f"on {args.hardware}, batch {batch}, context {args.context}: the fastest tree {where}; its speedup (at "
            f"its nodes) by rate: {curve}"
        )
    lines.append(
        "  the trees searched, not an engine's setting: give --acceptance-vector FILE (or the target's measured "
        "acceptance to plan --emit) for the flags of one"
    )
    payload = {"acceptance": why, "curve": rows, "break_even": breakeven, "engine": args.engine}
    args.batch = batches
    emit(args, payload, "\n".join(lines))
    return 0


#: the most paths the text shows (a 512-node tree's paths fill a screen; --json has every one)
SHOWN_PATHS = 40


def _tree_lines(t: Any) -> list[str]:
    """A tree's shape in words: nodes, depth, nodes per level, and its paths as sibling ranks."""
    paths = ["".join(map(str, p)) for p in t.paths()]
    more = f" ... (+{len(paths) - SHOWN_PATHS} more; --json lists them all)" if len(paths) > SHOWN_PATHS else ""
    return [
        f"  {t.n_nodes} nodes, depth {t.depth}, nodes per level {t.widths.tolist()}",
        "  paths (sibling ranks, 0 = the draft's top choice): "
        + (" ".join(paths[:SHOWN_PATHS]) + more if paths else "none (no draft node adds expected tokens)"),
    ]


def _tree_payload(t: Any) -> dict[str, Any]:
    return {
        "n_nodes": t.n_nodes,
        "depth": t.depth,
        "parents": t.parents.tolist(),
        "paths": [list(p) for p in t.paths()],
        "widths": t.widths.tolist(),
    }


def _tree_deploy(args: argparse.Namespace, drafter: str, acc: Any, framework: str) -> dict[str, Any]:
    """The engine's own tree knobs searched for this acceptance vector on the GPU, and the flags of the best."""
    from roofline.deploy.engine_search import plan_engine

    kind = drafter_key(drafter)
    plan = plan_engine(
        hardware=pricing_from_args(args),
        target=args.target,
        drafter="eagle" if kind == "eagle1" else kind,
        framework=framework,
        acceptance=acc,
        batches=[args.batch],
        context=args.context,
    )
    return plan.records(target=args.target, drafter=kind, draft_model=args.draft_model)[0]


#: the engines whose own EAGLE trees ``--emit`` searches, and the pricing engines that stand for them
_FRAMEWORK_NAMES = {"sglang": "SGLang", "vllm": "vLLM", "trtllm": "TensorRT-LLM"}


def _deploy_engine(args: argparse.Namespace) -> str:
    """The engine whose flags the answer gives: ``--emit``, else the pricing engine's own (``serving`` is an alias of
    vLLM), else vLLM."""
    if args.emit:
        return str(args.emit)
    from roofline.costing.engine import load_engine

    eng = load_engine(args.engine) if isinstance(args.engine, str) else None
    name = str(getattr(eng, "name", "") or "").lower()
    return name if name in _FRAMEWORK_NAMES else "vllm"


def _search_budgets(cap: int | None) -> list[int]:
    """The node budgets searched for a GPU: the page's grid, up to ``--budget`` when one is given (its cap)."""
    if cap is None:
        return list(TREE_BUDGETS)
    return sorted({b for b in TREE_BUDGETS if b < cap} | {cap})


def cmd_tree(args: argparse.Namespace) -> int:
    from roofline.speculation.trees import optimal_tree

    if args.drafter and args.draft:
        raise SpecroofError("give --drafter SPEC or --draft NAME (the same as --drafter model:NAME), not both")
    if args.engine_config is not None and args.draft:
        args.drafter, args.draft = draft_spec(args.draft), None
    config = engine_config_from_args(args, fill_hardware=True)  # read before any work
    if config is not None:
        _check_config(args, config)
    emit_prices(args)
    apply_weight_only(args)
    drafter = args.drafter or (draft_spec(args.draft) if args.draft else None)
    if (args.target or drafter) and not args.hardware:
        raise SpecroofError("--target and --drafter choose a tree size for a GPU: give --hardware too")
    if args.hardware and not (args.target and drafter):
        raise SpecroofError("--hardware needs --target and --drafter as well")
    if args.budget is None and not args.hardware:
        raise SpecroofError(
            "give --budget N (draft nodes per round), or --hardware --target --drafter to choose the size for a GPU "
            "(without a GPU the largest tree always wins)"
        )
    if args.emit and drafter_key(drafter or "") not in TREE_DRAFTER_KEYS and drafter is not None:
        raise SpecroofError(
            f"--emit searches the tree knobs of EAGLE-family drafters ({', '.join(TREE_DRAFTER_KEYS)}); for {drafter!r} "
            "use specroof plan --emit, which deploys its best chain"
        )
    if args.emit and not args.hardware:
        raise SpecroofError("--emit prices the engine's trees on a GPU: give --hardware, --target and --drafter")
    if args.tp > 1:
        if not args.hardware:
            raise SpecroofError("--tp prices the tree on a GPU: give --hardware, --target and --drafter too")
        from roofline.core.validation import check_tp
        from roofline.passes.model import get_model

        check_tp(get_model(args.target), args.tp)
    depth = args.max_depth
    if args.hardware and drafter is not None:
        from roofline.passes.model import get_model
        from roofline.speculation.drafters.base import deepest
        from roofline.speculation.drafters.grammar import as_drafter

        depth = deepest(as_drafter(drafter, get_model(args.target)), depth)  # Medusa's, Hydra's heads
    batches = [int(b) for b in (args.batch if isinstance(args.batch, list) else [args.batch])]
    if config is not None and len(batches) > 1:
        raise SpecroofError(
            f"--engine-config prices one deployment: give one --batch (got {','.join(map(str, batches))})"
        )
    try:
        acc, acc_json, acc_line = tree_acceptance(args, drafter)
    except NoMatchedDefault as e:  # no published figure for this pair: the answer is a curve over acceptance
        if args.budget is not None or config is not None or args.emit or args.plot:
            raise SpecroofError(
                f"{e}: --budget, --emit, --plot and --engine-config size or draw one tree, which needs one acceptance"
            ) from None
        return _tree_over_acceptance(args, drafter, str(e), _search_budgets(None), batches)
    payload: dict[str, Any] = {"acceptance": acc_json}
    lines = [acc_line]
    drawn = None
    if args.budget is not None:
        opt = optimal_tree(acc, args.budget, depth)
        drawn = opt.tree
        payload |= {"expected_tokens": opt.expected_tokens, **_tree_payload(opt.tree)}
        lines += [
            f"the tree with the most expected tokens for {args.budget} draft nodes, depth <= {depth} "
            f"(no hardware: the largest tree always wins on tokens):",
            *_tree_lines(opt.tree),
            f"  expected tokens per round: {opt.expected_tokens:.4f} (bonus included)",
        ]
    if args.hardware:
        budgets = _search_budgets(args.budget)
        shared = optimal_tree(acc, max(budgets), depth)  # one table for every batch: the trees do not depend on it
        by_batch = []
        for batch in batches:
            args.batch = batch  # the deploy search, the engine's own tree and the band read one batch
            part: dict[str, Any] = {}
            lines += _hardware_answer(args, drafter, acc, config, budgets, depth, shared, part)
            by_batch.append({"batch": batch, **part})
        args.batch = batches
        if args.budget is None:  # no fixed size: the drawing is the GPU's tree (the first batch's)
            drawn = by_batch[0]["tree"]
        first = by_batch[0]
        payload |= {k: v for k, v in first.items() if k not in ("batch", "tree")}
        if args.budget is None and first["tree"] is not None:  # the answer is the GPU's tree: its fields on top
            payload |= {"expected_tokens": first["hardware_choice"]["expected_tokens"], **_tree_payload(first["tree"])}
        if len(batches) > 1:
            payload["by_batch"] = [{k: v for k, v in b.items() if k != "tree"} for b in by_batch]
    if args.plot and drawn is not None:
        from roofline.plot import tree_chart

        fig = tree_chart(drawn, values=drawn.path_probabilities(acc))
        fig.savefig(args.plot, dpi=110)
    emit(args, payload, "\n".join(lines))
    return 0


def _hardware_answer(
    args: argparse.Namespace,
    drafter: str,
    acc: Any,
    config: Any,
    budgets: list[int],
    depth: int,
    shared: Any,
    payload: dict[str, Any],
) -> list[str]:
    """The GPU's best tree at ``args.batch`` (one of ``--batch``'s values): its lines, its fields into ``payload``."""
    from roofline.deploy.tree_sizing import best_tree_size

    choice = best_tree_size(
        with_offload(args.hardware, args.offload),
        args.target,
        resolve_drafter(drafter, args.target),
        acc,
        args.batch,
        args.context,
        budgets=budgets,
        max_depth=depth,
        dtype=args.dtype,
        engine=engine_of(args),
        weight_dtype=args.weight_dtype,
        kv_dtype=args.kv_dtype,
        tp=args.tp,
        opt=shared,
    )
    b = choice.best
    unfit = _does_not_fit(args, drafter, int(choice.tree.n_nodes))
    if unfit is not None:  # no speedup for a tree the engine cannot hold (docs/cost-model.md, section 50.4)
        payload["hardware_choice"] = {"fits_in_memory": False, "speedup": None, **unfit}
        payload["engine"] = args.engine
        payload["tree"] = None
        return ["", f"on {args.hardware}: {args.target} + {drafter}, batch {args.batch}, context {args.context}: "
                    f"{unfit['reason']}"]  # fmt: skip
    chosen = {
        k: (float(v) if isinstance(v, (int, float, np.floating, np.integer)) else v) for k, v in b.items()
    } | _tree_payload(choice.tree)
    payload["hardware_choice"] = chosen | {"budgets_searched": budgets, "max_depth": depth}
    payload["engine"] = args.engine
    payload["tree"] = choice.tree
    engine = f", engine {args.engine}" if args.engine else " (datasheet roofline, no engine)"
    band = band_for(args.engine, load_hardware(args.hardware), speculative=True, batch=args.batch,
                    model=args.target, context=args.context)  # fmt: skip
    payload["error_band"], payload["error_band_note"] = band
    searched = (
        f"sizes {budgets[0]}-{budgets[-1]} nodes searched" + (f" (capped by --budget {args.budget})" if args.budget else "")
        + f", depth <= {depth}"
    )  # fmt: skip
    lines = [
        "",
        f"on {args.hardware}: best tree (the fastest, not the largest) for {args.target} + {drafter}, "
        f"batch {args.batch}, context {args.context}{engine}: speedup {b['speedup']:.2f}x ({band[1]})",
        *_tree_lines(choice.tree),
        f"  {b['expected_tokens']:.3f} tokens per {b['t_round_s'] * 1e3:.2f} ms round; {searched}",
    ]
    kind = drafter_key(drafter or "")
    if config is not None:
        lines += _config_lines(args, config, acc, payload)
    elif kind in TREE_DRAFTER_KEYS:
        framework = _deploy_engine(args)
        payload["deploy"] = _tree_deploy(args, drafter, acc, framework)
        r = payload["deploy"]
        lines += [
            "",
            f"flags: as {_FRAMEWORK_NAMES[framework]} builds {drafter}'s tree (its own knobs searched; --emit "
            f"sglang|vllm|trtllm for another engine), its best setting on {args.hardware} at batch {args.batch}: "
            f"{r['label']} ({r['n_nodes']} nodes, depth {r['depth']}, {r['expected_tokens']:.3f} tokens per "
            f"round, {r['speedup']:.2f}x)",
            *(f"  {line}" for line in str(r["flags"]).splitlines()),
        ]
        from specroof.commands.tree_labels import one_table  # the two answers, labelled (section 50.3)

        table_lines, payload["answers"] = one_table(b | _tree_payload(choice.tree), r, framework)
        lines += table_lines
    else:
        lines += [
            "",
            f"flags: the engines build draft trees for EAGLE-family drafters only ({', '.join(TREE_DRAFTER_KEYS)}); "
            f"{drafter} drafts a chain there: specroof plan --emit vllm|sglang|trtllm deploys its best gamma",
        ]
    return lines


def _does_not_fit(args: argparse.Namespace, drafter: str, nodes: int) -> dict[str, Any] | None:
    """None when the GPU's best tree fits the engine's share of each device; else the reason and the largest batch
    and context that fit, by the rule ``speedup`` applies (one check: specroof.commands.speedup)."""
    from types import SimpleNamespace

    from specroof.commands.speedup import _does_not_fit as unfit

    one = argparse.Namespace(**vars(args))
    one.drafter = drafter
    return unfit(one, SimpleNamespace(tree_nodes=nodes, gamma=None))


def _check_config(args: argparse.Namespace, config: Any) -> None:
    """What ``tree --engine-config`` needs, refused before any work: a GPU, an EAGLE-family drafter (the engines
    build trees for those only), and no other engine's flags."""
    if not args.hardware:
        raise SpecroofError("--engine-config prices the engine's tree on a GPU: give --hardware")
    if drafter_key(config.drafter) not in TREE_DRAFTER_KEYS:
        raise SpecroofError(
            f"the engine configuration drafts with {config.drafter}, a chain: the engines build trees for "
            f"{', '.join(TREE_DRAFTER_KEYS)} only; price it with specroof speedup --engine-config or plan --engine-config"
        )
    if args.emit is not None and args.emit != config.engine:
        raise SpecroofError(
            f"--emit {args.emit} and the engine configuration's {config.engine} differ: the answer is in your "
            "engine's flags (give one)"
        )
    args.emit = config.engine


def _config_lines(args: argparse.Namespace, config: Any, acc: Any, payload: dict[str, Any]) -> list[str]:
    """Your engine's tree under this acceptance vector: its shape and price, beside the best setting of the same
    engine and the flags that deploy it (roofline.deploy.planner.compare_engine_config)."""
    from roofline.deploy.planner import compare_engine_config
    from roofline.speculation.engine_trees import engine_tree

    v = compare_engine_config(config, pricing_from_args(args), acceptance=acc, target=args.target, batch=args.batch,
                              context=args.context)  # fmt: skip
    yours = engine_tree(config.setting, acc).tree
    y = v.yours
    payload["engine_config"] = config.to_json() | {"tree": _tree_payload(yours)}
    payload["verdict"] = v.to_json()
    payload["deploy"] = v.best | {"flags": v.flags, "knobs": v.best_setting.knobs()}
    name = _FRAMEWORK_NAMES[config.engine]
    sentence = v.sentence().splitlines()
    return [
        "",
        f"your setting ({config.label}, read from {config.source}): the tree {name} builds for {config.drafter} "
        f"under this acceptance, {y['expected_tokens']:.3f} tokens per {y['t_round_s'] * 1e3:.2f} ms round, "
        f"{y['speedup']:.2f}x",
        *_tree_lines(yours),
        *(f"  note: {n}" for n in config.notes),
        "",
        f"flags: {sentence[0]}",
        *(f"  {line}" for line in sentence[1:]),
    ]


def add_parser(sub: Any) -> None:
    """Register ``specroof tree``."""
    p = sub.add_parser("tree", help="optimal draft tree for a sibling-rank acceptance vector (and its size for a GPU)")
    p.add_argument(
        "--acceptance-vector",
        help="a JSON file, or the JSON itself: [p0, p1, ...], {'p': [...]} or {'sequoia': [...]} (default with "
        "--drafter: its published acceptance, as plan takes it, named on the output)",
    )
    p.add_argument(
        "--budget",
        type=bounded_int(1, 100_000),
        default=None,
        help="draft nodes per round (not counting the root): a fixed size; with --hardware the largest size searched "
        f"(default with --hardware: {TREE_BUDGETS[0]}-{TREE_BUDGETS[-1]}, as the report page searches)",
    )
    p.add_argument(
        "--max-depth", type=bounded_int(1, 10_000), default=TREE_DEPTH, help=f"draft levels (default {TREE_DEPTH})"
    )
    p.add_argument("--hardware", help="choose the tree size for this GPU (searches sizes; needs --target, --drafter)")
    p.add_argument(
        "--target", "--model", dest="target", help="target model (with --hardware): preset, config.json or folder"
    )
    p.add_argument("--drafter", metavar="SPEC", help=f"the drafter (with --hardware): {DRAFTER_GRAMMAR}")
    p.add_argument("--draft", help="same as --drafter model:NAME")
    add_int_list(p, "--batch", 1, INT_MAX, [1], "sequences per pass (with --hardware: the best tree at each)")
    p.add_argument("--context", type=bounded_int(0, INT_MAX), action=GivenStore, default=1024)
    p.add_argument(
        "--tp", type=bounded_int(1, 1024), action=GivenStore, default=1, help="tensor-parallel degree of the target"
    )
    p.add_argument("--dtype", action=GivenStore, default="bf16", help="compute/activation dtype (default bf16)")
    p.add_argument("--weight-dtype", default=None, help=WEIGHT_DTYPE_HELP)
    p.add_argument("--kv-dtype", default=None, help=KV_DTYPE_HELP)
    p.add_argument("--plot", type=plot_path, help="write a drawing of the tree (.png, .svg, .pdf)")
    p.add_argument(
        "--emit",
        choices=("sglang", "vllm", "trtllm"),
        help="the engine whose own tree knobs are searched for an EAGLE-family --drafter, and whose flags are "
        "printed (default: the --engine's own, vLLM for serving)",
    )
    p.add_argument("--draft-model", help="with --emit: the draft checkpoint to name (a Hugging Face id or a path)")
    _add_engine(p)
    add_engine_config(p)
    _add_offload(p)
    _add_json(p)
    p.set_defaults(func=cmd_tree)

"""What the analytic commands share: the model, drafter and acceptance flags read into the model's objects,
the weight-format rule, the error band sentence and the sweep limits.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from roofline.errors import SpecroofError
from roofline.hardware import load_hardware, weight_only
from roofline.model import ModelSpec, get_model


def model_from_args(args: argparse.Namespace) -> ModelSpec:
    if getattr(args, "params", None) is not None:
        if not args.params > 0:
            raise SpecroofError(f"--params must be a positive number of weights (got {args.params})")
        return ModelSpec.from_params(args.params)
    if getattr(args, "model", None):
        return get_model(args.model)
    raise SpecroofError("give a model: --model PRESET (or a config.json path) or --params N")


#: what an answer priced on the datasheet roofline says instead of a band
NO_ENGINE_BAND = "datasheet roofline: an upper bound; no error band (price it under an engine for one)"


def band_for(
    engine: Any, hw: Any, *, model: Any = None, context: int = 0, kind: str | None = None, **what: Any
) -> tuple[dict[str, Any] | None, str]:
    """The error band of a prediction and the sentence that states it: the held-out published rows of the most
    specific group it belongs to (engine, kind, batch bucket, dense/MoE target, context:
    :func:`roofline.error_bands.band_for`), or the old per-kind sentence when no group has rows.

    ``what`` (batch, tp, weight_dtype, speculative, prefill) names the kind (:func:`roofline.error_bands.
    prediction_kind`) unless ``kind`` is given (``serving``); ``model`` is the target (dense or MoE), ``context``
    the tokens in each sequence's cache."""
    import dataclasses

    from roofline.error_bands import band_for as kind_band
    from roofline.error_bands import band_sentence, error_band, prediction_kind

    if not engine:
        return None, NO_ENGINE_BAND
    k = kind or prediction_kind(**what)
    band = kind_band(engine, k, hw, batch=int(what.get("batch", 1)), model=model, context=int(context))
    if band is None:  # no group of this kind has held-out rows: the per-kind band, or the sentence saying none exists
        old = error_band(engine, k, hw)
        return (dataclasses.asdict(old) if old else None), band_sentence(engine, k, hw)
    return dataclasses.asdict(band) | {"kind": k}, band.description


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


def draft_spec(value: str) -> str:
    """``--draft X``: a drafter of the grammar when X names one (``eagle2``), else a separate draft model."""
    return value if drafter_key(value) in GRAMMAR_NAMES else f"model:{value}"


def drafter_specs(args: argparse.Namespace) -> list[str]:
    """Every drafter the command line names, in the drafter grammar (``--drafter``, then the old flags)."""
    specs = [s.strip() for s in (getattr(args, "drafter", None) or [])]
    for attr, form in LEGACY_DRAFTER_FLAGS.items():
        value = getattr(args, attr, None)
        if value is None or value is False:
            continue
        specs.append(draft_spec(value) if attr == "draft" else form if value is True else form.format(value))
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


#: where a drafter's acceptance comes from when none is given: its row on Spec-Bench's A100 leaderboard (the
#: published/ file, the target and the drafter as that file names them). Spec-Bench measures every method on one GPU,
#: one prompt set and greedy decoding, so the defaults are comparable with one another; none is for the user's model
SPEC_BENCH_ROWS = {
    "eagle": ("spec_bench_a100_2025.toml", "vicuna-7b", "eagle"),
    "eagle1": ("spec_bench_a100_2025.toml", "vicuna-7b", "eagle"),
    "eagle2": ("spec_bench_a100_2025.toml", "vicuna-7b", "eagle2"),
    "eagle3": ("spec_bench_a100_2025.toml", "vicuna-13b", "eagle3"),
    "medusa": ("spec_bench_a100_2025.toml", "vicuna-7b", "medusa"),
    "hydra": ("spec_bench_a100_2025.toml", "vicuna-7b", "hydra"),
    "prompt-lookup": ("spec_bench_a100_2025.toml", "vicuna-7b", "prompt-lookup"),
    "model": ("spec_bench_a100_2025.toml", "vicuna-7b", "model:vicuna-68m"),
}
#: MTP is not on Spec-Bench: DeepSeek-V3's own figure, the low end of the range it states
MTP_ACCEPTANCE = (
    0.85,
    "DeepSeek-V3 Technical Report (arXiv 2412.19437), section 5.4.3: its MTP module's second token is accepted "
    "85-90% of the time; the low end, 0.85, per token",
)
#: EAGLE-2's dynamic tree as Spec-Bench runs EAGLE-2 and EAGLE-3 (total_token 60, depth 5, top_k 10), in SGLang's
#: knobs, which build the same tree (steps, top-k, verified tokens)
SPEC_BENCH_EAGLE2 = ("sglang", 5, 10, 60)
#: drafters no published figure covers: their acceptance is required
NO_PUBLISHED_ACCEPTANCE = ("early-exit", "block", "window")


def published_row(file: str, model: str, drafter: str) -> dict[str, Any]:
    """One row of a published/ file, read as it is written (without importing roofline.published, which costs a
    second of imports that the commands do not need)."""
    import tomllib

    import roofline

    path = Path(roofline.__file__).resolve().parents[1] / "published" / file
    rows = tomllib.loads(path.read_text()).get("row", [])
    hit = [r for r in rows if r.get("model") == model and r.get("drafter") == drafter]
    if len(hit) != 1:
        raise SpecroofError(f"{path.name}: expected one row for {model} + {drafter}, found {len(hit)}")
    return dict(hit[0])


def _tree_rate(mean: float, tree: Any) -> float:
    """The i.i.d. per-candidate rate p under which ``tree`` yields ``mean`` tokens per round (bisection)."""
    from roofline.trees import IIDAcceptance

    lo, hi = 0.0, 1.0
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if tree.expected_tokens(IIDAcceptance(mid)) < mean else (lo, mid)
    return (lo + hi) / 2


def published_acceptance(kind: str) -> tuple[Any, str]:
    """A drafter kind's acceptance from a named published figure, and the sentence that names it.

    Returns ``(PerToken, sentence)``. Spec-Bench's tokens per round on a tree (EAGLE, Medusa, Hydra) is read on the
    tree that run verified (the row's ``tree``, else the drafter's own), as i.i.d. per-candidate p; at a stated gamma
    (prompt lookup) as the per-token rate of that chain; under Hugging Face's heuristic schedule (a draft model) as the
    rate that schedule turns into the figure. Raises SpecroofError for a kind no published figure covers.
    """
    from roofline.acceptance import MeanAccepted, PerToken

    kind = "eagle" if kind == "eagle1" else kind
    if kind == "mtp":
        return PerToken(MTP_ACCEPTANCE[0]), f"{MTP_ACCEPTANCE[0]:g} per token, from the {MTP_ACCEPTANCE[1]}"
    if kind not in SPEC_BENCH_ROWS:
        raise SpecroofError(
            f"no published acceptance figure for {kind} drafters: give --acceptance {kind}=VALUE "
            "(0.7, mean:3.2@5, vllm-rate:0.7@5, a curve or a metrics file)"
        )
    from roofline.drafters import TREE_PRESETS, as_drafter, default_tree
    from roofline.predict import alpha_for_heuristic

    file, model, drafter = SPEC_BENCH_ROWS[kind]
    row = published_row(file, model, drafter)
    mean, gamma, tree_name = float(row["mean_accepted"]), row.get("gamma"), row.get("tree")
    where = f"Spec-Bench's A100 leaderboard (2025-04-22), {model} + {drafter}: {mean:g} tokens per round"
    if gamma == "heuristic":
        a = float(alpha_for_heuristic(mean))
        return PerToken(a), f"{a:.3f} per token, {where} under Hugging Face's heuristic gamma schedule"
    if isinstance(gamma, int):  # a chain at a stated gamma
        a = float(MeanAccepted(mean, gamma=int(gamma)).for_plan())
        return PerToken(a), f"{a:.3f} per token, {where} at gamma {int(gamma)}"
    if kind in ("eagle2", "eagle3"):  # EAGLE-2's dynamic tree, as Spec-Bench runs both (the file's note)
        from roofline.engine_trees import EngineSetting, fit_acceptance

        p = float(fit_acceptance(mean, EngineSetting(*SPEC_BENCH_EAGLE2)).p)
        return PerToken(p), (
            f"{p:.3f} per candidate, {where} on EAGLE-2's dynamic tree (total_token 60, depth 5, top_k 10)"
        )
    tree = TREE_PRESETS[tree_name] if isinstance(tree_name, str) and tree_name else default_tree(as_drafter(kind))
    p = _tree_rate(mean, tree)
    return PerToken(p), f"{p:.3f} per candidate, {where} on its {tree.n_nodes}-node tree of depth {tree.depth}"


def default_acceptance(drafters: dict[str, Any]) -> dict[str, tuple[Any, str]]:
    """Each drafter's published default (:func:`published_acceptance`), keyed as ``drafters``; one line naming every
    drafter that has none."""
    missing = [k for k in drafters if drafter_key(k) not in (*SPEC_BENCH_ROWS, "mtp")]
    if missing:
        from roofline.acceptance import GRAMMAR

        raise SpecroofError(
            f"no published acceptance for {', '.join(missing)}: give --acceptance KEY=VALUE for "
            f"{'it' if len(missing) == 1 else 'each'} (VALUE {GRAMMAR})"
        )
    return {k: published_acceptance(drafter_key(k)) for k in drafters}


def acceptance_from_args(args: argparse.Namespace, drafters: dict[str, Any]) -> Any:
    """Acceptance per drafter (``--acceptance KEY=VALUE``, repeated; VALUE in any kind of roofline.acceptance), or one
    shared value only with --same-alpha. Returns what the planner takes, keyed by drafter name; the sentences saying
    what each value was read as go to ``args.acceptance_notes``.

    Drafters differ in how often their tokens are accepted (a trained draft model, an
    early exit and prompt lookup are not alike), so a plan that compares several with
    one shared alpha favours whichever is cheapest: it must be asked for explicitly.
    """
    from roofline.acceptance import parse_acceptance_items

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
    if not shared:  # none given: each drafter's published figure, named on the output
        out = {}
        for key, (acc, source) in default_acceptance(drafters).items():
            out[drafters[key].name], _ = _for_plan(key, acc)
            args.acceptance_notes.append(
                f"{key}: none given: {source} (--acceptance {drafter_key(key)}=VALUE for yours)"
            )
            args.acceptance_kinds[key] = acc
        return out
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


def single_acceptance(value: str | None, drafter: str) -> tuple[Any, Any, str]:
    """One drafter's acceptance in the grammar every command shares: ``VALUE`` or ``KEY=VALUE`` (KEY the drafter's
    name, as ``plan --acceptance`` takes it), or None for its published figure (:func:`published_acceptance`).

    Returns (the acceptance kind, what the planner takes: a rate or a curve, the sentence saying what it was read as).
    """
    from roofline.acceptance import parse_acceptance, parse_acceptance_items

    key = drafter_key(drafter)
    if value is None:
        acc, source = published_acceptance(key)
        plan_value, _ = _for_plan(key, acc)
        return acc, plan_value, f"{key}: none given: {source} (--acceptance {key}=VALUE for yours)"
    text = str(value).strip()
    if "=" in text and not Path(text).is_file():  # KEY=VALUE (a file whose name holds '=' is a file): KEY names it
        aliases = {a: key for a, k in ACCEPTANCE_KEY_ALIASES.items() if k == key} | {drafter.strip(): key}
        acc = parse_acceptance_items([text], [key], aliases=aliases)[key]
    else:
        acc = parse_acceptance(text)
    plan_value, note = _for_plan(key, acc)
    return acc, plan_value, note


#: the draft-tree sizes searched for a GPU and the deepest tree, by ``tree --hardware`` and the report page alike
#: (one search: the page and the command name the same tree for one question)
TREE_BUDGETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
TREE_DEPTH = 10

#: the most configurations one `specroof plan` prices (each takes a few hundred bytes of the table)
PLAN_MAX_CELLS = 2_000_000
#: the most (hardware, batch, context) recommendations one plan prints
PLAN_MAX_RECOMMENDATIONS = 2_000


def with_offload(name: str, link: str | None) -> Any:
    """The profile ``name``, with its weights offloaded over ``link`` when one is given."""
    hw = load_hardware(name)
    return hw.offloaded(link) if link else hw


#: the weight format grammar and the KV rule, as every pricing command's help states them (roofline.dtypes)
WEIGHT_DTYPE_HELP = (
    "weights stored as int8|int4|fp8|bits:B[,group:G][,kernel:gptfast|torchao|marlin|gptq|awq|exl2] "
    "(weight-only; e.g. int4,group:128,kernel:marlin or bits:2.5,kernel:exl2)"
)
KV_DTYPE_HELP = (
    "KV-cache dtype (default: the activations' dtype; bf16 under --dtype fp8/int8: fp8 KV is --kv-dtype fp8)"
)


def apply_weight_only(args: argparse.Namespace) -> None:
    """--dtype int4 alone is weight-only int4 with bf16 arithmetic (GPUs multiply in bf16); under an 8-bit
    --dtype the KV cache stays bf16 unless --kv-dtype says otherwise (roofline.dtypes.default_kv_dtype)."""
    from roofline.dtypes import default_kv_dtype

    args.dtype, args.weight_dtype = weight_only(args.dtype, getattr(args, "weight_dtype", None))
    if getattr(args, "kv_dtype", None) is None:
        args.kv_dtype = default_kv_dtype(args.dtype)

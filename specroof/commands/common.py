"""What the analytic commands share: the model, drafter and acceptance flags read into the model's objects,
the weight-format rule, the error band sentence and the sweep limits.
"""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from roofline.core.errors import SpecroofError
from roofline.costing.hardware import load_hardware, weight_only
from roofline.passes.model import PRESETS, ModelSpec, get_model
from specroof.shell import was_given


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
    :func:`roofline.evidence.error_bands.band_for`), or the old per-kind sentence when no group has rows.

    ``what`` (batch, tp, weight_dtype, speculative, prefill) names the kind (:func:`roofline.evidence.error_bands.
    prediction_kind`) unless ``kind`` is given (``serving``); ``model`` is the target (dense or MoE), ``context``
    the tokens in each sequence's cache."""
    import dataclasses

    from roofline.evidence.error_bands import band_for as kind_band
    from roofline.evidence.error_bands import band_sentence, error_band, is_hybrid, is_moe, prediction_kind
    from roofline.evidence.published import batch_bucket, context_class

    if not engine:
        return None, NO_ENGINE_BAND
    k = kind or prediction_kind(**what)
    batch = int(what.get("batch", 1))
    # a plan asks for thousands of cells that share a few groups: each group's band is looked up once per process
    hw_id = hw if isinstance(hw, str) else getattr(hw, "id", id(hw))
    key = (engine if isinstance(engine, str) else repr(engine), k, hw_id, batch_bucket(batch),
           model is not None and is_moe(model), model is not None and is_hybrid(model),
           context_class(context))  # fmt: skip
    if key not in BAND_CACHE:
        band = kind_band(engine, k, hw, batch=batch, model=model, context=int(context))
        if band is None:  # no group of this kind has held-out rows: the per-kind band, or the sentence saying none
            old = error_band(engine, k, hw)
            BAND_CACHE[key] = (dataclasses.asdict(old) if old else None), band_sentence(engine, k, hw)
        else:
            BAND_CACHE[key] = dataclasses.asdict(band) | {"kind": k}, band.description
    found, note = BAND_CACHE[key]
    return (dict(found) if found is not None else None), note


#: bands looked up in this process, by (engine, kind, GPU, batch bucket, MoE, hybrid, context class): band_for's
#: cache (every field the group lookup reads, or one target's band would answer for another's)
BAND_CACHE: dict[tuple[Any, ...], tuple[dict[str, Any] | None, str]] = {}


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
DRAFTER_GRAMMAR = "eagle|eagle2|eagle3|mtp[:N]|medusa[:HEADS]|hydra|model:NAME_OR_CONFIG|early-exit:L|prompt-lookup|block:NAME|dflash[:ID]|window:W"


#: the drafter grammar's method names (what comes before any ``:``)
GRAMMAR_NAMES = ("eagle", "eagle1", "eagle2", "eagle3", "mtp", "medusa", "hydra", "model", "early-exit", "prompt-lookup",
                 "block", "dflash", "window")  # fmt: skip


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
    """One drafter from the grammar (``roofline.speculation.speculative.as_drafter`` is the only resolver)."""
    from roofline.speculation.speculative import as_drafter

    return as_drafter(spec, target)


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


def _for_plan(key: str, acc: Any, args: argparse.Namespace | None = None) -> tuple[Any, str]:
    """What the planner takes for one drafter's acceptance (an alpha or a curve), and the sentence saying so.

    A chain measurement is read under the shape it was measured with, the engine's own when none is written, and
    carried past it by its class's per-position decay (roofline.speculation.acceptance_positions; docs/cost-model.md, 50.1)."""
    from roofline.speculation.acceptance import MeanAccepted
    from roofline.speculation.acceptance_positions import engine_family, read_for_plan

    family = engine_family(getattr(args, "engine", None), getattr(args, "emit", None))
    read = read_for_plan(key, acc, family, max(16, int(getattr(args, "max_gamma", 16) or 16)))
    if read is not None:
        return read

    if isinstance(acc, MeanAccepted) and acc.tree and drafter_key(key) not in TREE_DRAFTER_KEYS:
        raise SpecroofError(
            f"--acceptance {key}=mean:{acc.mean:g}@tree: @tree names SGLang's default EAGLE tree, which {key} does not draft; "
            f"write mean:{acc.mean:g}@G (G drafts per round)"
        )
    if (
        isinstance(acc, MeanAccepted)
        and acc.gamma is None
        and acc.depth is None
        and drafter_key(key) in TREE_DRAFTER_KEYS
    ):
        from roofline.speculation.engine_trees import SGLANG_DEFAULT, fit_acceptance

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
    """One row of a published/ file, read as it is written (without importing roofline.evidence.published, which costs a
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
    from roofline.speculation.trees import IIDAcceptance

    lo, hi = 0.0, 1.0
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if tree.expected_tokens(IIDAcceptance(mid)) < mean else (lo, mid)
    return (lo + hi) / 2


def published_acceptance(kind: str, target: Any = None) -> tuple[Any, str]:
    """A drafter kind's acceptance from a named published figure, and the sentence that names it.

    Returns ``(PerToken, sentence)``. Spec-Bench's tokens per round on a tree (EAGLE, Medusa, Hydra) is read on the
    tree that run verified (the row's ``tree``, else the drafter's own), as i.i.d. per-candidate p; at a stated gamma
    (prompt lookup) as the per-token rate of that chain; under Hugging Face's heuristic schedule (a draft model) as the
    rate that schedule turns into the figure. Raises SpecroofError for a kind no published figure covers.
    """
    from roofline.speculation.acceptance import MeanAccepted, PerToken

    kind = "eagle" if kind == "eagle1" else kind
    if target is not None:  # a matched pair only (roofline.speculation.acceptance_defaults; docs/cost-model.md, 50.2)
        from roofline.speculation.acceptance import parse_acceptance
        from roofline.speculation.acceptance_defaults import NoMatchedDefault, matched_default, no_match_sentence

        pair = matched_default(kind, target)
        if pair is None:
            raise NoMatchedDefault(f"{no_match_sentence(kind, target)}: give --acceptance {kind}=VALUE for one answer")
        if not pair.value.startswith("spec-bench:"):
            return parse_acceptance(pair.value), f"the matched pair's {pair.sentence()}"
    if kind == "mtp":
        return PerToken(MTP_ACCEPTANCE[0]), f"{MTP_ACCEPTANCE[0]:g} per token, from the {MTP_ACCEPTANCE[1]}"
    if kind not in SPEC_BENCH_ROWS:
        raise SpecroofError(
            f"no published acceptance figure for {kind} drafters: give --acceptance {kind}=VALUE "
            "(0.7, mean:3.2@5, vllm-rate:0.7@5, a curve or a metrics file)"
        )
    from roofline.speculation.drafters import TREE_PRESETS, as_drafter, default_tree
    from roofline.speculation.predict import alpha_for_heuristic

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
        from roofline.speculation.engine_trees import EngineSetting, fit_acceptance

        p = float(fit_acceptance(mean, EngineSetting(*SPEC_BENCH_EAGLE2)).p)
        return PerToken(p), (
            f"{p:.3f} per candidate, {where} on EAGLE-2's dynamic tree (total_token 60, depth 5, top_k 10)"
        )
    tree = TREE_PRESETS[tree_name] if isinstance(tree_name, str) and tree_name else default_tree(as_drafter(kind))
    p = _tree_rate(mean, tree)
    return PerToken(p), f"{p:.3f} per candidate, {where} on its {tree.n_nodes}-node tree of depth {tree.depth}"


def default_acceptance(drafters: dict[str, Any], target: Any = None) -> dict[str, tuple[Any, str]]:
    """Each drafter's published default (:func:`published_acceptance`), keyed as ``drafters``; one line naming every
    drafter that has none."""
    missing = [k for k in drafters if drafter_key(k) not in (*SPEC_BENCH_ROWS, "mtp")]
    if missing and target is None:
        from roofline.speculation.acceptance import GRAMMAR

        raise SpecroofError(
            f"no published acceptance for {', '.join(missing)}: give --acceptance KEY=VALUE for "
            f"{'it' if len(missing) == 1 else 'each'} (VALUE {GRAMMAR})"
        )
    return {k: published_acceptance(drafter_key(k), target) for k in drafters}


def _at_built_length(key: str, acc: Any, drafter: Any) -> Any:
    """A mean accepted length given without its length (``mean:3.7``), for a chain drafter built for one length (a
    published DFlash drafter: its config's block less the anchor), read as measured at that length."""
    from roofline.speculation.acceptance import MeanAccepted
    from roofline.speculation.drafters import default_gamma

    g = default_gamma(drafter) if drafter is not None else None
    if not isinstance(acc, MeanAccepted) or acc.gamma is not None or acc.depth is not None or g is None:
        return acc
    if drafter_key(key) in TREE_DRAFTER_KEYS:  # EAGLE and MTP means are read on the engine's default tree
        return acc
    return MeanAccepted(acc.mean, gamma=g, source=acc.source or f"measured at {drafter.name}'s {g} drafts per block")


def acceptance_from_args(args: argparse.Namespace, drafters: dict[str, Any]) -> Any:
    """Acceptance per drafter (``--acceptance KEY=VALUE``, repeated; VALUE in any kind of roofline.speculation.acceptance), or one
    shared value only with --same-alpha. Returns what the planner takes, keyed by drafter name; the sentences saying
    what each value was read as go to ``args.acceptance_notes``.

    Drafters differ in how often their tokens are accepted (a trained draft model, an
    early exit and prompt lookup are not alike), so a plan that compares several with
    one shared alpha favours whichever is cheapest: it must be asked for explicitly.
    """
    from roofline.speculation.acceptance import parse_acceptance_items

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
            acc = _at_built_length(key, acc, drafters[key])
            out[drafters[key].name], note = _for_plan(key, acc, args)
            args.acceptance_notes.append(note)
            args.acceptance_kinds[key] = acc
        return out
    if not shared:  # none given: each drafter's published figure, named on the output
        out = {}
        for key, (acc, source) in default_acceptance(drafters, getattr(args, "target", None)).items():
            out[drafters[key].name], _ = _for_plan(key, acc, args)
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
    from roofline.speculation.acceptance import PerToken, parse_acceptance

    acc = parse_acceptance(args.acceptance_curve) if args.acceptance_curve else PerToken(args.alpha)
    value, note = _for_plan(next(iter(drafters)), acc, args) if len(drafters) == 1 else (acc.for_plan(), acc.describe())
    args.acceptance_notes.append(note if len(drafters) == 1 else f"every drafter (--same-alpha): {note}")
    return value


def single_acceptance(
    value: str | None, drafter: str, target: Any = None, args: argparse.Namespace | None = None
) -> tuple[Any, Any, str]:
    """One drafter's acceptance in the grammar every command shares: ``VALUE`` or ``KEY=VALUE`` (KEY the drafter's
    name, as ``plan --acceptance`` takes it), or None for its published figure (:func:`published_acceptance`: with
    ``target``, its matched pair's only, else :class:`NoMatchedDefault`). ``args`` (its ``--engine``) says which shape
    a mean without one was measured on, as ``plan`` reads it.

    Returns (the acceptance kind, what the planner takes: a rate or a curve, the sentence saying what it was read as).
    """
    from roofline.speculation.acceptance import parse_acceptance, parse_acceptance_items

    key = drafter_key(drafter)
    if value is None:  # with the target: its matched pair's figure (docs/cost-model.md, 50.2)
        acc, source = published_acceptance(key, target)
        plan_value, _ = _for_plan(key, acc, args)
        return acc, plan_value, f"{key}: none given: {source} (--acceptance {key}=VALUE for yours)"
    text = str(value).strip()
    if "=" in text and not Path(text).is_file():  # KEY=VALUE (a file whose name holds '=' is a file): KEY names it
        aliases = {a: key for a, k in ACCEPTANCE_KEY_ALIASES.items() if k == key} | {drafter.strip(): key}
        acc = parse_acceptance_items([text], [key], aliases=aliases)[key]
    else:
        acc = parse_acceptance(text)
    acc = _at_built_length(key, acc, _built_for(drafter, target))  # mean:E on a published block: at its block
    plan_value, note = _for_plan(key, acc, args)
    return acc, plan_value, note


def _built_for(drafter: str, target: Any) -> Any:
    """The drafter ``drafter`` names on ``target`` (a published DFlash drafter has a block it is built for), or None
    where the name resolves to none here (the command's own resolution says why)."""
    from roofline.speculation.drafters import as_drafter

    try:
        return as_drafter(drafter, get_model(target) if target is not None else None)
    except SpecroofError:
        return None


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


#: the weight format grammar and the KV rule, as every pricing command's help states them (roofline.passes.dtypes)
WEIGHT_DTYPE_HELP = (
    "weights stored as int8|int4|fp8|bits:B[,group:G][,kernel:gptfast|torchao|marlin|gptq|awq|exl2] "
    "(weight-only; e.g. int4,group:128,kernel:marlin or bits:2.5,kernel:exl2)"
)
KV_DTYPE_HELP = (
    "KV-cache dtype (default: the activations' dtype; bf16 under --dtype fp8/int8: fp8 KV is --kv-dtype fp8)"
)


def apply_weight_only(args: argparse.Namespace) -> None:
    """--dtype int4 alone is weight-only int4 with bf16 arithmetic (GPUs multiply in bf16); under an 8-bit
    --dtype the KV cache stays bf16 unless --kv-dtype says otherwise (roofline.passes.dtypes.default_kv_dtype)."""
    from roofline.passes.dtypes import default_kv_dtype

    args.dtype, args.weight_dtype = weight_only(args.dtype, getattr(args, "weight_dtype", None))
    if getattr(args, "kv_dtype", None) is None:
        args.kv_dtype = default_kv_dtype(args.dtype)


# -- --engine-config: the engine's own configuration as the question (issue 47) ---------------------------------------

ENGINE_CONFIG_HELP = (
    "your engine's speculative configuration, read before any work: vLLM's --speculative-config JSON, SGLang's "
    "--speculative-* flags, TensorRT-LLM's speculative_config YAML, a whole `vllm serve ...` or `python -m "
    "sglang.launch_server ...` line, what `specroof plan ... --emit ENGINE` prints, or @FILE holding any of these "
    "(text that starts with -- is given as --engine-config=TEXT). It fills --target, --drafter, --engine, --tp, "
    "--dtype and --weight-dtype where they are left out; a flag given with another value is refused"
)


def add_engine_config(p: argparse.ArgumentParser) -> None:
    p.add_argument("--engine-config", metavar="TEXT|@FILE", help=ENGINE_CONFIG_HELP)


@dataclass(frozen=True)
class Deployment:
    """One setting ``plan --emit`` (or ``tree --emit --json``) deployed: where, at which batch, and its flags."""

    hardware: str | None
    batch: int | None
    flags: str
    context: int | None = None


#: plan's text output: the header of its deployments, each deployment's first line, and the engine it priced under
_PLAN_DEPLOY = "deploying it with "
_PLAN_ENTRY = re.compile(r"^  (\S+) batch (\d+)(?: context (\d+))?(?: \S+)?: ")
_PLAN_ENGINE = re.compile(r"^priced under the (\S+) engine", re.MULTILINE)
#: the engine plan's output does not state (JSON without the key): the configuration's own engine prices it
_UNSTATED = "unstated"


def _launches(flags: Any) -> bool:
    """Whether a deployment's text launches speculation (not "plain decoding wins here" or "does not fit")."""
    return isinstance(flags, str) and ("--speculative" in flags or "speculative_config:" in flags)


def plan_deployments(text: str) -> tuple[list[Deployment], str | None] | None:
    """The deployments in what ``specroof plan ... --emit ENGINE`` printed (its text or its ``--json``; also
    ``tree --emit --json``) and the engine it priced them under (None: the datasheet roofline); None when ``text`` is
    no such output. Only deployments that speculate are kept."""
    if text.startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            return None
        if not isinstance(data, dict) or "deploy" not in data:
            return None
        items = data["deploy"] if isinstance(data["deploy"], list) else [data["deploy"]]
        deps = [
            Deployment(d.get("hardware"), d.get("batch"), d["flags"], d.get("context"))
            for d in items
            if isinstance(d, dict) and _launches(d.get("flags"))
        ]
        return deps, data.get("engine", _UNSTATED)
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(_PLAN_DEPLOY)), None)
    if start is None:
        return None
    found: list[tuple[str, int, int | None, list[str]]] = []
    for line in lines[start + 1 :]:
        m = _PLAN_ENTRY.match(line)
        if m:
            found.append((m.group(1), int(m.group(2)), int(m.group(3)) if m.group(3) else None, []))
        elif line.startswith("    ") and found:
            found[-1][3].append(line[4:])
        else:  # a blank line, the table or the heuristic-schedule lines: the deployments have ended
            break
    deps = [Deployment(h, b, "\n".join(f), c) for h, b, c, f in found if _launches("\n".join(f))]
    m = _PLAN_ENGINE.search(text)
    return deps, (m.group(1) if m else None if "priced on the datasheet roofline" in text else _UNSTATED)


def _hardware_id(name: Any) -> str:
    try:
        return load_hardware(name).id
    except SpecroofError:
        return str(name)


def pick_deployment(
    deps: list[Deployment], hardware: str | None, batch: int | None, context: int | None = None
) -> Deployment:
    """The one deployment of a plan's output at ``hardware``, ``batch`` and ``context`` (each when given), or one line
    saying which there are."""
    if not deps:
        raise SpecroofError(
            "--engine-config: the plan output deploys no speculative setting (plain decoding wins, or the model does "
            "not fit): there is no setting to price"
        )
    sel = [
        d
        for d in deps
        if (hardware is None or d.hardware is None or _hardware_id(d.hardware) == _hardware_id(hardware))
        and (batch is None or d.batch is None or int(d.batch) == int(batch))
        and (context is None or d.context is None or int(d.context) == int(context))
    ]
    if len(sel) == 1:
        return sel[0]

    def where(d: Deployment) -> str:
        return f"{d.hardware} batch {d.batch}" + (f" context {d.context}" if d.context is not None else "")

    listed = ", ".join(where(d) for d in (sel or deps))
    if not sel:
        given = (("--hardware", hardware), ("--batch", batch), ("--context", context))
        at = " ".join(f"{flag} {v}" for flag, v in given if v is not None)
        raise SpecroofError(f"--engine-config: the plan output deploys {listed}, none at {at}")
    raise SpecroofError(
        f"--engine-config: the plan output holds {len(sel)} deployments ({listed}): give --hardware, --batch and "
        "--context to pick one, or pass one deployment's command"
    )


def _one(args: argparse.Namespace, dest: str) -> Any:
    """The one value a command line gives for ``dest`` (a GPU, a batch, a context) to pick a plan's deployment by;
    None when it gives several, or only the default."""
    value = getattr(args, dest, None)
    values = value if isinstance(value, list) else [value]
    if len(values) != 1 or values[0] is None or (dest != "hardware" and not was_given(args, dest)):
        return None
    return values[0]


def _engine_config_text(raw: Any) -> str:
    """The configuration's text (``@FILE`` read), refused in one line when empty or unreadable."""
    if not isinstance(raw, str) or not raw.strip():
        raise SpecroofError("--engine-config must be a non-empty string (flags, JSON, YAML, a command line or @FILE)")
    t = raw.strip()
    if not t.startswith("@"):
        return t
    path = Path(t[1:].strip())
    if not path.is_file():
        raise SpecroofError(f"--engine-config @{path}: no such file")
    text = _read_text(path).strip()
    if not text:
        raise SpecroofError(f"--engine-config @{path}: the file is empty")
    return text


#: drafter names one engine method stands for (SGLang's EAGLE runs EAGLE-1's and EAGLE-2's checkpoints alike)
_SAME_DRAFTER = {"eagle1": "eagle", "eagle2": "eagle"}


def _known(name: str) -> ModelSpec | None:
    """The model ``name`` stands for (a preset, a preset's Hugging Face id, a config.json), or None."""
    try:
        return get_model(name)
    except SpecroofError:
        return None


def _same_model(a: str, b: str) -> bool | None:
    """Whether two model names are one model (None: one of them is not a model specroof knows)."""
    sa, sb = _known(a), _known(b)
    return None if sa is None or sb is None else sa.name == sb.name


def _same_drafter(given: str, read: str) -> bool:
    gk, rk = drafter_key(given), drafter_key(read)
    if _SAME_DRAFTER.get(gk, gk) != _SAME_DRAFTER.get(rk, rk):
        return False
    if gk != "model":
        return True
    # a draft model: the same checkpoint by name, or one the engine loads from a path specroof cannot read (yours)
    return _same_model(given.split(":", 1)[1], read.split(":", 1)[1]) is not False


def _dtype_word(value: Any) -> str | None:
    return None if value is None else str(value).strip().lower()


def engine_config_from_args(
    args: argparse.Namespace, *, fill_hardware: bool = False, drafter_list: bool = False
) -> Any:
    """``--engine-config`` read before any work, the flags it answers filled in: target, drafter, engine, TP, dtype
    and weight dtype where the command line leaves them out, and one line refusing a flag given with another value.

    Returns the :class:`roofline.deploy.engine_flags.EngineConfig` (None without ``--engine-config``); what ``plan --emit``
    printed is read as the deployment it names (``--hardware``, ``--batch`` and ``--context`` pick one of several).
    With ``fill_hardware`` (speedup, tree, serve: one GPU, one batch) that deployment's GPU, batch and context fill
    those flags too.
    A plan output's pricing engine prices it again, so the figure is plan's own. ``drafter_list``: the command takes
    ``--drafter`` repeated (plan).
    """
    from roofline.costing.engine import engine_group, load_engine
    from roofline.deploy.engine_flags import read_engine_config

    raw = getattr(args, "engine_config", None)
    if raw is None:
        return None
    text = _engine_config_text(raw)
    found = plan_deployments(text)
    plan_engine: Any = _UNSTATED
    deployment = None
    if found is not None:
        deps, plan_engine = found
        deployment = pick_deployment(deps, *(_one(args, dest) for dest in ("hardware", "batch", "context")))
        text = deployment.flags
        if fill_hardware and args.hardware is None and deployment.hardware is not None:
            args.hardware = deployment.hardware
        for dest in ("batch", "context") if fill_hardware else ():
            value = getattr(deployment, dest)
            if hasattr(args, dest) and not was_given(args, dest) and value is not None:
                setattr(args, dest, int(value))
    target = getattr(args, "target", None)
    config = read_engine_config(text, target=target)
    # the target: yours where the configuration names none or one specroof cannot read; refused where they differ
    if config.target is not None:
        same = _same_model(target, config.target) if target else None
        if target and same is False:
            raise SpecroofError(
                f"--target {target} and the engine configuration's model {config.target} differ: give one"
            )
        if not target:
            spec = _known(config.target)
            if spec is None:
                raise SpecroofError(
                    f"the engine configuration's model {config.target!r} is not a model specroof knows: give --target "
                    "(a preset or a config.json)"
                )
            # a preset by its own name (a Hugging Face id of one reads as the preset); a config.json as written
            args.target = spec.name if spec.name in PRESETS else config.target
    elif not target:
        raise SpecroofError("the engine configuration names no model: give --target")
    # the drafter
    given = getattr(args, "drafter", None)
    givens = given if isinstance(given, list) else [given] if given else []
    if len(givens) > 1:
        raise SpecroofError("--engine-config prices one drafter, its own: give one --drafter or none")
    if givens and not _same_drafter(givens[0], config.drafter):
        raise SpecroofError(f"--drafter {givens[0]} and the engine configuration's {config.drafter} differ: give one")
    if not givens:
        if drafter_key(config.drafter) == "model" and _known(config.drafter.split(":", 1)[1]) is None:
            raise SpecroofError(
                f"the engine configuration's draft model {config.draft_model!r} is not a model specroof knows: give "
                "--drafter model:NAME (a preset or a config.json)"
            )
        args.drafter = [config.drafter] if drafter_list else config.drafter
    # the engine: the configuration's (a version of it counts as it); a plan output's pricing engine prices it again
    if was_given(args, "engine"):
        if args.engine is not None and engine_group(load_engine(args.engine)) != config.engine:
            raise SpecroofError(
                f"--engine {args.engine} and the engine configuration's {config.engine} differ: give one (a version of "
                f"{config.engine}, or none for the datasheet roofline)"
            )
    else:
        args.engine = config.engine if plan_engine == _UNSTATED else plan_engine
    # TP and dtypes, where the configuration states them
    for dest, flag, value in (("tp", "--tp", config.tp), ("dtype", "--dtype", config.dtype)):
        if value is None or not hasattr(args, dest):
            continue
        if was_given(args, dest) and _dtype_word(getattr(args, dest)) != _dtype_word(value):
            raise SpecroofError(f"{flag} {getattr(args, dest)} and the engine configuration's {value} differ: give one")
        setattr(args, dest, value)
    if config.weight_dtype is not None and hasattr(args, "weight_dtype"):
        if args.weight_dtype is not None and _dtype_word(args.weight_dtype) != _dtype_word(config.weight_dtype):
            raise SpecroofError(
                f"--weight-dtype {args.weight_dtype} and the engine configuration's {config.weight_dtype} differ: give "
                "one"
            )
        args.weight_dtype = config.weight_dtype
    args.engine_config_read = config
    args.engine_config_deployment = deployment
    return config


def config_acceptance(config: Any, acc: Any, value: Any, note: str) -> tuple[dict[str, Any], str]:
    """What :func:`roofline.deploy.planner.price_engine_config` and ``compare_engine_config`` take for one drafter's
    acceptance (``acc`` its kind, ``value`` what the planner takes), and the sentence saying so. A mean accepted
    length without the setting it was measured at (or measured at this very chain or tree depth) is the engine's
    own "accept length" with this setting, fitted on it (docs/cost-model.md, section 30)."""
    from roofline.speculation.acceptance import MeanAccepted

    s = config.setting
    if isinstance(acc, MeanAccepted) and (
        (acc.gamma is None and acc.depth is None)
        or (s.is_chain and acc.gamma == s.num_steps)
        or (acc.depth is not None and acc.depth == s.num_steps)
    ):
        key = note.split(":", 1)[0]
        return {"mean_accepted": float(acc.mean)}, (
            f"{key}: given {acc.given()}, read as measured with your setting ({s.label})"
        )
    return {"acceptance": value}, note


def config_rate(config: Any, acceptance: dict[str, Any]) -> float:
    """One per-token (chain) or per-candidate (tree) rate for the serving simulator from :func:`config_acceptance`'s
    keywords: a mean measured with the setting is fitted on it."""
    from roofline.speculation.acceptance_kinds import alpha_for_tokens

    s = config.setting
    if "mean_accepted" in acceptance:
        mean = float(acceptance["mean_accepted"])
        if s.is_chain:
            return float(alpha_for_tokens(mean, s.num_steps))
        from roofline.speculation.engine_trees import fit_acceptance

        return float(fit_acceptance(mean, s).p)
    value = acceptance["acceptance"]
    if isinstance(value, (list, tuple, np.ndarray)):
        raise SpecroofError("serve draws one rate per request: give a rate or a mean, not a per-position curve")
    return float(value)


def emit_prices(args: argparse.Namespace) -> None:
    """``--emit ENGINE`` without ``--engine``: the answer is priced under that engine's own profile (flags for SGLang
    priced with vLLM's costs would be two answers to one question); the default engine stands when it is that
    engine already (``serving`` is vLLM's)."""
    from roofline.costing.engine import load_engine

    if not getattr(args, "emit", None) or was_given(args, "engine") or args.engine is None:
        return
    default = load_engine(args.engine)
    if default is None or default.name != load_engine(args.emit).name:
        args.engine = args.emit
        args.engine_from_emit = True


def fit_cures(hw: Any, tp: int) -> str:
    """What a configuration that does not fit can change, in words: a wider TP only up to the GPUs one node's link
    joins (a wider one is not priced: docs/cost-model.md, section 63), then fewer bits per weight."""
    if hw.max_tp is not None and tp >= hw.max_tp:
        return f"store the weights in fewer bits (--weight-dtype) or use GPUs with more memory (--tp {tp} fills a node)"
    return "raise --tp or store the weights in fewer bits (--weight-dtype)"

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


def band_for(engine: Any, hw: Any, **kind: Any) -> tuple[dict[str, Any] | None, str]:
    """The error band of a prediction (held-out published rows of its kind) and the sentence that states it."""
    import dataclasses

    from roofline.error_bands import band_sentence, error_band, prediction_kind

    if not engine:
        return None, "datasheet roofline: an upper bound; no error band (price it under an engine for one)"
    k = prediction_kind(**kind)
    band = error_band(engine, k, hw)
    return (dataclasses.asdict(band) if band else None), band_sentence(engine, k, hw)


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

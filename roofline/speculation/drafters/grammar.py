"""The drafter grammar: the one resolver of a drafter from its name, and what each drafter ships with."""

from __future__ import annotations

from typing import Any

from roofline.core.errors import SpecroofError, check_min
from roofline.passes.model import ModelSpec, get_model
from roofline.speculation.drafters.draft_model import DraftModel, ParallelBlock, _SmallModel
from roofline.speculation.drafters.eagle import MTP, Eagle
from roofline.speculation.drafters.early_exit import EarlyExit
from roofline.speculation.drafters.heads import Heads
from roofline.speculation.drafters.hydra import Hydra
from roofline.speculation.drafters.prompt_lookup import PromptLookup
from roofline.speculation.drafters.sliding_window import SlidingWindowSelfDraft
from roofline.speculation.drafters.tree_presets import (
    TREE_PRESETS,
)
from roofline.speculation.trees import Tree

#: the grammar, as the error messages and the CLI's help print it
DRAFTER_GRAMMAR = "eagle|eagle2|eagle3|mtp[:N]|medusa[:HEADS]|hydra|model:NAME_OR_CONFIG|early-exit:L|prompt-lookup[:MATCH]|block:NAME|dflash[:ID]|window:W"


def default_tree(drafter: Any) -> Tree | None:
    """The tree a drafter ships with (EAGLE's, Medusa's), or None for chain drafters."""
    if isinstance(drafter, MTP):
        return None
    if isinstance(drafter, (Eagle, Hydra)):
        return drafter.default_tree
    if isinstance(drafter, Heads):
        return TREE_PRESETS["medusa"]
    return None


def default_gamma(drafter: Any) -> int | None:
    """The chain length a drafter is built for (an MTP stack: its module count), or None."""
    g = getattr(drafter, "default_gamma", None)
    return int(g) if g is not None else None


def owns_weights(drafter: Any) -> bool:
    """Whether a drafter runs weights of its own (a draft model, heads, a block drafter), not the target's."""
    return isinstance(drafter, (DraftModel, ParallelBlock, Heads, Hydra))


def _count(name: str, text: str, example: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise SpecroofError(f"{name} needs a whole number, e.g. {example} (got {text!r})") from None
    check_min(name, value, 1, integer=True)
    return value


def _share(name: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise SpecroofError(
            f"{name}:MATCH takes the share of requests whose n-gram matched, in (0, 1], e.g. {name}:0.4 (got {text!r})"
        ) from None
    if not 0.0 < value <= 1.0:
        raise SpecroofError(f"{name} match rate must lie in (0, 1] (got {value:g})")
    return value


def as_drafter(d: Any, target: Any = None) -> Any:
    """The one drafter resolver: a drafter from a name in the grammar (module docstring), a draft model
    (ModelSpec, preset name or config.json path), None (prompt lookup), or a drafter object as it is.

    ``target`` picks a published drafter where the name leaves it to the target (``dflash``).
    """
    if d is None:
        return PromptLookup()
    if isinstance(d, ModelSpec):
        return DraftModel(d)
    if not isinstance(d, str):
        if hasattr(d, "draft_time") and hasattr(d, "verify_time"):
            return d
        raise SpecroofError(f"cannot use {d!r} as a drafter: give a name ({DRAFTER_GRAMMAR}), a ModelSpec or a drafter")
    from roofline.speculation import drafter_presets  # published drafters by name (a data table)

    if drafter_presets.is_dflash_name(d.lower()):  # dflash (the target's), dflash:ID, or a published DFlash id
        spec, block, label = drafter_presets.dflash(d, target)
        return ParallelBlock(spec, name=label, block_size=block)
    hit = _BY_NAME.get(d)
    if hit is not None:
        return hit
    out = _from_name(d)
    if not isinstance(out, _SmallModel):  # a draft model's name resolves a model (its config file may change): not kept
        if len(_BY_NAME) > 256:
            _BY_NAME.clear()
        _BY_NAME[d] = out
    return out


#: drafters by their name in the grammar: every drafter is a frozen dataclass, so one object per name is shared
_BY_NAME: dict[str, Any] = {}


def _from_name(d: str) -> Any:
    """:func:`as_drafter` of a name (the grammar, or a draft model's preset name or config.json path)."""
    key = d.strip().lower()
    kind, sep, arg = key.partition(":")
    arg_raw = d.strip().partition(":")[2].strip()
    if kind in ("eagle", "eagle1") and not sep:
        return Eagle(1)
    if kind in ("eagle2", "eagle3") and not sep:
        return Eagle(int(kind[-1]))
    if kind == "mtp":
        return MTP(modules=_count("mtp", arg, "mtp:2") if sep else None)
    if kind == "medusa":
        # bare "medusa" is the method as shipped (5 heads, its name); medusa:H is H such heads ("H heads")
        return Heads(_count("medusa heads", arg, "medusa:4")) if sep else Heads(5, name="medusa")
    if kind == "hydra" and not sep:
        return Hydra()
    if kind in ("prompt-lookup", "pld", "ngram"):
        return PromptLookup(match_rate=_share(kind, arg) if sep else 1.0)
    if kind == "early-exit":
        if not sep:
            raise SpecroofError("early-exit needs a layer count, e.g. early-exit:8")
        return EarlyExit(_count("early-exit layers", arg, "early-exit:8"))
    if kind == "window":
        if not sep:
            raise SpecroofError("window needs a token count, e.g. window:512")
        return SlidingWindowSelfDraft(_count("window", arg, "window:512"))
    if kind == "block":
        if not arg_raw:
            raise SpecroofError("block needs a draft model, e.g. block:llama-3.2-1b")
        from roofline.speculation.drafter_presets import published_spec

        # a published drafter's listed shape first: its id needs no hub
        return ParallelBlock(published_spec(arg_raw) or get_model(arg_raw))
    if kind == "model":
        if not arg_raw:
            raise SpecroofError("model needs a draft model, e.g. model:llama-3.2-1b or model:path/config.json")
        return DraftModel(get_model(arg_raw))
    try:
        return DraftModel(get_model(d))
    except SpecroofError:
        raise SpecroofError(
            f"unknown drafter {d!r}: use {DRAFTER_GRAMMAR} (NAME: a preset model or a config.json)"
        ) from None


#: the earlier name of :func:`as_drafter`
named_drafter = as_drafter

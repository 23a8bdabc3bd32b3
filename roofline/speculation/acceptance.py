"""One acceptance vocabulary: the kinds (:mod:`roofline.speculation.acceptance_kinds`, re-exported here) and how the command line,
files and metrics dumps (:mod:`roofline.speculation.importers`) become one.

``parse_acceptance`` reads the command line's VALUE (``0.7``, ``alpha:0.7``, ``mean:3.2[@G]``,
``vllm-rate:0.7@K``, ``curve:...`` or a file); ``parse_acceptance_items`` matches
``--acceptance KEY=VALUE`` to drafters; ``read_sibling_vector`` reads Sequoia's vectors.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from roofline.core.errors import SpecroofError
from roofline.speculation.acceptance_kinds import (
    GRAMMAR,
    Acceptance,
    MeanAccepted,
    PerToken,
    PositionCounts,
    PositionCurve,
    SiblingRankVector,
    VllmDraftRate,
    _at,
    _number,
    alpha_for_tokens,
    check_mean_accepted,
    conditional_from_unconditional,
    from_json,
    unconditional_from_conditional,
)
from roofline.speculation.importers import import_text, sniff_format

__all__ = [
    "Acceptance",
    "GRAMMAR",
    "MeanAccepted",
    "PerToken",
    "PositionCounts",
    "PositionCurve",
    "SiblingRankVector",
    "VllmDraftRate",
    "alpha_for_tokens",
    "check_mean_accepted",
    "conditional_from_unconditional",
    "from_json",
    "parse_acceptance",
    "parse_acceptance_items",
    "read_acceptance_file",
    "read_sibling_vector",
    "unconditional_from_conditional",
]


def _read_text(path: Path) -> str:
    try:
        return path.read_text()
    except UnicodeDecodeError:
        raise SpecroofError(f"{str(path)!r} is not a text file (expected JSON, text or a metrics dump)") from None


def read_acceptance_file(path: str | Path, *, gamma: int | None = None) -> Acceptance:
    """An acceptance from a file: JSON (see :func:`from_json`), numbers as text, or a raw metrics dump.

    vLLM's /metrics text or log lines, SGLang's server log and Spec-Bench's answer JSONL are
    recognised by their content and imported (:mod:`roofline.speculation.importers`).
    """
    p = Path(path)
    if not p.is_file():
        raise SpecroofError(f"acceptance file {str(path)!r} does not exist (write {GRAMMAR})")
    text = _read_text(p)

    try:
        data, parsed = json.loads(text), True
    except json.JSONDecodeError:
        data, parsed = None, False
    # a JSON acceptance (ours, or a list) first: its describe() may quote a metrics file's words
    if parsed and (isinstance(data, list) or (isinstance(data, dict) and "choices" not in data)):
        return from_json(data, source=p.name, gamma=gamma)
    fmt = sniff_format(text)
    if fmt is not None:
        return import_text(text, fmt, source=p.name, gamma=gamma)
    if not parsed:
        values = text.replace(",", " ").split()
        try:
            return PositionCurve(tuple(float(v) for v in values), conditional=True, source=p.name)
        except ValueError:
            raise SpecroofError(
                f"{p.name}: not JSON, not a list of numbers and not a vLLM, SGLang or Spec-Bench metrics file"
            ) from None
    return from_json(data, source=p.name, gamma=gamma)


def parse_acceptance(text: str | float, *, gamma: int | None = None) -> Acceptance:
    """The command line's acceptance VALUE: ``0.7``, ``alpha:0.7``, ``mean:3.2[@G]``, ``mean:3.2@tree`` (measured on
    the engine's default tree: SGLang's EAGLE tree), ``vllm-rate:0.7@K``,
    ``curve:0.9,0.8,...`` (conditional), ``unconditional:0.9,0.72,...``, or a file.

    ``gamma`` is the speculation length a bare ``mean:`` was measured at. vLLM's rate may be
    written as a percentage (``vllm-rate:70%@5``, as its log prints it).
    """
    if isinstance(text, (int, float)):
        return PerToken(float(text))
    t = str(text).strip()
    head, sep, rest = t.partition(":")
    head = head.strip().lower()
    if sep and head in ("alpha", "mean", "vllm-rate", "curve", "unconditional"):
        if head == "alpha":
            return PerToken(_number(rest, "alpha"))
        if head == "mean":
            value, sep_at, shape = rest.rpartition("@")
            if sep_at and shape.strip().lower() == "tree":  # measured on the engine's default tree, said explicitly
                return MeanAccepted(_number(value, "mean accepted length"), tree=True)
            value, at = _at(rest, "mean")
            return MeanAccepted(_number(value, "mean accepted length"), gamma=at if at is not None else gamma)
        if head == "vllm-rate":
            value, at = _at(rest, "vllm-rate")
            if at is None:
                raise SpecroofError(
                    f"vllm-rate:{value} needs the number of speculative tokens it was logged at: vllm-rate:{value}@K"
                )
            return VllmDraftRate(_number(value, "vLLM draft acceptance rate"), at)
        if Path(rest).is_file():
            acc = read_acceptance_file(rest, gamma=gamma)
            if head == "unconditional" and isinstance(acc, PositionCurve):
                return PositionCurve(acc.values, conditional=False, source=acc.source)
            return acc
        parts = [x.strip() for x in rest.split(",")] if "," in rest else rest.split()
        if "" in parts:  # 'curve:,0.5' or '0.9,,0.8': a position left out would shift every later one
            raise SpecroofError(
                f"{head}:{rest}: position {parts.index('') + 1} is empty; give one rate per position, e.g. "
                f"{head}:0.9,0.8,0.7"
            )
        values = tuple(_number(x, f"{head} value") for x in parts)
        return PositionCurve(values, conditional=head == "curve")
    try:
        x = float(t)
    except ValueError:
        x = None
    if x is not None:
        if math.isfinite(x) and x > 1.0:  # a rate lies in [0, 1]: a number past 1 is most likely a mean accepted length
            raise SpecroofError(
                f"acceptance {t!r} is not a per-token rate alpha (a rate lies in [0, 1]): a mean accepted length of {t} "
                f"tokens per round is written mean:{t} (or mean:{t}@G, measured at G drafts per round)"
            )
        return PerToken(x)
    if Path(t).is_file():
        return read_acceptance_file(t, gamma=gamma)
    if "/" in t or t.endswith((".json", ".txt", ".csv", ".prom", ".log", ".jsonl")):
        raise SpecroofError(f"acceptance file {t!r} does not exist")
    raise SpecroofError(f"acceptance {t!r} is neither a number, a known kind nor a file: write {GRAMMAR}")


def parse_acceptance_items(
    items: Sequence[str],
    keys: Sequence[str],
    *,
    gamma: int | None = None,
    aliases: Mapping[str, str] | None = None,
) -> dict[str, Acceptance]:
    """``--acceptance KEY=VALUE`` (repeated) -> {key: acceptance}, KEY matched against the drafters' keys.

    A drafter's key is its name before any ``:`` (``model:llama-3.2-1b`` is ``model``,
    ``early-exit:8`` is ``early-exit``); the full name matches too, and so does any name in
    ``aliases`` (another name -> key, e.g. a drafter's display name). A key given twice, a
    key no drafter has, or a drafter left without an acceptance is an error.
    """
    short = {k: k.split(":", 1)[0] for k in keys}
    out: dict[str, Acceptance] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep and len(keys) == 1 and key not in (keys[0], short[keys[0]], *(aliases or {})):
            # one drafter: its value alone names it (as speedup and serve take it)
            key, value, sep = keys[0], item, "="
        match = (
            [k for k in keys if k == key]
            or [k for k, s in short.items() if s == key]
            or [k for a, k in (aliases or {}).items() if a == key and k in short]
        )
        if not sep or not value.strip():
            raise SpecroofError(
                f"--acceptance {item!r}: {f'with {len(keys)} drafters ' if len(keys) > 1 else ''}write KEY=VALUE, KEY "
                f"one of {', '.join(keys)} and VALUE one of: {GRAMMAR}"
            )
        if not match:
            raise SpecroofError(f"--acceptance {item!r}: KEY must be one of the drafters asked for ({', '.join(keys)})")
        if len(match) > 1:
            raise SpecroofError(
                f"--acceptance {item!r}: {key!r} names {len(match)} drafters ({', '.join(match)}); use the full name, "
                f"e.g. {match[0]}={value.strip()}"
            )
        if match[0] in out:
            raise SpecroofError(f"--acceptance for {match[0]!r} given twice: give one value per drafter")
        out[match[0]] = parse_acceptance(value, gamma=gamma)
    missing = [k for k in keys if k not in out]
    if missing:
        raise SpecroofError(f"no --acceptance for drafter(s) {', '.join(missing)}: give KEY=VALUE for each")
    return out


def read_sibling_vector(path_or_list: str | Path | Sequence[float]) -> SiblingRankVector:
    """A sibling-rank vector for ``tree --acceptance-vector``: a JSON file or a list, Sequoia's layout detected.

    Files hold a list (rank 0 first, or Sequoia's saved vector with its leading 0 and
    trailing 'none' share), ``{"p": [...]}`` or ``{"sequoia": [...]}``. A per-position chain
    curve is refused: it says nothing about ranks below the top candidate.
    """
    if not isinstance(path_or_list, (str, Path)):
        return SiblingRankVector.from_values(list(path_or_list))
    p = Path(path_or_list)
    inline = isinstance(path_or_list, str) and path_or_list.lstrip()[:1] in ("[", "{") and not p.is_file()
    if not inline and not p.is_file():
        raise SpecroofError(
            f"acceptance-vector file {str(path_or_list)!r} does not exist (give a JSON file, or the JSON itself: "
            "'[0.6, 0.2, 0.1]')"
        )
    name = "the JSON given" if inline else p.name  # the JSON itself, as the command line's help offers it
    try:
        data = json.loads(str(path_or_list) if inline else _read_text(p))
    except json.JSONDecodeError as exc:
        raise SpecroofError(f"{name}: not valid JSON ({exc})") from None
    if isinstance(data, list):
        return SiblingRankVector.from_values(data, source=name)
    if isinstance(data, dict) and ("p" in data or "sequoia" in data):
        acc = from_json(data, source=name)
        assert isinstance(acc, SiblingRankVector)
        return acc
    if isinstance(data, dict) and ("curve" in data or "kind" in data):
        raise SpecroofError(
            f"{name} holds a {data.get('kind', 'curve')} acceptance (per position of a chain), not a sibling-rank "
            "vector: a tree needs p[k] = P(the rank-k child is accepted), e.g. from `measure spec --tree`"
        )
    raise SpecroofError(f"{name}: expected a list, {{'p': [...]}} or {{'sequoia': [...]}}")

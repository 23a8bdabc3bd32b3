"""Draft trees: the presets drafters ship with (EAGLE's, Medusa's) and the one parser of a tree in any form."""

from __future__ import annotations

import ast
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from roofline.core.errors import SpecroofError
from roofline.speculation.trees import Tree

EAGLE_TREE_PATHS = [
    [0], [1], [2], [3], [0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [2, 0], [2, 1], [3, 0],
    [0, 0, 0], [0, 0, 1], [0, 0, 2], [0, 1, 0], [0, 1, 1], [0, 2, 0], [0, 2, 1], [1, 0, 0],
    [0, 0, 0, 0], [0, 0, 0, 1], [0, 0, 0, 2], [0, 0, 0, 0, 0], [0, 0, 0, 0, 1],
]  # fmt: skip

#: Medusa's default tree (Medusa repository, medusa/model/medusa_choices.py ``mc_sim_7b_63``): 63 nodes, depth 4
MEDUSA_TREE_PATHS = [
    [0], [0, 0], [1], [0, 1], [2], [0, 0, 0], [1, 0], [0, 2], [3], [0, 3], [4], [0, 4], [2, 0], [0, 5],
    [0, 0, 1], [5], [0, 6], [6], [0, 7], [0, 1, 0], [1, 1], [7], [0, 8], [0, 0, 2], [3, 0], [0, 9], [8],
    [9], [1, 0, 0], [0, 2, 0], [1, 2], [0, 0, 3], [4, 0], [2, 1], [0, 0, 4], [0, 0, 5], [0, 0, 0, 0],
    [0, 1, 1], [0, 0, 6], [0, 3, 0], [5, 0], [1, 3], [0, 0, 7], [0, 0, 8], [0, 0, 9], [6, 0], [0, 4, 0],
    [1, 4], [7, 0], [0, 1, 2], [2, 0, 0], [3, 1], [2, 2], [8, 0], [0, 5, 0], [1, 5], [1, 0, 1], [0, 2, 1],
    [9, 0], [0, 6, 0], [0, 0, 0, 1], [1, 6], [0, 7, 0],
]  # fmt: skip


def _dynamic_tree(n_nodes: int, depth: int, top_k: int) -> Tree:
    """A tree of ``n_nodes`` spread over ``depth`` levels, at most ``top_k`` children per node and
    at most ``top_k**l`` nodes at level l: the shape EAGLE-2 verifies after reranking (for pricing)."""
    per_level = [min(top_k**level, n_nodes // depth) for level in range(1, depth + 1)]
    per_level[-1] += n_nodes - sum(per_level)
    parents: list[int] = []
    prev = [-1]
    for width in per_level:
        level = [prev[i % len(prev)] for i in range(width)]
        start = len(parents)
        parents.extend(level)
        prev = list(range(start, start + width))
    return Tree(parents)


#: named trees: ``--tree NAME`` in the CLI, ``tree="NAME"`` in :func:`roofline.speculation.speculative.predict_speedup`
TREE_PRESETS: dict[str, Tree] = {
    "eagle": Tree.from_paths(EAGLE_TREE_PATHS),
    "medusa": Tree.from_paths(MEDUSA_TREE_PATHS),
    "eagle2": _dynamic_tree(59, 5, 10),
    "eagle3": _dynamic_tree(59, 7, 10),
    # Hydra's own default (hydra_choices = mc_sim_7b_63 in Spec-Bench's evaluation/inference_hydra.py and in
    # HydraModel.hydra_generate; model/hydra/hydra_choices.py): the same 63 rank paths as Medusa's file
    "hydra": Tree.from_paths(MEDUSA_TREE_PATHS),
}


#: how ``--tree`` / ``tree=`` may be written, for the error messages and the CLI's help
TREE_FORMS = (
    "a preset ({presets}), an inline parent array (parents:-1,0,0,1), rank paths (Medusa choices or vLLM's "
    "speculative_token_tree: [[0],[1],[0,0]] or [(0,), (1,), (0, 0)]), or a JSON file holding one of those, "
    '{{"parents": [...]}} or a Sequoia growmap {{"Successors": [...]}}'
)


def tree_preset(tree: Tree | str | Sequence[Any] | dict[str, Any]) -> Tree:
    """The one tree parser: a :class:`Tree` from itself or from any form in :data:`TREE_FORMS`.

    A list of integers is a parent array (-1: child of the committed prefix); a list of lists
    is rank paths (each node the sibling ranks on its path: Medusa's ``medusa_choices``,
    Hydra's ``hydra_choices``, EAGLE-1's ``choices.py``, vLLM's ``speculative_token_tree``); a
    mapping with ``Successors`` is a Sequoia growmap (children per node, node 0 the root), with
    ``parents`` the JSON :meth:`roofline.speculation.trees.Tree.to_json` writes, and with
    ``speculative_token_tree`` a vLLM speculative config. Text is a preset name, ``parents:``
    followed by the array, a literal of one of those, or a file holding one.
    """
    if isinstance(tree, Tree):
        return tree
    if isinstance(tree, str):
        return _tree_from_text(tree)
    return _tree_from_data(tree, "tree")


def _tree_forms() -> str:
    return TREE_FORMS.format(presets=", ".join(TREE_PRESETS))


def _tree_from_text(text: str) -> Tree:
    t = text.strip()
    if t in TREE_PRESETS:
        return TREE_PRESETS[t]
    kind, sep, rest = t.partition(":")
    if sep and kind.strip().lower() == "parents":
        items = rest.strip().strip("[]").replace(",", " ").split()
        try:
            parents = [int(x) for x in items]
        except ValueError:
            raise SpecroofError(
                f"parents: takes whole numbers separated by commas, e.g. parents:-1,0,0,1 (got {rest!r})"
            ) from None
        return Tree(parents)
    if t[:1] in "[({":
        return _tree_from_data(_literal(t, "tree"), "tree")
    path = Path(t).expanduser()
    if path.is_file():
        try:
            body = path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise SpecroofError(f"cannot read the tree file {t!r}: {exc}") from None
        return _tree_from_data(_literal(body, t), t)
    raise SpecroofError(f"unknown tree {t!r}: give {_tree_forms()}")


def _literal(text: str, where: str) -> Any:
    """JSON, or a Python literal (vLLM's tuples, a list pasted from a choices file)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    try:
        return ast.literal_eval(text.strip())
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        raise SpecroofError(f"{where}: not JSON or a list literal; give {_tree_forms()}") from None


def _is_int(x: Any) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


def _tree_from_data(data: Any, where: str) -> Tree:
    if isinstance(data, Tree):
        return data
    if isinstance(data, str):  # vLLM's speculative_token_tree is a string of tuples
        return _tree_from_data(_literal(data, where), where)
    if isinstance(data, dict):
        if "Successors" in data:
            return Tree.from_sequoia(data)
        if "parents" in data:
            return Tree(_int_list(data["parents"], f"{where}: parents"), data.get("tokens"))
        if "speculative_token_tree" in data:
            return _tree_from_data(data["speculative_token_tree"], f"{where}: speculative_token_tree")
        raise SpecroofError(f"{where}: a tree object needs 'parents', 'Successors' or 'speculative_token_tree'")
    if isinstance(data, np.ndarray):
        data = data.tolist()
    if not isinstance(data, (list, tuple)):
        raise SpecroofError(f"{where}: give {_tree_forms()} (got a {type(data).__name__})")
    items = list(data)
    if all(_is_int(x) for x in items):
        return Tree([int(x) for x in items])
    if all(isinstance(x, (list, tuple)) and x and all(_is_int(r) for r in x) for x in items):
        return Tree.from_paths(items)
    raise SpecroofError(f"{where}: a list must be a parent array of integers or rank paths such as [[0], [1], [0, 0]]")


def _int_list(value: Any, where: str) -> list[int]:
    if not isinstance(value, (list, tuple)) or not all(_is_int(x) for x in value):
        raise SpecroofError(f"{where} must be a list of whole numbers (-1 for a child of the prefix)")
    return [int(x) for x in value]

"""A griffe extension for the API reference: docstrings written with Sphinx roles render as code names.

The docstrings name other objects the Sphinx way (``:func:`as_drafter```, ``:class:`Tree```); mkdocstrings
renders Google-style Markdown, where a role would show as raw text (":func:" before the name). Each role
becomes the backticked name (a leading ``~`` keeps the last dotted part, as Sphinx shows it). A private
base class (``_Kind``) is an implementation detail: it is left out of "Bases:".
"""

from __future__ import annotations

import re
from typing import Any

import griffe

#: ``:func:`name```, ``:py:meth:`~mod.Class.name```, ...: the roles the docstrings use, with or without the domain
ROLE = re.compile(r":(?:py:)?(?:meth|func|class|mod|data|attr|exc|obj|const|attribute):`(~?)([^`]+)`")


def plain_roles(text: str) -> str:
    """``text`` with every Sphinx role replaced by the backticked name it refers to."""

    def name(m: re.Match[str]) -> str:
        target = m[2].strip()
        return f"`{target.rsplit('.', 1)[-1] if m[1] else target}`"

    return ROLE.sub(name, text)


class SphinxRolesAsCode(griffe.Extension):
    """Rewrite Sphinx roles in every docstring, and drop private bases, once the tree is built."""

    def on_object(self, *, obj: Any, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = plain_roles(obj.docstring.value)
        if getattr(obj, "is_class", False):
            obj.bases = [b for b in obj.bases if not str(b).rsplit(".", 1)[-1].startswith("_")]

"""Ctrl-C that is never lost.

Python turns SIGINT into ``KeyboardInterrupt`` in whatever Python code runs next. When
that code is a finalizer (a weakref callback: matplotlib frees its transforms that
way when figures close), the exception is printed as "ignored" and the program goes
on, so a report interrupted at that moment kept running its next section. The CLI
installs :func:`install`; long loops call :func:`check` at their boundaries (between
report sections), which raises the interrupt a finalizer swallowed. The "ignored" report
itself (a traceback on stderr, under a clean "interrupted" line) is left out for a
remembered Ctrl-C; any other exception a finalizer raises is reported as Python would.
"""

from __future__ import annotations

import signal
import sys
import threading
from types import FrameType
from typing import Any

_pending = False


def _on_sigint(signum: int, frame: FrameType | None) -> None:
    global _pending
    _pending = True
    raise KeyboardInterrupt


_previous_hook = sys.unraisablehook  # the unraisable hook before install(): what any other finalizer error goes to


def _unraisable(unraisable: Any) -> None:
    """``sys.unraisablehook`` while installed: a Ctrl-C a finalizer swallowed is remembered (:func:`check` raises
    it), so it is not reported as an ignored exception; anything else goes to the hook that was there."""
    if isinstance(unraisable.exc_value, KeyboardInterrupt) and _pending:
        return
    _previous_hook(unraisable)


def install() -> None:
    """Remember every Ctrl-C (main thread, and only where Ctrl-C is not deliberately ignored)."""
    global _previous_hook
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is (
        signal.default_int_handler
    ):
        signal.signal(signal.SIGINT, _on_sigint)
        if sys.unraisablehook is not _unraisable:
            _previous_hook = sys.unraisablehook
            sys.unraisablehook = _unraisable


def check() -> None:
    """Raise ``KeyboardInterrupt`` if a Ctrl-C came and was not handled yet."""
    if _pending:
        raise KeyboardInterrupt


def handled() -> None:
    """The interrupt was caught and acted on: forget it."""
    global _pending
    _pending = False

"""JSON out of specroof: numpy values as plain numbers, non-finite floats as null.

``json.dumps`` writes ``Infinity`` and ``NaN``, which strict parsers (``jq``, browsers'
``JSON.parse``) reject; a crossover that a sweep never reaches is ``inf`` in Python and
``null`` on disk.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np


def _plain(o: Any) -> Any:
    if isinstance(o, dict):
        return {str(k): _plain(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_plain(v) for v in o]
    if isinstance(o, np.ndarray):
        return _plain(o.tolist())
    if isinstance(o, np.generic):
        o = o.item()
    if isinstance(o, float) and not math.isfinite(o):
        return None
    return o


def dumps(obj: Any) -> str:
    """``obj`` as indented, strict JSON (anything else that is a number goes through ``float``)."""
    return json.dumps(_plain(obj), indent=2, allow_nan=False, default=float)

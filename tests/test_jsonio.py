import json

import numpy as np

from roofline.core.jsonio import dumps


def test_strict_json_with_numpy_and_non_finite_values():
    text = dumps({"k": [np.float64(2.5), float("inf"), np.nan], "n": np.int64(3), "a": np.arange(2), 1: True})
    assert "Infinity" not in text and "NaN" not in text
    assert json.loads(text) == {"k": [2.5, None, None], "n": 3, "a": [0, 1], "1": True}

"""The validation rows added for quantised formats: every row is validation, cited, priced, and the engine-aware
prediction is closer than the datasheet roofline (a claim the rows could refute)."""

from __future__ import annotations

import numpy as np
import pytest

from roofline.evidence.published import error_summary, load_published, validation_table

NEW_FILES = ("exllamav2_readme.toml", "torchao_gpt_fast.toml")


@pytest.fixture(scope="module")
def table():
    rows = load_published()
    return validation_table(rows[rows["file"].isin(NEW_FILES)])


def test_the_new_files_only_validate_and_name_their_source(table):
    rows = load_published()
    new = rows[rows["file"].isin(NEW_FILES)]
    assert set(new["file"]) == set(NEW_FILES)
    assert (new["use"] == "validation").all()
    assert new["url"].str.startswith("https://github.com/").all()
    assert len(new) >= 25 and new["hardware"].nunique() >= 4


def test_every_row_is_priced_and_the_engine_beats_the_roofline(table):
    assert np.isfinite(table["error_engine"]).all() and np.isfinite(table["error_roofline"]).all()
    s = error_summary(table).set_index("kind")
    for kind in ("decode", "quantised"):
        assert s.loc[kind, "median_abs_error_engine"] < 0.5 * s.loc[kind, "median_abs_error_roofline"]

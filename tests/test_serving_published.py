"""Published serving results (latency against request rate, with and without speculation) priced by the simulator."""

from __future__ import annotations

import math

import numpy as np
import pytest

from roofline.core.errors import SpecroofError
from roofline.evidence import published
from roofline.evidence.published import load_published, serving_crossovers, serving_table

SOURCE = "vllm_blog_spec_decode_4xh100"


@pytest.fixture(scope="module")
def table():
    return serving_table()


def test_the_serving_rows_load_with_their_series():
    df = load_published()
    s = df[df["kind"] == "serving"]
    assert len(s) == 18 and set(s["series"]) == {"sharegpt-draft", "cnn-ngram"}
    assert set(s["policy"]) == {"off", "static:4"} and (s["use"] == "validation").all()
    assert s["published_value"].gt(0).all() and s["serving"].map(lambda d: d["model"]).eq("llama-3.1-70b").all()
    # the other kinds are untouched: their rows carry no serving fields
    assert df.loc[df["kind"] != "serving", "series"].isna().all()


def test_every_row_is_priced_and_the_error_table_has_its_columns(table):
    cols = {"source", "series", "policy", "rate_req_s", "metric", "published", "roofline", "engine_aware",
            "error_roofline", "error_engine", "alpha_engine", "note"}  # fmt: skip
    assert cols <= set(table.columns) and len(table) == 18
    assert np.isfinite(table["engine_aware"]).all() and np.isfinite(table["roofline"]).all()
    anchored = table["note"].str.startswith("anchors")
    # one anchor per series (its lowest rate's speculative row), every other row has an error
    assert anchored.sum() == 2 and table.loc[anchored, "error_engine"].isna().all()
    assert table.loc[~anchored, "error_engine"].notna().all()
    err = table["engine_aware"] / table["published"] - 1.0
    np.testing.assert_allclose(table.loc[~anchored, "error_engine"], err[~anchored])
    # the implied acceptance reproduces the anchor's published ratio (to the bisection's resolution)
    for series, g in table.groupby("series"):
        g = g.set_index(["policy", "rate_req_s"])
        r0 = min(g.index.get_level_values(1))
        pub = g.loc[("off", r0), "published"] / g.loc[("static:4", r0), "published"]
        sim = g.loc[("off", r0), "engine_aware"] / g.loc[("static:4", r0), "engine_aware"]
        assert abs(sim / pub - 1) < 0.02, series
        assert 0.0 < g["alpha_engine"].iloc[0] < 1.0


def test_the_prices_are_deterministic_under_the_seed(table):
    published._SERVING_CACHE.clear()
    again = serving_table()
    np.testing.assert_array_equal(again["engine_aware"].to_numpy(), table["engine_aware"].to_numpy())


def test_the_crossover_table(table):
    x = serving_crossovers(table)
    assert set(x["series"]) == {"sharegpt-draft", "cnn-ngram"}
    for _, r in x.iterrows():
        # the published crossover lies between the last rate that pays and the first that does not
        assert r["published_bracket_lo_req_s"] <= r["published_rate_req_s"] <= r["published_bracket_hi_req_s"]
        v = r["engine_aware_rate_req_s"]
        assert (v is None and math.isnan(r["error_engine"])) or math.isclose(
            r["error_engine"], v / r["published_rate_req_s"] - 1.0
        )


def test_the_validation_table_carries_the_serving_rows(table):
    v = published.validation_table(load_published())
    s = v[v["kind"] == "serving"]
    assert len(s) == 18 and (s["metric"] == "e2e_mean_s").all()
    np.testing.assert_allclose(np.sort(s["engine_aware"]), np.sort(table["engine_aware"]))


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ('series = "nope"\npolicy = "off"\nrate_req_s = 1\nmetric = "e2e_mean_s"\nvalue = 1', "series must name"),
        ('series = "a"\npolicy = "static:9"\nrate_req_s = 1\nmetric = "e2e_mean_s"\nvalue = 1', "policy must be"),
        ('series = "a"\npolicy = "off"\nrate_req_s = 0\nmetric = "e2e_mean_s"\nvalue = 1', "rate_req_s must be"),
        ('series = "a"\npolicy = "off"\nrate_req_s = 1\nmetric = "throughput_tok_s"\nvalue = 1', "metric must be"),
    ],
)
def test_a_bad_serving_row_is_one_line(tmp_path, row, message):
    head = (
        'source = "s"\nurl = "u"\nsetup = "x"\nhardware = "h100-sxm-80gb"\nengine = "vllm"\nuse = "validation"\n'
        '[series.a]\nmodel = "llama-3.1-8b"\nspeculating = "static:4"\n'
    )
    (tmp_path / "bad.toml").write_text(head + '[[row]]\nkind = "serving"\n' + row + "\n")
    with pytest.raises(SpecroofError, match=message):
        load_published(tmp_path)

"""MagicDec's blog tables as held-out rows, and the two row fields they need: a per-token ``alpha`` (the tokens per
round it gives on a chain) and a draft model's StreamingLLM window (``drafter_kv_window``)."""

from __future__ import annotations

import numpy as np
import pytest

from roofline.core.errors import SpecroofError
from roofline.evidence.published import load_published, predict_row, validation_table
from roofline.passes.model import get_model
from roofline.speculation.closed_forms import expected_tokens
from roofline.speculation.drafters import DraftModel
from roofline.speculation.predict import predict_speedup

_HEAD = (
    'source = "s"\nurl = "https://example.org/x"\nsetup = "a setup of twenty chars"\nhardware = "a100-sxm-80gb"\n'
    'engine = "compiled"\nuse = "validation"\n'
)
_ROW = 'kind = "speculative"\nmodel = "llama-2-7b-32k"\ntp = 8\nbatch = 32\ncontext = 8032\nspeedup = 1.3\n'


def _load(tmp_path, row: str):
    (tmp_path / "r.toml").write_text(_HEAD + "[[row]]\n" + _ROW + row + "\n")
    return load_published(tmp_path)


def test_alpha_gives_the_chain_its_tokens_per_round(tmp_path):
    rows = _load(tmp_path, 'drafter = "window:288"\ngamma = 3\nalpha = 0.81')
    assert rows["mean_accepted"].iloc[0] == pytest.approx(float(expected_tokens(0.81, 3)))
    assert rows["alpha"].iloc[0] == 0.81


def test_a_draft_models_window_prices_the_window_not_the_context(tmp_path):
    rows = _load(tmp_path, 'drafter = "model:tinyllama-1.1b"\ndrafter_kv_window = 288\ngamma = 3\nmean_accepted = 2.5')
    r = rows.iloc[0]
    got = predict_row(r, "compiled")["predicted"]
    kw = dict(hardware="a100-sxm-80gb", target="llama-2-7b-32k", gamma=3, mean_accepted=2.5, engine="compiled",
              context=8032, dtype="bf16", tp=8, batch=32)  # fmt: skip
    tiny = get_model("tinyllama-1.1b")
    windowed = predict_speedup(drafter=DraftModel(tiny, kv_window=288), **kw).speedup
    assert got == pytest.approx(windowed)
    # the draft reads its window's KV: a longer window is a slower round
    longer = _load(
        tmp_path, 'drafter = "model:tinyllama-1.1b"\ndrafter_kv_window = 1800\ngamma = 3\nmean_accepted = 2.5'
    )
    assert predict_row(longer.iloc[0], "compiled")["predicted"] < got


@pytest.mark.parametrize(
    "row, message",
    [
        ('drafter = "window:288"\nalpha = 0.8', "alpha is a speculative chain's figure"),
        ('drafter = "window:288"\ngamma = 3\nalpha = 1.5', "alpha (a per-token acceptance rate) must lie in (0, 1]"),
        ('drafter = "window:288"\ngamma = 3\nalpha = 0.8\nmean_accepted = 2.0', "give alpha or mean_accepted"),
        ('drafter = "window:288"\ngamma = 3\ndrafter_kv_window = 256', "drafter_kv_window is a draft model's cache"),
        ('drafter = "model:tinyllama-1.1b"\ngamma = 3\ndrafter_kv_window = 0', "drafter_kv_window must be a whole"),
    ],
)
def test_a_bad_alpha_or_window_names_its_row_and_field(tmp_path, row, message):
    with pytest.raises(SpecroofError) as e:
        _load(tmp_path, row)
    assert "r.toml: row 1" in str(e.value) and message in str(e.value)


def test_a_speedup_without_acceptance_reports_the_tokens_per_round_it_implies(tmp_path):
    r = _load(tmp_path, 'drafter = "window:288"\ngamma = 3').iloc[0]
    out = predict_row(r, "compiled")
    assert np.isnan(out["predicted"])
    # priced at the implied tokens per round, the row gives its published speedup back
    again = predict_row({**dict(r), "mean_accepted": out["implied_mean_accepted"]}, "compiled")["predicted"]
    assert again == pytest.approx(1.3)


def test_the_magicdec_rows_are_held_out_and_priced():
    rows = load_published()
    md = rows[rows["file"] == "magicdec_blog.toml"]
    assert len(md) == 19 and (md["use"] == "validation").all() and (md["engine"] == "compiled").all()
    assert (md["hardware"] == "a100-sxm-80gb").sum() == 11 and (md["hardware"] == "h100-sxm-80gb").sum() == 8
    t = validation_table(md)
    with_alpha = md["alpha"].notna().to_numpy()
    assert with_alpha.sum() == 5
    assert np.isfinite(t["error_engine"].to_numpy()[with_alpha]).all()
    # the rest publish no acceptance: an implied tokens per round within a chain's bounds, no error
    implied = t["implied_mean_accepted"].to_numpy()[~with_alpha]
    gammas = md["gamma"].to_numpy()[~with_alpha].astype(float)
    assert np.isnan(t["error_engine"].to_numpy()[~with_alpha]).all()
    assert ((implied >= 1.0) & (implied <= gammas + 1)).all()

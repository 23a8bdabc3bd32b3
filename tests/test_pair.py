"""The offline pair: the shipped weights load and draft usefully; the build works from scratch (scaled down)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")

from measure.decode import autoregressive_generate, speculative_generate  # noqa: E402
from measure.pair import PairConfig, corpus, held_out_prompts, load_pair  # noqa: E402


def test_corpus_is_the_standard_library_and_reproducible():
    train, held = corpus(200_000)
    again, _ = corpus(200_000)
    assert len(train) > 150_000 and (train == again).all()
    assert b"def " in train.tobytes() and len(held) > 5_000


def test_shipped_pair_drafts_real_text():
    target, draft, stats = load_pair()
    assert stats["held_out"]["target"] < stats["held_out"]["draft"] < 3.0  # nats/byte: both learned the text
    prompts = held_out_prompts(4)
    base = autoregressive_generate(target, prompts, 32)
    for d in (draft, 1):
        res = speculative_generate(target, d, prompts, 4, 32)
        assert res.tokens == base.tokens
        assert res.metrics().acceptance_rate > 0.3


def test_build_from_scratch_scaled_down(tmp_path):
    cfg = PairConfig(
        target_layers=2,
        target_dim=64,
        draft_dim=64,
        target_steps=30,
        draft_steps=10,
        batch=4,
        seq_len=32,
        corpus_bytes=300_000,
    )
    target, draft, stats = load_pair(cfg, cache=tmp_path / "pair")
    assert (tmp_path / "pair" / "target.safetensors").exists() and (tmp_path / "pair" / "meta.json").exists()
    assert stats["held_out"]["target"] < 5.0  # below uniform over bytes (ln 256 = 5.55)
    again, _, _ = load_pair(cfg, cache=tmp_path / "pair")  # cached: no retraining
    assert torch.equal(again.embed_tokens.weight, target.embed_tokens.weight.to(again.dtype))


def test_measure_spec_cli(tmp_path, capsys):
    import json

    from specroof.cli import main

    code = main(
        [
            "measure",
            "spec",
            "--pair",
            "offline",
            "--early-exit",
            "1",
            "--gamma",
            "1,2",
            "--batch",
            "1",
            "--tokens",
            "8",
            "--width",
            "2",
            "--repeats",
            "1",
            "--hardware",
            "a100-sxm-80gb",
            "--out",
            str(tmp_path / "spec"),
            "--json",
        ]
    )
    d = json.loads(capsys.readouterr().out)
    assert code == 0
    for key in (
        "fit_mape",
        "apriori_mape",
        "crossover_measured",
        "crossover_predicted",
        "speedup",
        "speedup_error_max",
        "speedup_error_max_wall",
    ):
        assert key in d
    assert {r["gamma"] for r in d["speedup"]} == {1, 2} and len(d["speedup"]) == 4  # 2 drafters x 2 gammas
    assert all(r["speedup_measured"] > 0 and r["speedup_predicted"] > 0 for r in d["speedup"])
    assert all(r["speedup_wall"] > 0 and r["statistic"] == "min" for r in d["speedup"])
    assert (tmp_path / "spec" / "speedup.csv").exists() and (tmp_path / "spec" / "fitted-profile.toml").exists()
    assert main(["measure", "spec", "--gamma", "1"]) == 2


def test_widened_target_computes_the_same_function():
    from measure.pair import widen

    target, _, _ = load_pair()
    wide = widen(target, 4, dtype="fp32")
    assert wide.spec.d_model == 4 * target.spec.d_model and wide.spec.n_heads == 4 * target.spec.n_heads
    assert wide.spec.total_params > 14 * target.spec.total_params  # layer weights grow as the square
    x = torch.tensor(held_out_prompts(2, 48))
    with torch.no_grad():
        a, b = target.forward_train(x)[0], wide.forward_train(x)[0]
    assert torch.allclose(a, b, atol=1e-4, rtol=1e-4)
    # through the cache too: greedy speculation on the wide target emits the small target's tokens
    prompts = held_out_prompts(2)
    assert autoregressive_generate(wide, prompts, 16).tokens == autoregressive_generate(target, prompts, 16).tokens
    with pytest.raises(Exception, match="power of two"):
        widen(target, 3)

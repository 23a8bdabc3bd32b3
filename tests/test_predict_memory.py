"""predict_speedup counts memory as speedup does: a configuration that does not fit the devices carries no speed in
its dict (the JSON form), only its bytes (issue 56: no speedup for a configuration that does not fit)."""

from __future__ import annotations

import json

import pytest

import roofline as rf


def test_a_70b_target_on_one_80gb_device_does_not_fit_and_its_dict_has_no_speed():
    p = rf.predict_speedup(hardware="h100-sxm-80gb", target="llama-3.1-70b", drafter="eagle3", mean_accepted=3.0)
    assert not p.fits_in_memory and p.memory_bytes > 80e9
    d = p.to_dict()
    assert all(d[k] is None for k in p.SPEED_FIELDS) and d["memory_bytes"] == p.memory_bytes
    json.dumps(d)  # the JSON form is plain


def test_two_devices_hold_it_and_the_speed_is_back():
    p = rf.predict_speedup(hardware="h100-sxm-80gb", target="llama-3.1-70b", drafter="eagle3", mean_accepted=3.0, tp=2)
    assert p.fits_in_memory and p.to_dict()["speedup"] == pytest.approx(p.speedup) and p.speedup > 1


def test_its_bytes_are_the_array_paths_bytes_for_the_same_chain():
    kw = {"hardware": "h100-sxm-80gb", "target": "llama-3.1-8b", "drafter": "model:llama-3.2-1b"}
    p = rf.predict_speedup(**kw, alpha=0.8, gamma=4, batch=8, context=4096)
    s = rf.speedup(kw["hardware"], kw["target"], kw["drafter"], 0.8, 4, batch=8, context=4096)
    assert p.memory_bytes == pytest.approx(float(s.memory_bytes), rel=1e-9)
    assert p.fits_in_memory == bool(s.fits_in_memory)


def test_speedup_without_a_matched_figure_answers_over_acceptance_with_its_break_even(capsys):
    from roofline.speculation.acceptance_defaults import CURVE_ALPHAS, break_even
    from specroof.cli import main

    argv = ["speedup", "--hardware", "h100-sxm-80gb", "--target", "llama-3.1-8b", "--drafter", "model:llama-3.2-1b",
            "--gamma", "4"]  # fmt: skip
    assert main([*argv, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert "no published acceptance" in d["acceptance"] and "speedup" not in d
    assert [p["alpha"] for p in d["curve"]] == list(CURVE_ALPHAS)
    assert d["break_even_alpha"] == break_even(CURVE_ALPHAS, [p["speedup"] > 1 for p in d["curve"]])
    # each point is the priced speedup at that rate given explicitly
    assert main([*argv, "--alpha", "0.7", "--json"]) == 0
    one = json.loads(capsys.readouterr().out)
    assert next(p for p in d["curve"] if p["alpha"] == 0.7)["speedup"] == pytest.approx(one["speedup"], rel=1e-9)
    assert main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("acceptance: no published acceptance of model drafting") and "break-even" in out[0]

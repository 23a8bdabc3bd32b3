"""One TOML writer: every shipped profile survives load -> write -> load unchanged, measured blocks included."""

from __future__ import annotations

import dataclasses
import math

import pytest

from roofline.costing.hardware import Measured, list_hardware, load_hardware, write_profile


def _same(a, b, path=""):
    if isinstance(a, float) and isinstance(b, float):
        assert math.isclose(a, b, rel_tol=1e-12), (path, a, b)
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), (path, a.keys(), b.keys())
        for k in a:
            _same(a[k], b[k], f"{path}.{k}")
    elif dataclasses.is_dataclass(a):
        for f in dataclasses.fields(a):
            if f.name not in ("path", "id"):
                _same(getattr(a, f.name), getattr(b, f.name), f"{path}.{f.name}")
    else:
        assert a == b, (path, a, b)


@pytest.mark.parametrize("profile", list(list_hardware()["id"]))
def test_every_shipped_profile_round_trips(profile, tmp_path):
    hw = load_hardware(profile)
    again = load_hardware(str(write_profile(hw, tmp_path / f"{profile}.toml")))
    _same(hw, again)


def test_a_measured_block_round_trips(tmp_path):
    m = Measured(
        bandwidth_bytes_per_s=24.4e9,
        peak_flop_per_s={"bf16": 8.7e11, "fp32": 1.7e11},
        pass_overhead_s=2.2e-6,
        layer_overhead_s=6.6e-6,
        matmul_half_tokens=9.8,
        gemv_bandwidth_bytes_per_s=23.5e9,
        attention_flop_per_s=9.3e10,
        overlap=0.1,
        provenance={"device": "AMD EPYC", "method": "test"},
    )
    hw = load_hardware("a100-sxm-80gb").replace(measured=m, notes="a note", aliases=("x1",))
    again = load_hardware(str(write_profile(hw, tmp_path / "m.toml")))
    _same(hw, again)

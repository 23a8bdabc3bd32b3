"""Hardware profiles: every built-in loads and validates; lookup, ridge, measured overrides, errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from roofline import SpecroofError, list_hardware, load_hardware
from roofline.hardware import parse_profile

PROFILES = Path(__file__).resolve().parents[1] / "hardware_profiles"


def test_at_least_25_profiles_and_all_families():
    df = list_hardware()
    assert len(df) >= 25
    ids = set(df["id"])
    for needed in (
        "v100-sxm2-32gb",
        "t4-16gb",
        "a10-24gb",
        "a10g-24gb",
        "l4-24gb",
        "l40s-48gb",
        "a100-sxm-40gb",
        "a100-sxm-80gb",
        "a100-pcie-80gb",
        "h100-sxm-80gb",
        "h100-pcie-80gb",
        "h100-nvl-94gb",
        "h200-sxm-141gb",
        "b200-180gb",
        "gb200-186gb",
        "rtx-3090-24gb",
        "rtx-4090-24gb",
        "rtx-5090-32gb",
        "mi250x-128gb",
        "mi300x-192gb",
        "mi325x-256gb",
        "gaudi2-96gb",
        "gaudi3-128gb",
        "tpu-v4",
        "tpu-v5e",
        "tpu-v5p",
        "tpu-v6e",
        "apple-m2-ultra",
        "apple-m3-max",
        "apple-m4-max",
        "epyc-9654",
    ):
        assert needed in ids


@pytest.mark.parametrize("path", sorted(PROFILES.glob("*.toml")), ids=lambda p: p.stem)
def test_every_profile_has_sources_and_positive_numbers(path):
    hw = load_hardware(path)
    assert hw.bandwidth_bytes_per_s > 0
    assert hw.sources["memory"]
    if hw.peak_flop_per_s:
        assert hw.sources["compute"]
    assert all(v > 0 for v in hw.peak_flop_per_s.values())
    for d in hw.dtypes:
        assert hw.ridge(d) == pytest.approx(hw.peak(d) / hw.bandwidth())


def test_datasheet_figures_match_the_sourced_table():
    h = load_hardware("h100-sxm-80gb")
    assert h.bandwidth() == 3350e9 and h.peak("bf16") == pytest.approx(989.4e12)
    assert h.interconnect_bytes_per_s == 450e9  # per direction, not the 900 bidirectional
    assert load_hardware("h200").bandwidth() == 4800e9
    assert load_hardware("tpu-v4").memory_bytes == 32 * 2**30  # GiB, not GB
    assert load_hardware("rtx-4090").peak("bf16") == pytest.approx(165.2e12)  # fp32-accumulate rate
    # unverified cells are left out, not guessed
    with pytest.raises(SpecroofError, match="no verified bf16"):
        load_hardware("a10g-24gb").peak("bf16")


def test_name_resolution():
    assert load_hardware("A100 80GB SXM").id == "a100-sxm-80gb"
    assert load_hardware("H100 SXM").id == "h100-sxm-80gb"
    assert load_hardware("mi300x").id == "mi300x-192gb"
    with pytest.raises(SpecroofError, match="ambiguous.*h100-nvl-94gb.*h100-pcie-80gb.*h100-sxm-80gb"):
        load_hardware("h100")
    with pytest.raises(SpecroofError, match="unknown hardware 'h1000'; closest: h100"):
        load_hardware("h1000")


def test_attainable_is_the_roofline():
    a = load_hardware("a100-sxm-80gb")
    x = np.array([1.0, 153.0, 1000.0])
    got = a.attainable(x, "fp16")
    assert got[0] == pytest.approx(2039e9)
    assert got[2] == pytest.approx(312e12)
    assert np.all(np.diff(got) >= 0)


def _profile(**memory):
    return {"name": "X", "memory": {"source": "test", **memory}, "compute": {"bf16_TFLOP_per_s": 100, "source": "t"}}


def test_measured_block_overrides_datasheet(tmp_path):
    text = (PROFILES / "a100-sxm-80gb.toml").read_text() + (
        '\n[measured]\nbandwidth_GB_per_s = 1700\npass_overhead_us = 50\ndate = "2026-11-29"\n'
        'method = "test"\n[measured.compute]\nbf16_TFLOP_per_s = 270\n'
    )
    p = tmp_path / "a100-measured.toml"
    p.write_text(text)
    hw = load_hardware(str(p))
    assert hw.bandwidth() == 1700e9
    assert hw.peak("bf16") == 270e12
    assert hw.peak("fp16") == 312e12  # no measurement for fp16: datasheet
    assert hw.pass_overhead_s == pytest.approx(50e-6)
    assert hw.measured is not None and hw.measured.provenance["method"] == "test"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"name": "X", "memory": {"source": "t"}}, r"f\.toml: missing field 'memory.bandwidth_GB_per_s'"),
        (_profile(bandwidth_GB_per_s=-5), r"'bandwidth_GB_per_s' must be positive \(got -5\)"),
        (_profile(bandwidth=900), r"'memory.bandwidth' has no unit"),
        (
            {**_profile(bandwidth_GB_per_s=900), "compute": {"bf17_TFLOP_per_s": 1, "source": "t"}},
            r"unknown dtype 'bf17'",
        ),
        ({**_profile(bandwidth_GB_per_s=900), "compute": {"bf16": 1, "source": "t"}}, r"'bf16' has no unit"),
        (_profile(bandwidth_GB_per_s="900 GB"), r"must be a number"),
        ({"name": "X", "memory": {"bandwidth_GB_per_s": 900}}, r"\[memory\]: missing field 'source'"),
        ({**_profile(bandwidth_GB_per_s=9), "bogus": 1}, r"unknown field 'bogus'"),
    ],
)
def test_schema_errors_name_file_field_and_problem(data, message):
    with pytest.raises(SpecroofError, match=message):
        parse_profile(data, "f.toml", "f")


def test_invalid_toml_file(tmp_path):
    p = tmp_path / "bad.toml"
    p.write_text("name = \n")
    with pytest.raises(SpecroofError, match="bad.toml: not valid TOML"):
        load_hardware(str(p))

"""Hardware profiles: every built-in loads and validates; lookup, ridge, measured overrides, errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from roofline import SpecroofError, list_hardware, load_hardware
from roofline.costing.hardware import parse_profile

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


# -- the GPUs of 2026 (issue 55, Build 4) -------------------------------------------------------

GPUS_2026 = {
    # id: (bandwidth GB/s, capacity GB, dense bf16-or-fp16 TFLOP/s, link GB/s per direction)
    "b300-288gb": (8000, 288, 2250, 900),
    "gb300-288gb": (8000, 288, 2500, 900),
    "mi355x-288gb": (8000, 288, 2500, 535.5),
    "mi350x-288gb": (8000, 288, 2306.9, 535.5),
    "rtx-pro-6000-96gb": (1792, 96, 503.8, 64),
    "rtx-2080-ti-11gb": (616, 11, 56.9, 16),
}


@pytest.mark.parametrize("profile", sorted(GPUS_2026))
def test_gpus_of_2026_load_with_a_source_for_every_block(profile):
    bw, cap, half, link = GPUS_2026[profile]
    hw = load_hardware(profile)
    assert hw.bandwidth() == pytest.approx(bw * 1e9)
    assert hw.memory_bytes == pytest.approx(cap * 1e9)
    assert hw.peak("fp16") == pytest.approx(half * 1e12)
    assert hw.interconnect_bytes_per_s == pytest.approx(link * 1e9)  # per direction, not both together
    for block in ("memory", "compute", "interconnect", "efficiency"):
        assert hw.sources[block].strip(), (profile, block)


def test_gpus_of_2026_leave_unverified_cells_out():
    b300, gb300, mi355x, mi350x, pro, turing = (load_hardware(p) for p in GPUS_2026)
    # Blackwell Ultra cut int8 and the sources disagree on B300's dense fp4: neither is guessed
    assert "int8" not in b300.dtypes and "fp4" not in b300.dtypes and "int8" not in gb300.dtypes
    assert gb300.peak("fp4") == pytest.approx(15000e12)
    # Turing's tensor cores have no bf16 and no fp8
    with pytest.raises(SpecroofError, match="no verified bf16"):
        turing.peak("bf16")
    assert "fp8" not in turing.dtypes
    # AMD's dense figures: fp8 twice bf16 (the with-sparsity rates are another 2x)
    assert mi355x.peak("fp8") == pytest.approx(2 * mi355x.peak("bf16"))
    # the MI350X is the MI355X's silicon at 2200 MHz: clock x 512 FMA x 2 x 1024 matrix cores
    assert mi350x.peak("bf16") == pytest.approx(2200e6 * 512 * 2 * 1024, rel=1e-4)
    # the professional Blackwell card runs fp32 accumulate at the full tensor rate: 4000 sparse fp4 TOPS / 8
    assert pro.peak("bf16") == pytest.approx(4000e12 / 8, rel=0.01)


def test_gpus_of_2026_achievable_shares_follow_their_sources():
    # own mamf-finder figures over the profile's own datasheet rate; memory borrowed from the same HBM generation
    b300, mi355x = load_hardware("b300"), load_hardware("mi355x")
    assert b300.compute_efficiency("bf16") == pytest.approx(1769.0 / 2250, abs=1e-3)
    assert b300.compute_efficiency("fp8") == pytest.approx(3353.3 / 4500, abs=1e-3)
    assert mi355x.compute_efficiency("bf16") == pytest.approx(1565.0 / 2500, abs=1e-3)
    assert b300.efficiency_memory == load_hardware("h200").efficiency_memory
    assert mi355x.efficiency_memory == load_hardware("mi300x").efficiency_memory
    assert all(load_hardware(p).efficiency_estimated for p in GPUS_2026)


@pytest.mark.parametrize(
    ("name", "profile"),
    [
        ("b300", "b300-288gb"),
        ("GB300", "gb300-288gb"),
        ("MI355X", "mi355x-288gb"),
        ("mi350x", "mi350x-288gb"),
        ("RTX PRO 6000", "rtx-pro-6000-96gb"),
        ("rtx 2080 ti", "rtx-2080-ti-11gb"),
        ("b200", "b200-180gb"),
        ("gb200", "gb200-186gb"),
        ("rtx 6000 ada", "rtx-6000-ada-48gb"),
    ],
)
def test_gpus_of_2026_resolve_apart_from_their_neighbours(name, profile):
    assert load_hardware(name).id == profile

"""NCCL's all-reduce from public tables beside the engines' own kernels (docs/cost-model.md, section 60)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from roofline.core.errors import SpecroofError
from roofline.costing.collectives import load_allreduce_tables, nccl_model
from roofline.costing.engine import Engine, engine_from_dict, load_engine
from roofline.costing.hardware import load_hardware
from roofline.costing.passtime import pass_time

KB, MB = 1024, 1024 * 1024


def test_the_eight_rank_table_reads_as_published_and_interpolates_between_rows():
    m = nccl_model("h100-sxm-80gb", "nccl")
    assert m is not None
    # Azure/msccl's ND H100 v5 NCCL column: 256 KB 20.5 us, 512 KB 29.89 us, 1 MB 31.94 us
    assert m.seconds(256 * KB, 8) == pytest.approx(20.5e-6)
    assert m.seconds(1 * MB, 8) == pytest.approx(31.94e-6)
    assert m.seconds(384 * KB, 8) == pytest.approx((20.5e-6 + 29.89e-6) / 2)
    # below the first row (1 KB) a message costs the first row's time: the latency
    assert m.seconds(64, 8) == pytest.approx(13.12e-6)
    # arrays broadcast, and time never falls as the message grows
    sizes = np.geomspace(64, 2e9, 200)
    t = m.seconds(sizes, 8)
    assert t.shape == sizes.shape and (np.diff(t) >= 0).all()


def test_ranks_between_tables_are_linear_and_a_short_table_grows_as_the_widest():
    m = nccl_model("h200-sxm-141gb", "nccl")
    assert m is not None
    t4, t8 = m.seconds(2 * MB, 4), m.seconds(2 * MB, 8)
    assert t4 == pytest.approx(26e-6) and t8 == pytest.approx(37.95e-6)
    assert m.seconds(2 * MB, 6) == pytest.approx((t4 + t8) / 2)
    assert m.seconds(2 * MB, 2) == pytest.approx(t4)  # below the fewest ranks: the nearest table
    assert m.seconds(2 * MB, 16) == pytest.approx(t8)  # past one node: the eight-rank table, a floor
    # past the four-rank table's 4 MB, it grows as the eight-rank one does, times the bytes a rank sends (1.5 / 1.75)
    grow8 = m.seconds(64 * MB, 8) - m.seconds(4 * MB, 8)
    assert m.seconds(64 * MB, 4) - m.seconds(4 * MB, 4) == pytest.approx(grow8 * 1.5 / 1.75)
    assert m.seconds(64 * MB, 4) < m.seconds(64 * MB, 8)


@pytest.mark.parametrize("hw", ["h100-pcie-80gb", "rtx-4090-24gb", "mi300x-192gb", "l40s-48gb", "tpu-v5e"])
def test_gpus_outside_nvswitch_nodes_keep_the_latency_and_line(hw):
    assert nccl_model(hw, "nccl") is None
    tm = load_hardware(hw).time_model(engine=load_engine("hf"))
    assert tm.nccl is None


@pytest.mark.parametrize("hw", ["a100-sxm-80gb", "h100-sxm-80gb", "b200-180gb", "gb300-288gb"])
def test_nvswitch_nodes_read_the_tables_under_an_engine_that_runs_nccl(hw):
    assert nccl_model(hw, "custom") is None
    assert load_hardware(hw).time_model(engine=load_engine("hf")).nccl is not None
    assert load_hardware(hw).time_model(engine=load_engine("compiled")).nccl is None


def test_which_engines_run_nccl():
    assert load_engine("hf").allreduce == "nccl" and load_engine("torch-eager").allreduce == "nccl"
    assert load_engine("hf-4").allreduce == "nccl"  # extends hf
    for name in ("compiled", "vllm", "sglang", "sglang-spec-v2", "trtllm"):
        assert load_engine(name).allreduce == "custom", name


def test_a_pass_pays_two_nccl_all_reduces_per_layer_in_place_of_latency_and_line():
    # compiled has no host term, so the difference is the device's: 2 x 80 layers x (NCCL - latency and line)
    custom = load_engine("compiled")
    nccl = dataclasses.replace(custom, allreduce="nccl")
    args = ("llama-2-70b", "h100-sxm-80gb", 32, 1, 2048, "bf16")
    t_custom = float(pass_time(*args, tp=8, engine=custom).t_step_s)
    t_nccl = float(pass_time(*args, tp=8, engine=nccl).t_step_s)
    s = 32 * 8192 * 2  # the hidden state of 32 sequences in bf16: 512 KB
    line = custom.allreduce_latency_s + 2 * 7 / 8 * s / load_hardware("h100-sxm-80gb").interconnect_bytes_per_s
    assert t_nccl - t_custom == pytest.approx(2 * 80 * (29.89e-6 - line), rel=1e-6)
    # one device has no all-reduce to pay
    one = (float(pass_time(*args, tp=1, engine=e).t_step_s) for e in (custom, nccl))
    assert next(one) == next(one)


def test_a_user_file_extending_a_shipped_engine_switches_its_all_reduce(tmp_path):
    f = tmp_path / "gpt-fast-nccl.toml"
    f.write_text('extends = "compiled"\n[collectives]\nallreduce = "nccl"\n')
    e = load_engine(str(f))
    assert e.name == "compiled" and e.allreduce == "nccl"
    assert e.device_layer_s == load_engine("compiled").device_layer_s  # every other term the shipped profile's


def test_bad_all_reduce_names_and_tables_are_refused(tmp_path):
    with pytest.raises(SpecroofError, match="allreduce must be one of custom, nccl"):
        engine_from_dict({"name": "x", "collectives": {"allreduce": "mpi"}})
    with pytest.raises(SpecroofError, match="allreduce must be one of"):
        Engine("x", allreduce="gloo")
    with pytest.raises(SpecroofError, match="allreduce must be one of"):
        nccl_model("h100-sxm-80gb", "NCCL")
    bad = tmp_path / "t.toml"
    head = 'source = "s"\nurl = "u"\ngpu = "g"\nfamily = "hopper"\nlibrary = "l"\ncuda_graphs = true\ncommand = "c"\n'
    bad.write_text(head + "ranks = 8\nsize_bytes = [2, 1]\ntime_us = [1, 2]\n")
    with pytest.raises(SpecroofError, match="ascending"):
        load_allreduce_tables(str(tmp_path))
    bad.write_text(head + "ranks = 1\nsize_bytes = [1, 2]\ntime_us = [1, 2]\n")
    with pytest.raises(SpecroofError, match="ranks must be"):
        load_allreduce_tables(str(tmp_path))
    bad.write_text(head + "ranks = 8\nsize_bytes = [1, 2]\ntime_us = [1, 2]\nextra = 1\n")
    with pytest.raises(SpecroofError, match="unknown key 'extra'"):
        load_allreduce_tables(str(tmp_path))


def test_every_shipped_table_names_its_source_and_is_hopper():
    tables = load_allreduce_tables()
    assert set(tables) == {"hopper"}
    assert [t.ranks for t in tables["hopper"]] == [4, 8]
    for t in tables["hopper"]:
        assert t.source and all(b > a for a, b in zip(t.size_bytes, t.size_bytes[1:], strict=False))


def test_the_step_time_carries_its_all_reduces_on_the_scalar_and_array_paths():
    nccl = dataclasses.replace(load_engine("compiled"), allreduce="nccl")
    one = pass_time("llama-2-70b", "h100-sxm-80gb", 32, 1, 2048, "bf16", tp=8, engine=nccl)  # the scalar pricer
    sweep = pass_time("llama-2-70b", "h100-sxm-80gb", np.array([1, 32]), 1, 2048, "bf16", tp=8, engine=nccl)
    assert float(one.t_allreduce_s) == pytest.approx(2 * 80 * 29.89e-6)
    assert np.allclose(sweep.t_allreduce_s, [2 * 80 * 16.64e-6, 2 * 80 * 29.89e-6])  # 16 KB and 512 KB
    single = pass_time("llama-2-70b", "h100-sxm-80gb", 32, 1, 2048, "bf16", engine=nccl)
    assert float(single.t_allreduce_s) == 0.0 and "t_allreduce_s" not in single.to_frame()
    assert "t_allreduce_s" in sweep.to_frame() and "t_allreduce_s" in one.to_frame()


def test_roofline_says_whose_all_reduce_it_priced(capsys):
    from specroof.cli import main

    base = ["roofline", "--hardware", "h100-sxm-80gb", "--model", "llama-3.1-70b", "--tp", "8", "--batch", "32"]
    assert main([*base, "--engine", "hf"]) == 0
    out = capsys.readouterr().out
    assert "all-reduces" in out and "160 a pass: NCCL's, from public all_reduce_perf tables" in out
    assert main([*base, "--engine", "vllm"]) == 0
    assert "vllm's own kernel: a latency plus the bytes over the link" in capsys.readouterr().out
    assert main([*base, "--engine", "hf", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["t_allreduce_s"] == pytest.approx(2 * 80 * 29.89e-6)  # 32 x 8192 x 2 bytes: 512 KB
    # a sweep shows the column under tensor parallelism only
    assert main([*base[:-1], "1,32", "--engine", "hf"]) == 0
    assert "t_allreduce_ms" in capsys.readouterr().out
    assert main(["roofline", "--hardware", "h100-sxm-80gb", "--model", "llama-3.1-8b", "--batch", "1,32"]) == 0
    out = capsys.readouterr().out
    assert "t_allreduce_ms" not in out and "all-reduces" not in out

"""The measurement harness on the CPU: timer, device, microbenchmarks, measured profiles, sweeps, store."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

torch = pytest.importorskip("torch")

import measure.sweep as sweeps  # noqa: E402
from measure.device import describe, match_profile, resolve_device  # noqa: E402
from measure.fit import fit, measured_crossover, measured_knee, validate  # noqa: E402
from measure.microbench import bandwidth, dispatch_overhead, matmul_flops, measure_profile  # noqa: E402
from measure.store import SweepStore  # noqa: E402
from measure.timing import time_fn  # noqa: E402
from roofline import SpecroofError, load_hardware  # noqa: E402
from roofline.costing.hardware import Measured  # noqa: E402
from roofline.costing.passtime import combine  # noqa: E402
from roofline.passes.model import ModelSpec  # noqa: E402
from roofline.speculation.trees import Tree  # noqa: E402
from specroof.cli import main  # noqa: E402

TINY = ModelSpec("tiny", 2, 64, 4, 2, 16, 128, 97, max_context=512)


def test_timer_counts_repeats_and_orders_stats():
    t = time_fn(lambda: sum(range(1000)), warmup=1, repeats=7)
    assert t.repeats == 7 and t.min_s <= t.q25_s <= t.median_s <= t.q75_s
    assert t.as_row()["repeats"] == 7
    with pytest.raises(SpecroofError, match="repeats >= 1"):
        time_fn(lambda: None, repeats=0)


def test_describe_the_cpu():
    info = describe("cpu")
    assert info["kind"] == "cpu" and info["cores"] >= 1 and info["torch_version"] == torch.__version__
    assert match_profile({"name": "NVIDIA H100 80GB HBM3"}) == "h100-sxm-80gb"
    assert match_profile({"name": "NVIDIA A100-SXM4-80GB"}) == "a100-sxm-80gb"
    assert match_profile({"name": "Some CPU"}) is None


def test_resolve_device():
    assert resolve_device("cpu").type == "cpu"
    assert resolve_device(None).type == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(SpecroofError, match="use 'cpu' or 'cuda'"):
        resolve_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(SpecroofError, match="sees none"):
            resolve_device("cuda")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error where there is no GPU")
def test_measure_spec_asked_for_cuda_without_one(capsys, tmp_path):
    code = main(["measure", "spec", "--pair", "offline", "--device", "cuda", "--out", str(tmp_path / "s")])
    assert code == 2 and "sees none" in capsys.readouterr().err


def test_microbenchmarks_give_sane_figures():
    bw = bandwidth("cpu", nbytes=64 << 20, repeats=3)
    assert 1e8 < bw["copy"].value < 1e13 and bw["copy"].unit == "B/s"
    mm = matmul_flops("fp32", shapes=[(64, 256, 256)], repeats=2)
    assert 1e8 < mm.value < 1e14
    assert 0 < dispatch_overhead(repeats=20).value < 1e-2
    with pytest.raises(SpecroofError, match="supports"):
        matmul_flops("int3")


def test_measured_profile_round_trips(tmp_path, monkeypatch):
    import measure.microbench as mb

    monkeypatch.setattr(mb, "_default_bytes", lambda device: 32 << 20)
    monkeypatch.setattr(
        mb,
        "matmul_flops",
        lambda d, device="cpu", threads=None: mb.Measurement(
            f"{d} matmul", 1e11, "FLOP/s", time_fn(lambda: None, repeats=1)
        ),
    )
    hw = measure_profile(tmp_path / "me.toml", "cpu", dtypes=("fp32", "bf16"))
    assert hw.measured is not None and hw.measured.peak_flop_per_s["bf16"] == pytest.approx(1e11)
    again = load_hardware(str(tmp_path / "me.toml"))
    assert again.bandwidth() == pytest.approx(hw.bandwidth()) and "torch_version" in again.measured.provenance


def test_sweep_returns_tidy_rows_with_predictions(tmp_path):
    hw = load_hardware("a100-sxm-80gb")
    df = sweeps.sweep(
        TINY, batch=[1, 2], new_tokens=[1, 4], context=[0, 32], dtype=["fp32"], repeats=2, hardware=hw, progress=False
    )
    assert len(df) == 8 and set(df["status"]) == {"ok"}
    for col in ("t_median_s", "t_min_s", "t_iqr_s", "repeats", "t_predicted_s", "device"):
        assert col in df
    assert (df["t_predicted_s"] > 0).all()
    tree = Tree.kary(2, 2)
    dt = sweeps.sweep(TINY, batch=[1], context=[16], dtype=["fp32"], tree=tree, repeats=2, progress=False, rounds=2)
    assert dt["new_tokens"].tolist() == [6] and dt["tree"].iloc[0] == "tree6d2" and dt["repeats"].iloc[0] == 4


def test_sweep_saves_as_it_goes_and_resumes(tmp_path, monkeypatch):
    out = tmp_path / "sw"
    kw = dict(device="cpu", progress=False)  # the meta names the device: pin it (a GPU machine defaults to CUDA)
    sweeps.sweep(TINY, batch=[1], new_tokens=[1, 2], context=[0], dtype=["fp32"], repeats=1, out=out, **kw)
    meta = json.loads((out / "meta.json").read_text())
    assert meta["device"]["kind"] == "cpu" and len(meta["runs"]) == 1
    calls = []
    real = sweeps.time_fn
    monkeypatch.setattr(sweeps, "time_fn", lambda *a, **k: calls.append(1) or real(*a, **k))
    df = sweeps.sweep(
        TINY,
        batch=[1],
        new_tokens=[1, 2, 3],
        context=[0],
        dtype=["fp32"],
        repeats=1,
        out=out,
        resume=True,
        **kw,
    )
    assert len(calls) == 1 and len(df) == 3  # only the new point was measured
    assert sorted(pd.read_csv(out / "results.csv")["new_tokens"]) == [1, 2, 3]


def test_out_of_memory_becomes_a_row(tmp_path, monkeypatch):
    class Boom(sweeps.ModelRunner):
        def run(self, tokens, tree=None):
            if tokens.shape[1] > 2:
                raise RuntimeError("CUDA out of memory. Tried to allocate 20 GiB")
            super().run(tokens, tree)

    monkeypatch.setattr(sweeps, "ModelRunner", Boom)
    df = sweeps.sweep(
        TINY, batch=[1], new_tokens=[1, 4], context=[0], dtype=["fp32"], repeats=1, out=tmp_path / "o", progress=False
    )
    assert df.set_index("new_tokens").loc[4, "status"] == "oom"
    assert df.set_index("new_tokens").loc[1, "status"] == "ok"


def test_store_keys_survive_csv_types(tmp_path):
    st = SweepStore(tmp_path, ("a", "b"))
    st.append({"a": 1, "b": "x", "t": 0.5})
    assert st.done() == {("1", "x")} and st.key_of({"a": 1, "b": "x"}) in st.done()


def test_knee_of_a_hinge():
    n = np.array([1, 2, 4, 8, 12, 16, 24, 32, 48, 64])
    t = 10.0 + 0.5 * np.maximum(0, n - 16)  # a roofline: flat at 10 until K = 16, then rising
    assert measured_knee(n, t) == pytest.approx(18)  # 10% above the plateau: 16 + 1 / 0.5
    assert measured_knee(n, t, rise=0.5) == pytest.approx(26)
    assert measured_knee(n, np.full(n.size, 3.0)) == n.max()


def test_crossover_of_every_roofline_shape():
    n = np.array([2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64])
    # memory time 10, compute time per token 10 / K, combined as the cost model combines them
    for k_true, overlap in ((16, 1.0), (40, 0.5), (150, 0.0)):
        t = combine(np.full(n.size, 10.0), 10.0 / k_true * n, overlap)
        assert measured_crossover(n, t, overlap) == pytest.approx(k_true, rel=1e-4)
    # a flat curve on an overlapping device: K is at least the widest pass; on an additive one, never reached
    assert measured_crossover(n, np.full(n.size, 3.0), 1.0) == pytest.approx(n.max(), rel=0.05)
    assert measured_crossover(n, np.full(n.size, 3.0), 0.0) == np.inf
    with pytest.raises(SpecroofError):
        measured_crossover(n, -np.ones(n.size))
    with pytest.raises(SpecroofError):
        measured_crossover(n, np.ones(n.size), overlap=1.5)
    with pytest.raises(SpecroofError):
        measured_crossover(n[:2], np.ones(2))


def test_crossover_is_steadier_than_the_knee():
    # a CPU-like curve (memory and compute time add, K = 60) over the spec run's verify widths,
    # with 2% noise per pass: every point weighs in the crossover, two points make the knee
    rng = np.random.default_rng(0)
    n = np.array([2, 3, 4, 5, 6, 7, 9, 12, 16])
    t = 1.0 + n / 60.0
    k_err, knee_err = [], []
    for _ in range(200):
        y = t * np.exp(rng.normal(0.0, 0.02, n.size))
        k_err.append(abs(measured_crossover(n, y, 0.0) / 60.0 - 1))
        knee_err.append(abs(measured_knee(n, y) / measured_knee(n, t) - 1))
    assert np.median(k_err) < 0.12
    assert np.median(k_err) < 0.7 * np.median(knee_err)


def test_fit_recovers_known_parameters():
    # synthetic sweep priced by a known profile: the fit must find it again
    truth = load_hardware("a100-sxm-80gb").replace(bandwidth_bytes_per_s=1.5e12, peak_flop_per_s={"bf16": 2e14})
    spec = ModelSpec("m", 8, 1024, 8, 8, 128, 4096, 1000, max_context=8192)
    rows = [
        dict(dtype="bf16", batch=b, new_tokens=n, context=c, status="ok")
        for b in (1, 4)
        for n in (1, 8, 64, 256)
        for c in (0, 2048)
    ]
    df = pd.DataFrame(rows)
    from measure.fit import predict_times

    df["t_median_s"] = df["t_min_s"] = predict_times(df, spec, truth) + 20e-6
    start = load_hardware("a100-sxm-80gb")
    f = fit(df, spec, start)
    assert f.mape < 0.01
    assert f.params["bandwidth_bytes_per_s"] == pytest.approx(1.5e12, rel=0.05)
    table, summary = validate(df, spec, start, f.hardware)
    assert summary["fit_mape"] < 0.01 and summary["apriori_mape"] > summary["fit_mape"]


def test_fit_recovers_one_token_bandwidth_and_attention_throughput():
    # one-token passes stream at their own rate and attention runs far below the GEMM peak
    # (both true of CPUs): the fit must find each refinement again, and the validation's
    # predicted crossover must sit where the same read-out puts the measured one
    m = Measured(
        bandwidth_bytes_per_s=20e9,
        peak_flop_per_s={"bf16": 1e12},
        gemv_bandwidth_bytes_per_s=28e9,
        attention_flop_per_s=0.2e12,
        pass_overhead_s=1e-3,
        matmul_half_tokens=8.0,
    )
    truth = load_hardware("a100-sxm-80gb").replace(measured=m)
    spec = ModelSpec("m", 8, 1024, 8, 8, 128, 4096, 1000, max_context=8192)
    rows = [
        dict(dtype="bf16", batch=b, new_tokens=n, context=c, status="ok")
        for b in (1, 4)
        for n in (1, 2, 4, 8, 16, 32, 64)
        for c in (128, 4096)
    ]
    df = pd.DataFrame(rows)
    from measure.fit import predict_times

    df["t_median_s"] = df["t_min_s"] = predict_times(df, spec, truth)
    start = load_hardware("a100-sxm-80gb").replace(bandwidth_bytes_per_s=25e9, peak_flop_per_s={"bf16": 2e12})
    f = fit(df, spec, start)
    assert f.mape < 0.005
    assert f.params["gemv_bandwidth_bytes_per_s"] == pytest.approx(28e9, rel=0.03)
    assert f.params["attention_flop_per_s"] == pytest.approx(0.2e12, rel=0.05)
    assert f.params["bandwidth_bytes_per_s"] == pytest.approx(20e9, rel=0.03)
    _, summary = validate(df, spec, start, f.hardware)
    for k in summary["crossover"]:
        assert k["crossover_predicted"] == pytest.approx(k["crossover_measured"], rel=0.25)


def test_measure_cli(capsys, tmp_path):
    assert main(["measure", "device", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["kind"] in ("cpu", "gpu")
    out = tmp_path / "s"
    code = main(
        [
            "measure",
            "sweep",
            "--spec",
            str(_config(tmp_path)),
            "--tokens",
            "1,2",
            "--dtype",
            "fp32",
            "--repeats",
            "1",
            "--out",
            str(out),
            "--json",
        ]
    )
    assert code == 0 and json.loads(capsys.readouterr().out)["points"] == 2
    assert main(["measure", "sweep", "--tokens", "1"]) == 2


def _config(tmp_path):
    cfg = {
        "model_type": "llama",
        "hidden_size": 64,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "num_hidden_layers": 2,
        "intermediate_size": 128,
        "vocab_size": 97,
        "max_position_embeddings": 512,
    }
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    return p


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_path_uses_events_and_runs_a_sweep():
    t = time_fn(lambda: torch.ones(1 << 20, device="cuda").sum(), device="cuda", repeats=3)
    assert t.device.startswith("cuda") and t.median_s > 0
    df = sweeps.sweep(
        TINY, batch=[1], new_tokens=[1, 8], context=[64], dtype=["bf16"], device="cuda", repeats=2, progress=False
    )
    assert set(df["status"]) == {"ok"}


def test_measure_fit_cli(capsys, tmp_path):
    out = tmp_path / "sw"
    cfg = _config(tmp_path)
    assert (
        main(
            [
                "measure",
                "sweep",
                "--spec",
                str(cfg),
                "--tokens",
                "1,2,4,8",
                "--context",
                "0,64",
                "--dtype",
                "fp32",
                "--repeats",
                "1",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    capsys.readouterr()
    code = main(["measure", "fit", "--sweep", str(out), "--spec", str(cfg), "--hardware", "a100-sxm-80gb", "--json"])
    d = json.loads(capsys.readouterr().out)
    assert code == 0 and d["fit_mape"] < d["apriori_mape"]
    fitted = load_hardware(d["fitted_profile"])
    assert fitted.measured is not None and fitted.measured.provenance["fit_mape"] == pytest.approx(d["fit_mape"])
    assert main(["measure", "fit", "--sweep", str(tmp_path / "nope"), "--hardware", "a100-sxm-80gb"]) == 2

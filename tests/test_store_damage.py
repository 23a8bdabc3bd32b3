"""The store survives damage: a plausible but wrong row, a damaged header, a missing meta.json, a full disk,
and a resume after the device choice would have changed. Each case: 0 rows lost, 0 stores mixed."""

from __future__ import annotations

import errno
import json
import warnings

import pandas as pd
import pytest

torch = pytest.importorskip("torch")

import measure.store as store  # noqa: E402
import measure.sweep as sweeps  # noqa: E402
from measure.store import SweepStore, read_results  # noqa: E402
from roofline import SpecroofError  # noqa: E402
from roofline.passes.model import ModelSpec  # noqa: E402
from specroof.cli import main  # noqa: E402

TINY = ModelSpec("tiny", 2, 64, 4, 2, 16, 128, 100, max_context=512)
OTHER = ModelSpec("other", 2, 64, 4, 2, 16, 128, 100, max_context=512)
GRID = dict(batch=[1], new_tokens=[1, 2], context=[0], dtype=["fp32"], repeats=1, progress=False)


def _saved(out):
    return (out / "results.csv").read_text()


@pytest.fixture
def swept(tmp_path):
    out = tmp_path / "sw"
    sweeps.sweep(TINY, out=out, **GRID)
    return out


def _damage_line(out, line, column, value):
    """Replace one field of one line (1 = header) keeping the number of fields."""
    path = out / "results.csv"
    lines = path.read_text().splitlines()
    header = lines[0].split(",")
    fields = lines[line - 1].split(",")
    fields[header.index(column)] = value
    lines[line - 1] = ",".join(fields)
    path.write_text("\n".join(lines) + "\n")
    return path.read_text()


@pytest.mark.parametrize(
    "column, value, message",
    [
        ("t_min_s", "abc", "t_min_s = 'abc' is not a finite number"),
        ("t_min_s", "-5", "t_min_s = -5.0 is not a finite number in [0, 1e+06]"),
        ("t_median_s", "inf", "t_median_s = inf is not a finite number"),
        ("batch", "2.5", "batch = 2.5 is not a whole number"),
        ("batch", "0", "batch = 0 is not a whole number in [1, 1e+07]"),
        ("status", "okay", "status = 'okay' is not one of ok, oom"),
        ("visit", "-1", "visit = -1 is not a whole number"),
        ("t_min_s", "", "status 'ok' without a positive t_min_s"),
    ],
)
def test_a_damaged_row_with_the_right_field_count_is_refused_and_never_appended_to(swept, column, value, message):
    before = _damage_line(swept, 3, column, value)
    with pytest.raises(SpecroofError, match="line 3") as exc:
        sweeps.sweep(TINY, out=swept, resume=True, rounds=2, **GRID)
    assert message in str(exc.value)
    assert _saved(swept) == before  # nothing appended to a damaged file
    with pytest.raises(SpecroofError, match="line 3"):
        sweeps.load_sweep(swept)  # what `measure fit` reads


@pytest.mark.parametrize(
    "old, new, message",
    [
        ("model", "modle", "lacks the column(s) ['model']"),
        ("t_median_s", "t_min_s", "lacks the column(s) ['t_median_s']"),
        ("device", "t_min_s", "repeats ['t_min_s']"),
        ("device", "", "has an empty name"),
    ],
)
def test_a_damaged_header_is_an_error_naming_line_1(swept, old, new, message):
    path = swept / "results.csv"
    lines = path.read_text().splitlines()
    lines[0] = ",".join(new if c == old else c for c in lines[0].split(","))
    path.write_text("\n".join(lines) + "\n")
    before = path.read_text()
    with pytest.raises(SpecroofError, match="line 1 \\(the header\\)") as exc:
        sweeps.sweep(TINY, out=swept, resume=True, rounds=2, **GRID)
    assert message in str(exc.value)
    assert path.read_text() == before
    code = main(["measure", "fit", "--sweep", str(swept), "--hardware", "a100-sxm-80gb", "--spec", "x"])
    assert code == 2


def test_fit_on_a_damaged_store_is_one_line_and_exit_2(swept, capsys):
    _damage_line(swept, 2, "t_min_s", "1e999")
    cfg = swept.parent / "config.json"
    cfg.write_text(json.dumps({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
                               "num_key_value_heads": 2, "head_dim": 16, "num_hidden_layers": 2,
                               "intermediate_size": 128, "vocab_size": 100}))  # fmt: skip
    code = main(["measure", "fit", "--sweep", str(swept), "--hardware", "a100-sxm-80gb", "--spec", str(cfg)])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "line 2: t_min_s" in err, err


def test_without_meta_json_a_resume_by_another_model_cannot_mix_the_store(swept):
    (swept / "meta.json").unlink()
    before = _saved(swept)
    for model in (OTHER, TINY):  # not even the same model: nothing can verify what the rows measured
        with pytest.raises(SpecroofError, match="no meta.json, so what they measured cannot be verified"):
            sweeps.sweep(model, out=swept, resume=True, rounds=2, **GRID)
    assert _saved(swept) == before
    df = sweeps.sweep(OTHER, out=swept, overwrite=True, **GRID)  # the way out the message names
    assert set(df["model"]) == {"other"} and set(read_results(swept / "results.csv")["model"]) == {"other"}


def test_a_meta_json_without_fingerprint_is_refused(swept):
    (swept / "meta.json").write_text(json.dumps({"kind": "something else"}))
    with pytest.raises(SpecroofError, match="records no fingerprint"):
        sweeps.sweep(TINY, out=swept, resume=True, rounds=2, **GRID)


class _FullDisk:
    """A csv writer whose n-th row hits a full disk after writing half of itself (as a real ENOSPC does)."""

    def __init__(self, fail_at):
        self.fail_at, self.count = fail_at, 0
        self.real = store.csv.DictWriter

    def __call__(self, f, fieldnames, **kw):
        outer = self
        real = self.real(f, fieldnames, **kw)

        class W:
            def writeheader(self):
                real.writeheader()

            def writerow(self, row):
                outer.count += 1
                if outer.count == outer.fail_at:
                    f.write(",".join(str(row[k]) for k in fieldnames)[:11])
                    f.flush()
                    raise OSError(errno.ENOSPC, "No space left on device", str(f.name))
                real.writerow(row)

        return W()


def test_a_full_disk_keeps_every_row_before_it_says_so_and_a_resume_finishes(tmp_path, monkeypatch):
    out = tmp_path / "sw"
    grid = {**GRID, "new_tokens": [1, 2, 3]}
    monkeypatch.setattr(store.csv, "DictWriter", _FullDisk(fail_at=3))
    with pytest.raises(SpecroofError) as exc:
        sweeps.sweep(TINY, out=out, **grid)
    msg = str(exc.value)
    assert "no space left on the device" in msg and "the 2 rows measured before are saved" in msg
    assert "--resume" in msg
    monkeypatch.undo()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the half row was undone: no cut row to drop
        raw = read_results(out / "results.csv", sweeps.COLUMNS)
    assert len(raw) == 2
    df = sweeps.sweep(TINY, out=out, resume=True, **grid)
    raw = pd.read_csv(out / "results.csv")
    assert len(df) == 3 and len(raw) == 3 and not raw.duplicated(["new_tokens", "visit"]).any()


def test_a_full_disk_through_the_cli_is_one_line_naming_what_was_saved(tmp_path, monkeypatch, capsys):
    out = tmp_path / "sw"
    monkeypatch.setattr(store.csv, "DictWriter", _FullDisk(fail_at=2))
    argv = ["measure", "sweep", "--model", "llama-68m", "--tokens", "1,2", "--context", "0", "--dtype", "fp32"]
    code = main([*argv, "--repeats", "1", "--out", str(out), "--json"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert "1 rows measured before are saved" in err and "--resume" in err


def test_a_failed_meta_write_is_an_error_before_any_row(tmp_path, monkeypatch):
    def full(self, *a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(store.Path, "write_text", full)
    with pytest.raises(SpecroofError, match="cannot write .*meta.json.*nothing was measured yet"):
        sweeps.sweep(TINY, out=tmp_path / "sw", **GRID)


def test_append_refuses_a_header_of_other_columns(tmp_path):
    st = SweepStore(tmp_path, ("a",))
    st.append({"a": 1, "t": 0.5})
    with pytest.raises(SpecroofError, match="does not hold this run's columns"):
        st.append({"a": 2, "x": 0.5})
    assert (tmp_path / "results.csv").read_text().splitlines() == ["a,t", "1,0.5"]


# -- a resumed speculative check measures what it recorded, whatever the probe would choose now ---------


class _Stop(Exception):
    pass


def test_spec_resume_reuses_the_recorded_width_dtype_and_threads(tmp_path, monkeypatch):
    import measure.spec_check as sc

    seen = {}

    def probe(dev, **kw):
        seen.update(kw)
        raise _Stop

    monkeypatch.setattr(sc, "probe_and_choose", probe)
    out = tmp_path / "spec"
    out.mkdir()
    (out / sc.CHOICE).write_text(json.dumps({"width": 2, "dtype": "fp32", "threads": 1, "device": "cpu"}))
    with pytest.raises(_Stop):
        sc.spec_check(out, device="cpu", resume=True, progress=False)
    assert (seen["width"], seen["dtype"], seen["threads"]) == (2, "fp32", 1)
    with pytest.raises(SpecroofError, match="was measured at --width 2, not 4"):
        sc.spec_check(out, device="cpu", resume=True, width=4, progress=False)
    with pytest.raises(SpecroofError, match="was measured in fp32, not bf16"):
        sc.spec_check(out, device="cpu", resume=True, dtype="bf16", progress=False)
    (out / sc.CHOICE).write_text("{not json")
    with pytest.raises(SpecroofError, match="is damaged"):
        sc.spec_check(out, device="cpu", resume=True, progress=False)


def test_a_fresh_check_records_its_choice(tmp_path, monkeypatch):
    import measure.spec_check as sc
    from measure.choose import DeviceChoice

    def probe(dev, **kw):
        return DeviceChoice("cpu", "cpu", "fp32", 4, 1.0, 1.0, 1.0, 1.0, threads=2)

    def load_pair(**kw):
        raise _Stop

    monkeypatch.setattr(sc, "probe_and_choose", probe)
    monkeypatch.setattr("measure.pair.load_pair", load_pair)
    with pytest.raises(_Stop):
        sc.spec_check(tmp_path / "spec", device="cpu", progress=False)
    rec = json.loads((tmp_path / "spec" / sc.CHOICE).read_text())
    assert (rec["width"], rec["dtype"], rec["threads"]) == (4, "fp32", 2)


# -- sizes are checked before anything is allocated ------------------------------------------------------------


def test_a_grid_that_cannot_fit_is_refused_before_allocating(tmp_path, monkeypatch):
    monkeypatch.setattr(sweeps, "device_memory", lambda dev: (1e7, 1e7))
    built = []
    monkeypatch.setattr(sweeps, "_runner", lambda *a, **k: built.append(1))
    with pytest.raises(
        SpecroofError, match=r"batch 1000 x \(context 256 \+ 2 new tokens\) of tiny in fp32 needs about"
    ):
        sweeps.sweep(TINY, out=tmp_path / "sw", **{**GRID, "batch": [1, 1000], "context": [256]})
    assert not built and not (tmp_path / "sw" / "meta.json").exists()
    with pytest.raises(SpecroofError, match="the largest batch that fits is (\\d+)") as exc:
        sweeps.sweep(TINY, **{**GRID, "batch": [1000], "context": [256]})
    fits = int(str(exc.value).rsplit(" ", 1)[1])
    f = sweeps.footprint_bytes(TINY, "fp32", fits, 2, 256)
    assert f["total"] <= 1e7 < sweeps.footprint_bytes(TINY, "fp32", fits + 1, 2, 256)["total"]


def test_a_point_beyond_the_free_memory_becomes_an_oom_row_untried(tmp_path, monkeypatch):
    monkeypatch.setattr(sweeps, "device_memory", lambda dev: (1e12, 1e6))  # plenty in total, little free now
    tried = []
    real = sweeps.ModelRunner.prepare

    def prepare(self, batch, context, new_tokens=0):
        tried.append(batch)
        real(self, batch, context, new_tokens)

    monkeypatch.setattr(sweeps.ModelRunner, "prepare", prepare)
    df = sweeps.sweep(TINY, out=tmp_path / "sw", **{**GRID, "batch": [1, 64], "context": [256]})
    status = df.set_index(["batch", "new_tokens"])["status"]
    assert (status.loc[1] == "ok").all() and (status.loc[64] == "oom").all()
    assert 64 not in tried  # never allocated: on a CPU the kernel kills instead of raising
    assert len(read_results(tmp_path / "sw" / "results.csv", sweeps.COLUMNS)) == 4

"""How far a prediction of this kind has been from published measurements it never saw: its error band.

Every held-out (validation) row of ``published/*.toml`` leaves a residual: predicted over
published, minus one, under the row's engine. Grouped by what a new prediction shares with
them, the engine family, the kind of figure, and whether the GPU is one the engine was
calibrated on, their median |error| is the band a prediction of that group carries:

    ErrorBand(median_abs_pct=12.1, n=17, ...).description
    '±12%: held-out median error of compiled decode on GPUs other than the A100, n = 17'

Where no held-out row of that group exists, :func:`error_band` returns None and
:func:`band_sentence` says so instead of inventing a band. The residuals come from the
published table once per process (the first call prices it; later calls are a dict lookup).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from roofline.engine import Engine, canonical_engine
from roofline.hardware import Hardware, load_hardware

#: engines that share one set of fitted terms, and so one set of residuals
FAMILY = {"vllm": "serving", "sglang": "serving", "trtllm": "serving"}

#: how each family's name reads in a sentence
_LABEL = {"serving": "serving engines (vLLM, SGLang, TensorRT-LLM)", "hf": "Hugging Face eager"}

#: how each kind reads in a sentence
_KIND = {
    "decode": "batch-1 decode",
    "batched": "batched decode",
    "quantised": "quantised decode",
    "tp": "tensor-parallel decode",
    "speculative": "speculative decoding",
    "prefill": "prefill",
    "serving": "serving latency under load",
}


@dataclass(frozen=True)
class ErrorBand:
    """The held-out median |error| of the predictions a new one resembles, in percent, with what it rests on."""

    median_abs_pct: float
    n: int
    kind: str
    engine: str
    calibration_gpu: bool
    #: the median signed error (+: the model predicts faster than measured)
    median_signed_pct: float
    #: the GPU's achievable ceilings are its family's estimate, not its own measurement (wider than shown)
    estimated_ceiling: bool
    description: str


def family(engine: Engine | str | None) -> str:
    """The residual group of an engine: ``serving`` for vLLM/SGLang/TensorRT-LLM, ``roofline`` for none."""
    if engine is None:
        return "roofline"
    name = engine.name.split("@")[0] if isinstance(engine, Engine) else canonical_engine(str(engine)) or ""
    return FAMILY.get(name, name)


def prediction_kind(*, batch: int = 1, tp: int = 1, weight_dtype: str | None = None, speculative: bool = False,
                    prefill: bool = False) -> str:  # fmt: skip
    """The kind a prediction belongs to, as the published table names them."""
    if speculative:
        return "speculative"
    if prefill:
        return "prefill"
    if batch > 1:
        return "batched"
    if tp > 1:
        return "tp"
    if weight_dtype not in (None, "bf16", "fp16", "fp32"):
        return "quantised"
    return "decode"


#: the held-out residuals as shipped (one row per validation row: source, kind, engine, hardware, error), written by
#: ``specroof validate published --write-bands`` so that a one-line question does not price the whole published table
#: (about 6 s); a test recomputes them and fails when this file is stale
RESIDUALS_FILE = Path(__file__).resolve().parents[1] / "published" / "held_out_residuals.csv"
_COLUMNS = ["source", "use", "kind", "engine", "hardware", "family", "on_calibration_gpu", "metric", "error_engine"]


def faster_signed(error: npt.NDArray[np.float64], metric: Any) -> npt.NDArray[np.float64]:
    """Signed errors as "+: the model predicts faster than measured", whatever the row published.

    A rate or speedup row's error (predicted / published - 1) already reads that way; a time row's (``ttft_s``,
    a serving latency ``*_s``) reads the other way, so it becomes the error of the rate it implies, 1 / (1 + e) - 1.
    """
    err = np.asarray(error, dtype=float)
    if metric is None:
        return err
    is_time = np.array(
        [
            isinstance(m, str) and m.endswith("_s") and not m.endswith("per_s")
            for m in np.broadcast_to(np.asarray(metric), err.shape)
        ]
    )
    return np.where(is_time, 1.0 / (1.0 + err) - 1.0, err)


@functools.lru_cache(maxsize=1)
def _residuals() -> pd.DataFrame:
    if RESIDUALS_FILE.is_file():
        return pd.read_csv(RESIDUALS_FILE)
    return compute_residuals()


def write_residuals(path: str | Path | None = None) -> Path:
    """Price the published table and write its held-out residuals (the file :func:`error_band` reads)."""
    out = Path(path) if path is not None else RESIDUALS_FILE
    compute_residuals().to_csv(out, index=False, float_format="%.9g")
    _residuals.cache_clear()
    return out


def compute_residuals() -> pd.DataFrame:
    """The held-out residuals, priced now from published/*.toml (the slow path :data:`RESIDUALS_FILE` saves)."""
    from roofline.published import load_published, validation_table

    rows = load_published()
    table = validation_table(rows)
    table["family"] = table["engine"].map(family)
    gpus = _calibration_gpus()
    table["on_calibration_gpu"] = [
        h in gpus.get(f, ()) for h, f in zip(table["hardware"], table["family"], strict=True)
    ]
    held_out = table[(table["use"] == "validation") & table["error_engine"].notna()]
    return held_out.reset_index(drop=True)[[c for c in _COLUMNS if c in held_out.columns]]


@functools.lru_cache(maxsize=1)
def _calibration_gpus() -> dict[str, tuple[str, ...]]:
    from roofline.published import load_published

    rows = load_published()
    rows = rows.assign(family=rows["engine"].map(family))
    cal = rows[rows["use"] == "calibration"]
    return {str(f): tuple(sorted(set(g["hardware"]))) for f, g in cal.groupby("family")}


def _gpu_words(gpus: tuple[str, ...]) -> str:
    names = [load_hardware(g).name.removeprefix("NVIDIA ") for g in gpus]
    return " and ".join(names) if names else "no GPU"


def _group(engine: Engine | str | None, kind: str, hardware: Hardware | str) -> tuple[str, bool, str]:
    fam = family(engine)
    hw_id = load_hardware(hardware).id
    gpus = _calibration_gpus().get(fam, ())
    on = hw_id in gpus
    if not gpus:
        where = "on any GPU"
    else:
        where = f"on the {_gpu_words(gpus)}" if on else f"on GPUs other than the {_gpu_words(gpus)}"
    label = _LABEL.get(fam, fam)
    return fam, on, f"{label} {_KIND.get(kind, kind)} {where}"


def error_band(engine: Engine | str | None, kind: str, hardware: Hardware | str) -> ErrorBand | None:
    """The band of a prediction of ``kind`` under ``engine`` on ``hardware``; None where no held-out row of it exists."""
    fam, on, words = _group(engine, kind, hardware)
    res = _residuals()
    sel = res[(res["family"] == fam) & (res["kind"] == kind) & (res["on_calibration_gpu"] == on)]
    if sel.empty:
        return None
    err = sel["error_engine"].to_numpy(dtype=float)
    med = float(np.median(np.abs(err))) * 100
    estimated = bool(getattr(load_hardware(hardware), "efficiency_estimated", False))
    text = f"±{med:.0f}%: held-out median error of {words}, n = {len(err)}"
    if estimated:
        text += " (this GPU's achievable ceilings are its family's estimate: expect more)"
    return ErrorBand(
        median_abs_pct=med,
        n=len(err),
        kind=kind,
        engine=fam,
        calibration_gpu=on,
        median_signed_pct=float(np.median(faster_signed(err, sel.get("metric")))) * 100,
        estimated_ceiling=estimated,
        description=text,
    )


def band_sentence(engine: Engine | str | None, kind: str, hardware: Hardware | str) -> str:
    """The band's description, or the sentence that says no held-out row of this kind exists."""
    band = error_band(engine, kind, hardware)
    if band is not None:
        return band.description
    return f"no error band: no held-out published row of {_group(engine, kind, hardware)[2]} yet"


def band_table() -> pd.DataFrame:
    """Every group that has held-out rows: engine family, kind, calibration GPU or not, n, median and max |error|."""
    res = _residuals()
    if res.empty:
        return pd.DataFrame()
    signed = faster_signed(res["error_engine"].to_numpy(dtype=float), res.get("metric"))
    g = res.assign(abs_error=res["error_engine"].abs(), signed=signed).groupby(["family", "kind", "on_calibration_gpu"])
    out = g.agg(
        rows=("abs_error", "size"),
        median_abs_error=("abs_error", "median"),
        max_abs_error=("abs_error", "max"),
        median_signed_error=("signed", "median"),
    ).reset_index()
    return out.rename(columns={"family": "engine"})

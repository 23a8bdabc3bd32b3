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

from roofline.costing.engine import Engine, canonical_engine, engine_group
from roofline.costing.hardware import Hardware, load_hardware
from roofline.evidence.published import batch_bucket, context_class

#: engines that share one set of fitted terms, and so one set of residuals
FAMILY = {"vllm": "serving", "sglang": "serving", "trtllm": "serving", "vllm-0.12": "serving", "vllm-0.14": "serving",
          "sglang-spec-v2": "serving", "vllm-rocm": "serving"}  # fmt: skip

#: the share of a group's held-out rows its band covers (the claim every band sentence states)
COVERAGE = 0.8

#: the fewest held-out rows a group needs before its band stands on its own; below it the next coarser group answers.
#: Four: the band is the conformal quantile (:func:`band_quantile`), which needs n + 1 >= 1 / (1 - COVERAGE) rows
MIN_ROWS = 4


def band_quantile(abs_errors: Any, coverage: float = COVERAGE) -> float:
    """The |error| a new prediction of the group falls within with probability at least ``coverage``: the
    ceil(coverage (n + 1))-th smallest of the group's n held-out |errors| (the split-conformal quantile; distribution
    free for exchangeable rows). The plain empirical quantile of a few rows claims more than it covers: of three rows
    it interpolates below the largest, which a fourth row exceeds one time in four."""
    a = np.sort(np.abs(np.asarray(abs_errors, dtype=float)))
    k = int(np.ceil(coverage * (len(a) + 1)))
    return float(a[min(k, len(a)) - 1])


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


def _spec_count(model: Any, field: str) -> int:
    """``field`` of ``model`` (a name or a ModelSpec); 0 for a model the table names that the presets no longer
    know (dense and attention-only, as most are)."""
    from roofline.passes.model import get_model

    try:
        return int(getattr(get_model(model), field))
    except Exception:
        return 0


def is_moe(model: Any) -> bool:
    """Whether ``model`` (a name or a ModelSpec) routes its MLP over experts."""
    return bool(_spec_count(model, "n_experts"))


def is_hybrid(model: Any) -> bool:
    """Whether ``model`` (a name or a ModelSpec) mixes linear-attention layers with attention (Qwen3.5, Qwen3-Next,
    Mamba-2 hybrids: docs/cost-model.md, section 52)."""
    return bool(_spec_count(model, "n_linear_layers"))


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
RESIDUALS_FILE = Path(__file__).resolve().parents[2] / "published" / "held_out_residuals.csv"
_COLUMNS = ["source", "use", "kind", "engine", "hardware", "family", "on_calibration_gpu", "metric", "error_engine",
            "engine_group", "batch", "bucket", "moe", "hybrid", "context_class"]  # fmt: skip


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
    from roofline.evidence.published import load_published, validation_table

    table = kind_columns(validation_table(load_published()))
    held_out = table[(table["use"] == "validation") & table["error_engine"].notna()]
    return held_out.reset_index(drop=True)[[c for c in _COLUMNS if c in held_out.columns]]


def kind_columns(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` (a :func:`roofline.evidence.published.validation_table`) with the columns a band is grouped by: the engine
    family and group, the batch bucket, dense or MoE, the context class, and whether the GPU calibrated the family."""
    out = table.copy()
    out["family"] = out["engine"].map(family)
    out["engine_group"] = out["engine"].map(engine_group)
    out["bucket"] = out["batch"].map(batch_bucket)
    moe = {m: is_moe(m) for m in set(out["model"])} if "model" in out else {}
    out["moe"] = out["model"].map(moe) if "model" in out else False
    hybrid = {m: is_hybrid(m) for m in set(out["model"])} if "model" in out else {}
    out["hybrid"] = out["model"].map(hybrid) if "model" in out else False
    out["context_class"] = out["context"].map(context_class) if "context" in out else "<=8k"
    gpus = _calibration_gpus()
    out["on_calibration_gpu"] = [h in gpus.get(f, ()) for h, f in zip(out["hardware"], out["family"], strict=True)]
    return out


@functools.lru_cache(maxsize=1)
def _calibration_gpus() -> dict[str, tuple[str, ...]]:
    from roofline.evidence.published import load_published

    rows = load_published()
    rows = rows.assign(family=rows["engine"].map(family))
    # a row that is not priced (``not_modelled``) or that no fit reads (``fit = false``) calibrates nothing: its GPU
    # is not one the family was fitted on
    cal = rows[(rows["use"] == "calibration") & (rows["not_modelled"] == "") & rows["fit"]]
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


# -- bands by kind: engine, batch bucket, dense or MoE, context (issue 47) ------------------------------------------

#: the groups a band is looked up in, most specific first; each drops one dimension of the one before, the one before
#: last pools the serving engines (vLLM, SGLang, TensorRT-LLM and their versions) as the family they are fitted as,
#: and the last every engine's rows of the kind
_LEVELS: tuple[tuple[str, ...], ...] = (
    ("engine_group", "kind", "bucket", "moe", "hybrid", "context_class"),
    ("engine_group", "kind", "bucket", "moe", "hybrid"),
    ("engine_group", "kind", "bucket", "hybrid"),
    ("engine_group", "kind", "hybrid"),
    ("family", "kind", "hybrid"),
    ("kind",),
)
#: a hybrid linear-attention target's rows and an attention-only target's are kept apart down to the last level:
#: the held-out hybrid rows (Qwen3.5, Qwen3-Next under SGLang) miss by more than the attention-only ones, and a band
#: of one class must not be read as the other's


@dataclass(frozen=True)
class KindBand:
    """How far held-out predictions of one kind fell from what was measured: the |error| that :data:`COVERAGE` of
    them fell within (``band_pct``, percent), their median, and the group they were taken from."""

    band_pct: float
    coverage: float
    median_abs_pct: float
    #: +: the model predicts faster than measured
    median_signed_pct: float
    n: int
    #: the group's dimensions: engine (or family), kind, batch bucket, moe, context class (those the group keeps)
    group: dict[str, Any]
    #: an eager engine's host-speed span: (fastest, slowest) per-kernel host cost over the central one; None if none
    host_span: tuple[float, float] | None
    description: str

    @property
    def slowest_host_pct(self) -> float | None:
        """How much slower (percent of the rate) a host-bound eager pass runs on the slowest host measured."""
        if self.host_span is None:
            return None
        return 100.0 * (1.0 - 1.0 / self.host_span[1])

    @property
    def upper_pct(self) -> float:
        """The band's upper edge (+: the model faster than measured): the held-out band, or an eager engine's slowest
        host, whose host-bound pass the model prices ``span - 1`` too fast, whichever reaches further."""
        host = 100.0 * (self.host_span[1] - 1.0) if self.host_span is not None else 0.0
        return max(self.band_pct, host)


def _words(group: dict[str, Any]) -> str:
    eng = group.get("engine_group") or group.get("family") or "every engine's"
    parts = [_LABEL.get(eng, eng), _KIND.get(group["kind"], group["kind"])]
    if "bucket" in group:
        parts.append(f"at batch {group['bucket']}")
    if "moe" in group:
        parts.append("(MoE)" if group["moe"] else "(dense)")
    if group.get("hybrid"):
        parts.append("(hybrid linear attention)")
    if "context_class" in group:
        parts.append(f"at {group['context_class']} context")
    return " ".join(parts)


def band_for(
    engine: Engine | str | None,
    kind: str,
    hardware: Hardware | str | None = None,
    *,
    batch: int = 1,
    model: Any = None,
    moe: bool | None = None,
    context: int = 0,
    residuals: pd.DataFrame | None = None,
) -> KindBand | None:
    """The band of a prediction of ``kind`` under ``engine`` at ``batch`` sequences and ``context`` tokens, for a dense
    or MoE target (``moe``, or read from ``model``): the held-out residuals of the most specific group that has
    :data:`MIN_ROWS` of them (engine, kind, batch bucket, dense/MoE, context; then coarser, down to the serving family
    and kind). ``band_pct`` is the |error| :data:`COVERAGE` of that group's rows fell within. An eager engine's band
    also states how much slower its pass runs on the slowest host measured (its per-kernel host cost spans 2x between
    hosts: ``[host] launch_us_range``). None where no group has rows. ``hardware`` is accepted for the CLI's call and
    does not narrow the group (the calibration-GPU split is :func:`error_band`'s)."""
    del hardware
    res = _residuals() if residuals is None else residuals
    if res.empty or "engine_group" not in res:
        return None
    eng = load_engine_or_none(engine)
    moe_ = bool(moe) if moe is not None else (is_moe(model) if model is not None else False)
    hybrid_ = is_hybrid(model) if model is not None else False
    want = {
        "engine_group": engine_group(eng if eng is not None else engine),
        "family": family(eng if eng is not None else engine),
        "kind": kind,
        "bucket": batch_bucket(batch),
        "moe": moe_,
        "hybrid": hybrid_,
        "context_class": context_class(context),
    }
    for level in _LEVELS:
        sel = res
        for key in level:
            sel = sel[sel[key] == want[key]]
        if len(sel) >= MIN_ROWS:
            break
    else:
        return None
    err = sel["error_engine"].to_numpy(dtype=float)
    absolute = np.abs(err)
    band = band_quantile(absolute) * 100
    med = float(np.median(absolute)) * 100
    group = {k: want[k] for k in level}
    span = eng.host_speed_span() if isinstance(eng, Engine) else None
    text = f"±{band:.0f}%: {COVERAGE:.0%} of the {len(err)} held-out rows of {_words(group)} fell within it (median {med:.0f}%)"
    if span is not None and span[1] > 1.0:
        text += (
            f"; a host whose kernels cost {span[1]:.1f}x runs a host-bound eager pass up to "
            f"{100.0 * (1.0 - 1.0 / span[1]):.0f}% slower, +{100.0 * (span[1] - 1.0):.0f}% in the model's error "
            "(--host-launch-us prices your host)"
        )
    return KindBand(
        band_pct=band,
        coverage=COVERAGE,
        median_abs_pct=med,
        median_signed_pct=float(np.median(faster_signed(err, sel.get("metric")))) * 100,
        n=len(err),
        group=group,
        host_span=span,
        description=text,
    )


def load_engine_or_none(engine: Engine | str | None) -> Engine | None:
    from roofline.costing.engine import load_engine

    if engine is None or isinstance(engine, Engine):
        return engine
    try:
        return load_engine(engine)
    except Exception:
        return None


def within_band(band: KindBand | None, error: float) -> bool:
    """Whether a signed relative error (predicted / published - 1: + the model faster) lies inside ``band``; an
    eager band reaches up to its slowest host (:attr:`KindBand.upper_pct`)."""
    if band is None or not np.isfinite(error):
        return False
    return -band.band_pct / 100.0 <= error <= band.upper_pct / 100.0


def kind_band_table(residuals: pd.DataFrame | None = None) -> pd.DataFrame:
    """Every group of the most specific level that has held-out rows: engine, kind, batch bucket, dense/MoE, context,
    rows, the band (|error| :data:`COVERAGE` of them fell within), median and max |error|, median signed error."""
    res = _residuals() if residuals is None else residuals
    if res.empty or "engine_group" not in res:
        return pd.DataFrame()
    keys = list(_LEVELS[0])
    signed = faster_signed(res["error_engine"].to_numpy(dtype=float), res.get("metric"))
    g = res.assign(abs_error=res["error_engine"].abs(), signed=signed).groupby(keys)
    out = g.agg(
        rows=("abs_error", "size"),
        band_error=("abs_error", band_quantile),
        median_abs_error=("abs_error", "median"),
        max_abs_error=("abs_error", "max"),
        median_signed_error=("signed", "median"),
    ).reset_index()
    return out.rename(columns={"engine_group": "engine", "context_class": "context"})

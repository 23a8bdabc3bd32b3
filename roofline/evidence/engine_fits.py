"""Engine fits: an engine's free parameters fitted to its calibration rows of the published table, and written back.

:func:`calibrate` fits an engine's free parameters to the calibration rows of that engine only (least squares on
log ratios); everything else is held out. The shipped ``engine_profiles/*.toml`` hold what ``specroof validate
published --fit ENGINE`` prints (:func:`write_fitted`), and a test refits them.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from roofline.core.errors import SpecroofError
from roofline.costing.engine import Engine, canonical_engine, load_engine
from roofline.evidence.published import load_published, predict_row, published_figure, validation_table

#: engines whose device terms are the compiled engine's and whose serving terms are fitted together (every version)
SERVING_FAMILY = ("vllm", "vllm-0.12", "vllm-0.14", "sglang", "sglang-spec-v2", "trtllm")

#: fitted parameters that belong to one engine and its versions (the first word of the name: ``vllm-0.12`` is a
#: ``vllm``), not to the whole serving family: a scheduler's host time is its own (docs/cost-model.md, section 32)
OWN_PARAMETERS = frozenset({"host_step_s", "round_s", "round_fixed_s"})


def engine_base(name: str) -> str:
    """The engine a versioned profile is a version of: ``vllm-0.12`` -> ``vllm``, ``sglang-spec-v2`` -> ``sglang``."""
    name = str(name).split("@")[0]
    return name.split("-")[0] if name.startswith(("vllm-", "sglang-")) else name


#: how many more calibration rows than free parameters a fit needs (vllm: one, set when its serving sources named three
#: rows; Splitwise's prefill rows have since added four)
FIT_MARGIN = {"compiled": 2, "hf": 2, "vllm": 1, "sglang": 2}

#: every engine's free parameters when fitted, with bounds (SI units; ratios and fractions in (0, 1])
#: (lower bound, start, upper bound): the fit always starts from the same point, so it is reproducible
FIT_PARAMETERS: dict[str, dict[str, tuple[float, float, float]]] = {
    "compiled": {
        "bandwidth_fraction": (0.3, 0.8, 1.0),
        "device_pass_s": (0.0, 5e-4, 5e-3),
        "device_layer_s": (0.0, 3e-5, 2e-4),
        "weight_bandwidth_ratio.int8": (0.2, 0.8, 1.0),
        "weight_bandwidth_ratio.int4": (0.2, 0.8, 1.0),
        "allreduce_latency_s": (0.0, 1e-5, 1e-4),
    },
    # the per-kernel host cost is not fitted: speedups alone (the only calibration rows) cannot tell a fast host with
    # a slow loop from the reverse, and a free fit chose 5.8 us, which priced eager generate faster than CUDA graphs.
    # It is the profile's sourced figure (engine_profiles/hf.toml, launch_us); --host-launch-us gives a host's own.
    "hf": {
        "host_step_s": (0.0, 1e-3, 0.05),
        "round_s": (0.0, 2e-3, 0.05),
    },
    # the serving family's device rates, and vLLM's own per-step and per-round host time (its versions share them)
    "vllm": {
        "kv_bandwidth_fraction": (0.1, 0.8, 1.0),
        "compute_fraction": (0.2, 0.8, 1.0),
        "host_step_s": (0.0, 5e-4, 5e-3),
        "round_s": (0.0, 5e-4, 5e-3),
    },
    # SGLang's EAGLE worker's own time per round between its passes, which neither scheduler overlaps (spec v1 and v2:
    # docs/cost-model.md, section 41); the device rates stay the family's (fitted under vllm)
    "sglang": {
        "round_fixed_s": (0.0, 5e-4, 1e-2),
    },
    # vLLM on ROCm: the device time per layer and pass its kernels take beyond what they stream (AITER's kernel
    # floors, the HIP graphs' launches, the all-reduce's latency over Infinity Fabric at TP > 1: one term, the rows
    # do not separate them); its other terms are vllm-0.14's (docs/cost-model.md, section 55)
    "vllm-rocm": {
        "device_layer_s": (0.0, 4.6e-5, 5e-4),
    },
}


def _with(engine: Engine, name: str, value: float) -> Engine:
    """``engine`` with one fitted parameter set (``weight_bandwidth_ratio.<dtype>`` for a quantised rate)."""
    if name.startswith("weight_bandwidth_ratio."):
        dt = name.split(".", 1)[1]
        return dataclasses.replace(engine, weight_bandwidth_ratio={**engine.weight_bandwidth_ratio, dt: value})
    return dataclasses.replace(engine, **{name: value})  # type: ignore[arg-type]


def _get(engine: Engine, name: str) -> float:
    if name.startswith("weight_bandwidth_ratio."):
        return float(engine.weight_bandwidth_ratio.get(name.split(".", 1)[1], 1.0))
    return float(getattr(engine, name))


def calibrate(engine: Engine | str, rows: pd.DataFrame | None = None) -> tuple[Engine, pd.DataFrame]:
    """Fit ``engine``'s free parameters (:data:`FIT_PARAMETERS`) to its calibration rows; returns it and the fit table.

    Least squares on log(predicted / published) over the rows whose ``use`` is
    calibration and whose engine is this one (rows with an error to compute). Two more
    rows than parameters are required, so that no parameter is pinned by a single row
    and the fit leaves residuals to judge it by.
    """
    from scipy.optimize import least_squares

    eng = load_engine(engine)
    assert eng is not None
    if eng.name not in FIT_PARAMETERS:
        raise SpecroofError(f"engine {eng.name!r} has no free parameters to fit (fitted: {', '.join(FIT_PARAMETERS)})")
    params = FIT_PARAMETERS[eng.name]
    df = load_published() if rows is None else rows
    family = SERVING_FAMILY if eng.name in SERVING_FAMILY else (eng.name,)
    canonical = df["engine"].map(canonical_engine)
    cal = df[(df["use"] == "calibration") & canonical.isin(family) & (df["not_modelled"] == "") & df["fit"]]
    has_figure = cal["published_speedup"].notna() | cal["mean_accepted"].notna() | (cal["kind"] != "speculative")
    cal = cal[has_figure]
    if len(cal) < len(params) + FIT_MARGIN.get(eng.name, 2):
        raise SpecroofError(f"{len(cal)} calibration rows for {len(params)} parameters of {eng.name!r}: too few")
    names = list(params)
    lo = np.array([params[n][0] for n in names])
    hi = np.array([params[n][2] for n in names])
    scale = np.maximum(hi, 1e-12)
    x0 = np.array([params[n][1] for n in names]) / scale

    def build(x: np.ndarray) -> Engine:
        e = eng
        for n, v in zip(names, x * scale, strict=True):
            e = _with(e, n, float(v))
        return e

    def engine_of(e: Engine, row_engine: str) -> Engine:
        # a row of another engine of the family takes the fitted terms on top of its own profile: the shared ones
        # always, an engine's own host terms only for its versions
        other = load_engine(row_engine)
        assert other is not None
        if other.name == e.name:
            return e
        same = engine_base(other.name) == engine_base(e.name)
        for n in names:
            if n not in OWN_PARAMETERS or same:
                other = _with(other, n, _get(e, n))
        return other

    def residuals(x: np.ndarray) -> np.ndarray:
        e = build(x)
        res = []
        for _, r in cal.iterrows():
            pub, _ = published_figure(r)
            res.append(math.log(predict_row(r, engine_of(e, r["engine"]))["predicted"] / pub))
        return np.array(res)

    fit = least_squares(residuals, x0, bounds=(lo / scale, hi / scale), x_scale="jac", xtol=1e-12, ftol=1e-12)
    fitted = build(fit.x)
    engines = {name: engine_of(fitted, name) for name in set(cal["engine"])}
    return fitted, validation_table(cal, engines)


#: engines whose device terms are the compiled engine's (no calibration source of their own)
SHARES_COMPILED_DEVICE = SERVING_FAMILY

#: profiles that are a serving engine on another platform's kernels (vLLM on ROCm: vllm-0.14's terms): their own
#: FIT_PARAMETERS are fitted on their own rows, every other fitted term is written into them with the family's
ON_OTHER_KERNELS = ("vllm-rocm",)


def write_fitted(engine: Engine, folder: str | Path | None = None) -> list[Path]:
    """Write ``engine``'s fitted parameters into its shipped profile (and into the profiles that share them).

    Every other field, description and source of a profile is kept as it is.
    """
    import tomli_w

    from roofline.costing.engine import ENGINE_DIR, _load_file, engine_data

    root = Path(folder or ENGINE_DIR)
    names = [engine.name] + (list(SHARES_COMPILED_DEVICE) if engine.name == "compiled" else [])
    if engine.name in SERVING_FAMILY:
        names = list(dict.fromkeys([engine.name, *SERVING_FAMILY]))
    if engine.name == "compiled" or engine.name in SERVING_FAMILY:
        names += list(ON_OTHER_KERNELS)  # vLLM on ROCm keeps vllm-0.14's terms but its own fitted ones
    written = []
    for name in names:
        path = root / f"{name}.toml"
        target = load_engine(path)
        assert target is not None
        for param in FIT_PARAMETERS[engine.name]:
            if name in ON_OTHER_KERNELS and name != engine.name and param in FIT_PARAMETERS[name]:
                continue  # fitted on that platform's own rows
            if param not in OWN_PARAMETERS or engine_base(name) == engine_base(engine.name):
                target = _with(target, param, _get(engine, param))
        path.write_text(tomli_w.dumps(_readable(engine_data(target))))
        written.append(path)
    _load_file.cache_clear()
    return written


def _readable(data: Any) -> Any:
    """Numbers as a person writes them: 7 significant digits in the profile's units, and no 1e-18 for zero."""
    if isinstance(data, dict):
        return {k: _readable(v) for k, v in data.items()}
    if isinstance(data, float):
        return 0.0 if abs(data) < 1e-9 else float(f"{data:.7g}")
    return data

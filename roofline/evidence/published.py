"""Predictions checked against published measurements: the validation table.

One module despite its length: loading, predicting each kind of row, the summaries, buckets, trends and serving rows
all read one row schema; the engine fits are apart, in :mod:`roofline.evidence.engine_fits`.

``published/*.toml`` holds one file per source (URL, setup, figures, and whether its rows
calibrate an engine or only validate). For every row this module predicts the figure
twice, with the datasheet roofline (``engine=None``) and with the row's engine, and
reports the error of each; its error summaries, batch buckets, batch trends and serving rows.
The engine fits (:func:`roofline.evidence.engine_fits.calibrate`) are in :mod:`roofline.evidence.engine_fits`.
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from roofline.core.errors import SpecroofError
from roofline.costing.engine import Engine, canonical_engine, engine_group, load_engine
from roofline.costing.hardware import FLOAT_DTYPES, activation_dtype
from roofline.costing.passtime import pass_time
from roofline.costing.pricing import Pricing

try:  # the speedup predictor is moving to its own module (roofline.speculation.predict); either home works
    from roofline.speculation.predict import predict_speedup
except ImportError:  # pragma: no cover
    from roofline.speculation.speculative import predict_speedup  # type: ignore[no-redef]


PUBLISHED_DIR = Path(__file__).resolve().parents[2] / "published"

#: the kinds of figure, each summarised on its own: batch-1 decode, quantised weights, tensor parallel,
#: speculative, decode at a serving batch (a whole generation: prefill then every step), prefill, and serving
#: (a latency under load at one request rate, with or without speculation: priced by roofline.serving.simulate)
KINDS = ("decode", "quantised", "tp", "speculative", "batched", "prefill", "serving")

#: the fields of a ``[series.NAME]`` table (a serving workload the rows of one sweep share)
SERIES_FIELDS = ("model", "tp", "drafter", "drafter_vocab", "speculating", "acceptance", "input_len", "output_len",
                 "requests", "prefill", "max_tokens", "max_seqs", "weight_dtype")  # fmt: skip


def load_published(folder: str | Path | None = None) -> pd.DataFrame:
    """Every published row, one per line, with its source's fields (tidy; unit-suffixed figure columns)."""
    rows = []
    for path in sorted(Path(folder or PUBLISHED_DIR).glob("*.toml")):
        try:
            data = tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as e:
            raise SpecroofError(f"{path}: {e}") from None
        for key in ("source", "url", "setup", "hardware", "use"):
            if key not in data:
                raise SpecroofError(f"{path}: missing {key!r}")
        uses = [data["use"], *(r.get("use", data["use"]) for r in data.get("row", []))]
        if any(u not in ("calibration", "validation") for u in uses):
            bad = next(u for u in uses if u not in ("calibration", "validation"))
            raise SpecroofError(f"{path}: use must be 'calibration' or 'validation' (got {bad!r})")
        series = data.get("series", {})
        for i, r in enumerate(data.get("row", [])):
            if r.get("kind") not in KINDS:
                raise SpecroofError(f"{path}: row {i + 1} kind must be one of {', '.join(KINDS)}")
            if r["kind"] == "serving":
                rows.append(_serving_row(path, i, data, series, r))
                continue
            row = {
                **_source_fields(path, data, r),
                "batch": int(r.get("batch", data.get("batch", 1))),
                "prompt_tokens": int(r.get("prompt_tokens", data.get("prompt_tokens", 0))),
                "output_tokens": int(r.get("output_tokens", data.get("output_tokens", 0))),
                "counts": str(r.get("counts", data.get("counts", "output"))),
                "context": int(r.get("context", data.get("context", 512))),
                "kind": r["kind"],
                "model": r["model"],
                "weight_dtype": r.get("weight_dtype", "bf16"),
                "tp": int(r.get("tp", 1)),
                "drafter": r.get("drafter"),
                "drafter_kv_window": r.get("drafter_kv_window"),
                "gamma": r.get("gamma"),
                "tree": r.get("tree"),
                "alpha": r.get("alpha"),
                "mean_accepted": r.get("mean_accepted"),
                "published_tokens_per_s": r.get("tokens_per_s"),
                "published_speedup": r.get("speedup"),
                "published_ttft_s": r.get("ttft_s"),
                "not_modelled": r.get("not_modelled", ""),
                "engine_config": str(r.get("engine_config", "")),
                "date": str(r.get("date", data.get("date", ""))),
                "engine_version": str(r.get("engine_version", data.get("engine_version", ""))),
            }
            _check_row(path, i, row)
            rows.append(row)
    return pd.DataFrame(rows)


def _source_fields(path: Path, data: dict[str, Any], r: dict[str, Any]) -> dict[str, Any]:
    """The columns every row takes from its file (a row may override use, hardware and engine)."""
    return {
        "file": path.name,
        "source": data["source"],
        "url": data["url"],
        "setup": data["setup"],
        "use": r.get("use", data["use"]),
        "hardware": r.get("hardware", data["hardware"]),
        "engine": r.get("engine", data.get("engine")),
        # a calibration source no fit reads (``fit = false``): priced and shown beside the others, but it sets no
        # parameter and makes no GPU one its engine was fitted on
        "fit": bool(data.get("fit", True)),
    }


def _serving_row(path: Path, i: int, data: dict[str, Any], series: dict[str, Any], r: dict[str, Any]) -> dict[str, Any]:
    """One published latency under load: its sweep's workload (``[series.NAME]``), policy, rate, metric and value."""
    where = f"{path.name}: row {i + 1}"
    name = r.get("series")
    if name not in series:
        raise SpecroofError(f"{where}: series must name a [series.NAME] table of the file (got {name!r})")
    s = dict(series[name])
    unknown = sorted(set(s) - set(SERIES_FIELDS))
    if unknown:
        raise SpecroofError(
            f"{path.name}: series {name!r}: unknown field {unknown[0]!r} (one of {', '.join(SERIES_FIELDS)})"
        )
    if "model" not in s or "speculating" not in s:
        raise SpecroofError(f"{path.name}: series {name!r} gives model and speculating (the policy, e.g. static:4)")
    if r.get("policy") not in ("off", s["speculating"]):
        raise SpecroofError(
            f"{where}: policy must be 'off' or the series' {s['speculating']!r} (got {r.get('policy')!r})"
        )
    rate, value, metric = r.get("rate_req_s"), r.get("value"), r.get("metric")
    for key, v in (("rate_req_s", rate), ("value", value)):
        if not (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0):
            raise SpecroofError(f"{where}: {key} must be a finite number > 0 (got {v!r})")
    from roofline.serving.metrics import lower_is_better

    if not isinstance(metric, str) or not lower_is_better(metric):
        raise SpecroofError(
            f"{where}: metric must be a latency column of the serving summary, e.g. e2e_mean_s (got {metric!r})"
        )
    row = {
        **_source_fields(path, data, r),
        "batch": 1,
        "prompt_tokens": 0,
        "output_tokens": 0,
        "counts": "output",
        "context": 0,
        "kind": "serving",
        "model": s["model"],
        "weight_dtype": s.get("weight_dtype", "bf16"),
        "tp": int(s.get("tp", 1)),
        "drafter": s.get("drafter"),
        "drafter_kv_window": None,
        "gamma": None,
        "tree": None,
        "alpha": None,
        "mean_accepted": None,
        "published_tokens_per_s": None,
        "published_speedup": None,
        "published_ttft_s": None,
        "not_modelled": r.get("not_modelled", ""),
        "series": str(name),
        "serving": s,
        "policy": r["policy"],
        "rate_req_s": float(rate),  # type: ignore[arg-type]
        "serving_metric": metric,
        "published_value": float(value),  # type: ignore[arg-type]
    }
    if row["engine"] is None:
        raise SpecroofError(f"{where} names no engine")
    from roofline.costing.engine import list_engines

    if row["engine"] not in list_engines():
        raise SpecroofError(f"{where}: engine {row['engine']!r} is not shipped (one of {', '.join(list_engines())})")
    return row


def _check_row(path: Path, i: int, row: dict[str, Any]) -> None:
    """One line naming the file, the row and the field for anything a prediction could not use."""
    where = f"{path.name}: row {i + 1}"
    if row["engine"] is None:
        raise SpecroofError(f"{where} names no engine")
    from roofline.costing.engine import list_engines

    if row["engine"] not in list_engines():
        raise SpecroofError(f"{where}: engine {row['engine']!r} is not shipped (one of {', '.join(list_engines())})")
    for key in ("published_tokens_per_s", "published_speedup", "published_ttft_s", "mean_accepted"):
        v = row[key]
        if v is not None and not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
            raise SpecroofError(f"{where}: {key.removeprefix('published_')} must be a finite number > 0 (got {v!r})")
    if row["published_tokens_per_s"] is None and row["published_speedup"] is None and row["published_ttft_s"] is None:
        raise SpecroofError(f"{where}: give tokens_per_s or speedup (or ttft_s, a prefill row's time to first token)")
    if row["published_ttft_s"] is not None and (row["published_tokens_per_s"] or row["published_speedup"]):
        raise SpecroofError(f"{where}: give ttft_s or tokens_per_s/speedup, not both (one figure per row)")
    if row["published_ttft_s"] is not None and (row["kind"] != "prefill" or row["output_tokens"] > 1):
        raise SpecroofError(f"{where}: ttft_s is a prefill row's figure (kind = 'prefill', output_tokens 0 or 1)")
    if not 1 <= row["batch"] <= 4096 or not 1 <= row["tp"] <= 64:
        raise SpecroofError(f"{where}: batch must lie in [1, 4096] and tp in [1, 64]")
    if row["kind"] in ("batched", "prefill") and (row["prompt_tokens"] < 1 or row["output_tokens"] < 0):
        raise SpecroofError(f"{where}: a {row['kind']} row gives prompt_tokens >= 1 and output_tokens >= 0")
    if row["counts"] not in ("output", "total"):
        raise SpecroofError(f"{where}: counts must be 'output' or 'total' (got {row['counts']!r})")
    _check_speculative_fields(where, row)
    if row["engine_config"]:
        # the engine's own knobs (SGLang's flags, vLLM's speculative config): read as `--engine-config` reads them
        from roofline.deploy.engine_flags import read_engine_config

        if row["kind"] != "speculative" or row["mean_accepted"] is None or row["gamma"] or row["tree"]:
            raise SpecroofError(
                f"{where}: engine_config is a speculative row's setting, with mean_accepted and no gamma or tree"
            )
        try:
            read_engine_config(row["engine_config"], target=row["model"])
        except SpecroofError as e:
            raise SpecroofError(f"{where}: engine_config: {e}") from None


def _check_speculative_fields(where: str, row: dict[str, Any]) -> None:
    """A speculative row's per-token acceptance and its draft model's StreamingLLM window.

    ``alpha`` (a per-token acceptance rate, as MagicDec publishes one) on a chain of ``gamma`` drafts stands for the
    tokens per round it gives under the i.i.d. model, ``(1 - alpha^(gamma+1)) / (1 - alpha)``: the loader writes that
    into ``mean_accepted`` (which it must then not also give). ``drafter_kv_window`` is a ``model:NAME`` draft's
    StreamingLLM cache (attention sinks plus the most recent tokens): the draft reads ``min(context, window)`` cached
    tokens, not the context (:class:`roofline.speculation.drafters.DraftModel` ``kv_window``)."""
    alpha, window = row["alpha"], row["drafter_kv_window"]
    if alpha is not None:
        g = row["gamma"]
        if row["kind"] != "speculative" or isinstance(g, bool) or not isinstance(g, int) or g < 1 or row["tree"]:
            raise SpecroofError(f"{where}: alpha is a speculative chain's figure: give it with a whole gamma >= 1")
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0.0 < alpha <= 1.0:
            raise SpecroofError(f"{where}: alpha (a per-token acceptance rate) must lie in (0, 1] (got {alpha!r})")
        if row["mean_accepted"] is not None or row["engine_config"]:
            raise SpecroofError(f"{where}: give alpha or mean_accepted, not both (alpha gives the tokens per round)")
        from roofline.speculation.closed_forms import expected_tokens_scalar

        row["mean_accepted"] = expected_tokens_scalar(float(alpha), g)
    if window is not None:
        if row["kind"] != "speculative" or not str(row["drafter"] or "").startswith("model:"):
            raise SpecroofError(
                f"{where}: drafter_kv_window is a draft model's cache: give it with drafter = 'model:NAME'"
            )
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise SpecroofError(f"{where}: drafter_kv_window must be a whole number of tokens >= 1 (got {window!r})")


def _row_drafter(r: dict[str, Any]) -> Any:
    """The drafter a row names, as the predictor takes it: the name, or its draft model with a StreamingLLM window."""
    window: Any = r.get("drafter_kv_window")
    if not _is_given(window):
        return r["drafter"]
    from roofline.passes.model import get_model
    from roofline.speculation.drafters import DraftModel

    return DraftModel(get_model(str(r["drafter"]).removeprefix("model:")), kv_window=int(window))


def _act_dtype(weight_dtype: str) -> str:
    # the published engines multiply quantised weights in bf16 (gpt-fast's int8/int4 kernels)
    return activation_dtype(weight_dtype, default="bf16")


def _wdt(weight_dtype: str) -> str | None:
    return None if weight_dtype in FLOAT_DTYPES else weight_dtype


def predict_row(row: pd.Series | dict[str, Any], engine: Engine | str | None) -> dict[str, float]:
    """The row's figure as ``engine`` would run it (None: the datasheet roofline).

    Returns ``predicted`` (tokens/s or speedup, as the row publishes) and, for a
    speculative row published as tokens/s without an acceptance, ``implied_mean_accepted``:
    the tokens per round that reproduce the published figure.
    """
    r = dict(row)
    act, wdt = _act_dtype(r["weight_dtype"]), _wdt(r["weight_dtype"])
    batch = int(r.get("batch", 1) or 1)
    if _is_given(r.get("published_ttft_s")):
        # time to first token: the prefill pass of the prompts (it emits the first token), nothing after it
        st = pass_time(r["model"], r["hardware"], batch, int(r["prompt_tokens"]), 0, act, weight_dtype=wdt,
                       tp=r["tp"], engine=engine)  # fmt: skip
        return {"predicted": float(st.t_step_s[()])}
    if r["kind"] in ("batched", "prefill") or (r["kind"] != "speculative" and int(r.get("prompt_tokens", 0) or 0)):
        return {"predicted": _generation_rate(r, engine, act, wdt, batch)}
    if r["kind"] != "speculative":
        st = pass_time(
            r["model"], r["hardware"], batch, 1, r["context"], act, weight_dtype=wdt, tp=r["tp"], engine=engine
        )
        return {"predicted": float(batch / st.t_step_s[()])}

    gamma = r["gamma"]
    gamma = None if gamma is None or (isinstance(gamma, float) and math.isnan(gamma)) else gamma
    gamma = gamma if gamma in (None, "heuristic") else int(gamma)
    eng = load_engine(engine) if isinstance(engine, str) else engine
    # an engine that caps the requests it runs while speculating (SGLang's EAGLE: 48) runs that many of the batch
    spec_batch = eng.spec_batch(batch) if eng is not None else batch
    kw: dict[str, Any] = dict(
        hardware=r["hardware"],
        target=r["model"],
        drafter=_row_drafter(r),
        gamma=gamma,
        tree=r["tree"] if isinstance(r["tree"], str) else None,
        engine=eng,
        context=r["context"],
        dtype=act,
        weight_dtype=wdt,
        tp=r["tp"],
        batch=spec_batch,
    )
    ma = r["mean_accepted"]
    if isinstance(r.get("engine_config"), str) and r["engine_config"]:
        return _predict_engine_config(r, eng, batch, spec_batch, act, wdt)
    no_acceptance = ma is None or (isinstance(ma, float) and math.isnan(ma))
    # no acceptance published: price the round once (at one token per round) and report what E the figure implies
    p = predict_speedup(mean_accepted=1.0 if no_acceptance else float(ma), **kw)
    speedup_ = p.speedup
    if spec_batch != batch:
        # the plain decoding it is compared with runs the whole batch
        base = pass_time(r["model"], r["hardware"], batch, 1, r["context"], act, weight_dtype=wdt, tp=r["tp"],
                         engine=eng)  # fmt: skip
        speedup_ = p.tokens_per_s * float(base.t_step_s[()]) / batch
    published_speedup = _is_given(r["published_speedup"])
    if no_acceptance:
        # a round's time does not depend on E: tokens/s and speedup at E tokens per round are E times those at one
        implied = (
            float(r["published_speedup"]) / speedup_
            if published_speedup
            else r["published_tokens_per_s"] * p.t_round_s / spec_batch
        )
        return {"predicted": float("nan"), "implied_mean_accepted": implied}
    if published_speedup:
        return {"predicted": speedup_}
    return {"predicted": p.tokens_per_s}


def _predict_engine_config(
    r: dict[str, Any], eng: Engine | None, batch: int, spec_batch: int, act: str, wdt: str | None
) -> dict[str, float]:
    """A speculative row given in its engine's own knobs (``engine_config``), priced as ``--engine-config`` prices
    them (:func:`roofline.deploy.planner.price_engine_config`: the tree or chain the engine builds) at the published
    tokens per round."""
    from roofline.deploy.engine_flags import read_engine_config
    from roofline.deploy.planner import price_engine_config

    cfg = read_engine_config(r["engine_config"], target=r["model"])
    # the row's own pricing (the roofline's when eng is None): the configuration's knobs, not its engine's profile
    pr = Pricing.of(r["hardware"], engine=eng, dtype=act, weight_dtype=wdt, tp=int(r["tp"]))
    p = price_engine_config(cfg, pr, mean_accepted=float(r["mean_accepted"]), target=r["model"], batch=spec_batch,
                            context=int(r["context"]))  # fmt: skip
    tokens_per_s, speedup_ = float(p["tokens_per_s"]), float(p["speedup"])
    if spec_batch != batch:  # the engine's cap: plain decoding runs the whole batch
        base = pass_time(r["model"], r["hardware"], batch, 1, r["context"], act, weight_dtype=wdt, tp=r["tp"],
                         engine=eng)  # fmt: skip
        speedup_ = tokens_per_s * float(base.t_step_s[()]) / batch
    if r["published_speedup"] is not None and not pd.isna(r["published_speedup"]):
        return {"predicted": speedup_}
    return {"predicted": tokens_per_s}


def _is_given(v: Any) -> bool:
    return v is not None and not (isinstance(v, float) and math.isnan(v))


def published_figure(r: pd.Series | dict[str, Any]) -> tuple[float, str]:
    """The figure a row publishes and its metric: ``speedup``, ``ttft_s`` (seconds) or ``tokens_per_s``."""
    for key, metric in (("published_speedup", "speedup"), ("published_ttft_s", "ttft_s")):
        if _is_given(r.get(key)):
            return float(r[key]), metric
    return float(r["published_tokens_per_s"]), "tokens_per_s"


def _generation_rate(r: dict[str, Any], engine: Engine | str | None, act: str, wdt: str | None, batch: int) -> float:
    """Tokens/s of a whole generation of ``batch`` requests: one prefill of the prompts, then every decode step.

    A decode step's time is linear in its context (the KV read), so the steps are priced once,
    at the mean context ``prompt + output / 2``. ``counts`` says whether the figure counts the
    output tokens or prompt and output together (``vllm bench throughput``'s total tokens/s).
    """
    prompt, out = int(r["prompt_tokens"]), int(r["output_tokens"])
    kw: dict[str, Any] = dict(weight_dtype=wdt, tp=r["tp"], engine=engine)
    t = float(pass_time(r["model"], r["hardware"], batch, prompt, 0, act, **kw).t_step_s[()])
    if out > 1:
        step = pass_time(r["model"], r["hardware"], batch, 1, prompt + out // 2, act, **kw)
        t += (out - 1) * float(step.t_step_s[()])  # the prefill pass emits the first token
    tokens = batch * (out + (prompt if r["counts"] == "total" else 0))
    return tokens / t


def validation_table(rows: pd.DataFrame | None = None, engines: dict[str, Engine] | None = None) -> pd.DataFrame:
    """Published against predicted, per row: the roofline-only and the engine-aware prediction and their errors."""
    df = load_published() if rows is None else rows.copy()
    serving = {}
    if "kind" in df and (df["kind"] == "serving").any():
        st = serving_table(df, engines)
        keys = zip(st["source"], st["series"], st["policy"], st["rate_req_s"], strict=True)
        serving = dict(zip(keys, st.to_dict(orient="records"), strict=True))
    out = []
    for _, r in df.iterrows():
        if r["kind"] == "serving":
            sv = serving[(r["file"].removesuffix(".toml"), r["series"], r["policy"], float(r["rate_req_s"]))]
            out.append({
                "source": sv["source"], "use": r["use"], "fit": bool(r.get("fit", True)), "kind": "serving",
                "hardware": r["hardware"],
                "engine": r["engine"], "batch": 1,
                "setup": f"{r['model']} TP{r['tp']} {r['series']}: {r['policy']} at {sv['rate_req_s']:g} req/s",
                "model": r["model"], "context": 0,
                "metric": sv["metric"], "published": sv["published"], "roofline": sv["roofline"],
                "engine_aware": sv["engine_aware"], "error_roofline": sv["error_roofline"],
                "error_engine": sv["error_engine"], "implied_mean_accepted": np.nan,
                "note": sv["note"] or f"alpha {sv['alpha_engine']:.3f} ({'implied' if r['serving'].get('acceptance', 'implied') == 'implied' else 'published'})",
            })  # fmt: skip
            continue
        published, metric = published_figure(r)
        rec = {
            "source": r["file"].removesuffix(".toml"),
            "use": r["use"],
            "fit": bool(r.get("fit", True)),
            "kind": r["kind"],
            "hardware": r["hardware"],
            "engine": r["engine"],
            "batch": int(r["batch"]),
            "setup": _setup(r),
            "model": r["model"],
            "context": int(r["context"]),
            "metric": metric,
            "published": float(published),
            "roofline": np.nan,
            "engine_aware": np.nan,
            "error_roofline": np.nan,
            "error_engine": np.nan,
            "implied_mean_accepted": np.nan,
            "note": r["not_modelled"],
        }
        if not r["not_modelled"]:
            eng = (engines or {}).get(r["engine"]) or (engines or {}).get(canonical_engine(r["engine"]) or "")
            eng = eng or load_engine(r["engine"])
            roof = predict_row(r, None)
            aware = predict_row(r, eng)
            rec["roofline"], rec["engine_aware"] = roof["predicted"], aware["predicted"]
            rec["error_roofline"] = roof["predicted"] / published - 1.0
            rec["error_engine"] = aware["predicted"] / published - 1.0
            if "implied_mean_accepted" in aware:
                rec["implied_mean_accepted"] = aware["implied_mean_accepted"]
                g = r["gamma"]
                most = "" if g is None or pd.isna(g) else f" (of at most {int(g) + 1})"
                rec["note"] = (
                    f"no acceptance published: {aware['implied_mean_accepted']:.2f} tokens per round{most} "
                    f"reproduce it under {r['engine']}"
                )
        out.append(rec)
    return pd.DataFrame(out)


def _setup(r: pd.Series) -> str:
    parts = [str(r["model"]), str(r["weight_dtype"])]
    if int(r.get("batch", 1)) > 1:
        parts.append(f"batch {int(r['batch'])}")
    if int(r.get("prompt_tokens", 0) or 0):
        parts.append(f"{int(r['prompt_tokens'])} in / {int(r['output_tokens'])} out")
    if r["tp"] > 1:
        parts.append(f"TP{r['tp']}")
    if r["kind"] == "speculative":
        g = r["gamma"]
        shape = f"tree {r['tree']}" if isinstance(r["tree"], str) else ("" if g is None or pd.isna(g) else f"gamma {g}")
        knobs = r.get("engine_config")
        if isinstance(knobs, str) and knobs:  # SGLang's steps/topk/draft tokens as its flags give them
            shape = " ".join(w for w in knobs.replace("--speculative-", "").split() if w[:1].isdigit())
            shape = "knobs " + "/".join(shape.split())
        window: Any = r.get("drafter_kv_window")
        drafter = f"{r['drafter']} (StreamingLLM {int(window)})" if _is_given(window) else str(r["drafter"])
        parts.append(f"+ {drafter}" + (f" ({shape})" if shape else ""))
        if _is_given(r.get("alpha")):
            parts.append(f"alpha={r['alpha']} (E={r['mean_accepted']:.3f})")
        elif r["mean_accepted"] is not None and not pd.isna(r["mean_accepted"]):
            parts.append(f"E={r['mean_accepted']}")
    return " ".join(parts)


#: the ``use`` a summary shows for calibration rows that no fit reads (``fit = false``): apart from the fitted ones
UNFITTED = "calibration, no fit"


def _summary_use(t: pd.DataFrame) -> pd.DataFrame:
    """``t`` with its calibration rows that no fit reads relabelled :data:`UNFITTED`, so that a summary keeps them
    apart from the rows the engines were fitted on."""
    if "fit" not in t:
        return t
    unfitted = (t["use"] == "calibration") & ~t["fit"].astype(bool)
    return t.assign(use=t["use"].where(~unfitted, UNFITTED))


def error_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Median and max |error| per (use, kind), roofline-only beside engine-aware; rows without an error are left out
    (calibration rows no fit reads are their own use, :data:`UNFITTED`)."""
    t = _summary_use(table.dropna(subset=["error_engine"]))
    if t.empty:
        return pd.DataFrame()
    g = t.assign(abs_roofline=t["error_roofline"].abs(), abs_engine=t["error_engine"].abs()).groupby(["use", "kind"])
    s = g.agg(
        rows=("published", "size"),
        median_abs_error_roofline=("abs_roofline", "median"),
        max_abs_error_roofline=("abs_roofline", "max"),
        median_abs_error_engine=("abs_engine", "median"),
        max_abs_error_engine=("abs_engine", "max"),
    )
    return s.reset_index()


#: the batch buckets a band is kept per (issue 47): one sequence, a few, a serving batch, a large one
BATCH_BUCKETS = ((1, 1, "1"), (2, 16, "2-16"), (17, 64, "17-64"), (65, 10**9, ">64"))

#: contexts above this many tokens are "long" (>8k) for a band
LONG_CONTEXT = 8192


def batch_bucket(batch: Any) -> str:
    """The batch bucket of ``batch`` sequences: ``1``, ``2-16``, ``17-64`` or ``>64``."""
    b = int(batch)
    for lo, hi, name in BATCH_BUCKETS:
        if lo <= b <= hi:
            return name
    raise ValueError(f"batch must be >= 1 (got {batch!r})")


def context_class(context: Any) -> str:
    """``<=8k`` or ``>8k`` tokens of context."""
    return ">8k" if int(context) > LONG_CONTEXT else "<=8k"


#: issue 47's bounds on a validation summary: calibration rows' median |error| per engine and batch bucket, and the
#: held-out rows'
BUCKET_BOUNDS = {"calibration": 0.10, "validation": 0.15, UNFITTED: np.inf}


#: the kinds issue 47's per-bucket bounds speak of: decoding and speculation at a batch (prefill, quantised and TP
#: rows keep their per-kind summary; a serving row's batch is its simulator's, not one number)
BUCKET_KINDS = ("decode", "batched", "speculative")


def bucket_summary(table: pd.DataFrame, kinds: tuple[str, ...] | None = BUCKET_KINDS) -> pd.DataFrame:
    """Median and max |error| per (use, engine, batch bucket), engine-aware beside roofline-only, and whether the
    median keeps :data:`BUCKET_BOUNDS` (10% calibration, 15% held out), over the rows of ``kinds`` (None: every
    kind). ``engine`` is the engine a row's profile is a version of (``vllm-0.12`` is ``vllm``); rows without an
    error (not modelled, or anchoring an implied acceptance) are left out. The table ``specroof validate published``
    prints beside its per-kind summary."""
    t = _summary_use(table.dropna(subset=["error_engine"]))
    if kinds is not None:
        t = t[t["kind"].isin(kinds)]
    if t.empty:
        return pd.DataFrame()
    t = t.assign(
        engine=t["engine"].map(engine_group),
        bucket=t["batch"].map(batch_bucket),
        abs_roofline=t["error_roofline"].abs(),
        abs_engine=t["error_engine"].abs(),
    )
    s = t.groupby(["use", "engine", "bucket"]).agg(
        rows=("published", "size"),
        median_abs_error_roofline=("abs_roofline", "median"),
        median_abs_error_engine=("abs_engine", "median"),
        max_abs_error_engine=("abs_engine", "max"),
    )
    s = s.reset_index()
    s["within_bound"] = s["median_abs_error_engine"] <= s["use"].map(BUCKET_BOUNDS)
    return s


#: a series' batch trend must hold within this share (issue 47): its speedup at batch b over its speedup at batch 1
TREND_TOLERANCE = 0.10

#: what makes speculative rows one series: everything but the batch
SERIES_KEYS = ("file", "hardware", "engine", "model", "weight_dtype", "tp", "drafter", "drafter_kv_window", "gamma", "tree",
               "context")  # fmt: skip


def batch_trends(rows: pd.DataFrame | None = None, engines: dict[str, Engine] | None = None) -> pd.DataFrame:
    """The batch trend of every speculative series: its speedup at batch b over its speedup at batch 1, published
    against predicted, and their ratio's error (issue 47: within :data:`TREND_TOLERANCE` on calibration series).

    A series is the speculative rows of one file that differ only in batch (:data:`SERIES_KEYS`) and include batch 1.
    A row's published speedup is its ``speedup``, or its ``tokens_per_s`` over its series' plain decoding at the same
    batch (a ``decode``/``batched`` row of the file with the same model, hardware, engine and batch). A row without a
    published acceptance takes the tokens per round that reproduce the series' batch-1 row (the anchor), so a series
    tests what changes with batch at one acceptance; ``implied_mean_accepted`` is what each row's own figure implies.
    """
    df = load_published() if rows is None else rows
    spec = df[(df["kind"] == "speculative") & (df["not_modelled"] == "")].copy()
    out = []
    if spec.empty:
        return pd.DataFrame()
    # the series' keys as text (a missing gamma or tree is NaN, which no group matches)
    keys = {k: spec[k].map(lambda v: "" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v))
            for k in SERIES_KEYS}  # fmt: skip
    for key, g in spec.groupby([keys[k] for k in SERIES_KEYS], sort=False):
        if g["batch"].nunique() < 2 or 1 not in set(g["batch"]):
            continue
        eng_name = str(g["engine"].iloc[0])
        eng = (engines or {}).get(eng_name) or load_engine(eng_name)
        recs = []
        for _, r in g.sort_values("batch").iterrows():
            rec = dict(zip(SERIES_KEYS, key, strict=True)) | {"use": r["use"], "batch": int(r["batch"])}
            rec["published_speedup"] = _series_speedup(df, r)
            recs.append((r, rec))
        anchor_r, anchor = recs[0]
        e_anchor = _row_mean_accepted(anchor_r, eng)
        for r, rec in recs:
            e_row = _row_mean_accepted(r, eng)
            e = float(r["mean_accepted"]) if _is_given(r["mean_accepted"]) else e_anchor
            pred = predict_row({**dict(r), "mean_accepted": e, "published_speedup": 1.0}, eng)["predicted"]
            rec["mean_accepted"] = e
            rec["implied_mean_accepted"] = e_row
            rec["predicted_speedup"] = pred
            out.append(rec)
    t = pd.DataFrame(out)
    if t.empty:
        return t
    base = t[t["batch"] == 1].set_index(list(SERIES_KEYS))
    t = t.set_index(list(SERIES_KEYS))
    t["published_trend"] = t["published_speedup"] / base["published_speedup"].reindex(t.index).to_numpy()
    t["predicted_trend"] = t["predicted_speedup"] / base["predicted_speedup"].reindex(t.index).to_numpy()
    t["trend_error"] = t["predicted_trend"] / t["published_trend"] - 1.0
    t["implied_acceptance_drift"] = (
        t["implied_mean_accepted"] / base["implied_mean_accepted"].reindex(t.index).to_numpy() - 1.0
    )
    return t.reset_index()


def _series_speedup(df: pd.DataFrame, r: pd.Series) -> float:
    """A speculative row's published speedup: its own, or its tokens/s over the same file's plain row at its batch."""
    if _is_given(r["published_speedup"]):
        return float(r["published_speedup"])
    plain = df[
        (df["file"] == r["file"]) & df["kind"].isin(("decode", "batched")) & (df["model"] == r["model"])
        & (df["hardware"] == r["hardware"]) & (df["engine"] == r["engine"]) & (df["batch"] == r["batch"])
    ]  # fmt: skip
    if plain.empty or not _is_given(r["published_tokens_per_s"]):
        return float("nan")
    return float(r["published_tokens_per_s"]) / float(plain["published_tokens_per_s"].iloc[0])


def _row_mean_accepted(r: pd.Series, eng: Engine | None) -> float:
    """The tokens per round a row publishes, or the ones that reproduce its published speedup under ``eng``."""
    if _is_given(r["mean_accepted"]):
        return float(r["mean_accepted"])
    one = predict_row({**dict(r), "mean_accepted": 1.0, "published_speedup": 1.0}, eng)["predicted"]
    pub = (
        _series_speedup(load_published(), r) if not _is_given(r["published_speedup"]) else float(r["published_speedup"])
    )
    return float(pub / one) if one > 0 and np.isfinite(pub) else float("nan")


# -- serving rows: latencies under load, priced by the serving simulator -----------------------------------------

#: every serving prediction runs the simulator under this seed (the same arrivals and lengths for every policy)
SERVING_SEED = 0

#: bisection steps for an implied acceptance (alpha to within 0.98 / 2^10)
_ALPHA_STEPS = 10

_SERVING_CACHE: dict[tuple[str, str, str], dict[str, Any]] = {}


def _serving_drafter(s: dict[str, Any]) -> Any:
    """The series' drafter: a name as :func:`roofline.speculation.drafters.as_drafter` reads it, or a draft model with its vocabulary."""
    d = s.get("drafter")
    if d is None or "drafter_vocab" not in s:
        return d
    from roofline.passes.model import get_model

    if not str(d).startswith("model:"):
        raise SpecroofError(f"drafter_vocab applies to a draft model (model:NAME), not {d!r}")
    spec = get_model(str(d).removeprefix("model:"))
    vocab = s["drafter_vocab"]
    if not (isinstance(vocab, int) and vocab >= 1):
        raise SpecroofError(f"drafter_vocab must be a whole number >= 1 (got {vocab!r})")
    return dataclasses.replace(spec, name=f"{spec.name} (vocab {vocab})", vocab_size=vocab)


def _run_series(s: dict[str, Any], hardware: str, engine: Engine | None, policies: tuple[str, ...], rates: list[float],
                alpha: float) -> pd.DataFrame:  # fmt: skip
    from roofline.serving import simulate

    res = simulate(
        hardware=hardware, target=s["model"], drafter=_serving_drafter(s), acceptance=alpha, policy=policies,
        rates=rates, requests=int(s.get("requests", 200)), input_len=s.get("input_len", 512),
        output_len=s.get("output_len", 128), engine=engine, tp=int(s.get("tp", 1)),
        weight_dtype=_wdt(s.get("weight_dtype", "bf16")), max_seqs=int(s.get("max_seqs", 256)),
        max_tokens=int(s.get("max_tokens", 2048)), prefill=str(s.get("prefill", "fused")), seed=SERVING_SEED,
    )  # fmt: skip
    return res.summary


def _implied_alpha(s: dict[str, Any], hardware: str, engine: Engine | None, rate: float, metric: str, target: float,
                   base: float) -> float:  # fmt: skip
    """The per-token acceptance at which the simulated ``off / speculating`` ratio at ``rate`` is ``target``.

    The ratio grows with alpha (more tokens per verify pass), so a bisection finds it; a ratio
    out of reach returns the end of [0.01, 0.99] nearest to it.
    """
    lo, hi = 0.01, 0.99
    for _ in range(_ALPHA_STEPS):
        mid = 0.5 * (lo + hi)
        spec = _run_series(s, hardware, engine, (s["speculating"],), [rate], mid)[metric].iloc[0]
        if base / spec < target:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def predict_serving_series(rows: pd.DataFrame, engine: Engine | str | None) -> dict[str, Any]:
    """The simulated metric of every row of one serving series (one file, one ``[series.NAME]``) under ``engine``.

    Returns ``predicted`` ({(policy, rate): value}), ``alpha`` (the per-token acceptance simulated) and
    ``anchor`` (the (policy, rate) the acceptance was read from, or None). A series whose acceptance is
    ``"implied"`` (the source publishes none) takes the alpha that reproduces its lowest rate's published
    ``off / speculating`` ratio; that row is then no prediction (its error is left out). Every other
    row, the baseline's latencies and the crossover rate are predicted, nothing fitted to them.
    """
    first = rows.iloc[0]
    s, hardware, metric = first["serving"], str(first["hardware"]), str(first["serving_metric"])
    eng = load_engine(engine) if isinstance(engine, str) else engine
    key = (str(first["file"]), str(first["series"]), repr(eng))
    if key in _SERVING_CACHE:
        return _SERVING_CACHE[key]
    if len(set(rows["serving_metric"])) != 1:
        raise SpecroofError(f"{first['file']}: series {first['series']!r} mixes metrics: give one per series")
    rates = sorted(set(rows["rate_req_s"]))
    acceptance = s.get("acceptance", "implied")
    anchor = None
    if acceptance == "implied":
        r0 = rates[0]
        pub = rows.set_index(["policy", "rate_req_s"])["published_value"]
        if ("off", r0) not in pub.index or (s["speculating"], r0) not in pub.index:
            raise SpecroofError(
                f"{first['file']}: series {first['series']!r}: an implied acceptance needs both policies at {r0} req/s"
            )
        base = _run_series(s, hardware, eng, ("off",), [r0], 0.5)[metric].iloc[0]
        target = pub[("off", r0)] / pub[(s["speculating"], r0)]
        alpha = _implied_alpha(s, hardware, eng, r0, metric, float(target), float(base))
        anchor = (s["speculating"], r0)
    else:
        from roofline.serving import parse_acceptance

        alpha = parse_acceptance(acceptance, int(str(s["speculating"]).rpartition(":")[2] or 1))
    summary = _run_series(s, hardware, eng, ("off", s["speculating"]), rates, alpha)
    predicted = {
        (p, float(r)): float(v)
        for p, r, v in zip(summary["policy"], summary["rate_req_s"], summary[metric], strict=True)
    }
    out = {"predicted": predicted, "alpha": float(alpha), "anchor": anchor, "summary": summary}
    _SERVING_CACHE[key] = out
    return out


def serving_table(rows: pd.DataFrame | None = None, engines: dict[str, Engine] | None = None) -> pd.DataFrame:
    """Every serving row published against simulated: roofline-only and engine-aware, their errors, the alpha used."""
    df = load_published() if rows is None else rows
    df = df[df["kind"] == "serving"]
    out = []
    for (_, _), g in df.groupby(["file", "series"], sort=False):
        eng_name = str(g["engine"].iloc[0])
        eng = (engines or {}).get(eng_name) or load_engine(eng_name)
        roof, aware = predict_serving_series(g, None), predict_serving_series(g, eng)
        for _, r in g.iterrows():
            k = (r["policy"], float(r["rate_req_s"]))
            anchored = k == aware["anchor"]
            pub = float(r["published_value"])
            out.append({
                "source": r["file"].removesuffix(".toml"),
                "series": r["series"],
                "policy": r["policy"],
                "rate_req_s": k[1],
                "metric": r["serving_metric"],
                "published": pub,
                "roofline": roof["predicted"][k],
                "engine_aware": aware["predicted"][k],
                "error_roofline": np.nan if anchored else roof["predicted"][k] / pub - 1.0,
                "error_engine": np.nan if anchored else aware["predicted"][k] / pub - 1.0,
                "alpha_engine": aware["alpha"],
                "alpha_roofline": roof["alpha"],
                "note": "anchors the implied acceptance (no error of its own)" if anchored else "",
            })  # fmt: skip
    return pd.DataFrame(out)


def serving_crossovers(table: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per serving series: the rate where speculation stops paying, published against simulated (same rates, same rule).

    Both sides use :func:`roofline.serving.speculation_stops_paying_at_rate` on the series' own
    rates (interpolated on log rate between the last rate that pays and the first that does not);
    ``published_bracket_*`` are those two rates, between which the true published crossover lies.
    """
    from roofline.serving import speculation_stops_paying_at_rate

    t = serving_table() if table is None else table
    out = []
    for (src, series), g in t.groupby(["source", "series"], sort=False):
        metric = str(g["metric"].iloc[0])
        spec = next(p for p in g["policy"] if p != "off")
        rec: dict[str, Any] = {"source": src, "series": series, "policy": spec, "metric": metric}
        for col in ("published", "roofline", "engine_aware"):
            summ = pd.DataFrame({"policy": g["policy"], "rate_req_s": g["rate_req_s"], metric: g[col]})
            rec[f"{col}_rate_req_s"] = speculation_stops_paying_at_rate(summ, spec, metric=metric)
        pub = rec["published_rate_req_s"]
        rates = sorted(set(g["rate_req_s"]))
        if pub is not None:
            above = [r for r in rates if r >= pub]
            below = [r for r in rates if r < pub]
            rec["published_bracket_lo_req_s"] = below[-1] if below else np.nan
            rec["published_bracket_hi_req_s"] = above[0] if above else np.nan
        for col in ("roofline", "engine_aware"):
            v = rec[f"{col}_rate_req_s"]
            name = "engine" if col == "engine_aware" else col
            rec[f"error_{name}"] = np.nan if pub is None or v is None else v / pub - 1.0
        out.append(rec)
    return pd.DataFrame(out)

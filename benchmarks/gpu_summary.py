"""The figures issue 45's "done when" asks for, from one run of benchmarks/gpu.sh: ``summary.json``.

    python -m benchmarks.gpu_summary WORK_DIR OUT_FILE [--model llama-3.1-8b]

WORK_DIR holds what the script's steps wrote: each step's stdout (``NAME.out``, the ``--json``
payload), ``steps.tsv`` (name, exit status, seconds), the sweep folders. Every figure that a
step did not produce is null, with the reason in ``missing``; nothing here measures anything.

* ``weight_stream``: each batch-1 pass of 1-16 new tokens streams its weights (the roofline's
  weight bytes of the pass) in its fastest time, as a fraction of the copy bandwidth ``measure
  bench`` measured: with graphs, compiled, and eager (target: >= 60% graphs, >= 75% compiled);
* ``repeat_spread``: per point, the median of (median - min) / min over its repetitions, and the
  visit-to-visit spread of its minima (target: within 2%);
* ``crossover``: per batch, K read off the measured curve against the fitted roofline's (the
  read-out of the fitted curve and the pure roofline crossover), with the read-out's status
  (target: within 20%), and how far the passes below the knee rose above flat (target: 10%);
* ``fit_mape`` (target: <= 5%); ``spec``: the speedup rows' errors, noisy count and measured
  speedups (target: every row within 10%, none noisy); ``serve``: TTFT and TPOT p50/p90 errors
  per rate and policy and the verdicts (target: within 15%, verdicts agree);
* ``launch_overhead``: eager minus graph, per pass; ``capture_s``, ``compile_s``;
* ``kernels``: kernels per layer of each batch-1 pass (benchmarks/gpu_kernels.py, torch.profiler) beside the sweep's
  fastest time of that pass, and the same static pass uncaptured against replayed;
* ``smoke`` and ``point`` (``gpu.sh --smoke``): the graph checks' verdicts and the one sweep point;
* every pass row names its ``kv_slots``: the context bucket a static pass reads (the fit prices context + n);
* ``done_when``: each target evaluated (true, false, or null where its figure is missing).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from roofline.passes.cost import forward_cost
from roofline.passes.model import get_model


def _load(work: Path, name: str, missing: dict[str, str]) -> Any:
    """A step's JSON payload (its stdout), or None with the reason noted."""
    path = work / f"{name}.out"
    try:
        text = path.read_text()
    except OSError:
        missing[name] = "the step did not run or wrote nothing"
        return None
    start = text.find("{")
    if start < 0:
        missing[name] = "the step wrote no JSON (it failed or was stopped at its limit: see its log)"
        return None
    try:
        return json.loads(text[start:])
    except json.JSONDecodeError:
        missing[name] = "the step's output is not JSON (it failed or was cut off: see its log)"
        return None


def _lines(path: Path) -> list[str]:
    try:
        return [ln for ln in path.read_text().splitlines() if ln.strip()]
    except OSError:
        return []


def _num(x: Any) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def kv_slots(context: int, new_tokens: int, cap: int | None = None) -> int:
    """The cache slots a static (graph) pass reads: its context bucket (measure.models.context_bucket), the cache's
    length taken as the sweep's longest point when not known."""
    from measure.buckets import context_bucket

    need = int(context) + int(new_tokens)
    return int(context_bucket(need, max(need, cap or need)))


def weight_stream(rows: list[dict[str, Any]], model: str, copy_bw: float | None) -> dict[str, Any] | None:
    """Batch-1 passes of 1-16 new tokens: the roofline's weight bytes over the fastest time, and that over the copy
    bandwidth; the smallest fraction of them."""
    spec = get_model(model)
    out = []
    for r in rows:
        if int(r.get("batch", 0)) != 1 or not 1 <= int(r.get("new_tokens", 0)) <= 16 or r.get("status") != "ok":
            continue
        c = forward_cost(spec, 1, int(r["new_tokens"]), int(r["context"]), weight_dtype=str(r.get("dtype", "bf16")))
        nbytes = float(np.sum(c.bytes_weights))
        t = float(r["t_min_s"])
        rate = nbytes / t
        cap = max(int(x["context"]) + int(x["new_tokens"]) for x in rows)
        out.append(
            {
                "new_tokens": int(r["new_tokens"]),
                "context": int(r["context"]),
                "kv_slots": kv_slots(int(r["context"]), int(r["new_tokens"]), cap),
                "t_min_ms": 1e3 * t,
                "weight_GB_per_s": rate / 1e9,
                "fraction_of_copy": rate / copy_bw if copy_bw else None,
            }
        )
    if not out:
        return None
    fr = [o["fraction_of_copy"] for o in out if o["fraction_of_copy"] is not None]
    return {"points": out, "min_fraction_of_copy": min(fr) if fr else None}


def repeat_spread(sweep_dir: Path, rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """How far repeated passes of one point disagree: (median - min) / min per point, and the spread of a point's
    minima from visit to visit (results.csv holds every visit)."""
    ok = [r for r in rows if r.get("status") == "ok"]
    if not ok:
        return None
    within = [float(r["t_median_s"]) / float(r["t_min_s"]) - 1 for r in ok]
    out: dict[str, Any] = {"median_over_min_median": float(np.median(within)), "median_over_min_max": max(within)}
    path = sweep_dir / "results.csv"
    if path.is_file():
        v = pd.read_csv(path)
        v = v[v["status"] == "ok"]
        g = v.groupby(["dtype", "batch", "new_tokens", "context"])["t_min_s"]
        spread = (g.max() / g.min() - 1)[g.size() > 1]
        if len(spread):
            out |= {"visit_spread_median": float(spread.median()), "visit_spread_max": float(spread.max())}
    return out


def crossover(fit: dict[str, Any], rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (batch, context): measured K, the fitted curve's and the fitted roofline's, their relative differences,
    and how far the passes below the knee rose above the narrowest one."""
    df = pd.DataFrame([r for r in rows if r.get("status") == "ok"])
    out = []
    for k in fit.get("crossover") or []:
        km, kp, kr = (
            _num(k.get(c)) for c in ("crossover_measured", "crossover_predicted", "crossover_roofline_fitted")
        )
        row = {
            "batch": k["batch"],
            "context": k["context"],
            "crossover_measured": km,
            "crossover_measured_status": k.get("crossover_measured_status"),
            "crossover_fitted_curve": kp,
            "crossover_roofline_fitted": kr,
            "rel_diff_fitted_curve": (km / kp - 1) if km and kp else None,
            "rel_diff_roofline_fitted": (km / kr - 1) if km and kr else None,
        }
        if not df.empty and km:
            g = df[(df["batch"] == k["batch"]) & (df["context"] == k["context"])].sort_values("new_tokens")
            below = g[g["new_tokens"] <= km]
            if len(below) >= 2:
                row["rise_below_knee"] = float(below["t_min_s"].max() / below["t_min_s"].iloc[0] - 1)
        out.append(row)
    return out


def kernel_rows(kern: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Kernels per layer of each counted batch-1 pass beside the sweep's fastest time of that pass (graphs)."""
    best = {
        int(r["new_tokens"]): float(r["t_min_s"])
        for r in rows
        if r.get("status") == "ok" and int(r.get("batch", 0)) == 1 and r.get("tree", "chain") == "chain"
    }
    table = []
    for p in kern.get("passes") or []:
        t = best.get(int(p["new_tokens"])) if "tree" not in p else None
        table.append(
            {
                "new_tokens": p["new_tokens"],
                "tree": "tree" in p,
                "kv_slots": p.get("kv_slots"),
                "static_per_layer": p.get("static_per_layer"),
                "static_outside_layers": p.get("static_outside_layers"),
                "eager_per_layer": p.get("eager_per_layer"),
                "t_min_ms": 1e3 * t if t is not None else None,
            }
        )
    return {
        "counted_as": kern.get("counted_as"),
        "layers_counted": kern.get("layers_counted"),
        "table": table,
        "launch_overhead_2_layers": kern.get("launch_overhead_2_layers"),
    }


def spec_rows(spec: dict[str, Any]) -> dict[str, Any]:
    rows = spec.get("speedup") or []
    errs = [abs(float(r["rel_error"])) for r in rows if _num(r.get("rel_error")) is not None]
    return {
        "rows": len(rows),
        "error_max": max(errs) if errs else None,
        "noisy_rows": sum(bool(r.get("noisy")) for r in rows),
        "fit_mape": spec.get("fit_mape"),
        "passes": spec.get("passes"),
        "host_fit": spec.get("host_fit"),
        "table": [
            {
                k: r.get(k)
                for k in (
                    "drafter",
                    "batch",
                    "gamma",
                    "speedup_measured",
                    "speedup_predicted",
                    "rel_error",
                    "noisy",
                    "noise",
                    "host_share_measured",
                )
            }
            for r in rows
        ],
    }


def serve_rows(serve: dict[str, Any]) -> dict[str, Any]:
    figs = ("ttft_p50", "ttft_p90", "tpot_p50", "tpot_p90")
    table = [
        {
            "rate_req_s": r["rate_req_s"],
            "policy": r["policy"],
            **{f"{m}_rel_error": r.get(f"{m}_rel_error") for m in figs},
        }
        | {f"{m}_noisy": r.get(f"{m}_noisy") for m in figs}
        for r in serve.get("table") or []
    ]
    errs = [abs(v) for t in table for m in figs if (v := _num(t[f"{m}_rel_error"])) is not None]
    verdicts = serve.get("verdicts") or []
    return {
        "table": table,
        "error_max": max(errs) if errs else None,
        "verdicts": verdicts,
        "verdicts_agree": all(bool(v.get("agree")) for v in verdicts) if verdicts else None,
        "settings": {k: (serve.get("settings") or {}).get(k) for k in ("device", "dtype", "passes", "runner")},
    }


def _check(value: float | None, ok: bool | None) -> bool | None:
    return None if value is None else ok


def summarise(work: Path, model: str) -> dict[str, Any]:
    missing: dict[str, str] = {}
    device, bench = _load(work, "device", missing), _load(work, "bench", missing)
    sweep, fit = _load(work, "sweep", missing), _load(work, "fit", missing)
    eager, compiled = _load(work, "eager", missing), _load(work, "compile", missing)
    spec, serve, report = _load(work, "spec", missing), _load(work, "serve", missing), _load(work, "report", missing)
    ran = {line.split("\t")[0] for line in _lines(work / "steps.tsv")}
    # the smoke's steps and the kernels step: looked for only where they ran (a full run has no smoke, and a smoke
    # no sweep: that one is named missing as before)
    smoke = _load(work, "smoke", missing) if "smoke" in ran else None
    point = _load(work, "point", missing) if "point" in ran else None
    kern = _load(work, "kernels", missing) if "kernels" in ran else None
    copy_bw = _num((bench or {}).get("copy_bandwidth_bytes_per_s"))
    steps = []
    for line in _lines(work / "steps.tsv"):
        name, rc, secs = line.split("\t")
        steps.append({"step": name, "exit": int(rc), "seconds": float(secs)})
    out: dict[str, Any] = {
        "device": (device or {}).get("name"),
        "torch": (device or {}).get("torch_version"),
        "model": model,
        "steps": steps,
        "copy_bandwidth_GB_per_s": copy_bw / 1e9 if copy_bw else None,
        "weight_stream": {
            "graphs": weight_stream(sweep["rows"], model, copy_bw) if sweep else None,
            "compile": weight_stream(compiled["rows"], model, copy_bw) if compiled else None,
            "eager": weight_stream(eager["rows"], model, copy_bw) if eager else None,
        },
        "repeat_spread": repeat_spread(work / "sweep", sweep["rows"]) if sweep else None,
        "crossover": crossover(fit, sweep["rows"]) if fit and sweep else [],
        "fit_mape": (fit or {}).get("fit_mape"),
        "spec": spec_rows(spec) if spec else None,
        "serve": serve_rows(serve) if serve else None,
        "launch_overhead": (eager or {}).get("launch_overhead"),
        "kernels": kernel_rows(kern, (sweep or {}).get("rows") or []) if kern else None,
        "smoke": {k: smoke.get(k) for k in ("ok", "checks", "error", "captures", "replays_sync_checked", "seconds")}
        if smoke
        else None,
        "point": [
            {
                k: r.get(k)
                for k in ("batch", "new_tokens", "context", "status", "t_min_s", "t_median_s", "t_predicted_s")
            }
            | {"kv_slots": kv_slots(int(r["context"]), int(r["new_tokens"]))}
            for r in point.get("rows") or []
        ]
        if point
        else None,
        "capture_s": ((sweep or {}).get("runner") or {}).get("capture_s"),
        "compile_s": ((compiled or {}).get("runner") or {}).get("compile_s"),
        "report": {
            k: ((report or {}).get("measurement") or {}).get(k)
            for k in ("fit_mape", "best_measured_text", "passes", "crossover")
        }
        if report
        else None,
        "missing": missing,
    }
    ws = out["weight_stream"]
    g_frac = (ws["graphs"] or {}).get("min_fraction_of_copy")
    c_frac = (ws["compile"] or {}).get("min_fraction_of_copy")
    rs = out["repeat_spread"] or {}
    cross = out["crossover"]
    k_errs = [abs(c["rel_diff_roofline_fitted"]) for c in cross if c["rel_diff_roofline_fitted"] is not None]
    rises = [c["rise_below_knee"] for c in cross if c.get("rise_below_knee") is not None]
    sp, sv = out["spec"] or {}, out["serve"] or {}
    out["done_when"] = {
        "batch1_graphs_ge_60pct_of_copy": _check(g_frac, g_frac is not None and g_frac >= 0.60),
        "batch1_compile_ge_75pct_of_copy": _check(c_frac, c_frac is not None and c_frac >= 0.75),
        "repeats_within_2pct": _check(rs.get("median_over_min_max"), (rs.get("median_over_min_max") or 1) <= 0.02),
        "flat_within_10pct_below_knee": _check(max(rises) if rises else None, bool(rises) and max(rises) <= 0.10),
        "crossover_within_20pct": _check(
            max(k_errs) if k_errs else None, bool(k_errs) and len(k_errs) == len(cross) and max(k_errs) <= 0.20
        ),
        "fit_mape_le_5pct": _check(out["fit_mape"], (out["fit_mape"] or 1) <= 0.05),
        "spec_rows_within_10pct": _check(sp.get("error_max"), (sp.get("error_max") or 1) <= 0.10),
        "spec_no_noisy_row": _check(sp.get("rows"), sp.get("noisy_rows") == 0),
        "serve_within_15pct": _check(sv.get("error_max"), (sv.get("error_max") or 1) <= 0.15),
        "serve_verdicts_agree": sv.get("verdicts_agree"),
        "smoke_ok": smoke.get("ok") if smoke else None,
    }
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("work", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--model", default="llama-3.1-8b")
    args = ap.parse_args(argv)
    summary = summarise(args.work, args.model)
    from roofline.core.jsonio import dumps

    args.out.write_text(dumps(summary))
    print(json.dumps(summary["done_when"], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The measured section of ``specroof report``: microbenchmarks, a verify sweep, the fit, validation.

Kept in ``measure`` (torch) and handed to ``roofline.report.write_report`` as an
extra section, so the analytic report never imports torch.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from measure.device import default_device, describe
from measure.fit import sweep_fit_validate
from roofline.model import ModelSpec
from roofline.plot import fit_overlay
from roofline.report import ReportWriter, Section

#: Default: 12 layers of d 1024 (~0.27e9 weights, 0.5 GB in bf16); quick: a tiny model.
FULL = ModelSpec("report-270m", 12, 1024, 16, 4, 64, 4096, 32000, max_context=4096)
QUICK = ModelSpec("report-quick", 4, 512, 8, 4, 64, 1536, 8000, max_context=2048)


def measurement_section(w: ReportWriter, quick: bool = False) -> Section:
    """Measure this device, fit the roofline to it and show predicted against measured."""
    dev = default_device()
    info = describe(dev)
    spec = QUICK if quick else FULL
    grid = dict(batch=[1], context=[128]) if quick else dict(batch=[1, 4], context=[128, 1024])
    tokens = [1, 2, 4, 8, 16, 32] if quick else [1, 2, 4, 8, 12, 16, 24, 32, 48, 64]
    res = sweep_fit_validate(
        spec, new_tokens=tokens, repeats=1 if quick else 2, rounds=3, device=dev, out=w.out / "measure", **grid
    )
    s = res.summary
    ap = res.apriori
    dev_rows = pd.DataFrame(
        [
            {
                "device": info["name"],
                "kind": info["kind"],
                "torch": info["torch_version"],
                "weight_streaming_GB_per_s": ap.bandwidth() / 1e9,
                "copy_bandwidth_GB_per_s": (
                    ap.measured.provenance.get("copy_bandwidth_GB_per_s") if ap.measured else None
                ),
                "overlap": ap.overlap,
                "matmul_TFLOP_per_s": ", ".join(f"{d} {v / 1e12:.2f}" for d, v in ap.measured.peak_flop_per_s.items())
                if ap.measured
                else "",
                "dispatch_us": ap.pass_overhead_s * 1e6,
            }
        ]
    )
    body = "<h3>This device</h3>" + w.table(dev_rows, "device")
    body += (
        f"<p>Verify passes of {spec.name} ({spec.total_params / 1e9:.2f}e9 weights, bf16) over "
        f"{s['points']} points. MAPE of the verify-pass time: a-priori (microbenchmark ceilings) "
        f"{s['apriori_mape']:.1%}, fitted {s['fit_mape']:.1%}.</p>"
    )
    body += w.figure(
        fit_overlay(res.validation), "measured_vs_predicted", "Verify pass: measured, a-priori and fitted roofline"
    )
    cols = ["batch", "new_tokens", "context", "t_measured_s", "t_apriori_s", "t_fitted_s", "err_apriori", "err_fitted"]
    body += "<h3>Validation, point by point</h3>" + w.table(res.validation[cols], "validation")
    if s["crossover"]:
        body += "<h3>Crossover K: read off the measured curve and off the fitted one</h3>" + w.table(
            pd.DataFrame(s["crossover"]), "crossover_measured"
        )
    fitted = {k: (v / 1e9 if "bandwidth" in k else v / 1e12 if "flop" in k else v) for k, v in s["fit_params"].items()}
    body += (
        "<p>Fitted parameters (GB/s, TFLOP/s, tokens, s): "
        + ", ".join(f"{k} {v:.4g}" for k, v in fitted.items())
        + "</p>"
    )
    body += _speculative_run(w, quick)
    return Section(
        f"Measured on this device: {info['name']}",
        body,
        ["validation.csv"],
        {
            "measurement": {k: s[k] for k in ("apriori_mape", "fit_mape", "points", "crossover")}
            | {"device": info["name"]}
        },
    )


def _speculative_run(w: ReportWriter, quick: bool) -> str:
    """The offline pair: baseline vs speculative decoding on held-out text, and the measured acceptance curve."""
    from measure.decode import autoregressive_generate, speculative_generate
    from measure.pair import held_out_prompts, load_pair
    from roofline.trees import Tree

    # the shipped target widened x16 (same function, 1.75 GB in bf16): memory bound on a CPU, as a real LLM is
    dev = default_device()
    target, draft, stats = load_pair(device=dev, dtype="bf16", width=4 if quick else 16)
    for m in (target, draft):
        m.set_matvec(dev.type == "cpu")
    prompts = held_out_prompts(4)
    n = 24 if quick else 48
    base = autoregressive_generate(target, prompts, n)
    rows, curves = [], {}
    plans: list[tuple[str, Any, Any]] = [("distilled draft", draft, g) for g in ((2, 4) if quick else (1, 2, 4, 6))]
    plans += [("early exit @1", 1, g) for g in ((2,) if quick else (1, 2, 4))]
    plans += [("distilled draft", draft, Tree.kary(2, 3))]
    for label, d, g in plans:
        r = speculative_generate(target, d, prompts, g, n)
        m = r.metrics()
        rows.append(
            {
                "drafter": label,
                "gamma_or_tree": g if isinstance(g, int) else f"tree {g.n_nodes} nodes, depth {g.depth}",
                "acceptance_rate": m.acceptance_rate,
                "mean_acceptance_length": m.mean_acceptance_length,
                "tokens_per_s": r.tokens_per_s,
                "speedup_vs_baseline": base.decode_s / r.decode_s,
                "same_tokens_as_baseline": r.tokens == base.tokens,
            }
        )
        if isinstance(g, int):
            curves[label] = r.acceptance_curve()
        else:
            ranks = r.rank_acceptance()
    held = stats["held_out"]
    out = (
        "<h3>Speculative decoding with the offline pair (held-out standard-library text, greedy, batch 4)</h3>"
        f"<p>Byte-level target ({target.spec.name}: the trained target widened by exact neuron duplication, "
        f"{target.spec.total_params / 1e9:.2f}e9 weights) and distilled draft built by measure.pair; "
        f"held-out cross-entropy {held['target']:.2f} "
        f"(target), {held['draft']:.2f} (draft), {held['early_exit']:.2f} (early exit) nats/byte. Baseline "
        f"{base.tokens_per_s:.0f} tokens/s.</p>"
    )
    out += w.table(pd.DataFrame(rows), "speculative_run")
    curve_rows = [{"drafter": k, **{f"a_{i + 1}": v for i, v in enumerate(c)}} for k, c in curves.items()]
    out += "<p>Measured acceptance per position (P(position i accepted | i - 1 accepted)):</p>"
    out += w.table(pd.DataFrame(curve_rows), "acceptance_curve")
    out += (
        "<p>Tree run, measured acceptance per sibling rank (Sequoia's vector: P(rank k accepted | ranks below "
        "rejected)): " + ", ".join(f"{v:.2f}" for v in ranks) + "</p>"
    )
    return out

"""Time one scalar call of pass_time, speedup and predict_speedup with a Pricing (issue #27 item 4: target <= 20 us).

Each figure is the fastest of fifteen loops of calls (mean time per call) on one scalar
configuration (Llama-3.1-8B on an H100 SXM, batch 1, context 1024, bf16), and, for
speedup and predict_speedup, on distinct configurations one after another (gamma 1..8,
alpha 0.50..0.92, context 256..8192 and batch 1/2/4/8 cycling at different periods: 840
different questions), so that nothing a call leaves behind answers the next one.
The same calls with the hardware named (a string: the Pricing is looked up, not
rebuilt) and the cost model's own share (``forward_cost``) are timed beside them.

``--llm-viewer DIR`` also times LLM-Viewer's per-configuration analysis
(``ModelAnalyzer.analyze``, github.com/hahnyuan/LLM-Viewer, a checkout in DIR; it needs
``transformers``, read from a local config.json: no network) for the same model,
hardware, batch and sequence length in the same run. One ``analyze`` call prices the
prefill and the decode stage of every layer, so it is the closest counterpart of a
pass_time call, not an equal amount of work.

    python -m benchmarks.bench_scalar [--llm-viewer DIR] [--no-record]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import roofline as rf
from benchmarks.record import record
from roofline.passes.cost import forward_cost

TARGET_US = 20.0
#: loops per figure: on a shared machine another process's burst only adds time, so more loops find a quiet one
REPEATS = 15


def per_call_us(fn: Callable[[], Any], calls: int, repeats: int = REPEATS) -> float:
    """The fastest of ``repeats`` loops of ``calls`` calls, microseconds per call (after a warm-up loop).

    The fastest loop, not the median: on a shared machine other processes only ever add time.
    """
    for _ in range(max(1, calls // 10)):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - t0) / calls * 1e6)
    return min(times)


def cycling(fn: Callable[..., Any], configs: list[tuple[Any, ...]]) -> Callable[[], Any]:
    """A call of ``fn`` on the next configuration of ``configs`` each time (round and round)."""
    it = itertools.cycle(configs)
    return lambda: fn(*next(it))


def distinct_configs() -> list[tuple[int, float, int, int]]:
    """(gamma, alpha, context, batch) tuples, each a different question: periods 8, 7, 5 and 3 (lcm 840)."""
    gammas, alphas = range(1, 9), [0.5 + 0.07 * i for i in range(7)]
    contexts, batches = [256, 1024, 2048, 4096, 8192], [1, 2, 4]
    return [(gammas[i % 8], alphas[i % 7], contexts[i % 5], batches[i % 3]) for i in range(840)]


def _hf_config(spec: rf.ModelSpec) -> dict[str, Any]:
    return {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "num_hidden_layers": spec.n_layers,
        "hidden_size": spec.d_model,
        "num_attention_heads": spec.n_heads,
        "num_key_value_heads": spec.n_kv_heads,
        "head_dim": spec.head_dim,
        "intermediate_size": spec.d_ff,
        "vocab_size": spec.vocab_size,
        "max_position_embeddings": spec.max_context,
        "tie_word_embeddings": False,
    }


def llm_viewer_call(checkout: Path, spec: rf.ModelSpec, context: int) -> Callable[[], Any]:
    """One LLM-Viewer analysis of ``spec`` on its H100 SXM entry at batch 1, fp16 weights/activations/KV."""
    sys.path.insert(0, str(checkout))
    cwd = os.getcwd()
    os.chdir(checkout)  # it imports its configs/ relative to its own folder
    try:
        from model_analyzer import ModelAnalyzer  # type: ignore[import-not-found]

        folder = Path(tempfile.mkdtemp()) / "Llama-3.1-8B"  # the name picks its configs/Llama.py
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(_hf_config(spec)))
        with contextlib.redirect_stdout(io.StringIO()):
            analyzer = ModelAnalyzer(str(folder), "nvidia_H100_SXM", config_file="configs/Llama.py")
    finally:
        os.chdir(cwd)
    return lambda: analyzer.analyze(context, 1, w_bit=16, a_bit=16, kv_bit=16)


def main(argv: list[str] | None = None) -> dict[str, float]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=2000, help="calls per timed loop")
    ap.add_argument("--llm-viewer", type=Path, default=None, help="a checkout of github.com/hahnyuan/LLM-Viewer")
    ap.add_argument("--no-record", action="store_true", help="print, do not write BENCHMARKS.md")
    args = ap.parse_args(argv)
    spec = rf.get_model("llama-3.1-8b")
    pr = rf.Pricing.of("h100-sxm-80gb")
    d = rf.as_drafter("llama-3.2-1b")
    n = args.calls
    configs = distinct_configs()
    rows: dict[str, float] = {
        "pass_time(spec, pricing, 1, 1, 1024)": per_call_us(lambda: rf.pass_time(spec, pr, 1, 1, 1024), n),
        "pass_time(spec, 'h100-sxm-80gb', 1, 1, 1024)": per_call_us(
            lambda: rf.pass_time(spec, "h100-sxm-80gb", 1, 1, 1024), n
        ),
        "forward_cost(spec, 1, 1, 1024) (the cost model alone)": per_call_us(
            lambda: forward_cost(spec, 1, 1, 1024, weight_dtype="bf16"), n
        ),
        "speedup(pricing, spec, draft 1B, 0.8, gamma 4)": per_call_us(lambda: rf.speedup(pr, spec, d, 0.8, 4), n // 4),
        "predict_speedup(pricing, draft 1B, alpha 0.8, gamma 4)": per_call_us(
            lambda: rf.predict_speedup(hardware=pr, target=spec, drafter=d, alpha=0.8, gamma=4), n // 4
        ),
        "predict_speedup(pricing, eagle3 tree, mean 3.0)": per_call_us(
            lambda: rf.predict_speedup(hardware=pr, target=spec, drafter="eagle3", mean_accepted=3.0), n // 4
        ),
        "speedup(pricing, spec, draft 1B, 840 distinct (gamma, alpha, context, batch))": per_call_us(
            cycling(lambda g, a, c, b: rf.speedup(pr, spec, d, a, g, batch=b, context=c), configs), n // 4
        ),
        "predict_speedup(pricing, draft 1B, 840 distinct (gamma, alpha, context, batch))": per_call_us(
            cycling(
                lambda g, a, c, b: rf.predict_speedup(
                    hardware=pr, target=spec, drafter=d, alpha=a, gamma=g, batch=b, context=c
                ),
                configs,
            ),
            n // 4,
        ),
    }
    if args.llm_viewer is not None:
        rows["LLM-Viewer ModelAnalyzer.analyze(1024, batch 1, 16-bit)"] = per_call_us(
            llm_viewer_call(args.llm_viewer, spec, 1024), max(50, n // 20)
        )
    load = os.getloadavg()
    lines = [
        f"One call on scalars, Llama-3.1-8B on an H100 SXM, batch 1, context 1024, bf16 (target: <= {TARGET_US:g} us "
        f"per pass_time/speedup/predict_speedup call). Load average at the end: {load[0]:.2f}, {load[1]:.2f}, "
        f"{load[2]:.2f} (1, 5, 15 min). Fastest of {REPEATS} loops; LLM-Viewer: commit 472f71f of hahnyuan/LLM-Viewer, "
        "its `nvidia_H100_SXM` entry.",
        "",
        "| call | us per call | <= 20 us |",
        "|---|---|---|",
    ]
    for name, us in rows.items():
        counts = name.startswith(("pass_time", "speedup", "predict_speedup"))
        lines.append(f"| `{name}` | {us:.1f} | {('yes' if us <= TARGET_US else 'no') if counts else '-'} |")
    viewer = next((us for name, us in rows.items() if name.startswith("LLM-Viewer")), None)
    if viewer is not None:  # the same run, the same load: the ratio is the figure that travels between machines
        lines += [
            "",
            "Against LLM-Viewer's analysis in this run (same load; the issue's target is 5x): "
            + ", ".join(
                f"`{name.split('(')[0]}` "
                + (f"{viewer / us:.1f}x faster" if us <= viewer else f"{us / viewer:.1f}x slower")
                for name, us in rows.items()
                if name.startswith(("pass_time(spec, pricing", "speedup", "predict_speedup(pricing, draft"))
            )
            + ".",
        ]
    text = "\n".join(lines)
    if args.no_record:
        print(text)
    else:
        shown = ["python -m benchmarks.bench_scalar"]
        if args.llm_viewer is not None:
            shown.append("--llm-viewer LLM-Viewer")  # the checkout's own path stays off the page
        argv_text = " ".join(shown)
        record("scalar calls (pass_time, speedup, predict_speedup)", text, argv_text)
    return rows


if __name__ == "__main__":
    main()

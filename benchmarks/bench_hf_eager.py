"""Hugging Face eager decoding and a torch.compile'd step on the GPU at hand: held-out rows for the engines.

Spec-Bench measured its speedups under Hugging Face eager PyTorch (2.0.1) and the
``eager`` engine profile is fitted to them; gpt-fast's tables under torch.compile with
CUDA graphs fit ``compiled``. This measures both regimes on whatever GPU runs it, with
random weights of Llama-2-7B's shape (no download: decode speed does not depend on the
values), so the profiles can be checked on another GPU, PyTorch and host:

* ``hf_eager``: ``LlamaForCausalLM.generate`` at batch 1, greedy, a 16-token prompt and
  ``--tokens`` new tokens (EOS disabled), tokens per second after a warm-up;
* ``compiled``: the static-shape step of ``bench_engine_overhead`` under
  ``torch.compile(mode="reduce-overhead")``, gpt-fast's setting (inductor skips CUDA graphs
  for this step, which writes its KV cache and token in place: fused kernels, one launch each).

    python -m benchmarks.bench_hf_eager --json hf.json          (on the GPU)
    python -m benchmarks.bench_hf_eager --record-from hf.json   (here: into BENCHMARKS.md)
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from benchmarks.bench_engine_overhead import Shape, build_step, time_step

LLAMA2_7B = dict(
    vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32,
    num_key_value_heads=32, max_position_embeddings=4096,
)  # fmt: skip


def hf_eager(device: torch.device, tokens: int, layers: int | None = None) -> dict[str, float]:
    """Tokens per second of Hugging Face ``generate`` (eager) on random Llama-2-7B-shaped weights."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(**{**LLAMA2_7B, **({"num_hidden_layers": layers} if layers else {})})
    with torch.device(device):
        model = LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    prompt = torch.randint(0, cfg.vocab_size, (1, 16), device=device)
    kw = dict(do_sample=False, max_new_tokens=tokens, min_new_tokens=tokens)
    with torch.no_grad():
        model.generate(prompt, **{**kw, "max_new_tokens": 8, "min_new_tokens": 8})  # warm-up
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = model.generate(prompt, **kw)
        if device.type == "cuda":
            torch.cuda.synchronize()
        dt = time.perf_counter() - t0
    n = int(out.shape[1] - prompt.shape[1])
    return {"tokens": n, "seconds": dt, "tokens_per_s": n / dt, "layers": cfg.num_hidden_layers}


def compiled(device: torch.device, context: int, repeats: int) -> dict[str, float]:
    """Median seconds of the Llama-2-7B-shaped step under torch.compile with CUDA graphs."""
    step = build_step(Shape("llama-2-7b-like", 4096, 32, 32, 11008), context, device, torch.bfloat16)
    fast = torch.compile(step, mode="reduce-overhead", fullgraph=True)
    t0 = time.perf_counter()
    with torch.no_grad():
        t = time_step(fast, device, repeats, warmup=5)
    return {"step_s": t, "tokens_per_s": 1.0 / t, "compile_and_time_s": time.perf_counter() - t0}


def record_from(path: str) -> None:
    from benchmarks.record import record

    res = json.load(open(path))
    lines = [f"Random weights of Llama-2-7B's shape, bf16, batch 1 ({res['device_name']}, torch {res['torch']}"
             f"{', transformers ' + res['transformers'] if res.get('transformers') else ''}).", ""]  # fmt: skip
    if "hf_eager" in res:
        h = res["hf_eager"]
        lines.append(
            f"* Hugging Face `generate`, eager: {h['tokens_per_s']:.1f} tokens/s ({h['tokens']} tokens in {h['seconds']:.2f} s)"
        )
    if "compiled" in res:
        c = res["compiled"]
        lines.append(
            f"* the static step under torch.compile (mode reduce-overhead; inductor skips CUDA graphs for a step that "
            f"mutates its inputs, so these are fused kernels launched per pass): {c['tokens_per_s']:.1f} tokens/s "
            f"({c['step_s'] * 1e3:.2f} ms per step; compiling and timing took {c['compile_and_time_s']:.0f} s)"
        )
    for k, v in res.get("errors", {}).items():
        lines.append(f"* {k}: failed ({v})")
    record(
        "Hugging Face eager and torch.compile on a GPU",
        "\n".join(lines),
        "python -m benchmarks.bench_hf_eager --json hf.json (on the GPU), then --record-from hf.json",
        machine_line=f"{res['device_name']}, torch {res['torch']}",
        date=res.get("date"),
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--layers", type=int, default=None, help="fewer layers (a CPU check of the plumbing)")
    ap.add_argument("--skip-compile", action="store_true")
    ap.add_argument("--json")
    ap.add_argument("--record-from", metavar="JSON")
    a = ap.parse_args()
    if a.record_from:
        record_from(a.record_from)
        return
    dev = torch.device(a.device)
    res: dict[str, object] = {
        "device_name": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "date": time.strftime("%Y-%m-%d"),
        "errors": {},
    }
    try:
        import transformers

        res["transformers"] = transformers.__version__
        res["hf_eager"] = hf_eager(dev, a.tokens, a.layers)
        print("hf eager:", res["hf_eager"], flush=True)
    except Exception as e:  # a missing or incompatible transformers: keep the other half
        res["errors"]["hf_eager"] = f"{type(e).__name__}: {e}"  # type: ignore[index]
    if not a.skip_compile and dev.type == "cuda":
        try:
            res["compiled"] = compiled(dev, 512, 50)
            print("compiled:", res["compiled"], flush=True)
        except Exception as e:
            res["errors"]["compiled"] = f"{type(e).__name__}: {e}"  # type: ignore[index]
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()

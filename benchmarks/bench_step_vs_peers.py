"""specroof's decode step and verify pass against gpt-fast's model.py and Hugging Face's Llama, same run.

Three implementations of one Llama-style shape hold the SAME weight tensors (the
peers' parameters are views of specroof's fused ones, so no copy and no extra
memory): ``measure.models.Transformer`` with its default paths, gpt-fast's
``model.py`` (eager, loaded from a checkout given on the command line; it is
not a dependency of specroof) and ``transformers.LlamaForCausalLM`` (eager, SDPA
attention, a ``DynamicCache``: what ``generate`` uses). Each is timed on a pass of
``n`` new tokens after ``--context`` cached ones, batch 1: n = 1 is the decode
step, n = 2 the verify pass of gamma 1, n = 5 that of gamma 4, n = 64 a long verify. The cached keys and
values are random (a pass's time does not depend on them); logit parity of
specroof and Hugging Face is checked on a real prefill per width (fp32).

The host is shared, so the three (and a copy-bandwidth sample, for one-token
steps) are timed in one interleaved loop, in rotating order, one call each per
round; a ratio is the median over rounds of the peer's time over specroof's in
that round (with its range over rounds: a peer is faster only where it was in every
round, else the cell is within the host's noise), and times are the minimum over rounds. Shapes: the offline pair's
target (``measure.pair``) widened x1, x4 and x16 (``measure.pair.widened_spec``).

    python -m benchmarks.bench_step_vs_peers --gpt-fast GPT_FAST_CHECKOUT/model.py --gpt-fast-rev COMMIT

The threads are chosen as ``measure spec`` chooses them (``measure.choose.choose_threads``)
and are the same for all three. Not a test: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np
import torch
from torch import nn

from benchmarks.record import record
from measure.choose import choose_threads
from measure.device import describe
from measure.models import Transformer
from measure.pair import PairConfig, widened_spec
from measure.timing import time_fn
from roofline.passes.model import ModelSpec


def load_gpt_fast(path: str) -> ModuleType:
    """gpt-fast's ``model.py`` as a module, from a checkout (read at run time, never copied)."""
    spec = importlib.util.spec_from_file_location("gpt_fast_model", path)
    assert spec is not None and spec.loader is not None, path
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _share(module: nn.Module, name: str, tensor: torch.Tensor) -> None:
    setattr(module, name, nn.Parameter(tensor, requires_grad=False))


def gpt_fast_twin(gf: ModuleType, ours: Transformer, max_seq: int) -> nn.Module:
    """gpt-fast's Transformer of the same shape whose parameters are views of ``ours``'s."""
    s = ours.spec
    args = gf.ModelArgs(
        block_size=max_seq, vocab_size=s.vocab_size, n_layer=s.n_layers, n_head=s.n_heads, dim=s.d_model,
        intermediate_size=s.d_ff, n_local_heads=s.n_kv_heads,
    )  # fmt: skip
    assert args.head_dim == s.head_dim, "gpt-fast derives head_dim as dim // n_head"
    with torch.device("meta"):
        m = gf.Transformer(args)
    m.to_empty(device="cpu")  # untouched pages: every parameter is replaced by a view below
    _share(m.tok_embeddings, "weight", ours.embed_tokens.weight)
    _share(m.norm, "weight", ours.norm.weight)
    _share(m.output, "weight", ours.lm_head.weight)
    for g, o in zip(m.layers, ours.layers, strict=True):
        _share(g.attention.wqkv, "weight", o.self_attn.wqkv.weight)
        _share(g.attention.wo, "weight", o.self_attn.o_proj.weight)
        w13 = o.mlp.w13.weight
        _share(g.feed_forward.w1, "weight", w13[: s.d_ff])
        _share(g.feed_forward.w3, "weight", w13[s.d_ff :])
        _share(g.feed_forward.w2, "weight", o.mlp.down_proj.weight)
        _share(g.attention_norm, "weight", o.input_layernorm.weight)
        _share(g.ffn_norm, "weight", o.post_attention_layernorm.weight)
    m.setup_caches(1, max_seq)
    return m.eval()


def hf_twin(ours: Transformer) -> nn.Module:
    """``LlamaForCausalLM`` of the same shape whose parameters are views of ``ours``'s."""
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    s = ours.spec
    cfg = LlamaConfig(
        vocab_size=s.vocab_size, hidden_size=s.d_model, intermediate_size=s.d_ff, num_hidden_layers=s.n_layers,
        num_attention_heads=s.n_heads, num_key_value_heads=s.n_kv_heads, head_dim=s.head_dim,
        max_position_embeddings=s.max_context, rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
        attn_implementation="sdpa",
    )  # fmt: skip
    with torch.device("meta"):
        m = LlamaForCausalLM(cfg)
    m.to_empty(device="cpu")
    m.model.rotary_emb = LlamaRotaryEmbedding(cfg)  # its buffers were on the meta device
    _share(m.model.embed_tokens, "weight", ours.embed_tokens.weight)
    _share(m.model.norm, "weight", ours.norm.weight)
    _share(m.lm_head, "weight", ours.lm_head.weight)
    q, kv = s.n_heads * s.head_dim, s.n_kv_heads * s.head_dim
    for h, o in zip(m.model.layers, ours.layers, strict=True):
        w = o.self_attn.wqkv.weight
        _share(h.self_attn.q_proj, "weight", w[:q])
        _share(h.self_attn.k_proj, "weight", w[q : q + kv])
        _share(h.self_attn.v_proj, "weight", w[q + kv :])
        _share(h.self_attn.o_proj, "weight", o.self_attn.o_proj.weight)
        w13 = o.mlp.w13.weight
        _share(h.mlp.gate_proj, "weight", w13[: s.d_ff])
        _share(h.mlp.up_proj, "weight", w13[s.d_ff :])
        _share(h.mlp.down_proj, "weight", o.mlp.down_proj.weight)
        _share(h.input_layernorm, "weight", o.input_layernorm.weight)
        _share(h.post_attention_layernorm, "weight", o.post_attention_layernorm.weight)
    m.generation_config.pad_token_id = 0
    return m.eval()


def hf_parity(ours: Transformer, hf: nn.Module, prompt: int = 8, n: int = 5) -> float:
    """Max |logit difference| of specroof and HF on a real prefill then an n-token pass (fp32 weights)."""
    from transformers import DynamicCache

    gen = torch.Generator().manual_seed(1)
    toks = torch.randint(0, ours.spec.vocab_size, (1, prompt + n), generator=gen)
    with torch.no_grad():
        ours.setup_cache(1, prompt + n)
        ours(toks[:, :prompt])
        ours.advance(prompt)
        a = ours(toks[:, prompt:]).float()
        cache = DynamicCache(config=hf.config)
        hf(toks[:, :prompt], past_key_values=cache, use_cache=True)
        b = hf(toks[:, prompt:], past_key_values=cache, use_cache=True).logits.float()
    return float((a - b).abs().max())


def pass_calls(
    ours: Transformer, gfm: nn.Module | None, hf: nn.Module, context: int, max_seq: int, n: int
) -> dict[str, Callable[[], Any]]:
    """One zero-argument call per implementation: a pass of ``n`` tokens after ``context`` cached ones."""
    from transformers import DynamicCache

    s = ours.spec
    gen = torch.Generator().manual_seed(0)
    toks = torch.randint(0, s.vocab_size, (1, n), generator=gen)
    ours.setup_cache(1, max_seq)
    for buf in (*ours.cache.k, *ours.cache.v):
        buf.normal_(generator=gen)

    def specroof() -> Any:
        ours.cache.rollback([context])
        return ours(toks)

    cache = DynamicCache(config=hf.config)
    kv_shape = (1, s.n_kv_heads, context, s.head_dim)
    for i in range(s.n_layers):
        cache.update(
            torch.randn(kv_shape, generator=gen).to(ours.dtype), torch.randn(kv_shape, generator=gen).to(ours.dtype), i
        )

    def huggingface() -> Any:
        out = hf(toks, past_key_values=cache, use_cache=True).logits
        cache.crop(-n)  # drop the pass's tokens, as assisted generation does after a verify (a slice per layer)
        return out

    calls: dict[str, Callable[[], Any]] = {"specroof": specroof, "hf": huggingface}
    if gfm is not None:
        for layer in gfm.layers:
            for buf in (layer.attention.kv_cache.k_cache, layer.attention.kv_cache.v_cache):
                buf.normal_(generator=gen)
        pos = torch.arange(context, context + n)
        calls["gpt-fast"] = lambda: gfm(toks, pos)
    return calls


def copy_sampler() -> Callable[[], float]:
    """A copy-bandwidth sample (bytes/s, read + write, best of 3) over buffers allocated once, 4x the LLC."""
    n = max(4 * (describe("cpu").get("llc_bytes") or 32 << 20), 256 << 20) // 4
    src = torch.ones(n)
    dst = torch.empty_like(src)
    return lambda: 8 * n / time_fn(lambda: dst.copy_(src), warmup=1, repeats=3).min_s


def interleaved(
    calls: dict[str, Callable[[], Any]], rounds: int, copy_bw: Callable[[], float] | None
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Seconds per call, (rounds,) per implementation, timed in rotating order; copy bandwidth per round."""
    names = list(calls)
    times: dict[str, list[float]] = {k: [] for k in names}
    copies = []
    with torch.no_grad():
        for f in calls.values():
            time_fn(f, warmup=1, repeats=1)
        for r in range(rounds):
            order = names[r % len(names) :] + names[: r % len(names)]
            for k in order:
                times[k].append(time_fn(calls[k], warmup=0, repeats=1).min_s)
            if copy_bw is not None:
                copies.append(copy_bw())
    return {k: np.array(v) for k, v in times.items()}, np.array(copies)


def rounds_for(t_call_s: float, budget_s: float, lo: int = 3, hi: int = 9) -> int:
    """Rounds that fit ``budget_s`` for three implementations of about ``t_call_s`` each."""
    return int(np.clip(budget_s / max(3 * t_call_s, 1e-6), lo, hi))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--gpt-fast", metavar="MODEL_PY", help="gpt-fast's model.py (from a pytorch-labs/gpt-fast checkout)"
    )
    ap.add_argument("--gpt-fast-rev", default="", help="the gpt-fast commit that model.py is from (for the record)")
    ap.add_argument("--widths", default="1,4,16")
    ap.add_argument("--tokens", default="1,2,5,64")
    ap.add_argument("--dtypes", default="fp32,bf16")
    ap.add_argument("--context", type=int, default=128)
    ap.add_argument("--budget-s", type=float, default=20.0, help="seconds of timing per (width, tokens, dtype)")
    ap.add_argument("--max-call-s", type=float, default=3.0, help="skip a cell whose single call exceeds this")
    ap.add_argument("--threads", type=int, help="torch threads (default: measure.choose.choose_threads)")
    ap.add_argument("--no-record", action="store_true")
    a = ap.parse_args()
    threads, why_threads = (
        (a.threads, f"Threads: {a.threads} (asked for).") if a.threads else choose_threads(torch.device("cpu"))
    )
    torch.set_num_threads(threads)
    print(why_threads, flush=True)
    gf = load_gpt_fast(a.gpt_fast) if a.gpt_fast else None
    widths = [int(x) for x in a.widths.split(",")]
    tokens = [int(x) for x in a.tokens.split(",")]
    max_seq = -(-(a.context + max(tokens)) // 8) * 8  # gpt-fast rounds its cache to a multiple of 8
    load0, t0 = os.getloadavg(), time.perf_counter()
    rows, notes = [], []
    copy_bw = copy_sampler()
    base = PairConfig().target_spec()
    for dtype in a.dtypes.split(","):
        for w in widths:
            spec: ModelSpec = widened_spec(base, w) if w > 1 else base
            torch.manual_seed(0)
            ours = Transformer(spec, dtype=dtype)
            hf = hf_twin(ours)
            if dtype == "fp32":
                notes.append(f"x{w}: max |logit difference| specroof vs Hugging Face {hf_parity(ours, hf):.1e} (fp32)")
            gfm = gpt_fast_twin(gf, ours, max_seq) if gf is not None else None
            wbytes = ours.weight_bytes()
            chosen = ours.choose_kernels()  # what setup_cache does by default; done here to report it
            notes.append(
                f"x{w} {dtype}: specroof's kernels per weight shape (rows: kernel) "
                + "; ".join(f"{o}x{i} " + ", ".join(f"{r}: {k}" for r, k in c.items()) for (o, i), c in chosen.items())
                + "; attention (queries per KV head: kernel) "
                + ", ".join(f"{r}: {k}" for r, k in ours.layers[0].self_attn.kernels.items())
            )
            for n in tokens:
                calls = pass_calls(ours, gfm, hf, a.context, max_seq, n)
                with torch.no_grad():
                    t_est = time_fn(calls["specroof"], warmup=1, repeats=1).min_s
                if t_est > a.max_call_s:
                    notes.append(f"x{w} {dtype} n={n}: skipped (one call {t_est:.1f} s > --max-call-s)")
                    continue
                times, copies = interleaved(calls, rounds_for(t_est, a.budget_s), copy_bw if n == 1 else None)
                ref = times["specroof"]
                row = {
                    "dtype": dtype, "width": w, "d_model": spec.d_model, "weights_GB": wbytes / 1e9, "n": n,
                    "rounds": len(ref), "specroof_ms": ref.min() * 1e3,
                }  # fmt: skip
                for peer in ("gpt-fast", "hf"):
                    if peer in times:
                        row[f"{peer}_ms"] = times[peer].min() * 1e3
                        per_round = times[peer] / ref
                        row[f"{peer}_ratio"] = float(np.median(per_round))
                        row[f"{peer}_ratio_lo"], row[f"{peer}_ratio_hi"] = (
                            float(per_round.min()),
                            float(per_round.max()),
                        )
                if n == 1:
                    row["copy_GBps"] = float(np.median(copies)) / 1e9
                    row["of_copy"] = float(np.median(wbytes / ref / copies))
                    row["of_copy_best"] = float(wbytes / ref.min() / np.median(copies))
                rows.append(row)
                print(row, flush=True)
            del ours, hf, gfm, calls
    load1, wall = os.getloadavg(), time.perf_counter() - t0
    if a.no_record:
        return
    lines = [
        "| dtype | width (d_model) | weights GB | new tokens | specroof ms | gpt-fast ms | gpt-fast / specroof "
        "| HF ms | HF / specroof | specroof step / copy bandwidth (best) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]

    def cell(r: dict[str, Any], peer: str) -> str:
        lo, hi = r[f"{peer}_ratio_lo"], r[f"{peer}_ratio_hi"]
        return f"{peer} {r[f'{peer}_ratio']:.2f}x ({lo:.2f}-{hi:.2f} over {r['rounds']} rounds) at {r['dtype']} x{r['width']} n={r['n']}"

    below = [(r, peer) for r in rows for peer in ("gpt-fast", "hf") if r.get(f"{peer}_ratio", 1.0) < 1.0]
    # a peer is faster where it was in every round; a median below 1 with a round above it is the host's noise
    behind = [cell(r, p) for r, p in below if r[f"{p}_ratio_hi"] < 1.0]
    noise = [cell(r, p) for r, p in below if r[f"{p}_ratio_hi"] >= 1.0]
    notes.insert(0, "Cells where a peer was faster in every round: " + ("; ".join(behind) or "none") + ".")
    notes.insert(1, "Cells with a median ratio below 1 but a round above it (the host's noise, not a result): "
                 + ("; ".join(noise) or "none") + ".")  # fmt: skip
    for r in rows:
        gfc = f"{r['gpt-fast_ms']:.2f} | {r['gpt-fast_ratio']:.2f}x" if "gpt-fast_ms" in r else "- | -"
        bw = f"{r['of_copy']:.0%} ({r['of_copy_best']:.0%}) of {r['copy_GBps']:.1f} GB/s" if r["n"] == 1 else "-"
        lines.append(
            f"| {r['dtype']} | x{r['width']} ({r['d_model']}) | {r['weights_GB']:.3f} | {r['n']} | {r['specroof_ms']:.2f} "
            f"| {gfc} | {r['hf_ms']:.2f} | {r['hf_ratio']:.2f}x | {bw} |"
        )
    import transformers

    body = (
        f"Load average {' / '.join(f'{x:.2f}' for x in load0)} (1/5/15 min) at the start, "
        f"{' / '.join(f'{x:.2f}' for x in load1)} at the end; {wall:.0f} s; torch {torch.__version__} "
        f"({why_threads}), transformers {transformers.__version__}"
        + (
            f", gpt-fast's model.py (pytorch-labs/gpt-fast{' at ' + a.gpt_fast_rev if a.gpt_fast_rev else ''}, eager)"
            if a.gpt_fast
            else ", gpt-fast not given"
        )
        + f". Batch 1, context {a.context}, the same weight tensors in all three; times are the minimum over "
        "interleaved rounds, ratios the median over rounds of the peer's time over specroof's in the same round "
        "(above 1: specroof is faster; a peer counts as faster only where it was in every round). Bandwidth: weight bytes per step (no embedding table) over the step time, "
        "against a copy-bandwidth sample taken in each round (median of per-round ratios; best step in brackets).\n\n"
        + "\n".join(lines)
        + "\n\n"
        + "\n".join(f"* {x}" for x in notes)
        + "\n"
    )
    record(
        "decode step and verify pass vs gpt-fast and Hugging Face (CPU)",
        body,
        "python -m benchmarks.bench_step_vs_peers --gpt-fast GPT_FAST_CHECKOUT/model.py --gpt-fast-rev COMMIT"
        + (f" --threads {a.threads}" if a.threads else ""),
    )


if __name__ == "__main__":
    main()

"""A Llama-style decoder with a static batched KV cache, per-sequence lengths and tree masks.

One readable model file in the spirit of gpt-fast: RMSNorm, RoPE (Hugging Face's
rotate-half layout, so HF weights load unpermuted), grouped-query attention,
SwiGLU, optional MoE layers. Built from a ``roofline.ModelSpec`` with random
weights (latency does not depend on weight values) or loaded from a Hugging Face
checkpoint folder (config.json + safetensors) for Llama / Mistral / Qwen2 layouts.

The cache holds ``max_batch`` sequences of up to ``max_seq`` tokens; each sequence
has its own length. A forward pass takes ``n`` new tokens per sequence, written at
cache slots ``length .. length + n - 1``, with a causal or tree mask over them.
Attention reads only the first ``max(length) + n`` slots, so its cost follows the
real context, not the cache's capacity. Rolling back is setting a length; a tree
commit gathers the accepted path's KV into contiguous slots.

:meth:`Transformer.forward_static` is the same pass with static shapes and device inputs
only (each row's length a device tensor, a context bucket of the cache attended, masks and
the KV scatter computed on the device): what ``measure.graphs`` captures as CUDA graphs.
The CPU's default stays the eager pass, whose kernels are timed per weight shape.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from measure.buckets import context_bucket  # noqa: F401  (the graphs and the checks import it from here)
from roofline.core.errors import SpecroofError
from roofline.passes.model import ModelSpec

TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def dtype_name(dtype: torch.dtype) -> str:
    """The specroof name of a torch dtype (``torch.bfloat16`` -> ``"bf16"``)."""
    for name, td in TORCH_DTYPES.items():
        if td == dtype:
            return name
    raise SpecroofError(f"no specroof name for {dtype}; supported: {', '.join(TORCH_DTYPES)}")


@dataclass(frozen=True)
class RopeConfig:
    """Rotary embedding settings (HF names): base theta and optional llama3 frequency scaling."""

    theta: float = 10000.0
    scaling: dict[str, Any] | None = None


def rope_config_from_hf(cfg: dict[str, Any]) -> RopeConfig:
    """Rope settings from a HF config: old layout (rope_theta, rope_scaling) or v5 (rope_parameters)."""
    params = cfg.get("rope_parameters") or {}
    theta = cfg.get("rope_theta", params.get("rope_theta", 10000.0))
    scaling = cfg.get("rope_scaling") or (params if params.get("rope_type", "default") != "default" else None)
    return RopeConfig(float(theta), scaling)


def rope_frequencies(head_dim: int, max_pos: int, cfg: RopeConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin tables, (max_pos, head_dim), in HF's concatenated [f, f] layout."""
    inv = 1.0 / (cfg.theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    sc = cfg.scaling or {}
    kind = sc.get("rope_type", sc.get("type"))
    if kind == "llama3":
        factor, lo, hi = sc["factor"], sc.get("low_freq_factor", 1.0), sc.get("high_freq_factor", 4.0)
        old = sc.get("original_max_position_embeddings", 8192)
        wavelen = 2 * math.pi / inv
        smooth = (old / wavelen - lo) / (hi - lo)
        scaled = torch.where(wavelen > old / lo, inv / factor, inv)
        mid = (wavelen <= old / lo) & (wavelen >= old / hi)
        inv = torch.where(mid, (1 - smooth) * inv / factor + smooth * inv, scaled)
    elif kind not in (None, "default"):
        raise SpecroofError(f"rope scaling type {kind!r} is not supported (supported: default, llama3)")
    t = torch.arange(max_pos, dtype=torch.float64)
    freqs = torch.outer(t, inv)
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos().float(), emb.sin().float()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin_signed: torch.Tensor) -> torch.Tensor:
    """x: (B, H, n, D); cos and sin_signed: (B, 1, n, D) in x's dtype.

    ``sin_signed`` is sin with its first half negated, so rotate-half becomes one cat
    and one fused multiply-add (three ops instead of six on the hot path).
    """
    half = x.shape[-1] // 2
    return torch.addcmul(x * cos, torch.cat([x[..., half:], x[..., :half]], dim=-1), sin_signed)


def sign_half(sin: torch.Tensor) -> torch.Tensor:
    """sin with the first half of its last axis negated (see :func:`apply_rope`)."""
    half = sin.shape[-1] // 2
    return torch.cat([-sin[..., :half], sin[..., half:]], dim=-1)


#: a pass's rows (tokens x batch) -> the row count its kernel is probed at: one token, two (a gamma-1 verify,
#: a batch of two decoding), a few, many
PROBE_ROWS = (1, 2, 5, 64)


#: the max rows of each probed range between one row and the widest (:func:`rows_bucket`'s bounds): where
#: the sweep has points in one and the data support it, the fit gives its kernels a streaming rate of their
#: own (``TimeModel.rows_bandwidth_bytes_per_s``), as one-token passes have the gemv rate
ROWS_TOPS = (2, 16)


def rows_bucket(rows: int) -> int:
    """The probed row count whose kernel choice applies to a pass of ``rows`` rows."""
    return rows if rows <= ROWS_TOPS[0] else (5 if rows <= ROWS_TOPS[1] else 64)


#: the rows of a pass each probed row count's kernel choice covers (:func:`rows_bucket`), as the page names them
ROWS_RANGES = {1: "1", 2: "2", 5: "3-16", 64: ">16"}


def onednn_available() -> bool:
    """Whether this torch build has oneDNN's inner-product op (what inductor's CPU freezing path calls)."""
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def pack_weight(weight: torch.Tensor) -> torch.Tensor:
    """``weight`` reordered once into oneDNN's blocked layout (an opaque ``torch._mkldnn`` tensor, a copy).

    What inductor's CPU freezing pass does to every linear weight before the product that reads it
    (``mkldnn._reorder_linear_weight``): eager oneDNN reorders a plain bf16 weight on every call.
    """
    return torch.ops.mkldnn._reorder_linear_weight(weight, None)


#: kernels that read a copy of the weight made once (:meth:`Linear.weight_copy`), not the weight itself
COPY_KERNELS = ("transposed", "packed")


def make_copy(kind: str, weight: torch.Tensor) -> torch.Tensor:
    """The copy of ``weight`` the ``COPY_KERNELS`` kernel ``kind`` reads: "transposed", the transpose stored
    contiguous (in_features x out_features); "packed", the weight in oneDNN's layout (:func:`pack_weight`)."""
    return weight.t().contiguous() if kind == "transposed" else pack_weight(weight)


def copies_fit(weight_bytes: float, device: torch.device, kinds: int = 1) -> bool:
    """Whether ``kinds`` copies of ``weight_bytes`` of weights (a layer's per copy kernel) may be kept: while they
    take at most a quarter of the memory still available (or it cannot be told)."""
    from measure.device import device_memory

    _, available = device_memory(device)
    return available is None or kinds * weight_bytes <= available / 4


#: output features per product of the "split" kernel (a block of the weight's rows)
SPLIT_ROWS = 1024
#: output features per batch entry of the "bmm" kernel
BMM_ROWS = 64
#: blocks of input features the "transposed" kernel's batched product runs over (one per thread, up to 4)
K_SPLITS = 4


def kernel_candidates(out_features: int, rows: int) -> list[str]:
    """The kernels :func:`fastest_linear` times for a ``rows``-row product with an ``out_features``-row weight.

    The batched product over blocks is a candidate for one row too: on a Zen 3 EPYC with two threads it streamed a
    24576 x 4096 fp32 weight for one row in 11.9 ms against 15.3-21.1 for every other kernel (one thread per
    block of output features, where torch.mv and oneDNN's one-row paths left a thread waiting)."""
    return (
        ["gemm"]
        + (["mv"] if rows == 1 else [])
        + (["transposed"] if rows <= 16 else [])
        + (["split"] if rows > 1 and out_features > SPLIT_ROWS else [])
        + (["bmm"] if rows <= 16 and out_features % BMM_ROWS == 0 and out_features > BMM_ROWS else [])
        + (["onednn", "packed"] if onednn_available() else [])
    )


def run_linear(
    kind: str,
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    weight_t: torch.Tensor | None = None,
    packed: torch.Tensor | None = None,
) -> torch.Tensor:
    """``x @ weight.T + bias`` with the kernel ``kind``: "gemm" (F.linear), "mv" (one row), "onednn",
    "split" (F.linear per block of ``SPLIT_ROWS`` output features, concatenated), "bmm" (one batched
    product over blocks of ``BMM_ROWS`` output features, for a few rows), "transposed" (``x @ weight_t``,
    ``weight_t`` the weight's transpose stored contiguous: made here when not given) or "packed" (oneDNN's
    inner product over ``packed``, the weight reordered once by :func:`pack_weight`: made here when not given).

    Why "packed": eager oneDNN reorders a plain weight into its blocked layout inside every product (the
    "onednn" kernel pays that each call); packed once, as inductor's freezing pass does, the reorder is gone. On
    an AMD EPYC (Zen 5, AVX-512 with bf16 dot products) one- and two-row products with the x4 target's weights,
    streamed from memory at 1 and 2 threads, ran packed at 10-39 GB/s of weight in bf16 against 4-17 through
    every other kernel, and at 14-42 in fp32 against 6-26 (medians, benchmarks/bench_linear_kernels.py,
    BENCHMARKS.md); the x16 bf16 one-token step went from 98 to 45-53 ms.

    Why "transposed": one thread's matrix-vector kernels (MKL's and oneDNN's) streamed a 6144 x 1024
    fp32 weight from memory at 11.8-13.6 GB/s on an AMD EPYC (Zen 3, AVX2) and its stored transpose at
    15.3-18.6 (medians of interleaved rounds over 200 MB of weights, benchmarks/bench_linear_kernels.py):
    with the input features as rows, the output row (24 KB) stays in L1 while the weight streams once,
    front to back. Two threads gained nothing on one such product (17.2 GB/s), so the input features
    are cut into ``K_SPLITS`` blocks whose products run as one batched product, a thread per block,
    and are summed: 18.1-25.1 GB/s against oneDNN's 18.9-20.5 over two runs (20.8 against 18.6 for
    3072 x 1024). On the narrow 256 x 1024 head it was the slowest, and which kernel wins moves with
    the shape, the threads and the run, so it is one more candidate the probe times, not a rule.

    Why "split": one thread's MKL sgemm on an AMD EPYC (Zen 3, AVX2) ran a 64-row product with a
    6144 x 1024 weight at 69 GFLOP/s whole and 76 in blocks of 1536 rows, and a 64-row one with
    12288 x 4096 at 52 whole and 71 in blocks of 1536: a wide output is slower per FLOP than the
    same weight in square-ish blocks (Hugging Face's separate gate/up and q/k/v projections
    beat the fused ones on 64-token passes for this reason). The concatenation copies only the
    output, a small fraction of the weight's bytes at these row counts.

    Why "bmm": on the same CPU every GEMM kernel ran a 2-row product with a 6144 x 1024 fp32 weight at
    7-10 GB/s of weight, against 15-19 for one row (small products are not streamed at the memory's
    rate); as one batched product over 64-row blocks it streamed at 11-13, and the 0.22 GB target's
    2-token pass took 22 ms against oneDNN's 28.
    """
    if kind == "bmm":
        n, k = weight.shape
        m = x.numel() // k
        blocks = weight.view(n // BMM_ROWS, BMM_ROWS, k).transpose(1, 2)
        y = torch.bmm(x.reshape(1, m, k).expand(blocks.shape[0], m, k), blocks)  # (blocks, m, BMM_ROWS)
        y = y.transpose(0, 1).reshape(*x.shape[:-1], n)
        return y if bias is None else y + bias
    if kind == "split":
        n = weight.shape[0]
        return torch.cat(
            [
                F.linear(x, weight[i : i + SPLIT_ROWS], None if bias is None else bias[i : i + SPLIT_ROWS])
                for i in range(0, n, SPLIT_ROWS)
            ],
            dim=-1,
        )
    if kind == "transposed":
        wt = weight.t().contiguous() if weight_t is None else weight_t
        k, n = wt.shape
        m = x.numel() // k
        if k % K_SPLITS:
            y = x.reshape(m, k) @ wt
        else:  # K_SPLITS products over consecutive blocks of input features, batched (a thread each), summed
            y = torch.bmm(x.reshape(m, K_SPLITS, k // K_SPLITS).transpose(0, 1), wt.view(K_SPLITS, k // K_SPLITS, n))
            y = y.sum(0)
        if bias is not None:
            y = y + bias
        return y.view(*x.shape[:-1], wt.shape[1])
    if kind == "mv":
        y = torch.mv(weight, x.reshape(-1))
        if bias is not None:
            y = y + bias
        return y.view(*x.shape[:-1], weight.shape[0])
    if kind == "onednn":
        return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")
    if kind == "packed":
        return torch.ops.mkldnn._linear_pointwise(
            x, pack_weight(weight) if packed is None else packed, bias, "none", [], ""
        )
    return F.linear(x, weight, bias)


#: bytes of a weight a kernel probe times (its leading rows)
PROBE_BYTES = 64 << 20

#: (device, dtype, out, in, rows, threads) -> the fastest kernel measured there, once per process
_KERNEL_CHOICE: dict[tuple[Any, ...], str] = {}


def probe_rows(weight: torch.Tensor) -> int:
    """Rows of the leading block of ``weight`` that a kernel probe times in place of the whole weight."""
    # past a few LLCs a block streams from memory like the rest (a 4 MB block made a 64-row fp32
    # product pick F.linear where oneDNN was 15% faster on the whole 12288 x 4096 weight), and the
    # probe stays under a second per shape
    keep = max(1, min(weight.shape[0], PROBE_BYTES // (weight.shape[1] * weight.element_size())))
    if keep < weight.shape[0] and keep >= BMM_ROWS:
        keep -= keep % BMM_ROWS  # whole blocks of the batched kernel, or the probe could not time it
    return keep


#: a candidate kernel is timed again only while its best time is within this factor of the fastest's: on an AVX2
#: EPYC beside a busy core one kernel's own timings of a pass moved by up to 1.4x from round to round, and the losers
#: of a shape were 1.5-3x the winner; re-timing them took a third of the harness's kernel choice
RACE_FACTOR = 1.5


def still_in_race(calls: dict[str, Callable[[], Any]], best: dict[str, float]) -> dict[str, Callable[[], Any]]:
    """The candidates of ``calls`` whose best time so far is within ``RACE_FACTOR`` of the fastest one's."""
    fastest = min(best.values())
    return {kd: f for kd, f in calls.items() if best[kd] <= RACE_FACTOR * fastest}


def fastest_linear(
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    rows: int,
    repeats: int = 3,
    stream_bytes: int = 0,
    copies: bool = True,
) -> str:
    """The fastest kernel for a ``rows``-row product with ``weight`` on its device, timed once and cached.

    ``stream_bytes``: bytes of weights a pass of the model reads between two uses of this one
    (:meth:`Transformer.stream_bytes`); each timing cycles through copies of the probed block
    until it has read that many (up to ``PROBE_BYTES``), so a weight smaller than the last-level
    cache is timed streaming from memory, as it runs in a model that does not fit the cache, and
    not from the cache a lone repeated product leaves it in (on the EPYC a 25 MB 6144 x 1024 fp32
    weight, timed alone, picked torch.mv; cycled through 64 MB, its transpose, 1.3x as fast).
    ``copies=False`` leaves out the kernels that read a copy of the weight (``COPY_KERNELS``).

    Which kernel is fastest is a property of the CPU and its libraries, not a constant:
    on an AMD EPYC (Zen 3, AVX2, one thread) a 5-row fp32 product with a 12288 x 4096
    weight took 41 ms in F.linear (MKL) and 23 ms in oneDNN's inner product, a 1-row one
    8.3 and 8.4 ms; end to end that made the 5-token verify pass of a 3.5 GB fp32 model
    407 ms against Hugging Face's 665 (benchmarks/bench_step_vs_peers.py). On one Xeon the bf16 GEMM
    streamed one row at ~70% of torch.mv's rate, on a Zen 5 torch.mv was the slower.
    Candidates whose kernel does not exist for the dtype here (oneDNN bf16 without
    AVX-512 or AMX) are skipped; the candidates are timed interleaved, best of ``repeats``.
    """
    return fastest_linears(weight, bias, (rows,), repeats, stream_bytes, copies)[rows]


def fastest_linears(
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    rows: Sequence[int],
    repeats: int = 3,
    stream_bytes: int = 0,
    copies: bool = True,
) -> dict[int, str]:
    """:func:`fastest_linear` for each row count of ``rows``, the probed blocks and their copies made once for all.

    The copies a timing cycles through, their transposes and their oneDNN packings are the same for every row
    count; made per row count, the packings alone took a quarter of a model's kernel choice on an AVX2 EPYC.
    """
    from measure.timing import time_fn

    dev = weight.device
    stream = min(int(stream_bytes), PROBE_BYTES)
    keys = {r: (str(dev), weight.dtype, *weight.shape, r, torch.get_num_threads(), stream, copies) for r in rows}
    out = {r: _KERNEL_CHOICE[key] for r, key in keys.items() if key in _KERNEL_CHOICE}
    if dev.type != "cpu":
        return {r: "gemm" for r in rows}
    todo = [r for r in dict.fromkeys(rows) if r not in out]
    if not todo:
        return out
    kinds_of = {
        r: [kd for kd in kernel_candidates(weight.shape[0], r) if copies or kd not in COPY_KERNELS] for r in todo
    }
    every = {kd for kinds in kinds_of.values() for kd in kinds}
    n, k = weight.shape
    keep = probe_rows(weight)
    # the transposed kernel's block is the leading input features at the weight's whole output width (the output
    # row it accumulates is as wide as in the model: 48 KB at 12288 features, past L1, is not 16 KB), about as many
    # bytes as the others' leading output rows; the kernels are compared per byte read
    keep_in = k if keep == n else max(1, min(k, round(keep * k / n)))
    bias_rows = None if bias is None else bias[:keep]
    el = weight.element_size()
    with torch.inference_mode():

        def cycled(block: torch.Tensor) -> list[torch.Tensor]:
            n_blocks = max(1, -(-stream // (block.numel() * el)))
            return [block] + [block.clone() for _ in range(n_blocks - 1)]

        rows_blocks = cycled(weight[:keep])
        # (the transposes are made here, not timed: a model makes its copy once)
        t_blocks = cycled(weight[:, :keep_in].t().contiguous()) if "transposed" in every else []
        p_blocks: list[torch.Tensor] = []
        if "packed" in every:
            try:
                p_blocks = [pack_weight(w) for w in rows_blocks]
            except RuntimeError:  # oneDNN has no such layout for this dtype here
                for kinds in kinds_of.values():
                    kinds[:] = [kd for kd in kinds if kd != "packed"]
        for r in todo:
            x = torch.full((1, r, k), 0.01, dtype=weight.dtype, device=dev)
            x_in = x[..., :keep_in].contiguous()
            calls, per_byte = {}, {}
            for kind in kinds_of[r]:
                if kind == "transposed":
                    args = [(x_in, wt.t(), bias, wt) for wt in t_blocks]
                    nbytes = sum(wt.numel() for wt in t_blocks) * el
                elif kind == "packed":
                    args = [(x, w, bias_rows, None, p) for w, p in zip(rows_blocks, p_blocks, strict=True)]
                    nbytes = sum(w.numel() for w in rows_blocks) * el
                else:
                    args = [(x, w, bias_rows, None) for w in rows_blocks]
                    nbytes = sum(w.numel() for w in rows_blocks) * el
                try:
                    run_linear(kind, *args[0])
                except RuntimeError:  # no such kernel for this dtype on this CPU
                    continue
                calls[kind] = lambda kind=kind, args=args: [run_linear(kind, *a) for a in args]
                per_byte[kind] = 1.0 / nbytes
            if len(calls) == 1:  # nothing to choose between (bf16 without oneDNN support): no timing
                out[r] = _KERNEL_CHOICE[keys[r]] = next(iter(calls))
                continue
            best = {kd: float("inf") for kd in calls}
            for _ in range(repeats):
                for kd, f in calls.items():
                    best[kd] = min(best[kd], time_fn(f, warmup=0, repeats=1).min_s * per_byte[kd])
                calls = still_in_race(calls, best)
                if len(calls) == 1:  # the others cannot win: timing the leader again changes nothing
                    break
            # ties go to F.linear: the one kernel family that also runs training and every device
            out[r] = _KERNEL_CHOICE[keys[r]] = min(
                best, key=lambda kd: (best[kd] * (1.0 if kd == "gemm" else 1.02), kd)
            )
    return {r: out[r] for r in rows}


def prepared_linear(weight: torch.Tensor, rows: int, copies: bool = True) -> Callable[[torch.Tensor], torch.Tensor]:
    """``x -> x @ weight.T`` through the kernel a :class:`Transformer` layer of this shape runs for ``rows``-row
    products here (:func:`fastest_linear`'s choice for the row bucket, timed streaming from memory), with the copy
    that kernel reads made now: what a microbenchmark of "the rate this harness streams weights" must time, or it
    measures a kernel the model does not run (F.linear's bf16 path streamed a one-row product at half the packed
    kernel's rate on a Zen 5 EPYC)."""
    if weight.device.type != "cpu":
        return lambda x: F.linear(x, weight)
    kind = fastest_linear(
        weight, None, rows_bucket(rows), stream_bytes=weight.numel() * weight.element_size(), copies=copies
    )
    copy = make_copy(kind, weight) if kind in COPY_KERNELS else None
    if kind == "packed":
        return lambda x: run_linear(kind, x, weight, None, packed=copy)
    return lambda x: run_linear(kind, x, weight, None, copy)


class Linear(nn.Linear):
    """nn.Linear whose CPU inference passes use the kernel measured fastest for their row count.

    ``kernels`` maps a row bucket (:func:`rows_bucket`: 1, 2, 5 or 64 rows) to "gemm",
    "mv", "transposed", "onednn", "packed", "split" or "bmm" (:func:`run_linear`); empty, or under autograd, it is
    F.linear. ``Transformer`` fills it by timing each weight shape once (:func:`fastest_linear`).
    ``matvec`` is the one-token choice alone (``set_matvec``). "transposed" and "packed" (``COPY_KERNELS``)
    read a copy of the weight (:meth:`weight_copy`: as many bytes again per kind, for the layers that chose
    it), remade whenever the weight is replaced or changed in place through the parameter (as optimizers and
    ``load_state_dict`` change it; a write through ``.data`` is not seen). The copies are not state: a
    deep copy or a pickle of the layer leaves them out (oneDNN's packed tensors cannot be copied), and
    they are made again on first use.
    """

    kernels: dict[int, str] = {}
    # kind -> ((data_ptr, version) of the weight it was made from, the copy); made per instance on first use
    _copies: dict[str, tuple[tuple[int, int], torch.Tensor]] | None = None

    def weight_copy(self, kind: str) -> torch.Tensor:
        """The copy a ``COPY_KERNELS`` kernel reads, made once per weight version: "transposed", the weight's
        transpose stored contiguous (in_features x out_features); "packed", the weight in oneDNN's layout."""
        key = (self.weight.data_ptr(), self.weight._version)
        if self._copies is None:
            self._copies = {}
        held = self._copies.get(kind)
        if held is None or held[0] != key:
            # an ordinary tensor even when first asked for inside inference mode (it may be used outside it)
            with torch.inference_mode(False), torch.no_grad():
                held = self._copies[kind] = (key, make_copy(kind, self.weight.detach()))
        return held[1]

    def weight_t(self) -> torch.Tensor:
        """The weight's transpose, contiguous (in_features x out_features), made once per weight version."""
        return self.weight_copy("transposed")

    def free_copies(self) -> None:
        """Drop the copies no kernel of ``kernels`` reads any more."""
        if self._copies:
            self._copies = {k: v for k, v in self._copies.items() if k in self.kernels.values()} or None

    def held_copies(self) -> list[str]:
        """The kinds of copy this layer holds now."""
        return sorted(self._copies or {})

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state.pop("_copies", None)
        return state

    @property
    def matvec(self) -> bool:
        return self.kernels.get(1) == "mv"

    @matvec.setter
    def matvec(self, on: bool) -> None:
        self.kernels = {**self.kernels, 1: "mv" if on else "gemm"}
        self.free_copies()  # a copy the one-token pass alone read is freed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kernels and x.device.type == "cpu":
            kind = self.kernels.get(rows_bucket(x.numel() // self.in_features), "gemm")
            # oneDNN's op has no backward, and the copies (transposed, packed) are no views of the weight: a pass
            # that builds a graph keeps F.linear
            if (
                kind in ("onednn", *COPY_KERNELS)
                and torch.is_grad_enabled()
                and (self.weight.requires_grad or x.requires_grad)
            ):
                kind = "gemm"
            if kind == "transposed":
                return run_linear(kind, x, self.weight, self.bias, self.weight_t())
            if kind == "packed":
                return run_linear(kind, x, self.weight, self.bias, packed=self.weight_copy("packed"))
            if kind != "gemm":
                return run_linear(kind, x, self.weight, self.bias)
        return F.linear(x, self.weight, self.bias)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float, dtype: torch.dtype, device: torch.device) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim, dtype=dtype, device=device))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # one fused op (it accumulates in fp32 for bf16/fp16 inputs); the weight is applied inside
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


class MLP(nn.Module):
    def __init__(self, d: int, ff: int, kind: str, dtype: torch.dtype, device: torch.device) -> None:
        super().__init__()
        self.kind = kind
        kw: dict[str, Any] = dict(bias=False, dtype=dtype, device=device)
        # gate and up projections fused into one matrix (gpt-fast's w13): one read, one op
        self.w13 = Linear(d, 2 * ff if kind == "swiglu" else ff, **kw)
        self.down_proj = Linear(ff, d, **kw)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kind == "swiglu":
            gate, up = self.w13.forward(x).chunk(2, dim=-1)
            return self.down_proj.forward(F.silu(gate) * up)
        return self.down_proj(F.gelu(self.w13(x), approximate="tanh"))


class MoE(nn.Module):
    """Top-k routed experts plus optional shared experts (Mixtral / Qwen-MoE / DeepSeek layouts)."""

    def __init__(self, spec: ModelSpec, dtype: torch.dtype, device: torch.device) -> None:
        super().__init__()
        self.k = spec.experts_per_token
        self.gate = Linear(spec.d_model, spec.n_experts, bias=False, dtype=dtype, device=device)
        self.experts = nn.ModuleList(
            MLP(spec.d_model, spec.d_ff_expert, spec.mlp_kind, dtype, device) for _ in range(spec.n_experts)
        )
        ff_shared = spec.d_ff_shared or spec.d_ff_expert
        self.shared = nn.ModuleList(
            MLP(spec.d_model, ff_shared, spec.mlp_kind, dtype, device) for _ in range(spec.n_shared_experts)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        weights, chosen = torch.topk(torch.softmax(self.gate(flat).float(), dim=-1), self.k, dim=-1)
        weights = (weights / weights.sum(-1, keepdim=True)).to(x.dtype)
        out = torch.zeros_like(flat)
        for e, expert in enumerate(self.experts):
            rows, slot = torch.nonzero(chosen == e, as_tuple=True)
            if rows.numel():
                out.index_add_(0, rows, expert(flat[rows]) * weights[rows, slot, None])
        for s in self.shared:
            out = out + s(flat)
        return out.reshape(shape)


def attend(
    kind: str, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor | None
) -> torch.Tensor:
    """softmax(q kᵀ / sqrt(d), masked) v with the kernel ``kind``: "sdpa" (F.scaled_dot_product_attention) or "matmul"
    (two batched products around a softmax, all in fp32: a 16-bit cache is read into fp32 copies first).
    ``mask``: bool, True where a query sees a key, or additive (0 where a query sees a key, -inf elsewhere, in
    q's dtype: :func:`attention_mask`, what SDPA turns a bool mask into on every call).

    Why "matmul": torch's CPU SDPA runs a flash kernel that is slow for a few queries in bf16. On an AMD EPYC
    (Zen 5, 2 threads) one query over 1024 keys sliced from a static cache took 6.3 ms through SDPA against
    1.6 ms this way with 64 heads (1.0 against 0.24 with 16; bf16 products on the sliced cache itself, 4.3 and
    0.62: small bf16 batched products over strided keys are slow too), and in fp32 the two were within 10%
    of each other (ad-hoc, 2026-12-02). Which is faster moves with dtype, heads, queries and context: the model
    times both (:func:`fastest_attention`).
    """
    if kind == "matmul":
        scores = torch.matmul(q.float(), keys.float().transpose(-1, -2)) * q.shape[-1] ** -0.5
        if mask is not None:
            # x + 0 is x and x + -inf is -inf: the additive mask gives exactly what masked_fill does
            scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
        return torch.matmul(torch.softmax(scores, -1), values.float()).to(q.dtype)
    return F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)


def attention_mask(visible: torch.Tensor, group: int, dtype: torch.dtype) -> torch.Tensor:
    """A pass's attention mask as every layer's attention takes it, built once per pass: ``visible`` (B, 1, n, kv)
    bool (True where a query sees a key) expanded for grouped-query attention's ``group`` query heads per KV head
    (B, 1, group x n, kv: :class:`Attention` folds those heads into the query axis) and made additive in ``dtype``
    (0 where seen, -inf elsewhere). SDPA turns a bool mask into exactly this on each call, and the expansion copied
    it: done per layer, that was three kernels of every layer (a copy, a negation, a select) and, in the graph of a
    pass, three more nodes per layer; the values, and so every result, are the same."""
    B, _, n, kv = visible.shape
    if group > 1:
        visible = visible.unsqueeze(2).expand(B, 1, group, n, kv).reshape(B, 1, group * n, kv)
    zero = torch.zeros((), dtype=dtype, device=visible.device)
    return torch.where(visible, zero, torch.full((), float("-inf"), dtype=dtype, device=visible.device))


#: cached keys the attention probe times its kernels over
ATTENTION_PROBE_CONTEXT = 512
#: (device, dtype, kv heads, queries per kv head, head dim, threads) -> the faster attention kernel
_ATTENTION_CHOICE: dict[tuple[Any, ...], str] = {}


def fastest_attention(
    kv_heads: int, queries: int, head_dim: int, dtype: torch.dtype, device: torch.device, repeats: int = 3
) -> str:
    """The faster of :func:`attend`'s kernels for ``queries`` queries per KV head over ``ATTENTION_PROBE_CONTEXT``
    keys sliced from a cache twice as long, as the model slices its static cache (batch 1, causal among the
    queries), timed interleaved once per process; ties go to SDPA."""
    from measure.timing import time_fn

    key = (str(device), dtype, kv_heads, queries, head_dim, torch.get_num_threads())
    if key in _ATTENTION_CHOICE:
        return _ATTENTION_CHOICE[key]
    if device.type != "cpu":
        return "sdpa"
    ctx = ATTENTION_PROBE_CONTEXT
    q = torch.full((1, kv_heads, queries, head_dim), 0.01, dtype=dtype, device=device)
    k = torch.randn(1, kv_heads, 2 * ctx, head_dim, device=device).to(dtype)[:, :, :ctx]
    v = torch.randn(1, kv_heads, 2 * ctx, head_dim, device=device).to(dtype)[:, :, :ctx]
    mask = None if queries == 1 else torch.ones(1, 1, queries, ctx, dtype=torch.bool, device=device).tril(ctx - queries)
    best = {"sdpa": float("inf"), "matmul": float("inf")}
    with torch.inference_mode():
        for _ in range(repeats):
            for kind in best:
                best[kind] = min(
                    best[kind], time_fn(lambda kind=kind: attend(kind, q, k, v, mask), warmup=1, repeats=3).min_s
                )
    choice = "matmul" if best["matmul"] * 1.02 < best["sdpa"] else "sdpa"
    _ATTENTION_CHOICE[key] = choice
    return choice


class Attention(nn.Module):
    #: query-row bucket (:func:`rows_bucket` of queries per KV head) -> :func:`attend`'s kernel; empty: SDPA
    kernels: dict[int, str] = {}

    def __init__(self, spec: ModelSpec, dtype: torch.dtype, device: torch.device) -> None:
        super().__init__()
        self.h, self.kv, self.hd = spec.n_heads, spec.n_kv_heads, spec.head_dim
        d = spec.d_model
        # q, k and v fused into one matrix: one weight read and one op per layer
        self.wqkv = Linear(d, (self.h + 2 * self.kv) * self.hd, bias=spec.qkv_bias, dtype=dtype, device=device)
        self.o_proj = Linear(self.h * self.hd, d, bias=False, dtype=dtype, device=device)

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        where: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | int,
        kv_len: int,
        mask: torch.Tensor | None,
    ) -> torch.Tensor:
        B, n, _ = x.shape
        qkv = self.wqkv.forward(x).view(B, n, self.h + 2 * self.kv, self.hd).transpose(1, 2)
        qk = apply_rope(qkv[:, : self.h + self.kv], cos, sin)  # q and k rotated in one call
        q, k, v = qk[:, : self.h], qk[:, self.h :], qkv[:, self.h + self.kv :]
        if isinstance(where, int):  # every sequence at the same length: the new rows are one slice
            k_cache[:B, :, where : where + n].copy_(k)
            v_cache[:B, :, where : where + n].copy_(v)
        else:  # index_put_ writes only the new rows (scatter_ on the cache copied the whole buffer)
            k_cache.index_put_(where, k)
            v_cache.index_put_(where, v)
        keys, values = k_cache[:B, :, :kv_len], v_cache[:B, :, :kv_len]
        g = self.h // self.kv
        if g > 1:
            # grouped-query attention without expanding K/V: the g query heads of a KV head
            # become g x n queries of that head (SDPA's own GQA path copied K/V per head when masked);
            # the mask comes already expanded so (attention_mask, once per pass)
            q = q.reshape(B, self.kv, g * n, self.hd)
        kind = self.kernels.get(rows_bucket(q.shape[2]), "sdpa") if self.kernels else "sdpa"
        out = attend(kind, q, keys, values, mask)
        out = out.reshape(B, self.h, n, self.hd)
        return self.o_proj.forward(out.transpose(1, 2).reshape(B, n, self.h * self.hd))


class Block(nn.Module):
    def __init__(self, spec: ModelSpec, moe: bool, eps: float, dtype: torch.dtype, device: torch.device) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(spec.d_model, eps, dtype, device)
        self.self_attn = Attention(spec, dtype, device)
        self.post_attention_layernorm = RMSNorm(spec.d_model, eps, dtype, device)
        self.mlp: nn.Module = (
            MoE(spec, dtype, device) if moe else MLP(spec.d_model, spec.d_ff, spec.mlp_kind, dtype, device)
        )


def block_step(
    layer: Block,
    h: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    where: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | int,
    kv_len: int,
    mask: torch.Tensor | None,
) -> torch.Tensor:
    """One decoder layer over the cache: the residual stream after ``layer``'s attention and MLP.

    A plain function of its layer (not a method) so that ``--compile`` compiles it once for every layer of a
    shape: torch.compile inlines the module passed in and guards on its parameters' shapes, not on which layer
    it is (measure.graphs.compiled_block_step).
    """
    # .forward() directly: module __call__ machinery costs a few us per call, which adds up
    # to a visible share of a memory-bound decode step on a CPU
    a = layer.self_attn.forward(layer.input_layernorm.forward(h), cos, sin, k_cache, v_cache, where, kv_len, mask)
    h = h + a
    return h + layer.mlp.forward(layer.post_attention_layernorm.forward(h))


class _Eager:
    """``with model.eager():`` the model's runner detached for the block (see :meth:`Transformer.eager`)."""

    def __init__(self, model: Transformer) -> None:
        self.model, self.held = model, None

    def __enter__(self) -> None:
        self.held, self.model.runner = self.model.runner, None

    def __exit__(self, *exc: object) -> None:
        self.model.runner = self.held


class KVCache:
    """Static KV buffers for every layer plus each sequence's committed length (kept on the host)."""

    def __init__(self, spec: ModelSpec, max_batch: int, max_seq: int, dtype: torch.dtype, device: torch.device) -> None:
        shape = (max_batch, spec.n_kv_heads, max_seq, spec.head_dim)
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(spec.n_layers)]
        self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(spec.n_layers)]
        self.lengths = np.zeros(max_batch, dtype=np.int64)
        self.max_batch, self.max_seq = max_batch, max_seq

    @property
    def bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.k, *self.v))

    def rollback(self, lengths: Any) -> None:
        """Set each sequence's committed length (stale slots beyond it are masked and overwritten later)."""
        new = np.asarray(lengths, dtype=np.int64).reshape(-1)
        b = new.size
        if np.any(new < 0) or np.any(new > self.max_seq):
            raise SpecroofError(f"lengths must lie in [0, {self.max_seq}]")
        self.lengths[:b] = new

    def commit_paths(self, paths: torch.Tensor, n_accepted: torch.Tensor) -> None:
        """Move each sequence's accepted tree nodes into contiguous slots after its length.

        ``paths``: (B, depth) node indices of the accepted path (buffer order of the last
        pass, -1 padded); ``n_accepted``: (B,). Lengths grow by ``n_accepted``.
        """
        B, depth = paths.shape
        if depth == 0:
            return
        dev = self.k[0].device
        base = torch.as_tensor(self.lengths[:B], device=dev).view(B, 1)
        steps = torch.arange(depth, device=dev).view(1, depth)
        valid = steps < n_accepted.view(B, 1).to(dev)
        src = torch.where(valid, base + paths.to(dev).clamp(min=0), base + steps)
        dst = base + steps
        bi = torch.arange(B, device=dev).view(B, 1, 1)
        for buf in (*self.k, *self.v):
            hi = torch.arange(buf.shape[1], device=dev).view(1, -1, 1)
            gathered = buf[bi, hi, src.view(B, 1, depth)]  # (B, H, depth, D), a copy
            buf.index_put_((bi, hi, dst.view(B, 1, depth)), gathered)
        self.lengths[:B] += n_accepted.cpu().numpy().astype(np.int64)


def _fuse_hf_projections(raw: dict[str, torch.Tensor], n_layers: int) -> dict[str, torch.Tensor]:
    """Map HF's separate q/k/v and gate/up tensors onto the fused wqkv and w13 (other names unchanged)."""
    state = dict(raw)
    for i in range(n_layers):
        a, m = f"layers.{i}.self_attn.", f"layers.{i}.mlp."
        for kind in ("weight", "bias"):
            parts = [state.pop(f"{a}{p}_proj.{kind}", None) for p in "qkv"]
            if all(t is not None for t in parts):
                state[f"{a}wqkv.{kind}"] = torch.cat(parts, dim=0)  # type: ignore[arg-type]
        gate, up = state.pop(f"{m}gate_proj.weight", None), state.pop(f"{m}up_proj.weight", None)
        if gate is not None and up is not None:
            state[f"{m}w13.weight"] = torch.cat([gate, up], dim=0)
        elif up is not None:
            state[f"{m}w13.weight"] = up
    return state


def avoid_per_shape_attention_plans() -> None:
    """Keep SDPA off cuDNN's backend on CUDA (process-wide).

    cuDNN's attention builds an execution plan for every new shape. Decoding changes the
    key length on every pass (and speculative rounds change the query count), so almost
    every pass is a first use: on an H200 (torch 2.11) the first speculative run took
    2.1 s where the next took 71 ms, and batch-4 rounds whose ragged lengths kept
    producing new shapes measured 40 ms per pass instead of 3 (benchmarks/diag_batched_gpu.py).
    Flash and memory-efficient attention launch the same kernel for any length.
    """
    torch.backends.cuda.enable_cudnn_sdp(False)


class Transformer(nn.Module):
    """Llama-style decoder LM over a static batched KV cache (see the module docstring)."""

    def __init__(
        self,
        spec: ModelSpec,
        *,
        dtype: str | torch.dtype = "bf16",
        device: str | torch.device = "cpu",
        rope: RopeConfig | None = None,
        norm_eps: float = 1e-5,
        init_std: float | None = 0.02,
        matvec: bool | None = None,
    ) -> None:
        super().__init__()
        if spec.is_abstract:
            raise SpecroofError("an abstract ModelSpec (from_params) has no shapes to build a model from")
        if spec.is_mla or spec.n_sliding_layers:
            raise SpecroofError(
                f"{spec.name}: the harness builds Llama-style attention; multi-head latent attention and "
                "sliding-window layers are priced by the cost model but not built here"
            )
        self.spec = spec
        tdtype = TORCH_DTYPES[dtype] if isinstance(dtype, str) else dtype
        dev = torch.device(device)
        self.dtype, self.device_ = tdtype, dev
        self.embed_tokens = nn.Embedding(spec.vocab_size, spec.d_model, dtype=tdtype, device=dev)
        moe_from = spec.n_dense_layers if spec.is_moe else spec.n_layers
        self.layers = nn.ModuleList(Block(spec, i >= moe_from, norm_eps, tdtype, dev) for i in range(spec.n_layers))
        self.norm = RMSNorm(spec.d_model, norm_eps, tdtype, dev)
        self.lm_head = Linear(spec.d_model, spec.vocab_size, bias=False, dtype=tdtype, device=dev)
        if spec.tie_embeddings:
            self.lm_head.weight = self.embed_tokens.weight
        self.rope = rope or RopeConfig()
        # None: every CPU pass uses the kernels timed fastest here (chosen at setup_cache, once the
        # weights are real); True/False pins the one-token path and leaves the rest to F.linear
        self.auto_kernels = matvec is None
        if matvec is not None:
            self.set_matvec(matvec)
        self.cache: KVCache | None = None
        self._cos = self._sin = torch.empty(0)
        # static-shape passes captured as CUDA graphs (or run uncaptured: the CPU's static path), when attached:
        # measure.graphs.attach sets it; None runs every pass eagerly, as the CPU default does
        self.runner: Any = None
        # the function each layer's pass runs (measure.graphs swaps in a torch.compile'd one for --compile)
        self.block_fn: Callable[..., torch.Tensor] = block_step
        if init_std is not None:
            with torch.no_grad():
                for name, p in self.named_parameters():
                    if "norm" in name:
                        p.fill_(1.0)
                    elif name.endswith("bias"):
                        p.zero_()
                    else:
                        p.normal_(0.0, init_std)

    @property
    def device(self) -> torch.device:
        return self.device_

    def set_matvec(self, on: bool) -> None:
        """Use torch.mv (True) or the GEMM kernel (False) for one-token passes on the CPU (see :class:`Linear`)."""
        for mod in self.modules():
            if isinstance(mod, Linear):
                mod.matvec = on

    def choose_kernels(self, rows: tuple[int, ...] = PROBE_ROWS) -> dict[tuple[int, int], dict[int, str]]:
        """Time each distinct weight shape's kernels at each row count and use the fastest (CPU only); the same for
        the attention kernels (:func:`fastest_attention`) at each count of queries per KV head.

        Cached per (device, dtype, shape, rows, threads), so a second model of the same
        shapes, or a second call, costs nothing. Returns {(out, in): {rows: kernel}}.
        """
        chosen: dict[tuple[int, int], dict[int, str]] = {}
        if self.device.type != "cpu" or self.embed_tokens.weight.is_meta:
            return chosen
        stream = self.stream_bytes()
        # a layer that chooses a kernel of COPY_KERNELS keeps a copy of its weight per such kernel
        copies = copies_fit(self.weight_bytes(), self.device, kinds=len(COPY_KERNELS))
        for mod in self.modules():
            if isinstance(mod, Linear):
                shape = (mod.out_features, mod.in_features)
                if shape not in chosen:
                    chosen[shape] = fastest_linears(mod.weight, mod.bias, rows, stream_bytes=stream, copies=copies)
                mod.kernels = dict(chosen[shape])
                mod.free_copies()
                for kind in set(mod.kernels.values()) & set(COPY_KERNELS):
                    mod.weight_copy(kind)  # made now, not inside the first timed pass
            elif isinstance(mod, Attention):
                # queries per KV head: a bucket's representative count (GQA's g query heads share one KV head)
                mod.kernels = {r: fastest_attention(mod.kv, r, mod.hd, self.dtype, self.device) for r in rows}
        self.auto_kernels = False
        return chosen

    def setup_cache(self, max_batch: int, max_seq: int) -> KVCache:
        """Allocate the static cache (and RoPE tables) for ``max_batch`` sequences of ``max_seq`` tokens."""
        if max_seq > self.spec.max_context:
            raise SpecroofError(f"max_seq {max_seq} exceeds the model's max context {self.spec.max_context}")
        if self.device.type == "cuda":
            avoid_per_shape_attention_plans()
        if self.auto_kernels:
            self.choose_kernels()
        c = self.cache
        if self.runner is not None and c is not None and c.max_batch >= max_batch and c.max_seq >= max_seq:
            # a captured graph reads this cache's buffers where they are: keep them (and the graphs), forget the
            # lengths. Stale keys and values are masked, as after a rollback.
            c.lengths[:] = 0
            return c
        self.cache = None  # free the old buffers before the new ones are allocated
        if self.runner is not None:
            self.runner.reset()
        self.cache = KVCache(self.spec, max_batch, max_seq, self.dtype, self.device)
        cos, sin = rope_frequencies(self.spec.head_dim, max_seq, self.rope)
        self._cos, self._sin = cos.to(self.device), sign_half(sin).to(self.device)
        return self.cache

    def forward(
        self,
        tokens: torch.Tensor,
        tree: Any = None,
        *,
        new_mask: torch.Tensor | None = None,
        n_layers: int | None = None,
    ) -> torch.Tensor:
        """Logits (B, n, V) for ``n`` new tokens per sequence after each sequence's cached length.

        Default: the new tokens form a causal chain. ``tree`` (a ``roofline.speculation.trees.Tree``
        with n nodes, or its parent array) makes them a draft tree: each node sees its
        ancestors and gets position length + depth - 1. ``new_mask`` (n, n) or (B, n, n)
        bool overrides the mask among new tokens (positions then follow the chain).
        The cache lengths are not advanced: call ``advance``, ``rollback`` or ``commit``.
        ``n_layers`` runs only the first layers and then the final norm and head: the
        early-exit (self-speculative) draft, which writes exactly the KV the full pass
        writes for those layers.

        With a runner attached (:func:`measure.graphs.attach`) the pass runs with static shapes: captured
        as a CUDA graph and replayed on a GPU, called directly on the CPU; the logits it returns are the
        runner's output buffer, valid until the next pass of the same shape.
        """
        if self.cache is None:
            raise SpecroofError("call setup_cache(max_batch, max_seq) before running the model")
        B, n = tokens.shape
        c = self.cache
        if B > c.max_batch:
            raise SpecroofError(f"batch {B} exceeds the cache's max_batch {c.max_batch}")
        lengths = c.lengths[:B]
        kv_len = int(lengths.max()) + n
        if kv_len > c.max_seq:
            raise SpecroofError(f"{kv_len} tokens exceed the cache's max_seq {c.max_seq}")
        tree_obj = None
        if tree is not None:
            from roofline.speculation.trees import Tree

            tree_obj = tree if isinstance(tree, Tree) else Tree(tree)
            if tree_obj.n_nodes != n:
                raise SpecroofError(f"tree has {tree_obj.n_nodes} nodes but {n} tokens were given")
        if self.runner is not None and new_mask is None and self.runner.serves(n):
            return self.runner.forward(tokens, tree_obj, n_layers)  # type: ignore[no-any-return]
        dev = self.device
        L = torch.as_tensor(lengths, device=dev).view(B, 1)
        offs = torch.arange(n, device=dev).view(1, n)
        if tree_obj is not None:
            among = torch.as_tensor(tree_obj.ancestors_matrix(), device=dev).expand(B, n, n)
            positions = L + torch.as_tensor(tree_obj.depths - 1, device=dev).view(1, n)
        else:
            if new_mask is not None:
                among = new_mask.to(dev).bool().expand(B, n, n)
            else:
                among = torch.ones(n, n, dtype=torch.bool, device=dev).tril().expand(B, n, n)
            positions = L + offs
        slots = L + offs
        equal = bool(np.all(lengths == lengths[0]))
        mask: torch.Tensor | None = None
        if n > 1 or not equal:  # one token over equal lengths sees every key
            j = torch.arange(kv_len, device=dev).view(1, 1, kv_len)
            rel = j - L.view(B, 1, 1)  # key slot relative to the sequence's first new slot
            in_new = (rel >= 0) & (rel < n)
            new_ok = among.gather(2, rel.clamp(0, n - 1).expand(B, n, kv_len))
            visible = ((rel < 0) | (in_new & new_ok)).unsqueeze(1)  # (B, 1, n, kv_len)
            mask = attention_mask(visible, self.spec.n_heads // self.spec.n_kv_heads, self.dtype)
        cos = self._cos[positions].unsqueeze(1).to(self.dtype)
        sin = self._sin[positions].unsqueeze(1).to(self.dtype)
        # where each layer writes the new keys and values: one slice of the cache when every sequence
        # has the same length (batch 1 always), else a scatter of each sequence's rows
        where: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | int
        if equal:
            where = int(lengths[0])
        else:
            kvh = self.spec.n_kv_heads
            arange_b = torch.arange(B, device=dev).view(B, 1, 1)
            where = (arange_b, torch.arange(kvh, device=dev).view(1, kvh, 1), slots.view(B, 1, n))
        return self._layers(tokens, cos, sin, where, kv_len, mask, n_layers)

    def _layers(
        self,
        tokens: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        where: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | int,
        kv_len: int,
        mask: torch.Tensor | None,
        n_layers: int | None,
    ) -> torch.Tensor:
        """Embedding, the layers over the cache (the first ``n_layers``: an early exit), final norm and head."""
        c = self.cache
        assert c is not None
        h = self.embed_tokens(tokens)
        layers = self.layers if n_layers is None else self.layers[:n_layers]
        step = self.block_fn
        for i, layer in enumerate(layers):
            h = step(layer, h, cos, sin, c.k[i], c.v[i], where, kv_len, mask)
        return self.lm_head.forward(self.norm.forward(h))

    def forward_static(
        self,
        tokens: torch.Tensor,
        lengths: torch.Tensor,
        bucket: int,
        among: torch.Tensor | None = None,
        offsets: torch.Tensor | None = None,
        n_layers: int | None = None,
    ) -> torch.Tensor:
        """Logits (B, n, V): :meth:`forward` with static shapes and device inputs only, what a CUDA graph captures.

        ``tokens`` (B, n) and ``lengths`` (B,) (each row's cached length) are device tensors; ``bucket`` slots of
        the cache are attended (:func:`context_bucket`: at least ``max(lengths) + n``), each row masked at its own
        length, so a row reads nothing past its context and the new tokens. ``among`` (n, n) bool is the mask among
        the new tokens (None: causal) and ``offsets`` (n,) their position after the length (None: 0 .. n - 1; a
        tree's depth - 1). The new keys and values are scattered into slots ``length .. length + n - 1`` of each
        row by a device index. Nothing here reads a device value on the host or branches on one: the same
        kernels run whatever the lengths, which a graph replay requires. The cache lengths are not advanced.
        """
        c = self.cache
        if c is None:
            raise SpecroofError("call setup_cache(max_batch, max_seq) before running the model")
        B, n = tokens.shape
        dev = tokens.device
        steps = torch.arange(n, device=dev)
        L = lengths.view(B, 1)
        positions = L + (steps if offsets is None else offsets).view(1, n)
        rel = torch.arange(bucket, device=dev).view(1, 1, bucket) - L.view(B, 1, 1)
        ok = torch.ones(n, n, dtype=torch.bool, device=dev).tril() if among is None else among
        new_ok = ok.expand(B, n, n).gather(2, rel.clamp(0, n - 1).expand(B, n, bucket))
        visible = ((rel < 0) | ((rel < n) & new_ok)).unsqueeze(1)  # (B, 1, n, bucket): context, then the new tokens
        mask = attention_mask(visible, self.spec.n_heads // self.spec.n_kv_heads, self.dtype)
        cos = self._cos[positions].unsqueeze(1).to(self.dtype)
        sin = self._sin[positions].unsqueeze(1).to(self.dtype)
        kvh = self.spec.n_kv_heads
        where = (
            torch.arange(B, device=dev).view(B, 1, 1),
            torch.arange(kvh, device=dev).view(1, kvh, 1),
            (L + steps.view(1, n)).view(B, 1, n),
        )
        return self._layers(tokens, cos, sin, where, bucket, mask, n_layers)

    def eager(self) -> _Eager:
        """A context in which every pass runs eagerly, the runner set aside (prefills: a shape per prompt length)."""
        return _Eager(self)

    def forward_train(
        self, tokens: torch.Tensor, exit_layer: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Causal logits for training, without the cache; also the early-exit logits after ``exit_layer`` layers.

        The early-exit head is the model's own final norm and lm_head (LayerSkip-style),
        so training it makes the first layers a usable self-drafter.
        """
        B, n = tokens.shape
        pos = torch.arange(n, device=tokens.device)
        cos, sin = rope_frequencies(self.spec.head_dim, n, self.rope)
        cos = cos.to(tokens.device)[pos].view(1, 1, n, -1).to(self.dtype)
        sin = sign_half(sin).to(tokens.device)[pos].view(1, 1, n, -1).to(self.dtype)
        h = self.embed_tokens(tokens)
        early = None
        for i, layer in enumerate(self.layers):
            a = layer.self_attn
            x = layer.input_layernorm(h)
            qkv = a.wqkv(x).view(B, n, a.h + 2 * a.kv, a.hd).transpose(1, 2)
            qk = apply_rope(qkv[:, : a.h + a.kv], cos, sin)
            q, k, v = qk[:, : a.h], qk[:, a.h :], qkv[:, a.h + a.kv :]
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=a.kv != a.h)
            h = h + a.o_proj(out.transpose(1, 2).reshape(B, n, a.h * a.hd))
            h = h + layer.mlp(layer.post_attention_layernorm(h))
            if exit_layer is not None and i + 1 == exit_layer:
                early = self.lm_head(self.norm(h))
        return self.lm_head(self.norm(h)), early

    def advance(self, n: Any) -> None:
        """Commit ``n`` (scalar or per-sequence) tokens of the last pass in place (chain case)."""
        assert self.cache is not None
        add = np.broadcast_to(np.asarray(n, dtype=np.int64), (self.cache.max_batch,))
        self.cache.lengths += add

    @classmethod
    def from_hf(
        cls, path: str | Path, *, dtype: str | torch.dtype = "fp32", device: str | torch.device = "cpu"
    ) -> Transformer:
        """Load a local Hugging Face checkpoint folder (config.json + *.safetensors), Llama/Mistral/Qwen2."""
        folder = Path(path)
        cfg_path = folder / "config.json"
        if not cfg_path.is_file():
            raise SpecroofError(f"no config.json in {str(folder)!r}")
        cfg = json.loads(cfg_path.read_text())
        if cfg.get("model_type") not in ("llama", "mistral", "qwen2"):
            raise SpecroofError(f"from_hf supports llama, mistral and qwen2 layouts (got {cfg.get('model_type')!r})")
        spec = ModelSpec.from_hf_config(cfg, name=folder.name)
        rope = rope_config_from_hf(cfg)
        model = cls(
            spec, dtype=dtype, device="meta", rope=rope, norm_eps=float(cfg.get("rms_norm_eps", 1e-5)), init_std=None
        )
        files = sorted(folder.glob("*.safetensors"))
        if not files:
            raise SpecroofError(f"no *.safetensors files in {str(folder)!r}")
        from safetensors.torch import load_file

        raw: dict[str, torch.Tensor] = {}
        for f in files:
            for k, v in load_file(str(f)).items():
                raw[k.removeprefix("model.")] = v
        state = _fuse_hf_projections(raw, spec.n_layers)
        if spec.tie_embeddings:
            state.pop("lm_head.weight", None)
        model.to_empty(device=device)
        missing, unexpected = model.load_state_dict(state, strict=False)
        missing = [m for m in missing if not (spec.tie_embeddings and m == "lm_head.weight")]
        if missing or unexpected:
            raise SpecroofError(
                f"checkpoint does not match the model: missing {missing[:5]}, unexpected {unexpected[:5]}"
            )
        if spec.tie_embeddings:
            model.lm_head.weight = model.embed_tokens.weight
        model.device_ = torch.device(device)
        return model.to(model.dtype)

    def stream_bytes(self) -> int:
        """Bytes of weights a one-token pass reads between two uses of one weight: all of them past the last-level
        cache (:func:`fastest_linear` times each shape's kernels streaming that many), none where they fit it."""
        from measure.device import last_level_cache_bytes

        total = self.weight_bytes()
        return total if total > last_level_cache_bytes() else 0

    def weight_bytes(self, include_embedding: bool = False) -> int:
        """Bytes of weights one decode step reads (gpt-fast's figure: without the embedding table)."""
        total = 0
        seen: set[int] = set()
        for name, p in self.named_parameters():
            if id(p) in seen:
                continue
            seen.add(id(p))
            if name.startswith("embed_tokens") and not include_embedding:
                continue
            total += p.numel() * p.element_size()
        if self.spec.tie_embeddings and not include_embedding:
            total += self.lm_head.weight.numel() * self.lm_head.weight.element_size()
        return total

"""FLOPs and bytes of one forward pass, per operator, vectorised over batch/tokens/context.

One module despite its length: the array counts (:func:`forward_cost`) and the linear terms the scalar pricers
tabulate (:func:`linear_terms`) must count the same operators, so they stay side by side.

One pass processes ``new_tokens`` tokens for each of ``batch`` sequences whose
KV caches already hold ``context`` tokens. Every count broadcasts: arrays for
``batch``, ``new_tokens`` and ``context`` give arrays of results, so a sweep is
one call. FLOPs are 2 x multiply-adds; bytes are split into weights, KV read,
KV write and activations, which is what the roofline and the fit need.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from functools import cached_property
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import pandas as pd
from numpy.typing import ArrayLike
from scipy import special

from roofline.core.errors import SpecroofError, as_array, check_min
from roofline.passes.dtypes import activation_dtype, dtype_bytes
from roofline.passes.model import ModelSpec, get_model

Array = npt.NDArray[np.float64]

#: Operators of a concrete decoder pass, in execution order.
OPERATORS = ("embed", "qkv", "attn_scores", "attn_values", "out_proj", "router", "mlp", "norms", "lm_head")
#: The single operator of an abstract (weights-only) model.
ABSTRACT_OPERATORS = ("linear",)
_DENSE_OPERATORS = tuple(o for o in OPERATORS if o != "router")
#: the operators a hybrid model's linear-attention layers add after ``out_proj`` (docs/cost-model.md, section 52):
#: the layers' projections, conv and scan with their state's read and write, and the state checkpoints a verify
#: pass writes for every position but the last
LINEAR_OPERATORS = ("linear_attn", "state_checkpoint")
#: the most new tokens per sequence a pass of a hybrid model runs the engines' recurrent (decode and verify) path
#: for, writing a state per position; a longer pass is a prefill, run as a chunked scan that writes the final state
#: only (docs/cost-model.md, section 52)
RECURRENT_MAX_TOKENS = 64
#: the chunk of the chunked scan: FLA's chunk_gated_delta_rule (BT = 64) and Mamba-2's ``mamba_chunk_size`` (256)
LINEAR_CHUNK = {"gdn": 64, "mamba2": 256}


@dataclass(frozen=True)
class PassCost:
    """Per-operator FLOPs (FLOP) and bytes of one forward pass.

    Every array has shape ``(len(operators), *shape)`` where ``shape`` is the
    broadcast shape of batch, new_tokens and context.
    """

    operators: tuple[str, ...]
    flops: Array
    bytes_weights: Array
    bytes_kv_read: Array
    bytes_kv_write: Array
    bytes_act: Array
    batch: npt.NDArray[np.int64]
    new_tokens: npt.NDArray[np.int64]
    context: npt.NDArray[np.int64]
    compute_dtype: str
    n_layers: int
    #: bytes of one hidden-state all-reduce (batch x new_tokens x d_model x act bytes), for tensor parallelism
    allreduce_bytes: Array | float = 0.0
    #: the dtype the weights are stored in (an engine streams quantised weights at its own rate)
    weight_dtype: str = ""
    #: what an eager engine's kernel count and a sampler's logits need: the vocabulary, the MLP's matrices,
    #: the MoE layers and the distinct experts (shared ones included) each of them runs for this pass
    vocab_size: int = 0
    mlp_matrices: int = 3
    n_moe_layers: int = 0
    experts_touched: Array | float = 0.0
    #: the distinct routed experts (shared ones not counted) each MoE layer runs for this pass: the fused-MoE
    #: kernel's per-expert time (docs/cost-model.md, section 40)
    routed_experts: Array | float = 0.0
    #: of the mlp operator's weight bytes, those of routed experts stored in their own format (gpt-oss: MXFP4): an
    #: engine's kernels for the weight dtype do not stream them (docs/cost-model.md, section 51)
    expert_format_bytes: Array | float = 0.0
    #: of the mlp operator's FLOPs, those the fused-MoE kernel's padded tiles run over bf16/fp8 experts (0 without that
    #: kernel, and for experts in their own format, which run other kernels): their rate is the tile's, not the
    #: engine's GEMM rate (docs/cost-model.md, section 56)
    routed_flops: Array | float = 0.0
    #: the fused-MoE kernel's BLOCK_SIZE_M for this pass (:func:`fused_moe_tile_rows`; 0 without routed_flops)
    moe_tile_rows: Array | float = 0.0
    #: multi-head latent attention: one latent per token serves every head, so tensor parallelism splits the heads
    #: but not the cache, and every rank reads and writes all of it (vLLM's MLA under TP)
    kv_replicated: bool = False

    @cached_property
    def bytes(self) -> Array:
        """All bytes moved per operator."""
        return self.bytes_weights + self.bytes_kv_read + self.bytes_kv_write + self.bytes_act

    @cached_property
    def total_flops(self) -> Array:
        return self.flops.sum(axis=0)

    @cached_property
    def total_bytes(self) -> Array:
        return self.bytes.sum(axis=0)

    @property
    def weight_bytes(self) -> Array:
        return self.bytes_weights.sum(axis=0)

    @property
    def kv_read_bytes(self) -> Array:
        return self.bytes_kv_read.sum(axis=0)

    @property
    def tokens(self) -> npt.NDArray[np.int64]:
        """Tokens processed by the pass: batch x new_tokens."""
        return self.batch * self.new_tokens

    @property
    def intensity(self) -> Array:
        """Arithmetic intensity of the whole pass in FLOP/byte."""
        return arithmetic_intensity(self)

    def breakdown(self) -> pd.DataFrame:
        """Per-operator table of one configuration (the cost must be scalar-shaped)."""
        if self.flops[0].size != 1:
            raise SpecroofError("breakdown() needs a single configuration; index the sweep first")
        return pd.DataFrame(
            {
                "operator": self.operators,
                "flops": self.flops.reshape(len(self.operators)),
                "bytes_weights": self.bytes_weights.reshape(len(self.operators)),
                "bytes_kv_read": self.bytes_kv_read.reshape(len(self.operators)),
                "bytes_kv_write": self.bytes_kv_write.reshape(len(self.operators)),
                "bytes_act": self.bytes_act.reshape(len(self.operators)),
            }
        )


def arithmetic_intensity(cost: PassCost) -> Array:
    """FLOP per byte of a pass (array over the sweep)."""
    return cost.total_flops / cost.total_bytes


def _tree_visible(tree: Any) -> tuple[int, int]:
    """(number of nodes, sum over nodes of how many new tokens each sees) for a tree."""
    depths = getattr(tree, "depths", tree)
    d = check_min("tree depths", depths, 1, integer=True)
    if d.ndim != 1 or d.size == 0:
        raise SpecroofError("tree must be a Tree or a 1-D array of node depths (>= 1)")
    return int(d.size), int(d.sum())


def expected_experts_touched(n_experts: int, experts_per_token: int, tokens: ArrayLike) -> Array:
    """Expected distinct experts that ``tokens`` tokens touch with uniform top-k routing."""
    t = np.asarray(tokens, dtype=float)
    return n_experts * (1.0 - (1.0 - experts_per_token / n_experts) ** t)


#: MoE kernels whose FLOPs are priced as their tiles run them (docs/cost-model.md, section 28): ``None`` counts the
#: useful FLOPs only (the pure roofline; Hugging Face's per-expert loop runs each expert on its own tokens);
#: ``"fused"`` is the fused-MoE kernel of vLLM and SGLang (Triton ``fused_moe``: tokens sorted by expert, each
#: expert's rows padded to a multiple of the tile's BLOCK_SIZE_M by ``moe_align_block_size``)
MOE_KERNELS = (None, "fused")


#: BLOCK_SIZE_M of the fused-MoE kernel by the tokens each expert receives, T k / E: (largest, rows), then 128
#: (docs/cost-model.md, section 56). The tuned tables pick by it: Mixtral's over two H100s (``E=8,N=7168,device_name=
#: NVIDIA_H100_80GB_HBM3.json``, T / 4 tokens per expert) take 16 to 8 per expert, 32 to 24, 64 to 128 and 128
#: beyond, which is vLLM's default ladder by T since PR #24700 (16 to 32, 32 to 96, 64 to 512, 128 on) at E / k = 4;
#: Qwen3-30B-A3B's over two H200s (``E=128,N=384,device_name=NVIDIA_H200.json``, T / 16) take 16 to 128 tokens, 32 at
#: 256 and 64 at 512 (and 128 from 1024, where this ladder keeps 64)
FUSED_MOE_TILE_LADDER = ((8, 16), (24, 32), (128, 64))


def fused_moe_tile_rows(tokens: Any, n_experts: int, experts_per_token: int) -> Any:
    """BLOCK_SIZE_M of the fused-MoE kernel for a pass of ``tokens`` tokens over ``n_experts`` experts, ``experts_per_token``
    each (:data:`FUSED_MOE_TILE_LADDER`, by the tokens per expert). An int for a scalar, an array for an array."""
    t = np.asarray(tokens, dtype=float) * experts_per_token / n_experts
    bm = np.full(t.shape, 128.0)
    for top, rows in reversed(FUSED_MOE_TILE_LADDER):
        bm = np.where(t <= top, float(rows), bm)
    return bm if bm.ndim else int(bm)


@functools.lru_cache(maxsize=8192)
def _padded_rows(tokens: float, n_experts: int, experts_per_token: int) -> float:
    T = int(tokens)
    p = experts_per_token / n_experts
    bm = int(fused_moe_tile_rows(T, n_experts, experts_per_token))
    # expert e receives X ~ Binomial(T, k / E) tokens and runs ceil(X / bm) tiles of bm rows:
    # E[ceil(X / bm)] = sum_{j >= 0} P(X > j bm), summed until the tail is below a float's resolution
    mean, sd = T * p, math.sqrt(T * p * (1.0 - p))
    top = min(T // bm + 1, int((mean + 12.0 * sd) // bm) + 2)
    j = np.arange(top + 1, dtype=float) * bm
    tail = special.bdtrc(np.minimum(j, T), T, p)  # P(X > j bm); 0 once j bm >= T
    tail = np.where(j >= T, 0.0, tail)
    return float(n_experts * bm * np.sum(tail))


def moe_expert_rows(n_experts: int, experts_per_token: int, tokens: ArrayLike, kernel: str | None = None) -> Any:
    """Rows the routed experts of one MoE layer run for ``tokens`` tokens: ``tokens x k`` (each token's k experts)
    for ``kernel`` None, the expected padded rows of the fused-MoE kernel's tiles for ``"fused"``
    (docs/cost-model.md, section 28). A scalar for a scalar, an array for an array."""
    if kernel is None:
        return np.asarray(tokens, dtype=float) * experts_per_token
    if kernel != "fused":
        raise SpecroofError(f"moe_kernel must be one of {MOE_KERNELS} (got {kernel!r})")
    t = np.asarray(tokens, dtype=float)
    if t.ndim == 0:
        return np.asarray(_padded_rows(float(t), n_experts, experts_per_token))
    flat = t.ravel()
    uniq, inv = np.unique(flat, return_inverse=True)
    rows = np.array([_padded_rows(float(u), n_experts, experts_per_token) for u in uniq])
    return rows[inv].reshape(t.shape)


#: the largest count the scalar fast path takes as it is (the array path checks the same bound and names it)
_COUNT_LIMIT = 2**53


def scalar_count(value: Any, minimum: int) -> int | None:
    """``value`` as a plain int when it is a whole-number scalar in [minimum, 2**53]; None otherwise.

    The scalar fast path's only check: anything else (arrays, NaN, fractions, out of range)
    goes down the array path, which validates it and raises the error that names it.
    """
    t = type(value)
    if t is int:
        v = value
    elif t is np.ndarray:
        if value.ndim != 0 or value.dtype.kind not in "iu":  # 0-d counts, as check_min hands them on
            return None
        v = int(value)
    elif t is float or isinstance(value, (np.integer, np.floating)):
        if not math.isfinite(value) or value != int(value):
            return None
        v = int(value)
    else:
        return None
    return v if minimum <= v <= _COUNT_LIMIT else None


def array_sum(values: list[float]) -> float:
    """``np.sum`` of a short 1-D float array, to the last bit: numpy adds fewer than 8 values in order and 8 to 15
    in eight interleaved partial sums (its pairwise summation), so the scalar path's totals equal the array path's."""
    n = len(values)
    if n < 8:
        total = 0.0
        for v in values:
            total += v
        return total
    if n >= 16:
        return float(np.sum(values))
    r = values
    total = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
    for v in values[8:]:
        total += v
    return total


@dataclass(frozen=True)
class _Shape:
    """A concrete model's constants the cost formulas read (ModelSpec derives most of them on every access)."""

    nl: int
    d: int
    H: int
    KV: int
    hd: int
    qkv_out: int
    qkv_w: int
    vocab: int
    dense_layers: int
    dense_mlp: int
    mlp_matrices: int
    d_ff: int
    moe: bool
    n_moe_layers: int
    n_experts: int
    k: int
    expert: int
    shared: int
    n_shared: int
    d_ff_expert: int
    router: int
    norm: int
    lm_head: int
    total_params: float
    kv_elements_per_token: int
    mla: bool = False
    lat: int = 0  # MLA: cached latent + RoPE key per token and layer
    r: int = 0  # MLA: kv_lora_rank
    mla_qkv: int = 0
    mla_out: int = 0
    window: int = 0
    n_sliding: int = 0
    #: routed experts stored apart from the other weights (gpt-oss: MXFP4): their bytes per weight, else 0
    expert_wb: float = 0.0


_SHAPES: dict[int, tuple[ModelSpec, _Shape]] = {}


def model_shape(spec: ModelSpec) -> _Shape:
    """The constants of ``spec`` the scalar path reads, derived once per model object."""
    hit = _SHAPES.get(id(spec))
    if hit is not None and hit[0] is spec:  # the entry holds the spec, so its id is not reused while cached
        return hit[1]
    nl, d, H, KV, hd = spec.n_layers, spec.d_model, spec.n_heads, spec.n_kv_heads, spec.head_dim
    sh = _Shape(
        nl=nl, d=d, H=H, KV=KV, hd=hd, qkv_out=(H * (2 if spec.attn_output_gate else 1) + 2 * KV) * hd,
        qkv_w=nl * (spec.attn_params_per_layer - H * hd * d),
        vocab=spec.vocab_size, dense_layers=spec.n_dense_mlp_layers, dense_mlp=spec.dense_mlp_params,
        mlp_matrices=spec.mlp_matrices, d_ff=spec.d_ff, moe=spec.is_moe, n_moe_layers=spec.n_moe_layers,
        n_experts=spec.n_experts, k=spec.experts_per_token, expert=spec.expert_params,
        shared=spec.shared_expert_params, n_shared=spec.n_shared_experts, d_ff_expert=spec.d_ff_expert,
        router=spec.router_params, norm=spec.norm_params, lm_head=spec.lm_head_params,
        total_params=spec.total_params, kv_elements_per_token=spec.kv_elements_per_token, mla=spec.is_mla,
        lat=spec.kv_elements_per_layer_token, r=spec.kv_lora_rank,
        mla_qkv=spec.mla_qkv_params_per_layer if spec.is_mla else 0,
        mla_out=spec.mla_out_params_per_layer if spec.is_mla else 0,
        window=spec.sliding_window, n_sliding=spec.n_sliding_layers,
        expert_wb=spec.expert_bytes(0.0) if spec.expert_format else 0.0,
    )  # fmt: skip
    if len(_SHAPES) > 256:  # early exit builds a truncated spec per call: keep the table small
        _SHAPES.clear()
    _SHAPES[id(spec)] = (spec, sh)
    return sh


def frozen(cls: type, fields: dict[str, Any]) -> Any:
    """An instance of the frozen dataclass ``cls`` with every field in ``fields``, without its ``__init__``.

    A frozen dataclass sets each field through ``object.__setattr__``, which costs more than
    the arithmetic of a scalar pass (about 10 us for PassCost's 17 fields); the scalar path
    builds its results with every field given, so filling the instance's dict is the same object.
    """
    obj: Any = object.__new__(cls)
    obj.__dict__.update(fields)
    return obj


class ScalarTerms(NamedTuple):
    """One configuration's per-operator FLOPs and bytes as plain floats (the scalar fast path's PassCost)."""

    operators: tuple[str, ...]
    flops: list[float]
    bytes_weights: list[float]
    bytes_kv_read: list[float]
    bytes_kv_write: list[float]
    bytes_act: list[float]
    batch: int
    new_tokens: int
    context: int
    n_layers: int
    allreduce_bytes: float
    vocab_size: int
    mlp_matrices: int
    n_moe_layers: int
    experts_touched: float
    kv_replicated: bool = False
    routed_experts: float = 0.0
    expert_format_bytes: float = 0.0
    routed_flops: float = 0.0
    moe_tile_rows: float = 0.0

    def to_cost(self, compute_dtype: str, weight_dtype: str, rows: Any = None) -> PassCost:
        """The same numbers as the :class:`PassCost` :func:`forward_cost` returns for this configuration.

        ``rows``: the five per-operator rows already in an array (a caller that builds one block for more)."""
        if rows is None:
            rows = np.array([self.flops, self.bytes_weights, self.bytes_kv_read, self.bytes_kv_write, self.bytes_act])
        return frozen(
            PassCost,
            {
                "operators": self.operators, "flops": rows[0], "bytes_weights": rows[1], "bytes_kv_read": rows[2],
                "bytes_kv_write": rows[3], "bytes_act": rows[4], "batch": np.array(self.batch),
                "new_tokens": np.array(self.new_tokens), "context": np.array(self.context),
                "compute_dtype": compute_dtype, "n_layers": self.n_layers, "allreduce_bytes": self.allreduce_bytes,
                "weight_dtype": weight_dtype, "vocab_size": self.vocab_size, "mlp_matrices": self.mlp_matrices,
                "n_moe_layers": self.n_moe_layers, "experts_touched": self.experts_touched,
                "kv_replicated": self.kv_replicated, "routed_experts": self.routed_experts,
                "expert_format_bytes": self.expert_format_bytes, "routed_flops": self.routed_flops,
                "moe_tile_rows": self.moe_tile_rows,
            },
        )  # fmt: skip


def mla_attention(
    s: _Shape, T: Any, Bf: Any, Lf: Any, n: Any, vis: Any, wb: float, ab: float, kb: float
) -> list[tuple[Any, Any, Any, Any, Any]]:
    """(flops, weights, KV read, KV write, activations) of qkv, attn_scores, attn_values and out_proj under multi-head
    latent attention in the absorbed form (docs/cost-model.md section 21). Plain floats or arrays: the scalar and the
    array path call this one function, so their numbers agree to the last bit."""
    nl, d, H, lat, r = s.nl, s.d, s.H, s.lat, s.r
    pairs = Bf * (n * Lf + vis)
    return [
        (2.0 * T * s.mla_qkv * nl, nl * s.mla_qkv * wb, 0.0, T * nl * lat * kb, nl * T * (d + H * lat + lat) * ab),
        # the latent is read once for all heads: the scores read it whole, the values reuse its first r columns
        (2.0 * pairs * H * lat * nl, 0.0, Bf * Lf * nl * lat * kb, 0.0, nl * T * H * lat * ab),
        (2.0 * pairs * H * r * nl, 0.0, 0.0, 0.0, nl * T * H * r * ab),
        (2.0 * T * s.mla_out * nl, nl * s.mla_out * wb, 0.0, 0.0, nl * T * (H * r + d) * ab),
    ]


def compressed_attention(
    spec: ModelSpec, T: Any, Bf: Any, Lf: Any, n: Any, vis: Any, wb: float, ab: float, kb: float
) -> list[tuple[Any, Any, Any, Any, Any]]:
    """(flops, weights, KV read, KV write, activations) of qkv, attn_scores, attn_values and out_proj under
    DeepSeek-V4's compressed sparse attention (docs/cost-model.md, section 58), summed over the layers: a window of
    ``attn_window`` rows on every layer; CSA layers add each query's top-k compressed entries and the indexer's read
    of every compressed key; HCA layers every compressed entry. One key/value row per entry, read once for all heads
    (the values reuse the scores' read)."""
    nl, d, H, h = spec.n_layers, spec.d_model, spec.n_heads, spec.head_dim
    nc, nh = spec.n_csa_layers, spec.n_hca_layers
    window = np.minimum(Lf, float(spec.attn_window))
    csa_entries = Lf / spec.csa_ratio if nc else 0.0 * Lf
    picked = np.minimum(csa_entries, float(spec.index_topk)) if nc else 0.0 * Lf
    hca_entries = Lf / spec.hca_ratio if nh else 0.0 * Lf
    ih, ihd = spec.index_heads, spec.index_head_dim
    # keys one query sees, summed over layers; rows one sequence reads (the window and HCA entries shared by its n
    # queries, each query's own top-k)
    keys = nl * window + nc * picked + nh * hca_entries
    rows = nl * window + n * nc * picked + nh * hca_entries
    index_rows = nc * csa_entries
    pair_flops = 2.0 * H * h * Bf * (n * keys + vis * nl)
    index_flops = 2.0 * ih * ihd * Bf * n * index_rows
    out = nl * spec.compressed_out_params_per_layer
    proj = nl * spec.attn_params_per_layer - out + spec.compressor_params
    written = nl * h + (nc * (h + ihd) / spec.csa_ratio if nc else 0.0) + (nh * h / spec.hca_ratio if nh else 0.0)
    return [
        (2.0 * T * proj, proj * wb, 0.0, T * written * kb, nl * T * (d + H * h + h) * ab),
        (pair_flops + index_flops, 0.0, Bf * (rows * h + index_rows * ihd) * kb, 0.0, nl * T * H * h * ab),
        (pair_flops, 0.0, 0.0, 0.0, nl * T * H * h * ab),
        (2.0 * T * out, out * wb, 0.0, 0.0, nl * T * (H * h + d) * ab),
    ]


def scan_flops_per_token(spec: ModelSpec, recurrent: Any) -> Any:
    """FLOPs of one linear-attention layer's token mixing per token (docs/cost-model.md, section 52), per head:

    * recurrent form (decode and verify, ``recurrent`` true): Gated DeltaNet's decay, delta read ``S^T k``, rank-1
      update and output ``S^T q`` (7 d_k d_v); Mamba-2's decay and ``B x`` update and ``C h`` output (5 N P);
    * chunked form (a prefill): Gated DeltaNet 6 d_k d_v (``W S``, ``Q S``, the state update) plus the chunk's
      ``K K^T``, ``T K``, ``T V``, ``Q K^T`` and its product with U, 2 C (3 d_k + 2 d_v); Mamba-2 (SSD) 4 N P plus
      the chunk's ``(C B^T) X`` per head (2 C P) and ``C B^T`` per group (2 C N).

    ``recurrent`` is a bool or a boolean array (per configuration)."""
    h, g, dk, dv = spec.linear_heads, spec.linear_groups, spec.linear_key_dim, spec.linear_value_dim
    C = LINEAR_CHUNK[spec.linear_kind]
    if spec.linear_kind == "gdn":
        rec, chunk = 7.0 * h * dk * dv, h * (6.0 * dk * dv + 2.0 * C * (3 * dk + 2 * dv))
    else:
        rec, chunk = 5.0 * h * dk * dv, h * (4.0 * dk * dv + 2.0 * C * dv) + g * 2.0 * C * dk
    return np.where(recurrent, rec, chunk)


def linear_attention(spec: ModelSpec, T: Any, Bf: Any, n: Any, wb: float, ab: float) -> list[tuple[Any, ...]]:
    """(flops, weights, state read, state write, activations) of a hybrid model's ``linear_attn`` and
    ``state_checkpoint`` operators for a pass of ``n`` new tokens on each of ``Bf`` sequences (``T`` = Bf n), over
    all its linear-attention layers (docs/cost-model.md, section 52).

    Each layer reads its state (the d_k x d_v matrix per head and the conv's last inputs) once per sequence and
    writes it back once: its bytes do not grow with the context. A pass of up to :data:`RECURRENT_MAX_TOKENS` per
    sequence runs the engines' recurrent path, which writes the state after every position into a slot of its own
    (vLLM's ``num_speculative_blocks``, SGLang's ``intermediate_ssm_state``): the ``n - 1`` writes beyond the last
    are the state checkpoints a verify pass pays (the recurrent state and one conv input each). A longer pass (a
    prefill) is a chunked scan without them."""
    nlin, d = spec.n_linear_layers, spec.d_model
    S = spec.state_bytes_per_layer(ab)  # one layer's state of one sequence, bytes
    recurrent = n <= RECURRENT_MAX_TOKENS
    proj = 2.0 * d * spec.linear_in_proj + 2.0 * spec.linear_heads * spec.linear_value_dim * d
    conv = 2.0 * spec.linear_conv_dim * spec.linear_conv
    flops = nlin * T * (proj + conv + scan_flops_per_token(spec, recurrent))
    hv = spec.linear_heads * spec.linear_value_dim
    act = nlin * T * (2 * d + spec.linear_in_proj + spec.linear_conv_dim + 2 * hv) * ab
    state = nlin * Bf * S
    # a checkpoint is the recurrent state and one more conv input: vLLM widens the conv state to K - 1 + the
    # speculative tokens, a window slid back on rejection (mamba_utils' conv state shape), not a copy per position
    per_position = spec.state_bytes_per_layer(ab) - (spec.linear_conv - 2) * spec.linear_conv_dim * ab
    checkpoints = np.where(recurrent, nlin * Bf * (n - 1) * per_position, 0.0)
    return [
        (flops, nlin * spec.linear_params_per_layer * wb, state, state, act),
        (0.0 * T, 0.0, 0.0, checkpoints, 0.0),
    ]


def windowed_keys(s: _Shape, Lf: Any, capped: Any) -> Any:
    """Cached keys the layers read, summed over layers: full layers the whole context, sliding layers
    ``capped`` = min(context, window) (computed by the caller: ``min`` on floats, ``np.minimum`` on arrays)."""
    return Lf * (s.nl - s.n_sliding) + capped * s.n_sliding


def scalar_terms(
    spec: ModelSpec, B: int, n: int, L: int, vis: float, wb: float, ab: float, kb: float, moe_kernel: str | None = None
) -> ScalarTerms:
    """:func:`forward_cost` for one configuration in plain floats: the same formulas, term by term and in the same
    order, so the numbers are the array path's (``vis``: the new tokens the n new tokens see, summed)."""
    T = float(B * n)
    if spec.is_abstract:
        N = spec.raw_params
        return ScalarTerms(ABSTRACT_OPERATORS, [2.0 * T * N], [N * wb], [0.0], [0.0], [0.0], B, n, L, 0, 0.0, 0, 3, 0,
                           0.0)  # fmt: skip
    s = model_shape(spec)
    nl, d, H, KV, hd = s.nl, s.d, s.H, s.KV, s.hd
    Bf, Lf = float(B), float(L)
    if s.n_sliding:
        keys = windowed_keys(s, Lf, min(Lf, float(s.window)))
        kv_cache = Bf * keys * KV * hd * kb
        attn_f = 2.0 * Bf * (n * keys + vis * nl) * H * hd
    else:
        attn_pairs = Bf * (n * Lf + vis)
        kv_cache = Bf * Lf * nl * KV * hd * kb
        attn_f = 2.0 * attn_pairs * H * hd * nl
    attn_a = nl * T * H * hd * ab
    mlp_flops = 2.0 * T * s.dense_mlp * s.dense_layers
    mlp_w = s.dense_layers * s.dense_mlp * wb
    mlp_act = s.dense_layers * T * (2 * d + s.mlp_matrices * s.d_ff) * ab
    names = OPERATORS if s.moe else _DENSE_OPERATORS
    f = [0.0, 2.0 * T * d * s.qkv_out * nl, attn_f, attn_f, 2.0 * T * H * hd * d * nl]
    w = [min(T, s.vocab) * d * wb, s.qkv_w * wb, 0.0, 0.0, nl * H * hd * d * wb]
    a = [T * d * ab, nl * T * (d + s.qkv_out) * ab, attn_a, attn_a, nl * T * (H * hd + d) * ab]
    z = [0.0] * len(names)
    kr = z.copy()
    kr[2] = kr[3] = kv_cache
    kw = z.copy()
    kw[1] = T * nl * 2 * KV * hd * kb
    if s.mla:
        for i, (fi, wi, kri, kwi, ai) in enumerate(mla_attention(s, T, Bf, Lf, n, vis, wb, ab, kb), start=1):
            f[i], w[i], kr[i], kw[i], a[i] = fi, wi, kri, kwi, ai
    touched = own = routed = 0.0
    if s.moe:
        m, k = s.n_moe_layers, s.k
        touched = s.n_experts * (1.0 - (1.0 - k / s.n_experts) ** T)
        if moe_kernel is None:
            mlp_flops = mlp_flops + 2.0 * T * (k * s.expert + s.shared) * m
        else:  # the fused kernel's padded tiles (section 28)
            rows = float(moe_expert_rows(s.n_experts, k, T, moe_kernel))
            routed = 2.0 * rows * s.expert * m
            mlp_flops = mlp_flops + routed + 2.0 * T * s.shared * m
        if s.expert_wb:  # experts stored in their own format (gpt-oss: MXFP4)
            own = m * touched * s.expert * s.expert_wb
            mlp_w = mlp_w + m * (touched * s.expert * s.expert_wb + s.shared * wb)
        else:
            mlp_w = mlp_w + m * (touched * s.expert + s.shared) * wb
        mlp_act = mlp_act + m * T * (2 * d + k * s.mlp_matrices * s.d_ff_expert) * ab
        f.append(2.0 * T * s.router * m)
        w.append(m * s.router * wb)
        a.append(0.0)
    f += [mlp_flops, 4.0 * T * d * (2 * nl + 1), 2.0 * T * d * s.vocab]
    w += [mlp_w, s.norm * wb, s.lm_head * wb]
    a += [mlp_act, 2 * (2 * nl + 1) * T * d * ab, T * (d + s.vocab) * ab]
    return ScalarTerms(
        names, f, w, kr, kw, a, B, n, L, nl, T * d * ab, s.vocab, s.mlp_matrices, s.n_moe_layers,
        (touched + s.n_shared) if s.moe else 0.0, s.mla, touched, own, 0.0 if s.expert_wb else routed,
        float(fused_moe_tile_rows(T, s.n_experts, s.k)) if s.moe and moe_kernel is not None else 0.0,
    )  # fmt: skip


#: the variables every count of a standard-attention pass is linear in, the rows of a :class:`LinearTerms` table:
#: 1, the tokens T = batch x new tokens, the attention pairs batch x (new x context + visible), the cached tokens
#: batch x context, the embedding's rows min(T, vocab), a mixture's distinct experts touched and the rows its fused
#: kernel runs (section 28: the padded tiles; zero coefficients when the useful FLOPs are priced)
LINEAR_VARIABLES = ("one", "tokens", "pairs", "cached", "rows", "touched", "expert_rows")


class LinearTerms(NamedTuple):
    """Per variable (:data:`LINEAR_VARIABLES`, rows) and operator (columns) the FLOPs and bytes of one unit: a pass's
    per-operator counts are ``variables @ table`` (the scalar pricers' one coefficient table, roofline.costing.passtime)."""

    operators: tuple[str, ...]
    flops: Array
    bytes_weights: Array
    bytes_kv_read: Array
    bytes_kv_write: Array
    bytes_act: Array


def linear_terms(spec: ModelSpec, wb: float, ab: float, kb: float, moe_kernel: str | None = None) -> LinearTerms | None:
    """:func:`scalar_terms`' formulas with the configuration factored out (docs/cost-model.md, section 2): the
    coefficient table of ``spec`` in weight, activation and KV bytes ``wb``, ``ab``, ``kb``. None under multi-head
    latent attention or sliding-window layers, whose attention terms are other formulas (section 21)."""
    nv = len(LINEAR_VARIABLES)
    if spec.is_abstract:
        flops, w, z = np.zeros((nv, 1)), np.zeros((nv, 1)), np.zeros((nv, 1))
        flops[1, 0], w[0, 0] = 2.0 * spec.raw_params, spec.raw_params * wb
        return LinearTerms(ABSTRACT_OPERATORS, flops, w, z, z.copy(), z.copy())
    s = model_shape(spec)
    # experts in their own format: their own rate (section 51); hybrid: a state per sequence is no variable of the table,
    # and single-block layers (Nemotron-H) count their MLPs and norms apart from the layers (section 52)
    if s.mla or s.n_sliding or s.expert_wb or spec.n_linear_layers or spec.has_single_blocks or spec.is_compressed:
        return None
    nl, d, H, KV, hd, moe, vocab = s.nl, s.d, s.H, s.KV, s.hd, s.moe, s.vocab
    names = OPERATORS if moe else _DENSE_OPERATORS
    m = s.n_moe_layers if moe else 0
    flops, w, kr, kw, a = (np.zeros((nv, len(names))) for _ in range(5))
    ix = {name: i for i, name in enumerate(names)}
    flops[1, ix["qkv"]] = 2.0 * d * s.qkv_out * nl
    flops[2, ix["attn_scores"]] = flops[2, ix["attn_values"]] = 2.0 * H * hd * nl
    flops[1, ix["out_proj"]] = 2.0 * H * hd * d * nl
    if moe and moe_kernel is not None:  # the routed experts' FLOPs per row their kernel runs (section 28)
        flops[1, ix["mlp"]] = 2.0 * s.dense_mlp * s.dense_layers + 2.0 * s.shared * m
        flops[6, ix["mlp"]] = 2.0 * s.expert * m
    else:
        flops[1, ix["mlp"]] = 2.0 * s.dense_mlp * s.dense_layers + (2.0 * (s.k * s.expert + s.shared) * m if moe else 0)
    flops[1, ix["norms"]] = 4.0 * d * (2 * nl + 1)
    flops[1, ix["lm_head"]] = 2.0 * d * vocab
    w[4, ix["embed"]] = d * wb
    w[0, ix["qkv"]] = s.qkv_w * wb
    w[0, ix["out_proj"]] = nl * H * hd * d * wb
    w[0, ix["mlp"]] = s.dense_layers * s.dense_mlp * wb + (m * s.shared * wb if moe else 0.0)
    w[0, ix["norms"]] = s.norm * wb
    w[0, ix["lm_head"]] = s.lm_head * wb
    kr[3, ix["attn_scores"]] = kr[3, ix["attn_values"]] = nl * KV * hd * kb
    kw[1, ix["qkv"]] = nl * 2 * KV * hd * kb
    a[1, ix["embed"]] = d * ab
    a[1, ix["qkv"]] = nl * (d + s.qkv_out) * ab
    a[1, ix["attn_scores"]] = a[1, ix["attn_values"]] = nl * H * hd * ab
    a[1, ix["out_proj"]] = nl * (H * hd + d) * ab
    a[1, ix["mlp"]] = s.dense_layers * (2 * d + s.mlp_matrices * s.d_ff) * ab
    a[1, ix["norms"]] = 2 * (2 * nl + 1) * d * ab
    a[1, ix["lm_head"]] = (d + vocab) * ab
    if moe:
        flops[1, ix["router"]] = 2.0 * s.router * m
        w[0, ix["router"]] = m * s.router * wb
        w[5, ix["mlp"]] = m * s.expert * (s.expert_wb or wb)
        a[1, ix["mlp"]] += m * (2 * d + s.k * s.mlp_matrices * s.d_ff_expert) * ab
    return LinearTerms(names, flops, w, kr, kw, a)


def scalar_config(
    spec: ModelSpec, batch: Any, new_tokens: Any, context: Any, tree: Any
) -> tuple[int, int, int, float] | None:
    """(batch, new tokens, context, visible) of a scalar configuration within the model's context, or None
    (arrays, and anything the array path must validate or refuse)."""
    B, L = scalar_count(batch, 1), scalar_count(context, 0)
    # a hybrid model, one of single-block layers (Nemotron-H) and DeepSeek-V4's compressed attention: the array path
    # prices them (sections 52, 58)
    if B is None or L is None or spec.n_linear_layers or spec.has_single_blocks or spec.is_compressed:
        return None
    if tree is not None:
        n, vis_sum = _tree_visible(tree)
        if new_tokens is not None and scalar_count(new_tokens, 1) not in (1, n):
            return None
        vis = float(vis_sum)
    else:
        nt = scalar_count(new_tokens, 1)
        if nt is None:
            return None
        n, vis = nt, nt * (nt + 1) / 2.0
    if L + n > spec.max_context:
        return None
    return B, n, L, vis


def forward_cost(
    spec: ModelSpec | str,
    batch: ArrayLike = 1,
    new_tokens: ArrayLike | None = 1,
    context: ArrayLike = 0,
    *,
    weight_dtype: str = "fp16",
    kv_dtype: str | None = None,
    act_dtype: str | None = None,
    tree: Any = None,
    moe_kernel: str | None = None,
) -> PassCost:
    """Per-operator FLOPs and bytes of one pass of ``new_tokens`` tokens per sequence.

    ``batch`` sequences, each with ``context`` tokens already cached. ``tree`` (a
    :class:`roofline.speculation.trees.Tree` or an array of node depths) replaces the causal
    chain: ``new_tokens`` becomes the node count and each node attends to its
    ancestors only. ``kv_dtype``/``act_dtype`` default to ``weight_dtype`` (or fp16
    for integer/4-bit weights). ``moe_kernel`` (:data:`MOE_KERNELS`) prices a mixture's routed
    experts as that kernel runs them: ``"fused"`` counts the FLOPs of its padded tiles
    (docs/cost-model.md, section 28). Routed experts a checkpoint stores in a format of their
    own (``ModelSpec.expert_format``) take that format's bytes.
    """
    spec = get_model(spec)
    wb = dtype_bytes(weight_dtype)
    act_dtype = act_dtype or activation_dtype(weight_dtype)
    kv_dtype = kv_dtype or act_dtype
    ab, kb = dtype_bytes(act_dtype), dtype_bytes(kv_dtype)

    if moe_kernel not in MOE_KERNELS:
        raise SpecroofError(f"moe_kernel must be one of {MOE_KERNELS} (got {moe_kernel!r})")
    one = scalar_config(spec, batch, new_tokens, context, tree)
    if one is not None:  # one configuration: plain floats, no per-operator array arithmetic
        return scalar_terms(spec, *one, wb, ab, kb, moe_kernel).to_cost(act_dtype, weight_dtype)
    B = check_min("batch", batch, 1, integer=True)
    L = check_min("context", context, 0, integer=True)
    if tree is not None:
        n_nodes, visible_sum = _tree_visible(tree)
        n = np.asarray(n_nodes, dtype=np.int64)
        if new_tokens not in (None, 1) and np.any(as_array("new_tokens", new_tokens) != n_nodes):
            raise SpecroofError(f"new_tokens ({new_tokens}) disagrees with the tree's {n_nodes} nodes")
        vis = np.asarray(float(visible_sum))
    else:
        n = check_min("new_tokens", new_tokens, 1, integer=True)
        vis = n * (n + 1) / 2.0  # causal: token i sees i new tokens
    B, n, L = np.broadcast_arrays(B, n, L)
    vis = np.broadcast_to(vis, B.shape) if tree is not None else n * (n + 1) / 2.0
    if np.any(L + n > spec.max_context):
        bad = (L + n)[L + n > spec.max_context].flat[0]
        raise SpecroofError(
            f"context + new_tokens = {bad} exceeds {spec.name}'s max context of {spec.max_context} tokens"
        )
    T = (B * n).astype(float)
    Bf, Lf = B.astype(float), L.astype(float)
    zeros = np.zeros(B.shape)

    if spec.is_abstract:
        N = spec.raw_params
        flops = np.stack([2.0 * T * N])
        weights = np.stack([zeros + N * wb])
        z = np.stack([zeros])
        return PassCost(
            ABSTRACT_OPERATORS, flops, weights, z, z.copy(), z.copy(), B, n, L, act_dtype, 0, 0.0, weight_dtype
        )

    nl, d, H, KV, hd = spec.n_layers, spec.d_model, spec.n_heads, spec.n_kv_heads, spec.head_dim
    # a hybrid model's attention operators run in its attention layers only; a gated query (Qwen3-Next) is twice as
    # wide (section 52)
    na, nlin = spec.n_attn_layers, spec.n_linear_layers
    qkv_out = (H * (2 if spec.attn_output_gate else 1) + 2 * KV) * hd
    names = tuple(o for o in OPERATORS if spec.is_moe or o != "router")
    if nlin:
        at = names.index("out_proj") + 1
        names = (*names[:at], *LINEAR_OPERATORS, *names[at:])
    # One preallocated block per byte class; rows are filled in place so a
    # million-point sweep does not build and re-stack dozens of temporaries.
    out = {k: np.zeros((len(names), *B.shape)) for k in ("f", "w", "kr", "kw", "a")}
    row = {o: i for i, o in enumerate(names)}

    def op(name: str, flops: Any, w: Any = 0.0, kv_r: Any = 0.0, kv_w: Any = 0.0, act: Any = 0.0) -> None:
        if name not in row:
            return
        for key, value in (("f", flops), ("w", w), ("kr", kv_r), ("kw", kv_w), ("a", act)):
            if not (isinstance(value, (int, float)) and value == 0):  # a literal zero: the row is zero already
                out[key][row[name]] = value

    op("embed", 0.0, w=np.minimum(T, spec.vocab_size) * d * wb, act=T * d * ab)
    if spec.is_compressed:
        terms = compressed_attention(spec, T, Bf, Lf, n, vis, wb, ab, kb)
        for name, (f_, w_, kr_, kw_, a_) in zip(("qkv", "attn_scores", "attn_values", "out_proj"), terms, strict=True):
            op(name, f_, w=w_, kv_r=kr_, kv_w=kw_, act=a_)
    elif spec.is_mla:
        terms = mla_attention(model_shape(spec), T, Bf, Lf, n, vis, wb, ab, kb)
        for name, (f_, w_, kr_, kw_, a_) in zip(("qkv", "attn_scores", "attn_values", "out_proj"), terms, strict=True):
            op(name, f_, w=w_, kv_r=kr_, kv_w=kw_, act=a_)
    else:
        kv_new = T * na * 2 * KV * hd * kb
        op(
            "qkv",
            2.0 * T * d * qkv_out * na,
            w=na * (spec.attn_params_per_layer - H * hd * d) * wb,
            kv_w=kv_new,
            act=na * T * (d + qkv_out) * ab,
        )
        # Each query attends to the cached context plus the new tokens it can see; a sliding layer's cached
        # context is at most its window (section 21)
        if spec.n_sliding_layers:
            keys = windowed_keys(model_shape(spec), Lf, np.minimum(Lf, float(spec.sliding_window)))
            kv_cache = Bf * keys * KV * hd * kb
            attn_f = 2.0 * Bf * (n * keys + vis * nl) * H * hd
        else:
            attn_pairs = Bf * (n * Lf + vis)
            kv_cache = Bf * Lf * na * KV * hd * kb  # K (or V) of the cached context, all attention layers
            attn_f = 2.0 * attn_pairs * H * hd * na
        op("attn_scores", attn_f, kv_r=kv_cache, act=na * T * H * hd * ab)
        op("attn_values", attn_f, kv_r=kv_cache, act=na * T * H * hd * ab)
        op(
            "out_proj",
            2.0 * T * H * hd * d * na,
            w=na * H * hd * d * wb,
            act=na * T * (H * hd + d) * ab,
        )
    if nlin:
        for name, (f_, w_, kr_, kw_, a_) in zip(
            LINEAR_OPERATORS, linear_attention(spec, T, Bf, n, wb, ab), strict=True
        ):
            op(name, f_, w=w_, kv_r=kr_, kv_w=kw_, act=a_)
    dense_layers = spec.n_dense_mlp_layers  # Nemotron-H's mixer-only layers have no MLP (section 52)
    mlp_flops = 2.0 * T * spec.dense_mlp_params * dense_layers
    mlp_w: Any = dense_layers * spec.dense_mlp_params * wb
    mlp_act = dense_layers * T * (2 * d + spec.mlp_matrices * spec.d_ff) * ab
    router_f: Any = 0.0
    router_w: Any = 0.0
    touched: Any = 0.0
    own: Any = 0.0
    routed: Any = 0.0
    if spec.is_moe:
        m = spec.n_moe_layers
        k = spec.experts_per_token
        touched = expected_experts_touched(spec.n_experts, k, T)
        if moe_kernel is None:
            mlp_flops = mlp_flops + 2.0 * T * (k * spec.expert_params + spec.shared_expert_params) * m
        else:  # the fused kernel's padded tiles (section 28)
            rows = moe_expert_rows(spec.n_experts, k, T, moe_kernel)
            routed = 2.0 * rows * spec.expert_params * m
            mlp_flops = mlp_flops + routed + 2.0 * T * spec.shared_expert_params * m
        if spec.expert_format:  # experts stored in their own format (gpt-oss: MXFP4)
            ewb = spec.expert_bytes(wb)
            own = m * touched * spec.expert_params * ewb
            mlp_w = mlp_w + m * (touched * spec.expert_params * ewb + spec.shared_expert_params * wb)
        else:
            mlp_w = mlp_w + m * (touched * spec.expert_params + spec.shared_expert_params) * wb
        mlp_act = mlp_act + m * T * (2 * d + k * spec.mlp_matrices * spec.d_ff_expert) * ab
        router_f = 2.0 * T * spec.router_params * m
        router_w = m * spec.router_params * wb
    op("router", router_f, w=router_w)
    op("mlp", mlp_flops, w=mlp_w, act=mlp_act)
    # hyper-connections (section 58): mixing maps over the hc_mult streams, which each block reads and writes
    hc, hcw = spec.hc_mult, spec.hc_params
    op(
        "norms",
        4.0 * T * d * spec.n_norms + 2.0 * T * hcw,
        w=(spec.norm_params + hcw) * wb,
        act=2 * spec.n_norms * T * d * ab + (4 * nl * T * hc * d * ab if hc else 0.0),
    )
    op("lm_head", 2.0 * T * d * spec.vocab_size, w=spec.lm_head_params * wb, act=T * (d + spec.vocab_size) * ab)
    # the time model's per-layer terms (two all-reduces, a layer's launches and overhead) are those of a layer of a
    # mixer and an MLP: a single-block hybrid's blocks (Nemotron-H) count two to such a layer, rounded up (section 52)
    layers = -(-(spec.n_norms - 1) // 2) if spec.has_single_blocks else nl

    return PassCost(
        names, out["f"], out["w"], out["kr"], out["kw"], out["a"], B, n, L, act_dtype, layers, T * d * ab, weight_dtype,
        vocab_size=spec.vocab_size, mlp_matrices=spec.mlp_matrices, n_moe_layers=spec.n_moe_layers,
        experts_touched=(touched + spec.n_shared_experts) if spec.is_moe else 0.0,
        kv_replicated=spec.is_mla or spec.is_compressed,
        routed_experts=touched, expert_format_bytes=own, routed_flops=0.0 if spec.expert_format else routed,
        moe_tile_rows=fused_moe_tile_rows(T, spec.n_experts, spec.experts_per_token)
        if spec.is_moe and moe_kernel is not None else 0.0,
    )  # fmt: skip

"""Model specifications for decoder-only LMs: dense, GQA/MQA, MoE; presets; HF configs.

One module despite its length: the presets table, the Hugging Face config readers and the Hub lookup each fill
:class:`ModelSpec`'s fields and are checked against them; apart, a new field would touch three files.

A :class:`ModelSpec` holds the shapes the cost model needs. Parameter counts
are derived from the shapes (never stored), so a preset is checked against the
published count in the tests. ``ModelSpec.from_params(13e9)`` is the worked example's
abstract model: a number of weights and nothing else.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from roofline.core.errors import SpecroofError, as_array, check_choice
from roofline.core.validation import check_quantity
from roofline.passes.dtypes import WEIGHT_FORMAT_GRAMMAR, dtype_bytes

#: the MLP by its matrices: ``swiglu`` is any gated MLP (gate, up, down: three matrices; Gemma's GeGLU too, as the cost
#: model prices matrices, not the activation between them), ``gelu`` the ungated two-matrix MLP
MLP_KINDS = ("swiglu", "gelu")
#: linear-attention layer kinds of hybrid models (docs/cost-model.md, section 52)
LINEAR_KINDS = ("gdn", "mamba2")

#: each shape field's kind in :data:`roofline.core.validation.RANGES`
_FIELD_KINDS = {
    "n_layers": "layers",
    "d_model": "width",
    "n_heads": "heads",
    "n_kv_heads": "heads",
    "head_dim": "width",
    "d_ff": "width",
    "vocab_size": "vocab",
    "n_experts": "experts",
    "experts_per_token": "experts",
    "d_ff_expert": "width",
    "n_shared_experts": "experts",
    "d_ff_shared": "width",
    "n_dense_layers": "layers",
    "q_lora_rank": "width",
    "kv_lora_rank": "width",
    "qk_rope_head_dim": "width",
    "v_head_dim": "width",
    "sliding_window": "context",
    "n_sliding_layers": "layers",
}


@dataclass(frozen=True)
class ModelSpec:
    """Shapes of a decoder LM. All sizes are element counts, not bytes.

    For an abstract model (``from_params``) ``n_layers == 0`` and ``raw_params``
    holds the weight count; it then has no KV cache unless shapes are given.
    """

    name: str
    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    d_ff: int
    vocab_size: int
    mlp_kind: str = "swiglu"
    tie_embeddings: bool = False
    qkv_bias: bool = False
    max_context: int = 4096
    n_experts: int = 0
    experts_per_token: int = 0
    d_ff_expert: int = 0
    n_shared_experts: int = 0
    d_ff_shared: int = 0
    n_dense_layers: int = 0
    raw_params: float = 0.0
    #: multi-head latent attention (DeepSeek-V2/V3, Kimi K2): the cached latent's width (0: standard attention).
    #: Then ``head_dim`` is the query/key head (qk_nope + qk_rope), ``qk_rope_head_dim`` its RoPE part,
    #: ``v_head_dim`` the value head and ``q_lora_rank`` the query's low-rank width (0: a direct q projection)
    kv_lora_rank: int = 0
    q_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    #: sliding-window attention (gpt-oss): ``n_sliding_layers`` of the layers see only the last ``sliding_window``
    #: tokens; the others see the whole context
    sliding_window: int = 0
    n_sliding_layers: int = 0
    #: gpt-oss extras: a learned sink logit per head, a bias on the output projection, biases on the experts and router
    attn_sinks: bool = False
    out_bias: bool = False
    moe_bias: bool = False
    #: multi-token-prediction modules the checkpoint ships (config.json ``num_nextn_predict_layers``: DeepSeek-V3/R1
    #: 1, Kimi K2 0); None: not known (an ``mtp`` drafter is then priced as one module per draft step)
    mtp_modules: int | None = None
    #: how the checkpoint stores its routed experts when they are quantised apart from the other weights (gpt-oss:
    #: ``mxfp4``, 4-bit E2M1 values with an 8-bit scale per 32: 4.25 bits); "" stores them like the other weights.
    #: Any weight dtype or format (:data:`EXPERT_FORMATS`, :func:`roofline.passes.dtypes.weight_format`)
    expert_format: str = ""
    #: hybrid linear-attention models (docs/cost-model.md, section 52): ``n_linear_layers`` of the layers mix tokens
    #: through a fixed-size recurrent state instead of attention over a KV cache. ``linear_kind`` "gdn" (Gated
    #: DeltaNet: Qwen3-Next, Qwen3.5) or "mamba2" (Mamba-2: Granite 4.0-H); ``linear_heads`` the state's heads (GDN
    #: ``linear_num_value_heads``, Mamba-2 ``mamba_n_heads``), ``linear_groups`` the key heads or B/C groups
    #: (``linear_num_key_heads``, ``mamba_n_groups``), ``linear_key_dim`` x ``linear_value_dim`` one head's state
    #: (GDN key x value head; Mamba-2 ``mamba_d_state`` x ``mamba_d_head``), ``linear_conv`` the causal conv's width
    linear_kind: str = ""
    n_linear_layers: int = 0
    linear_heads: int = 0
    linear_groups: int = 0
    linear_key_dim: int = 0
    linear_value_dim: int = 0
    linear_conv: int = 0
    #: the dtype engines keep the recurrent state in ("": the pass's activation dtype; Qwen's ``mamba_ssm_dtype``
    #: float32 is SGLang's default and the Qwen3.5 configs' field)
    state_dtype: str = ""
    #: gated attention (Qwen3-Next, Qwen3.5: ``attn_output_gate``): the query projection also yields a sigmoid gate per
    #: query channel, so q_proj is twice as wide
    attn_output_gate: bool = False
    #: hybrids whose layers are single blocks (NVIDIA's Nemotron-H, ``hybrid_override_pattern``): of the ``n_layers``,
    #: ``n_mixer_only_layers`` are a token mixer (Mamba-2 or attention) with no MLP after it and ``n_mlp_only_layers``
    #: an MLP or a mixture of experts with no mixer before it, each with one norm (0 and 0: every layer is a mixer
    #: followed by an MLP, with two norms). The attention layers are then the layers that are neither linear nor MLP-only
    n_mixer_only_layers: int = 0
    n_mlp_only_layers: int = 0
    #: DeepSeek-V4's compressed sparse attention (docs/cost-model.md, section 58): one shared key/value head of
    #: ``head_dim``; every layer attends to the last ``attn_window`` tokens uncompressed (0: not this attention),
    #: ``n_csa_layers`` also to the ``index_topk`` entries, one per ``csa_ratio`` tokens, that a lightning indexer of
    #: ``index_heads`` x ``index_head_dim`` picks, ``n_hca_layers`` to every entry, one per ``hca_ratio`` tokens; the
    #: output projects in ``o_groups`` groups through ``o_lora_rank``; ``hc_mult`` hyper-connection streams
    attn_window: int = 0
    n_csa_layers: int = 0
    csa_ratio: int = 0
    n_hca_layers: int = 0
    hca_ratio: int = 0
    index_topk: int = 0
    index_heads: int = 0
    index_head_dim: int = 0
    o_lora_rank: int = 0
    o_groups: int = 0
    hc_mult: int = 0

    def __post_init__(self) -> None:
        check_choice("mlp_kind", self.mlp_kind, MLP_KINDS)
        if self.mtp_modules is not None and (
            isinstance(self.mtp_modules, bool) or not isinstance(self.mtp_modules, int) or self.mtp_modules < 0
        ):
            raise SpecroofError(
                f"ModelSpec {self.name!r}: mtp_modules must be a whole number >= 0 (got {self.mtp_modules!r})"
            )
        if self.expert_format:
            expert_bytes_per_weight(self.expert_format)  # an unknown format names the choices
        if self.raw_params != 0:
            check_quantity(f"ModelSpec {self.name!r}: raw_params", self.raw_params, "params")
        check_quantity(f"ModelSpec {self.name!r}: max_context", self.max_context, "context")
        if self.is_abstract:
            return
        for f in ("n_layers", "d_model", "n_heads", "n_kv_heads", "head_dim", "vocab_size", "max_context"):
            v = getattr(self, f)
            if not isinstance(v, int) or v < 1:
                raise SpecroofError(f"ModelSpec {self.name!r}: {f} must be a positive integer (got {v!r})")
        # physical ranges: past them the byte and FLOP counts overflow a float (a vocabulary of 10**400)
        for f, kind in _FIELD_KINDS.items():
            v = getattr(self, f)
            if v != 0 or f in ("n_layers", "d_model", "n_heads", "n_kv_heads", "head_dim", "vocab_size"):
                check_quantity(f"ModelSpec {self.name!r}: {f}", v, kind)
        if self.n_heads % self.n_kv_heads:
            raise SpecroofError(
                f"ModelSpec {self.name!r}: n_heads ({self.n_heads}) must be a multiple of n_kv_heads ({self.n_kv_heads})"
            )
        if self.n_experts:
            if not 1 <= self.experts_per_token <= self.n_experts:
                raise SpecroofError(
                    f"ModelSpec {self.name!r}: experts_per_token must lie in [1, n_experts={self.n_experts}] "
                    f"(got {self.experts_per_token})"
                )
            if self.d_ff_expert < 1:
                raise SpecroofError(f"ModelSpec {self.name!r}: d_ff_expert must be >= 1 for an MoE model")
            if not 0 <= self.n_dense_layers <= self.n_layers:
                raise SpecroofError(f"ModelSpec {self.name!r}: n_dense_layers must lie in [0, n_layers]")
        elif self.d_ff < 1:
            raise SpecroofError(f"ModelSpec {self.name!r}: d_ff must be >= 1")
        if self.kv_lora_rank:
            if not 1 <= self.qk_rope_head_dim < self.head_dim:
                raise SpecroofError(
                    f"ModelSpec {self.name!r}: qk_rope_head_dim must lie in [1, head_dim - 1 = {self.head_dim - 1}] "
                    f"for multi-head latent attention (got {self.qk_rope_head_dim})"
                )
            if self.v_head_dim < 1:
                raise SpecroofError(f"ModelSpec {self.name!r}: v_head_dim must be >= 1 for multi-head latent attention")
        if self.n_sliding_layers:
            if not 1 <= self.n_sliding_layers <= self.n_layers:
                raise SpecroofError(
                    f"ModelSpec {self.name!r}: n_sliding_layers must lie in [0, n_layers={self.n_layers}] "
                    f"(got {self.n_sliding_layers})"
                )
            if self.sliding_window < 1:
                raise SpecroofError(f"ModelSpec {self.name!r}: sliding_window must be >= 1 when layers slide")
        if self.n_mixer_only_layers or self.n_mlp_only_layers:
            self._check_blocks()
        if self.n_linear_layers:
            self._check_linear()
        if self.attn_window or self.n_csa_layers or self.n_hca_layers or self.o_lora_rank:
            self._check_compressed()

    def _check_compressed(self) -> None:
        """DeepSeek-V4's attention: whole positive shapes, one KV head, groups that divide the heads, no other
        attention kind beside it."""
        for f in ("attn_window", "o_lora_rank", "o_groups", "n_csa_layers", "csa_ratio", "n_hca_layers", "hca_ratio",
                  "index_topk", "index_heads", "index_head_dim", "hc_mult"):  # fmt: skip
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise SpecroofError(f"ModelSpec {self.name!r}: {f} must be a whole number >= 0 (got {v!r})")
            if v:
                check_quantity(
                    f"ModelSpec {self.name!r}: {f}", v, "context" if f in ("attn_window", "index_topk") else "width"
                )
        need = ["attn_window", "o_lora_rank", "o_groups"]
        need += ["csa_ratio", "index_topk", "index_heads", "index_head_dim"] if self.n_csa_layers else []
        need += ["hca_ratio"] if self.n_hca_layers else []
        for f in need:
            if getattr(self, f) < 1:
                raise SpecroofError(f"ModelSpec {self.name!r}: compressed attention needs {f} >= 1")
        if self.n_kv_heads != 1:
            raise SpecroofError(
                f"ModelSpec {self.name!r}: compressed attention shares one key/value head (got n_kv_heads "
                f"{self.n_kv_heads})"
            )
        if self.n_heads % self.o_groups:
            raise SpecroofError(
                f"ModelSpec {self.name!r}: o_groups ({self.o_groups}) must divide n_heads ({self.n_heads})"
            )
        if self.n_csa_layers + self.n_hca_layers > self.n_layers:
            raise SpecroofError(
                f"ModelSpec {self.name!r}: n_csa_layers + n_hca_layers must not exceed n_layers={self.n_layers}"
            )
        if self.is_mla or self.n_sliding_layers or self.n_linear_layers or self.has_single_blocks:
            raise SpecroofError(
                f"ModelSpec {self.name!r}: compressed attention is priced on its own (not beside latent, sliding, "
                "linear or single-block layers)"
            )

    def _check_blocks(self) -> None:
        """Single-block layers: whole counts that leave every layer one kind, and a mixture only where an MLP is."""
        for f in ("n_mixer_only_layers", "n_mlp_only_layers"):
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise SpecroofError(f"ModelSpec {self.name!r}: {f} must be a whole number >= 0 (got {v!r})")
        if self.n_mixer_only_layers + self.n_mlp_only_layers > self.n_layers:
            raise SpecroofError(
                f"ModelSpec {self.name!r}: n_mixer_only_layers + n_mlp_only_layers must not exceed n_layers="
                f"{self.n_layers} (got {self.n_mixer_only_layers} + {self.n_mlp_only_layers})"
            )
        if self.n_linear_layers + self.n_mlp_only_layers > self.n_layers:
            raise SpecroofError(
                f"ModelSpec {self.name!r}: n_linear_layers + n_mlp_only_layers must not exceed n_layers="
                f"{self.n_layers} (a layer is a mixer or an MLP, not both kinds of single block)"
            )
        if self.is_moe and self.n_moe_layers > self.n_mlp_layers:
            raise SpecroofError(
                f"ModelSpec {self.name!r}: {self.n_moe_layers} MoE layers but only {self.n_mlp_layers} layers with an "
                "MLP (n_dense_layers must count the mixer-only layers too)"
            )

    def _check_linear(self) -> None:
        """A hybrid model's linear-attention fields: a known kind, whole positive shapes, standard attention beside."""
        check_choice("linear_kind", self.linear_kind, LINEAR_KINDS)
        if not isinstance(self.n_linear_layers, int) or not 1 <= self.n_linear_layers <= self.n_layers:
            raise SpecroofError(
                f"ModelSpec {self.name!r}: n_linear_layers must lie in [0, n_layers={self.n_layers}] "
                f"(got {self.n_linear_layers!r})"
            )
        for f in ("linear_heads", "linear_groups", "linear_key_dim", "linear_value_dim", "linear_conv"):
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise SpecroofError(f"ModelSpec {self.name!r}: {f} must be a positive integer (got {v!r})")
            check_quantity(f"ModelSpec {self.name!r}: {f}", v, "width")
        if self.linear_heads % self.linear_groups:
            raise SpecroofError(
                f"ModelSpec {self.name!r}: linear_heads ({self.linear_heads}) must be a multiple of linear_groups "
                f"({self.linear_groups})"
            )
        if self.is_mla or self.n_sliding_layers:
            raise SpecroofError(
                f"ModelSpec {self.name!r}: linear-attention layers are priced beside standard full attention only "
                "(not latent or sliding-window attention)"
            )

    # -- construction ------------------------------------------------------
    @classmethod
    def from_params(cls, params: float, name: str | None = None, max_context: int = 1 << 20) -> ModelSpec:
        """The abstract model of the 13B-on-A100 worked example: ``params`` weights, 2 FLOPs per weight per token, no KV."""
        if as_array("params", params).ndim:  # a string or a flag is named, not compared (TypeError)
            raise SpecroofError(f"params is one number of weights, not an array (got {params!r})")
        if not params > 0:
            raise SpecroofError(f"params must be > 0 (got {params!r})")
        params = check_quantity("params", params, "params")
        label = name or f"{params / 1e9:g}B (abstract)"
        return cls(label, 0, 0, 0, 0, 0, 0, 0, max_context=max_context, raw_params=float(params))

    @classmethod
    def from_hf_config(cls, config: dict[str, Any] | str | Path, name: str | None = None) -> ModelSpec:
        """Build from a Hugging Face ``config.json`` (dict, file path or checkpoint folder).

        Supports Llama, Mistral, Qwen2/Qwen3, Mixtral, Qwen2-MoE/Qwen3-MoE, DeepSeek-V2/V3 and Kimi K2
        (DeepSeekMoE, standard or multi-head latent attention) and gpt-oss (sliding/full layers, sinks, MoE).
        """
        if isinstance(config, dict):
            return _from_hf_dict(config, name)
        p = Path(config)
        if p.is_dir():
            p = p / "config.json"
        if not p.is_file():
            raise SpecroofError(f"no config.json at {str(p)!r}")
        try:
            data = json.loads(p.read_text())
        except UnicodeDecodeError:
            raise SpecroofError(f"{str(p)!r} is not a text file (config.json must be UTF-8 JSON)") from None
        except json.JSONDecodeError as exc:
            raise SpecroofError(f"{str(p)!r} is not valid JSON: {exc.msg} at line {exc.lineno}") from None
        if not isinstance(data, dict):
            raise SpecroofError(f"{str(p)!r} must hold a JSON object (got a {type(data).__name__})")
        return _from_hf_dict(data, name or _cache_id(p) or p.parent.name)

    def replace(self, **changes: Any) -> ModelSpec:
        """A copy with fields changed (validated again).

        A copy with fewer layers (early exit's first layers, a drafter's one layer) keeps the model's share of
        sliding-window layers, rounded up, unless ``n_sliding_layers`` is given."""
        layers = changes.get("n_layers", self.n_layers)
        if self.n_sliding_layers and layers != self.n_layers and "n_sliding_layers" not in changes:
            changes["n_sliding_layers"] = min(layers, -(-self.n_sliding_layers * layers // self.n_layers))
        # linear-attention layers keep their share rounded down: the first 8 of Qwen3-Next's 3:1 stack hold 6, and one
        # layer is a full-attention layer (the MTP module's and a drafter's layer)
        if self.n_linear_layers and layers != self.n_layers and "n_linear_layers" not in changes:
            changes["n_linear_layers"] = self.n_linear_layers * layers // self.n_layers
        # single-block layers (Nemotron-H) keep their shares rounded down too, and a mixture its share of the layers
        if (self.n_mixer_only_layers or self.n_mlp_only_layers) and layers != self.n_layers:
            for f in ("n_mixer_only_layers", "n_mlp_only_layers"):
                changes.setdefault(f, getattr(self, f) * layers // self.n_layers)
            if self.is_moe and "n_dense_layers" not in changes:
                changes["n_dense_layers"] = layers - self.n_moe_layers * layers // self.n_layers
        # compressed-attention layers (DeepSeek-V4) keep their shares rounded down; the others are window-only
        if (self.n_csa_layers or self.n_hca_layers) and layers != self.n_layers:
            for f in ("n_csa_layers", "n_hca_layers"):
                changes.setdefault(f, getattr(self, f) * layers // self.n_layers)
        return dataclasses.replace(self, **changes)

    def one_layer(self, name: str, **changes: Any) -> ModelSpec:
        """One whole layer of this model's shape, named ``name``: attention over its whole context and its MLP (or
        MoE), whatever layer kinds the model mixes (a sliding window, a hybrid's linear attention, Nemotron-H's
        single blocks). A drafter's layer and an MTP module are such a layer (section 52); under DeepSeek-V4's
        compressed attention it is a window-only layer, as the MTP layer's ratio 0 in its config (section 58).
        ``changes`` as :meth:`replace` takes them."""
        one = {"n_layers": 1, "n_dense_layers": 0, "n_sliding_layers": 0, "n_linear_layers": 0,
               "n_mixer_only_layers": 0, "n_mlp_only_layers": 0, "n_csa_layers": 0, "n_hca_layers": 0}  # fmt: skip
        return dataclasses.replace(self, name=name, **(one | changes))

    # -- derived shapes ----------------------------------------------------
    @property
    def is_abstract(self) -> bool:
        """True for a weights-only model from :meth:`from_params`."""
        return self.raw_params > 0

    @property
    def is_moe(self) -> bool:
        return self.n_experts > 0

    @property
    def n_moe_layers(self) -> int:
        return self.n_layers - self.n_dense_layers if self.is_moe else 0

    @property
    def is_mla(self) -> bool:
        """True for multi-head latent attention (one cached latent per token and layer, shared by all heads)."""
        return self.kv_lora_rank > 0

    @property
    def mla_qkv_params_per_layer(self) -> int:
        """MLA's weights before the scores, as the absorbed decode kernels run them: the query (low-rank or direct),
        the KV down-projection to latent + RoPE key, the two low-rank norms, and W_UK (kv_b_proj's key half)."""
        d, H, hd, r, rope = self.d_model, self.n_heads, self.head_dim, self.kv_lora_rank, self.qk_rope_head_dim
        qr = self.q_lora_rank
        q = d * qr + qr + qr * H * hd if qr else d * H * hd
        return q + d * (r + rope) + r + r * H * (hd - rope)

    @property
    def is_compressed(self) -> bool:
        """True for DeepSeek-V4's compressed sparse attention (a window on every layer, compressed entries beside)."""
        return self.attn_window > 0

    @property
    def compressed_out_params_per_layer(self) -> int:
        """DeepSeek-V4's grouped low-rank output (section 58): each of ``o_groups`` groups of heads to ``o_lora_rank``
        (``H h o_lora_rank`` in all), then the groups' concatenation to the model width."""
        return self.n_heads * self.head_dim * self.o_lora_rank + self.o_groups * self.o_lora_rank * self.d_model

    @property
    def compressor_params(self) -> int:
        """Weights of every layer's compressor and, in CSA layers, lightning indexer (section 58): a compressor of
        ratio c and width w has KV and gate projections d x (k w) each, a position bias c x k w and a norm of w (k = 2
        where its windows overlap, ratio 4)."""
        if not self.is_compressed:
            return 0
        d, h = self.d_model, self.head_dim

        def comp(ratio: int, width: int) -> int:
            k = 2 if ratio == 4 else 1
            return 2 * d * k * width + ratio * k * width + width

        ih, ihd = self.index_heads, self.index_head_dim
        csa = comp(self.csa_ratio, h) + self.q_rank_in * ih * ihd + d * ih + comp(self.csa_ratio, ihd)
        return self.n_csa_layers * csa + (self.n_hca_layers * comp(self.hca_ratio, h) if self.n_hca_layers else 0)

    @property
    def q_rank_in(self) -> int:
        """The width the query projection reads: the low-rank ``q_lora_rank``, else the model width."""
        return self.q_lora_rank or self.d_model

    @property
    def hc_params(self) -> int:
        """Hyper-connection weights (section 58): before and after each block a map of the ``hc_mult`` streams
        (``hc_mult x d``) to ``(2 + hc_mult) x hc_mult`` mixing weights with its bias and 3 scales, and the head's map of
        the streams to ``hc_mult`` weights."""
        m = self.hc_mult
        if not m:
            return 0
        mix = (2 + m) * m
        return 2 * self.n_layers * (m * self.d_model * mix + mix + 3) + m * self.d_model * m + m + 1

    @property
    def mla_out_params_per_layer(self) -> int:
        """MLA's weights after the values: W_UV (kv_b_proj's value half) and the output projection."""
        return self.kv_lora_rank * self.n_heads * self.v_head_dim + self.n_heads * self.v_head_dim * self.d_model

    @property
    def n_attn_layers(self) -> int:
        """Layers with (full, sliding or latent) attention and a KV cache: all but the linear-attention layers (and
        the MLP-only layers of a single-block hybrid)."""
        return self.n_layers - self.n_linear_layers - self.n_mlp_only_layers

    @property
    def has_single_blocks(self) -> bool:
        """True for a hybrid whose layers are single blocks (Nemotron-H: a mixer or an MLP, not both)."""
        return bool(self.n_mixer_only_layers or self.n_mlp_only_layers)

    @property
    def n_mlp_layers(self) -> int:
        """Layers with an MLP or a mixture of experts: all but the mixer-only layers of a single-block hybrid."""
        return self.n_layers - self.n_mixer_only_layers

    @property
    def n_dense_mlp_layers(self) -> int:
        """Layers with a dense MLP: those with an MLP that is not a mixture of experts."""
        return self.n_mlp_layers - self.n_moe_layers

    @property
    def n_norms(self) -> int:
        """RMS norms of the stack: two per layer (before its mixer and before its MLP), one per single-block layer,
        and the final norm."""
        return 2 * self.n_layers - self.n_mixer_only_layers - self.n_mlp_only_layers + 1

    @property
    def linear_conv_dim(self) -> int:
        """Channels of a linear-attention layer's causal conv (and of its conv state): q and k of the key heads or
        B and C of the groups, and the value heads' inputs (GDN: 2 h_k d_k + h_v d_v; Mamba-2: 2 g N + h P)."""
        return 2 * self.linear_groups * self.linear_key_dim + self.linear_heads * self.linear_value_dim

    @property
    def linear_in_proj(self) -> int:
        """Output width of a linear-attention layer's input projection: the conv's channels, the output gate z
        (h_v d_v), and per head the gates (GDN: beta and the decay a, 2 h_v; Mamba-2: dt, h)."""
        gates = 2 if self.linear_kind == "gdn" else 1
        return self.linear_conv_dim + self.linear_heads * (self.linear_value_dim + gates)

    @property
    def linear_params_per_layer(self) -> int:
        """Weights of one linear-attention layer: input projection, conv, output projection, the gated norm and the
        per-head decay parameters (GDN: A_log, dt_bias, a norm of d_v; Mamba-2: A_log, D, dt_bias, conv bias and a
        norm over all h P channels)."""
        if not self.n_linear_layers:
            return 0
        d, h, dv, conv = self.d_model, self.linear_heads, self.linear_value_dim, self.linear_conv_dim
        proj = d * self.linear_in_proj + conv * self.linear_conv + h * dv * d
        if self.linear_kind == "gdn":
            return proj + dv + 2 * h
        return proj + conv + h * dv + 3 * h

    @property
    def state_elements_per_layer(self) -> int:
        """Recurrent-state elements one linear-attention layer keeps per sequence: a d_k x d_v matrix per head."""
        return self.linear_heads * self.linear_key_dim * self.linear_value_dim

    @property
    def conv_state_elements_per_layer(self) -> int:
        """Conv-state elements one linear-attention layer keeps per sequence: the last (width - 1) inputs."""
        return self.linear_conv_dim * (self.linear_conv - 1) if self.n_linear_layers else 0

    def state_bytes_per_layer(self, act_bytes: float) -> float:
        """Bytes of one layer's state of one sequence: the recurrent state in ``state_dtype`` (else the activations'
        dtype) and the conv state in the activations' dtype."""
        sb = dtype_bytes(self.state_dtype) if self.state_dtype else act_bytes
        return self.state_elements_per_layer * sb + self.conv_state_elements_per_layer * act_bytes

    def state_bytes_per_sequence(self, act_bytes: float) -> float:
        """Bytes of every linear-attention layer's state of one sequence (0 for a model without them)."""
        return self.n_linear_layers * self.state_bytes_per_layer(act_bytes) if self.n_linear_layers else 0.0

    @property
    def attn_params_per_layer(self) -> int:
        """q, k, v, o projection weights (and qkv biases) of one layer."""
        if self.is_mla:
            return self.mla_qkv_params_per_layer + self.mla_out_params_per_layer
        if self.is_compressed:  # section 58: low-rank query, one shared KV row, grouped low-rank output, sinks
            d, H, h, qr = self.d_model, self.n_heads, self.head_dim, self.q_lora_rank
            q = d * qr + qr + qr * H * h if qr else d * H * h
            return q + d * h + h + self.compressed_out_params_per_layer + H
        q = self.d_model * self.n_heads * self.head_dim * (2 if self.attn_output_gate else 1)
        kv = 2 * self.d_model * self.n_kv_heads * self.head_dim
        o = self.n_heads * self.head_dim * self.d_model
        bias = (self.n_heads + 2 * self.n_kv_heads) * self.head_dim if self.qkv_bias else 0
        extras = (self.d_model if self.out_bias else 0) + (self.n_heads if self.attn_sinks else 0)
        return q + kv + o + bias + extras

    @property
    def mlp_matrices(self) -> int:
        """Weight matrices per MLP: 3 for a gated MLP (SwiGLU, GeGLU: gate, up, down), 2 for GELU."""
        return 3 if self.mlp_kind == "swiglu" else 2

    @property
    def dense_mlp_params(self) -> int:
        return self.mlp_matrices * self.d_model * self.d_ff

    @property
    def expert_params(self) -> int:
        """Weights of one routed expert (gpt-oss: with its gate/up and down biases)."""
        bias = (self.mlp_matrices - 1) * self.d_ff_expert + self.d_model if self.moe_bias else 0
        return self.mlp_matrices * self.d_model * self.d_ff_expert + bias

    @property
    def routed_expert_params(self) -> float:
        """Weights of every routed expert of every MoE layer (what ``expert_format`` stores)."""
        return float(self.n_moe_layers * self.n_experts * self.expert_params)

    def weight_bytes(self, bytes_per_weight: float) -> float:
        """Bytes of all weights when they take ``bytes_per_weight`` each, the routed experts at ``expert_format``'s
        bytes when the checkpoint stores them apart (gpt-oss: 4.25-bit experts beside bf16 attention)."""
        if not self.expert_format:
            return self.total_params * bytes_per_weight
        routed = self.routed_expert_params
        return (self.total_params - routed) * bytes_per_weight + routed * expert_bytes_per_weight(self.expert_format)

    def expert_bytes(self, bytes_per_weight: float) -> float:
        """Bytes per routed-expert weight: ``expert_format``'s, else the other weights' ``bytes_per_weight``."""
        return expert_bytes_per_weight(self.expert_format) if self.expert_format else bytes_per_weight

    @property
    def shared_expert_params(self) -> int:
        """Weights of all shared (always-on) experts of one layer."""
        return self.n_shared_experts * self.mlp_matrices * self.d_model * (self.d_ff_shared or self.d_ff_expert)

    @property
    def router_params(self) -> int:
        return self.d_model * self.n_experts + (self.n_experts if self.moe_bias else 0)

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.d_model

    @property
    def lm_head_params(self) -> int:
        """Unembedding weights (shared with the embedding when tied, but read again each pass)."""
        return self.vocab_size * self.d_model

    @property
    def norm_params(self) -> int:
        return self.n_norms * self.d_model

    @property
    def total_params(self) -> float:
        """All weights (tied embeddings counted once)."""
        if self.is_abstract:
            return self.raw_params
        layers = self.n_attn_layers * self.attn_params_per_layer + self.n_linear_layers * self.linear_params_per_layer
        layers += self.n_dense_mlp_layers * self.dense_mlp_params
        layers += self.n_moe_layers * (
            self.n_experts * self.expert_params + self.shared_expert_params + self.router_params
        )
        layers += self.compressor_params + self.hc_params
        head = 0 if self.tie_embeddings else self.lm_head_params
        return float(self.embedding_params + layers + self.norm_params + head)

    @property
    def active_params(self) -> float:
        """Weights one token uses (MoE: only ``experts_per_token`` routed experts)."""
        if not self.is_moe:
            return self.total_params
        unused = self.n_moe_layers * (self.n_experts - self.experts_per_token) * self.expert_params
        return self.total_params - unused

    @property
    def kv_elements_per_layer_token(self) -> int:
        """Cache elements one layer stores per token: K and V of the KV heads, or MLA's latent + RoPE key."""
        if self.is_mla:
            return self.kv_lora_rank + self.qk_rope_head_dim
        if self.is_compressed:  # per context token, averaged over the layers (rounded down; section 58)
            return self.compressed_elements_per_token // self.n_layers
        return 2 * self.n_kv_heads * self.head_dim

    @property
    def kv_elements_per_token(self) -> int:
        """K and V elements stored per token, all layers (GQA: KV heads, not query heads; MLA: the latent).

        With sliding-window layers this is the rate while a sequence is shorter than the window, an upper bound
        after it (a sliding layer keeps at most ``sliding_window`` tokens): :meth:`kv_cache_elements` is exact."""
        if self.is_compressed:
            return self.compressed_elements_per_token
        return self.n_attn_layers * self.kv_elements_per_layer_token

    @property
    def compressed_elements_per_token(self) -> int:
        """Cache elements DeepSeek-V4 keeps per context token, all layers: a CSA layer's entry and indexer key per
        ``csa_ratio`` tokens, an HCA layer's entry per ``hca_ratio`` (the window's rows, a fixed count per sequence,
        are left out: section 58)."""
        h, ih = self.head_dim, self.index_head_dim
        csa = self.n_csa_layers * (h + ih) // self.csa_ratio if self.n_csa_layers else 0
        return csa + (self.n_hca_layers * h // self.hca_ratio if self.n_hca_layers else 0)

    def kv_cache_elements(self, tokens: Any) -> Any:
        """Cache elements of one sequence of ``tokens`` cached tokens (scalar or array), sliding layers capped at
        their window (what an engine that frees a sliding layer's old blocks holds)."""
        if not self.n_sliding_layers:
            return tokens * self.kv_elements_per_token
        full = (self.n_layers - self.n_sliding_layers) * tokens
        return (
            full + self.n_sliding_layers * np.minimum(tokens, self.sliding_window)
        ) * self.kv_elements_per_layer_token

    def kv_bytes(self, tokens: Any, kv_bytes_per_element: float) -> Any:
        """KV-cache bytes for ``tokens`` cached tokens (scalar or array; the uncapped rate, see kv_elements_per_token)."""
        return tokens * self.kv_elements_per_token * kv_bytes_per_element

    def summary(self) -> dict[str, Any]:
        """Headline numbers for tables and ``--json``."""
        return {
            "name": self.name,
            "params": self.total_params,
            "active_params": self.active_params,
            "n_layers": self.n_layers,
            "d_model": self.d_model,
            "n_heads": self.n_heads,
            "n_kv_heads": self.n_kv_heads,
            "head_dim": self.head_dim,
            "d_ff": self.d_ff,
            "vocab_size": self.vocab_size,
            "n_experts": self.n_experts,
            "experts_per_token": self.experts_per_token,
            "expert_format": self.expert_format or None,
            "mtp_modules": self.mtp_modules,
            "max_context": self.max_context,
            **(
                {"linear_kind": self.linear_kind, "n_linear_layers": self.n_linear_layers}
                if self.n_linear_layers
                else {}
            ),
        }


#: names checkpoints give their expert formats, as the formats of :func:`roofline.passes.dtypes.weight_format`: MXFP4 is
#: 4-bit E2M1 values sharing an 8-bit E8M0 scale per 32 (OCP Microscaling spec v1.0: 4 + 8 / 32 = 4.25 bits);
#: NVFP4 shares an 8-bit E4M3 scale per 16 (4.5 bits; NVIDIA's Blackwell FP4 format, plus a per-tensor fp32 scale)
EXPERT_FORMATS = {"mxfp4": "bits:4.25", "nvfp4": "bits:4.5"}


def expert_bytes_per_weight(fmt: str) -> float:
    """Stored bytes per weight of an expert format (``mxfp4``, ``nvfp4``, ``fp8``, ``int4,group:32``, ...)."""
    name = fmt.strip().lower() if isinstance(fmt, str) else fmt
    try:
        return dtype_bytes(EXPERT_FORMATS.get(name, name))
    except SpecroofError:
        raise SpecroofError(
            f"expert_format {fmt!r} must be one of {', '.join(EXPERT_FORMATS)} or a weight format "
            f"({WEIGHT_FORMAT_GRAMMAR})"
        ) from None


#: each config.json field's kind in :data:`roofline.core.validation.RANGES` (others: "width")
_CONFIG_KINDS = {
    "num_hidden_layers": "layers",
    "num_attention_heads": "heads",
    "num_key_value_heads": "heads",
    "vocab_size": "vocab",
    "max_position_embeddings": "context",
    "num_local_experts": "experts",
    "num_experts": "experts",
    "n_routed_experts": "experts",
    "num_experts_per_tok": "experts",
    "sliding_window": "context",
}

_SUPPORTED = (
    "llama", "mistral", "qwen2", "qwen3", "mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3", "kimi_k2",
    "gpt_oss", "glm4_moe", "minimax_m2", "gemma3_text", "llama4_text", "qwen3_next", "qwen3_5_text",
    "qwen3_5_moe_text", "granitemoehybrid", "nemotron_h", "deepseek_v4",
)  # fmt: skip
#: Gated DeltaNet hybrids (docs/cost-model.md, section 52): transformers' Qwen3NextConfig / Qwen3_5TextConfig fields
_GDN_HYBRIDS = ("qwen3_next", "qwen3_5_text", "qwen3_5_moe_text")
#: the DeepSeek MoE layout (Kimi K2 ships DeepSeek-V3's modelling code under its own model_type; GLM-4.5's glm4_moe
#: keeps its field names with standard attention)
_DEEPSEEK_LIKE = ("deepseek_v2", "deepseek_v3", "kimi_k2", "glm4_moe", "deepseek_v4")
#: multimodal checkpoints whose language model is the config's ``text_config`` (Gemma 3, Llama 4, Mistral Small 3.1,
#: Kimi K2.5): the text stack is what a decode step runs
_TEXT_CONFIG_WRAPPERS = {
    "gemma3": "gemma3_text", "llama4": "llama4_text", "mistral3": "mistral", "kimi_k25": "kimi_k2",
    "qwen3_5": "qwen3_5_text", "qwen3_5_moe": "qwen3_5_moe_text",
}  # fmt: skip
#: the state dtypes config.json names (``mamba_ssm_dtype``)
_STATE_DTYPES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


def _from_hf_dict(cfg: dict[str, Any], name: str | None) -> ModelSpec:
    arch = str(cfg.get("model_type", ""))
    if arch in ("qwen3_5", "qwen3_5_moe") and "text_config" not in cfg and "num_hidden_layers" in cfg:
        arch = _TEXT_CONFIG_WRAPPERS[arch]  # a flattened Qwen3.5 config: the text stack's fields at the top
        cfg = {**cfg, "model_type": arch}
    if arch in _TEXT_CONFIG_WRAPPERS:
        text = cfg.get("text_config")
        if not isinstance(text, dict):
            raise SpecroofError(f"config for model_type={arch!r} must hold its language model in 'text_config'")
        name = name or (str(cfg["_name_or_path"]) if cfg.get("_name_or_path") else None)
        cfg = {"model_type": _TEXT_CONFIG_WRAPPERS[arch], **text}
        cfg["model_type"] = str(text.get("model_type") or _TEXT_CONFIG_WRAPPERS[arch])
        if cfg["model_type"] == "gemma3":  # some Gemma 3 text configs name the outer type
            cfg["model_type"] = "gemma3_text"
        arch = cfg["model_type"]
    if arch not in _SUPPORTED:
        raise SpecroofError(f"unsupported architecture model_type={arch!r}; supported: {', '.join(_SUPPORTED)}")
    if arch == "nemotron_h":
        cfg = _nemotron_h_config(cfg)

    def whole(key: str, value: Any) -> int:
        """A positive whole number, or an error naming the field: no silent truncation, NaN or strings."""
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or value <= 0:
            raise SpecroofError(f"config field {key!r} must be a positive whole number (got {value!r})")
        if isinstance(value, float) and not value.is_integer():
            raise SpecroofError(f"config field {key!r} must be a whole number (got {value!r})")
        kind = _CONFIG_KINDS.get(key, "width")
        return int(check_quantity(f"config field {key!r}", value, kind))

    def req(key: str) -> int:
        if cfg.get(key) is None:
            raise SpecroofError(f"config for model_type={arch!r} is missing field {key!r}")
        return whole(key, cfg[key])

    def opt(key: str, default: int) -> int:
        return default if cfg.get(key) is None else whole(key, cfg[key])

    d = req("hidden_size")
    heads = req("num_attention_heads")
    kv = opt("num_key_value_heads", heads)
    head_dim = opt("head_dim", max(1, d // heads))
    act = str(cfg.get("hidden_act") or cfg.get("hidden_activation") or "silu")
    # Gemma 3's MLP is gated (gate, up, down) with a tanh GELU: GeGLU, priced as its three matrices ("swiglu")
    kind = "swiglu" if act in ("silu", "swish") or arch == "gemma3_text" else "gelu"
    fields: dict[str, Any] = dict(
        name=name or str(cfg.get("_name_or_path") or arch),
        n_layers=req("num_hidden_layers"),
        d_model=d,
        n_heads=heads,
        n_kv_heads=kv,
        head_dim=head_dim,
        d_ff=opt("intermediate_size", 0) if cfg.get("intermediate_size") else 0,
        vocab_size=req("vocab_size"),
        mlp_kind=kind,
        tie_embeddings=bool(cfg.get("tie_word_embeddings", arch == "gemma3_text")),
        qkv_bias=bool(cfg.get("attention_bias", arch == "qwen2" or arch == "qwen2_moe")),
        max_context=opt("max_position_embeddings", 4096),
    )
    if arch == "mixtral":
        fields.update(n_experts=req("num_local_experts"), experts_per_token=req("num_experts_per_tok"))
        fields["d_ff_expert"] = fields["d_ff"]
    elif arch in ("qwen2_moe", "qwen3_moe"):
        fields.update(
            n_experts=req("num_experts"),
            experts_per_token=req("num_experts_per_tok"),
            d_ff_expert=req("moe_intermediate_size"),
        )
        shared = int(cfg.get("shared_expert_intermediate_size") or 0)
        if shared:
            fields.update(n_shared_experts=1, d_ff_shared=shared)
        fields["n_dense_layers"] = len(cfg.get("mlp_only_layers") or [])
    elif arch == "gpt_oss":
        fields.update(
            n_experts=req("num_local_experts"),
            experts_per_token=req("num_experts_per_tok"),
            d_ff_expert=req("intermediate_size"),
            attn_sinks=True,  # GptOssAttention.sinks: one learned logit per head
            out_bias=bool(cfg.get("attention_bias", True)),
            qkv_bias=bool(cfg.get("attention_bias", True)),
            moe_bias=True,  # GptOssExperts' gate_up/down biases and the router's bias
            mtp_modules=0,  # openai's checkpoints ship no multi-token-prediction module
        )
        types = cfg.get("layer_types")
        if types is None:  # transformers' GptOssConfig default: even layers slide, odd layers are full
            types = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(fields["n_layers"])]
        if not isinstance(types, list) or len(types) != fields["n_layers"]:
            raise SpecroofError(f"config field 'layer_types' must list one type per layer ({fields['n_layers']})")
        sliding = sum(1 for t in types if t == "sliding_attention")
        if sliding:
            fields.update(sliding_window=req("sliding_window"), n_sliding_layers=sliding)
    elif arch == "minimax_m2":  # every layer full attention and MoE; ``intermediate_size`` is each expert's width
        fields.update(
            n_experts=req("num_local_experts"),
            experts_per_token=req("num_experts_per_tok"),
            d_ff_expert=req("intermediate_size"),
            d_ff=0,
            # config.json declares num_mtp_modules 3 but the published weights hold none (MiniMax-AI/MiniMax-M2 issue
            # #47; M2.5 and M2.7 alike): no MTP drafter runs on it
            mtp_modules=0,
        )
        shared = int(cfg.get("shared_intermediate_size") or 0)
        if shared:
            fields.update(n_shared_experts=1, d_ff_shared=shared)
    elif arch == "gemma3_text":
        types = cfg.get("layer_types")
        if isinstance(types, list) and len(types) == fields["n_layers"]:
            sliding = sum(1 for t in types if t == "sliding_attention")
        else:  # sliding_window_pattern P (default 6): layer i is global when (i + 1) % P == 0
            pattern = opt("sliding_window_pattern", 6)
            sliding = fields["n_layers"] - fields["n_layers"] // pattern
        if sliding and cfg.get("sliding_window"):
            fields.update(sliding_window=req("sliding_window"), n_sliding_layers=sliding)
    elif arch == "llama4_text":
        step = opt("interleave_moe_layer_step", 1)
        moe_layers = cfg.get("moe_layers")
        n_moe = len(moe_layers) if isinstance(moe_layers, list) else fields["n_layers"] // step
        fields.update(
            d_ff=opt("intermediate_size_mlp", 0) if cfg.get("intermediate_size_mlp") else 0,
            n_experts=req("num_local_experts"),
            experts_per_token=req("num_experts_per_tok"),
            d_ff_expert=req("intermediate_size"),
            n_shared_experts=1,  # Llama4TextMoe: one shared expert of the routed experts' width
            n_dense_layers=fields["n_layers"] - n_moe,
        )
        if cfg.get("attention_chunk_size"):  # chunked layers read at most one chunk: priced as sliding (section 48)
            nope = cfg.get("no_rope_layers")
            if isinstance(nope, list) and len(nope) == fields["n_layers"]:
                chunked = sum(1 for flag in nope if flag)  # 1: a RoPE layer, which attends within its chunk
            else:  # transformers' default: every fourth layer is a global NoPE layer
                chunked = fields["n_layers"] - fields["n_layers"] // opt("no_rope_layer_interval", 4)
            if chunked:
                fields.update(sliding_window=req("attention_chunk_size"), n_sliding_layers=chunked)
    elif arch in _GDN_HYBRIDS:
        fields.update(_gdn_fields(cfg, fields["n_layers"], req, opt))
    elif arch == "granitemoehybrid":
        fields.update(_granite_hybrid_fields(cfg, fields["n_layers"], req, opt))
    elif arch == "nemotron_h":
        fields.update(_nemotron_h_fields(cfg, fields["n_layers"], req, opt))
    elif arch == "deepseek_v4":
        fields.update(_deepseek_v4_fields(cfg, fields["n_layers"], req, opt))
    if arch in _DEEPSEEK_LIKE:
        if cfg.get("kv_lora_rank"):  # multi-head latent attention: the shapes the cost model prices it by
            for key in ("qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"):
                if cfg.get(key) is None:
                    raise SpecroofError(
                        f"config for model_type={arch!r} uses multi-head latent attention (kv_lora_rank) "
                        f"and must give field {key!r}"
                    )
            rope, nope = req("qk_rope_head_dim"), req("qk_nope_head_dim")
            fields.update(
                kv_lora_rank=req("kv_lora_rank"),
                q_lora_rank=opt("q_lora_rank", 0),
                qk_rope_head_dim=rope,
                head_dim=nope + rope,
                v_head_dim=req("v_head_dim"),
                n_kv_heads=heads,  # no KV heads: TP splits the query heads, the latent is shared
            )
        fields.update(
            n_experts=req("n_routed_experts"),
            experts_per_token=req("num_experts_per_tok"),
            d_ff_expert=req("moe_intermediate_size"),
            n_shared_experts=int(cfg.get("n_shared_experts") or 0),
            n_dense_layers=int(cfg.get("first_k_dense_replace") or 0),
            mtp_modules=int(cfg.get("num_nextn_predict_layers") or 0),
        )
    if arch == "deepseek_v4" and str(cfg.get("expert_dtype", "")).lower() == "fp4":
        # E2M1 experts with a power-of-two (ue8m0) scale per 32 weights: MXFP4's layout, beside fp8 weights
        fields["expert_format"] = "mxfp4"
    quant = cfg.get("quantization_config")
    if isinstance(quant, dict) and fields.get("n_experts"):
        method = str(quant.get("quant_method", "")).lower()
        if method in EXPERT_FORMATS:  # gpt-oss: MXFP4 experts, the attention, router and embeddings in bf16
            fields["expert_format"] = method
    return ModelSpec(**fields)


def _deepseek_v4_fields(cfg: dict[str, Any], n_layers: int, req: Any, opt: Any) -> dict[str, Any]:
    """DeepSeek-V4 (docs/cost-model.md, section 58): ``compress_ratios`` per layer (4: compressed sparse attention with
    the lightning indexer; a larger ratio: every compressed entry; 0: the window only), ``sliding_window`` the
    window every layer attends to, the grouped low-rank output and the hyper-connections. Entries past
    ``num_hidden_layers`` are the MTP layers'."""
    ratios = cfg.get("compress_ratios")
    if (
        not isinstance(ratios, list)
        or len(ratios) < n_layers
        or any(isinstance(r, bool) or not isinstance(r, int) or r < 0 for r in ratios)
    ):
        raise SpecroofError(
            f"config field 'compress_ratios' must list a whole ratio >= 0 per layer ({n_layers} layers)"
        )
    body = ratios[:n_layers]
    wide = sorted({r for r in body if r not in (0, 4)})
    if len(wide) > 1 or (wide and wide[0] < 2):
        raise SpecroofError(
            f"config field 'compress_ratios' mixes ratios {wide}: specroof prices one ratio beside 4 (section 58)"
        )
    n_csa = sum(1 for r in body if r == 4)
    out: dict[str, Any] = dict(
        attn_window=req("sliding_window"),
        q_lora_rank=opt("q_lora_rank", 0),
        qk_rope_head_dim=0,
        o_lora_rank=req("o_lora_rank"),
        o_groups=req("o_groups"),
        hc_mult=opt("hc_mult", 0),
        n_csa_layers=n_csa,
        n_hca_layers=sum(1 for r in body if r in wide),
        hca_ratio=wide[0] if wide else 0,
        n_dense_layers=0,  # every layer routes (the first num_hash_layers by a hash of the token, no router)
    )
    if n_csa:
        out.update(csa_ratio=4, index_topk=req("index_topk"), index_heads=req("index_n_heads"),
                   index_head_dim=req("index_head_dim"))  # fmt: skip
    return out


def _layer_types(cfg: dict[str, Any], n_layers: int, linear: str, full: str) -> int:
    """Linear-attention layers among ``n_layers`` from config.json's ``layer_types`` (each ``linear`` or ``full``)."""
    types = cfg.get("layer_types")
    if not isinstance(types, list) or len(types) != n_layers or any(t not in (linear, full) for t in types):
        raise SpecroofError(
            f"config field 'layer_types' must list one of {linear!r} or {full!r} per layer ({n_layers} layers)"
        )
    return sum(1 for t in types if t == linear)


def _gdn_fields(cfg: dict[str, Any], n_layers: int, req: Any, opt: Any) -> dict[str, Any]:
    """Qwen3-Next and Qwen3.5 (dense and MoE): Gated DeltaNet layers and gated full attention, 3:1 by default
    (``full_attention_interval`` 4: layer i is full when (i + 1) % 4 == 0, transformers' Qwen3NextConfig), a
    mixture of ``num_experts`` routed experts and one shared expert where the config has them, and one MTP layer
    (``mtp_num_hidden_layers``; Qwen3-Next's config.json does not name it, its checkpoint ships one layer, which
    vLLM's ``qwen3_next_mtp`` and SGLang's NEXTN run)."""
    if cfg.get("layer_types") is None:
        interval = opt("full_attention_interval", 4)
        cfg = {**cfg, "layer_types": ["full_attention" if (i + 1) % interval == 0 else "linear_attention"
                                      for i in range(n_layers)]}  # fmt: skip
    out: dict[str, Any] = dict(
        linear_kind="gdn",
        n_linear_layers=_layer_types(cfg, n_layers, "linear_attention", "full_attention"),
        linear_heads=req("linear_num_value_heads"),
        linear_groups=req("linear_num_key_heads"),
        linear_key_dim=req("linear_key_head_dim"),
        linear_value_dim=req("linear_value_head_dim"),
        linear_conv=opt("linear_conv_kernel_dim", 4),
        state_dtype=_STATE_DTYPES.get(str(cfg.get("mamba_ssm_dtype") or "float32"), "fp32"),
        attn_output_gate=bool(cfg.get("attn_output_gate", True)),
    )
    mtp = cfg.get("mtp_num_hidden_layers", cfg.get("num_nextn_predict_layers"))
    out["mtp_modules"] = 1 if mtp is None else int(mtp)
    if cfg.get("num_experts"):
        out.update(n_experts=req("num_experts"), experts_per_token=req("num_experts_per_tok"),
                   d_ff_expert=req("moe_intermediate_size"), n_dense_layers=len(cfg.get("mlp_only_layers") or []))  # fmt: skip
        shared = int(cfg.get("shared_expert_intermediate_size") or 0)
        if shared:
            out.update(n_shared_experts=1, d_ff_shared=shared)
    return out


def _granite_hybrid_fields(cfg: dict[str, Any], n_layers: int, req: Any, opt: Any) -> dict[str, Any]:
    """IBM Granite 4.0-H (model_type granitemoehybrid): Mamba-2 and attention layers as ``layer_types`` lists them
    ("mamba", "attention"), each followed by a shared MLP of ``shared_intermediate_size`` and, where
    ``num_local_experts`` > 0, a mixture of experts of width ``intermediate_size`` (transformers'
    GraniteMoeHybridDecoderLayer). The SSM state is kept in the model's dtype (vLLM's ``mamba_ssm_cache_dtype``
    auto)."""
    out: dict[str, Any] = dict(
        linear_kind="mamba2",
        n_linear_layers=_layer_types(cfg, n_layers, "mamba", "attention"),
        linear_heads=req("mamba_n_heads"),
        linear_groups=opt("mamba_n_groups", 1),
        linear_key_dim=req("mamba_d_state"),
        linear_value_dim=req("mamba_d_head"),
        linear_conv=opt("mamba_d_conv", 4),
        mtp_modules=0,
    )
    shared = req("shared_intermediate_size")
    if cfg.get("num_local_experts"):
        out.update(n_experts=req("num_local_experts"), experts_per_token=req("num_experts_per_tok"),
                   d_ff_expert=req("intermediate_size"), n_shared_experts=1, d_ff_shared=shared, d_ff=0)  # fmt: skip
    else:
        out["d_ff"] = shared
    return out


#: NVIDIA Nemotron-H's layer kinds by the character ``hybrid_override_pattern`` gives each layer (and by the name
#: ``layers_block_type`` gives it in transformers' later NemotronHConfig)
_NEMOTRON_H_BLOCKS = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}


def _nemotron_h_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """A Nemotron-H config.json as the generic reader takes it, or an error naming the field that cannot be priced:
    the attention head from ``attention_head_dim`` where ``head_dim`` is absent (the Nemotron-H-8B/47B/56B configs),
    and one MLP width for all the MLP layers."""
    for key, why in (
        ("moe_latent_size", "a mixture of experts in a latent width (Nemotron 3 Super) is not priced"),
        ("block_configs", "per-layer block configurations (a heterogeneous Nemotron-H) are not priced"),
        ("sliding_window", "sliding-window attention layers are not priced beside Mamba-2 layers"),
    ):
        if cfg.get(key) is not None:
            raise SpecroofError(f"config field {key!r} is set: {why}")
    for key, what in (("use_bias", "the Mamba-2 projections"), ("mlp_bias", "the MLPs")):
        if cfg.get(key):
            raise SpecroofError(f"config field {key!r} is true: biases on {what} are not priced")
    out = dict(cfg)
    if out.get("head_dim") is None and out.get("attention_head_dim") is not None:
        out["head_dim"] = out["attention_head_dim"]
    width = out.get("intermediate_size")
    if isinstance(width, list):
        if len(set(width)) != 1:
            raise SpecroofError(
                "config field 'intermediate_size' lists a width per MLP layer: one width for every MLP layer is priced"
            )
        out["intermediate_size"] = width[0]
    return out


def _nemotron_h_blocks(cfg: dict[str, Any], key: str, list_key: str, n_layers: int | None) -> list[str]:
    """The kind of each layer ("mamba", "attention", "mlp", "moe") from ``key`` (a string of M, *, - and E) or,
    without it, from ``list_key`` (their names), ``n_layers`` long where given."""
    pattern, names = cfg.get(key), cfg.get(list_key)
    if pattern is None and isinstance(names, list) and names:
        blocks = [str(b) for b in names]
    elif isinstance(pattern, str) and pattern and all(c in _NEMOTRON_H_BLOCKS for c in pattern):
        blocks = [_NEMOTRON_H_BLOCKS[c] for c in pattern]
    else:
        blocks = []
    if not blocks or any(b not in _NEMOTRON_H_BLOCKS.values() for b in blocks) or n_layers not in (None, len(blocks)):
        per = f" for each of the {n_layers} layers" if n_layers else ""
        raise SpecroofError(
            f"config field {key!r} must give a block{per}: M (Mamba-2), * (attention), - (MLP) or E (mixture of "
            f"experts); or {list_key!r} their names (got {pattern if pattern is not None else names!r})"
        )
    return blocks


def _nemotron_h_fields(cfg: dict[str, Any], n_layers: int, req: Any, opt: Any) -> dict[str, Any]:
    """NVIDIA Nemotron-H (model_type nemotron_h: Nemotron-H, Nemotron Nano 2, Nemotron 3 Nano). Each layer is one
    block with one norm before it (vLLM vllm/model_executor/models/nemotron_h.py, ``ALL_DECODER_LAYER_TYPES``;
    transformers' models/nemotron_h): a Mamba-2 mixer (``M``: ``mamba_num_heads`` heads of ``mamba_head_dim``, a state
    of ``ssm_state_size`` per head channel, ``n_groups`` B/C groups, a conv of ``conv_kernel``), attention (``*``), an
    MLP (``-``: NemotronHMLP, up_proj and down_proj with a squared ReLU between, two matrices and no gate) or a
    mixture of experts (``E``: NemotronHMoE, ``n_routed_experts`` experts of two matrices, ``num_experts_per_tok``
    per token, ``n_shared_experts`` shared MLPs of ``moe_shared_expert_intermediate_size``, a sigmoid router). The
    state is kept in ``mamba_ssm_cache_dtype``, float32 where the config does not name it (vLLM's
    NemotronHForCausalLMConfig). An MTP module (``num_nextn_predict_layers``, ``mtp_hybrid_override_pattern``) is
    priced as one attention and one MLP or MoE layer of the target's shape, the layout it must have."""
    blocks = _nemotron_h_blocks(cfg, "hybrid_override_pattern", "layers_block_type", n_layers)
    n_mamba, n_attn = blocks.count("mamba"), blocks.count("attention")
    n_mlp, n_moe = blocks.count("mlp"), blocks.count("moe")
    out: dict[str, Any] = dict(
        mlp_kind="gelu",  # two matrices: NemotronHMLP's up and down projections, whatever the activation
        linear_kind="mamba2",
        n_linear_layers=n_mamba,
        linear_heads=req("mamba_num_heads"),
        linear_groups=req("n_groups"),
        linear_key_dim=req("ssm_state_size"),
        linear_value_dim=req("mamba_head_dim"),
        linear_conv=opt("conv_kernel", 4),
        state_dtype=_STATE_DTYPES.get(str(cfg.get("mamba_ssm_cache_dtype") or "float32"), "fp32"),
        n_mixer_only_layers=n_mamba + n_attn,
        n_mlp_only_layers=n_mlp + n_moe,
        d_ff=req("intermediate_size") if n_mlp else 0,
    )
    if n_moe:  # vLLM's NemotronHModel.has_moe: an E in the pattern, whatever the config's expert fields say
        shared = int(cfg.get("n_shared_experts") or 0)
        out.update(n_experts=req("n_routed_experts"), experts_per_token=req("num_experts_per_tok"),
                   d_ff_expert=req("moe_intermediate_size"), n_dense_layers=n_layers - n_moe,
                   n_shared_experts=shared, d_ff_shared=req("moe_shared_expert_intermediate_size") if shared else 0)  # fmt: skip
    mtp = cfg.get("num_nextn_predict_layers")
    out["mtp_modules"] = 0 if mtp is None else _whole_count("num_nextn_predict_layers", mtp)
    if out["mtp_modules"]:
        layout = _nemotron_h_blocks(cfg, "mtp_hybrid_override_pattern", "mtp_layers_block_type", None)
        if layout != ["attention", "moe" if n_moe else "mlp"]:
            raise SpecroofError(
                "config field 'mtp_hybrid_override_pattern': an MTP module is priced as one attention layer and one "
                f"{'E' if n_moe else '-'} layer of the target's shape ('*{'E' if n_moe else '-'}'); this one is "
                f"{''.join({v: k for k, v in _NEMOTRON_H_BLOCKS.items()}[b] for b in layout)!r}"
            )
    return out


def _whole_count(key: str, value: Any) -> int:
    """A whole number >= 0 from config field ``key``, or an error naming it."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or value < 0:
        raise SpecroofError(f"config field {key!r} must be a whole number >= 0 (got {value!r})")
    if isinstance(value, float) and not value.is_integer():
        raise SpecroofError(f"config field {key!r} must be a whole number (got {value!r})")
    return int(value)


def _llama(name: str, L: int, d: int, H: int, kv: int, ff: int, vocab: int, ctx: int, **kw: Any) -> ModelSpec:
    """A Llama-style preset (Llama, Qwen2.5, Mistral, Mixtral, Qwen3 MoE, Vicuna, TinyLlama): their config.json has no
    MTP field and their published weights hold no MTP module, so ``mtp`` is refused on them (``mtp_modules`` 0), as
    vLLM and SGLang would refuse to load one; an EAGLE head or a draft model drafts for them instead."""
    kw.setdefault("mtp_modules", 0)
    return ModelSpec(name, L, d, H, kv, kw.pop("head_dim", d // H), ff, vocab, max_context=ctx, **kw)


def _mla(
    name: str,
    L: int,
    d: int,
    H: int,
    ff: int,
    vocab: int,
    ctx: int,
    E: int,
    k: int,
    ff_e: int,
    shared: int,
    dense: int,
    *,
    q_lora: int,
    mtp: int = 0,
) -> ModelSpec:
    return ModelSpec(
        name, L, d, H, H, 192, ff, vocab, max_context=ctx, n_experts=E, experts_per_token=k, d_ff_expert=ff_e,
        n_shared_experts=shared, n_dense_layers=dense, kv_lora_rank=512, q_lora_rank=q_lora, qk_rope_head_dim=64,
        v_head_dim=128, mtp_modules=mtp,
    )  # fmt: skip


def _deepseek_v4(
    name: str, L: int, d: int, H: int, E: int, ff_e: int, q_lora: int, o_groups: int, topk: int, csa: int, hca: int
) -> ModelSpec:
    """DeepSeek-V4 (section 58): one 512-wide KV head, a 128-token window on every layer, ``csa`` layers of ratio 4
    with the indexer (64 heads of 128) and ``hca`` of ratio 128, output groups through 1024, 4 hyper-connection
    streams, one shared and six routed experts per token in MXFP4 beside fp8 weights, one MTP layer."""
    return ModelSpec(
        name, L, d, H, 1, 512, 0, 129280, max_context=1048576, n_experts=E, experts_per_token=6, d_ff_expert=ff_e,
        n_shared_experts=1, q_lora_rank=q_lora, mtp_modules=1, expert_format="mxfp4", attn_window=128,
        n_csa_layers=csa, csa_ratio=4, n_hca_layers=hca, hca_ratio=128, index_topk=topk, index_heads=64,
        index_head_dim=128, o_lora_rank=1024, o_groups=o_groups, hc_mult=4,
    )  # fmt: skip


def _gpt_oss(name: str, L: int, E: int) -> ModelSpec:
    return ModelSpec(
        name, L, 2880, 64, 8, 64, 2880, 201088, max_context=131072, n_experts=E, experts_per_token=4,
        d_ff_expert=2880, qkv_bias=True, out_bias=True, attn_sinks=True, moe_bias=True, sliding_window=128,
        n_sliding_layers=L // 2, mtp_modules=0, expert_format="mxfp4",
    )  # fmt: skip


def _qwen3(name: str, L: int, d: int, H: int, ff: int, *, tie: bool) -> ModelSpec:
    """A Qwen3 dense model (Qwen/Qwen3-*/config.json: 8 KV heads of 128, vocabulary 151936, 40960 positions; q/k
    RMS norms, no qkv bias)."""
    return ModelSpec(name, L, d, H, 8, 128, ff, 151936, max_context=40960, tie_embeddings=tie, mtp_modules=0)


def _qwen3_moe(name: str, L: int, d: int, H: int, kv: int, E: int, ff_e: int, ctx: int) -> ModelSpec:
    """A Qwen3 MoE model (model_type qwen3_moe): every layer MoE, 8 routed experts per token, no shared expert."""
    return ModelSpec(
        name, L, d, H, kv, 128, 0, 151936, max_context=ctx, n_experts=E, experts_per_token=8, d_ff_expert=ff_e,
        mtp_modules=0,
    )  # fmt: skip


def _gemma3(
    name: str, L: int, d: int, H: int, kv: int, hd: int, ff: int, vocab: int, window: int, ctx: int
) -> ModelSpec:
    """A Gemma 3 text stack (config.json text_config, model_type gemma3_text): a GeGLU MLP (gated: three matrices, the
    ``swiglu`` kind), tied embeddings, and five local (sliding-window) layers to each global one
    (``sliding_window_pattern`` 6: layer i is global when (i + 1) % 6 == 0), so L - L // 6 layers slide."""
    return ModelSpec(
        name, L, d, H, kv, hd, ff, vocab, tie_embeddings=True, max_context=ctx,
        sliding_window=window, n_sliding_layers=L - L // 6, mtp_modules=0,
    )  # fmt: skip


def _llama4(name: str, E: int, moe_step: int, ctx: int) -> ModelSpec:
    """A Llama 4 text stack (config.json text_config, model_type llama4_text): 48 layers of width 5120, 40 query
    and 8 KV heads of 128; an MoE layer every ``interleave_moe_layer_step`` layers (16 or 128 routed experts of width
    ``intermediate_size`` 8192, one per token, plus one shared expert of the same width), the others dense with
    ``intermediate_size_mlp`` 16384. Three layers in four attend within chunks of ``attention_chunk_size`` 8192
    tokens (every fourth is a global NoPE layer): priced as 8192-token sliding layers (cost-model section 48)."""
    L = 48
    return ModelSpec(
        name, L, 5120, 40, 8, 128, 16384, 202048, max_context=ctx, n_experts=E, experts_per_token=1,
        d_ff_expert=8192, n_shared_experts=1, d_ff_shared=8192, n_dense_layers=L - L // moe_step,
        sliding_window=8192, n_sliding_layers=L - L // 4, mtp_modules=0,
    )  # fmt: skip


def _glm4_moe(name: str, L: int, d: int, E: int, ff: int, ff_e: int, dense: int, ctx: int) -> ModelSpec:
    """A GLM-4.5-family MoE (model_type glm4_moe): 96 query and 8 KV heads of 128 with qkv bias, ``first_k_dense_replace``
    dense layers, then 8 of E routed experts and one shared expert per token; one MTP layer
    (``num_nextn_predict_layers`` 1)."""
    return ModelSpec(
        name, L, d, 96, 8, 128, ff, 151552, max_context=ctx, qkv_bias=True, n_experts=E, experts_per_token=8,
        d_ff_expert=ff_e, n_shared_experts=1, n_dense_layers=dense, mtp_modules=1,
    )  # fmt: skip


def _minimax_m2() -> ModelSpec:
    """MiniMax-M2 (model_type minimax_m2): see its row in :data:`PRESETS`."""
    return ModelSpec(
        "minimax-m2", 62, 3072, 48, 8, 128, 0, 200064, max_context=196608, n_experts=256, experts_per_token=8,
        d_ff_expert=1536, mtp_modules=0,
    )  # fmt: skip


#: Qwen/Qwen3-Next-80B-A3B-Instruct config.json (its shape fields; the Thinking model's are the same): 48 layers,
#: Gated DeltaNet (16 key heads, 32 value heads of 128, conv 4) in three of four, gated attention (16 query heads,
#: 2 KV heads of 256) in the fourth; 512 experts, 10 per token, of width 512 and one shared expert of 512
_QWEN3_NEXT_80B_A3B: dict[str, Any] = {
    "model_type": "qwen3_next", "hidden_size": 2048, "num_hidden_layers": 48, "num_attention_heads": 16,
    "num_key_value_heads": 2, "head_dim": 256, "intermediate_size": 5120, "vocab_size": 151936,
    "max_position_embeddings": 262144, "tie_word_embeddings": False, "hidden_act": "silu",
    "full_attention_interval": 4, "linear_num_key_heads": 16, "linear_num_value_heads": 32,
    "linear_key_head_dim": 128, "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, "num_experts": 512,
    "num_experts_per_tok": 10, "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512,
    "decoder_sparse_step": 1, "mlp_only_layers": [],
}  # fmt: skip
#: Qwen/Qwen3.5-35B-A3B config.json's text_config (model_type qwen3_5_moe_text): 40 layers, the Qwen3-Next layout
#: (3 Gated DeltaNet : 1 gated attention), 256 experts, 8 per token, of width 512 and one shared expert of 512, the
#: 248320-token vocabulary, the state in float32 (``mamba_ssm_dtype``) and one MTP layer
_QWEN3_5_35B_A3B: dict[str, Any] = {
    "model_type": "qwen3_5_moe_text", "hidden_size": 2048, "num_hidden_layers": 40, "num_attention_heads": 16,
    "num_key_value_heads": 2, "head_dim": 256, "vocab_size": 248320, "max_position_embeddings": 262144,
    "tie_word_embeddings": False, "hidden_act": "silu", "attn_output_gate": True, "full_attention_interval": 4,
    "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_key_head_dim": 128,
    "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, "num_experts": 256, "num_experts_per_tok": 8,
    "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512, "mamba_ssm_dtype": "float32",
    "mtp_num_hidden_layers": 1,
}  # fmt: skip


def _qwen3_5_text(L: int, d: int, H: int, kv: int, lin_v: int, *, tie: bool, **fields: Any) -> dict[str, Any]:
    """A Qwen3.5 ``text_config`` from the fields its sizes differ in: ``L`` layers of width ``d``, ``H`` query / ``kv``
    KV heads in the gated-attention layers, ``lin_v`` Gated DeltaNet value heads, tied embeddings or not, and (dense:
    ``intermediate_size``; MoE: the expert fields) in ``fields``. The rest is what every Qwen3.5 config.json below
    gives alike: attention heads of 256 in every fourth layer (``full_attention_interval`` 4), 16 DeltaNet key heads,
    key and value heads of 128 and a conv of 4, the 248320-token vocabulary, 262144 positions, the state in float32
    (``mamba_ssm_dtype``) and one MTP layer (``mtp_num_hidden_layers``; the model cards: "MTP: trained with
    multi-steps")."""
    moe = "num_experts" in fields
    return {
        "model_type": "qwen3_5_moe_text" if moe else "qwen3_5_text", "hidden_size": d, "num_hidden_layers": L,
        "num_attention_heads": H, "num_key_value_heads": kv, "head_dim": 256, "vocab_size": 248320,
        "max_position_embeddings": 262144, "tie_word_embeddings": tie, "hidden_act": "silu", "attn_output_gate": True,
        "full_attention_interval": 4, "linear_num_key_heads": 16, "linear_num_value_heads": lin_v,
        "linear_key_head_dim": 128, "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
        "mamba_ssm_dtype": "float32", "mtp_num_hidden_layers": 1, **fields,
    }  # fmt: skip


#: The other Qwen3.5 checkpoints, each from its config.json's text_config (Qwen/Qwen3.5-<size> on the Hugging Face
#: hub), read in public copies: p-doom/omegalax omegalax/models/qwen3_5/config.py (a registry of every size's
#: text_config by Hugging Face id), THUDM/slime scripts/models/qwen3.5-*.sh (0.8B, 27B, 397B-A17B: layers, width,
#: heads, MLP), the 0.8B config.json copied whole into public tests (Qwen/Qwen3.5-0.8B at revision 2fc06364) and the
#: model cards' layouts (9B: "8 x (3 x (Gated DeltaNet -> FFN) -> 1 x (Gated Attention -> FFN))", 32 value / 16 QK
#: linear heads, 16 Q / 4 KV attention heads, intermediate 12288). The 0.8B, 2B and 4B tie their embeddings; the 9B,
#: 27B and the MoE models do not.
_QWEN3_5_DENSE: dict[str, dict[str, Any]] = {
    # Qwen/Qwen3.5-0.8B: 24 layers of 1024, 8 query / 2 KV heads, 16 DeltaNet value heads, MLP 3584
    "qwen3.5-0.8b": _qwen3_5_text(24, 1024, 8, 2, 16, tie=True, intermediate_size=3584),
    # Qwen/Qwen3.5-2B: 24 layers of 2048, 8 / 2 heads, 16 value heads, MLP 6144
    "qwen3.5-2b": _qwen3_5_text(24, 2048, 8, 2, 16, tie=True, intermediate_size=6144),
    # Qwen/Qwen3.5-4B: 32 layers of 2560, 16 / 4 heads, 32 value heads, MLP 9216
    "qwen3.5-4b": _qwen3_5_text(32, 2560, 16, 4, 32, tie=True, intermediate_size=9216),
    # Qwen/Qwen3.5-9B: 32 layers of 4096, 16 / 4 heads, 32 value heads, MLP 12288 (tests/data/hybrid/qwen3.5-9b.json)
    "qwen3.5-9b": _qwen3_5_text(32, 4096, 16, 4, 32, tie=False, intermediate_size=12288),
    # Qwen/Qwen3.5-27B: 64 layers of 5120, 24 / 4 heads, 48 value heads, MLP 17408
    "qwen3.5-27b": _qwen3_5_text(64, 5120, 24, 4, 48, tie=False, intermediate_size=17408),
}
#: The larger Qwen3.5 MoE checkpoints (same sources; 122B-A10B and 397B-A17B config.json as the registry above and
#: public copies of the 397B's text_config give them): 48 and 60 layers, 64 DeltaNet value heads, 32 query / 2 KV
#: heads, routed experts of width 1024 and one shared expert of 1024 (256 experts, 8 per token; 512, 10 per token)
_QWEN3_5_MOE: dict[str, dict[str, Any]] = {
    "qwen3.5-122b-a10b": _qwen3_5_text(
        48, 3072, 32, 2, 64, tie=False, num_experts=256, num_experts_per_tok=8, moe_intermediate_size=1024,
        shared_expert_intermediate_size=1024,
    ),
    "qwen3.5-397b-a17b": _qwen3_5_text(
        60, 4096, 32, 2, 64, tie=False, num_experts=512, num_experts_per_tok=10, moe_intermediate_size=1024,
        shared_expert_intermediate_size=1024,
    ),
}  # fmt: skip


def _granite_4_h(d: int, H: int, kv: int, mamba_heads: int, shared: int, **moe: int) -> dict[str, Any]:
    """A Granite 4.0-H config.json (model_type granitemoehybrid) from the fields its sizes differ in: width ``d``,
    ``H`` query / ``kv`` KV heads in the attention layers, ``mamba_heads`` Mamba-2 heads, the shared MLP's width
    ``shared`` (``shared_intermediate_size``) and, for the MoE models, ``num_local_experts``, ``num_experts_per_tok``
    and the experts' ``intermediate_size``. The rest every Granite 4.0-H below has alike: 40 layers of which 4 attend
    and 36 are Mamba-2 (``layer_types``; the tiny and micro configs put attention at layers 5, 15, 25 and 35),
    Mamba-2 heads of 64 (``mamba_d_head``: ``mamba_expand`` 2 x d over the heads, as transformers'
    GraniteMoeHybridConfig requires), a state of 128, one B/C group and a conv of 4, the 100352-token vocabulary,
    tied embeddings and 131072 positions."""
    types = ["attention" if i in (5, 15, 25, 35) else "mamba" for i in range(40)]
    return {
        "model_type": "granitemoehybrid", "hidden_size": d, "num_hidden_layers": 40, "num_attention_heads": H,
        "num_key_value_heads": kv, "vocab_size": 100352, "max_position_embeddings": 131072,
        "tie_word_embeddings": True, "hidden_act": "silu", "layer_types": types, "mamba_n_heads": mamba_heads,
        "mamba_d_head": 2 * d // mamba_heads, "mamba_d_state": 128, "mamba_n_groups": 1, "mamba_d_conv": 4,
        "mamba_expand": 2, "shared_intermediate_size": shared, **moe,
    }  # fmt: skip


#: IBM Granite 4.0-H (ibm-granite/granite-4.0-h-*), each from its config.json as public copies give it and the
#: model cards' architecture table (ibm-granite/granite-4.0-h-micro-base README: embedding size, 4 attention / 36
#: Mamba2 layers, attention heads and KV heads, Mamba2 state size and heads, MLP / shared expert hidden size, experts,
#: active experts, expert hidden size; 3B, 7B (1B active), 32B (9B active)). Granite-4.0-Micro is a plain transformer
#: (every ``layer_types`` entry "attention") and has no preset here.
_GRANITE_4_H: dict[str, dict[str, Any]] = {
    # ibm-granite/granite-4.0-h-small: 4096 wide, 32 query / 8 KV heads, 128 Mamba2 heads, 72 experts (10 per token)
    # of 768 and a shared MLP of 1536 (the card's table; hidden_size, heads, experts, intermediate_size 768,
    # shared_intermediate_size 1536, mamba_expand 2, vocab 100352 and tied embeddings as copies of its config.json
    # give them)
    "granite-4.0-h-small": _granite_4_h(
        4096, 32, 8, 128, 1536, num_local_experts=72, num_experts_per_tok=10, intermediate_size=768
    ),
    # ibm-granite/granite-4.0-h-tiny: 1536 wide, 12 query / 4 KV heads, 48 Mamba2 heads of 64, 64 experts (6 per
    # token) of 512 and a shared MLP of 1024 (config.json copied in public test fixtures)
    "granite-4.0-h-tiny": _granite_4_h(
        1536, 12, 4, 48, 1024, num_local_experts=64, num_experts_per_tok=6, intermediate_size=512
    ),
    # ibm-granite/granite-4.0-h-micro: 2048 wide, 32 query / 8 KV heads, 64 Mamba2 heads of 64, a dense MLP of 8192
    # (num_local_experts 0; config.json as a public test transcribes it)
    "granite-4.0-h-micro": _granite_4_h(2048, 32, 8, 64, 8192, num_local_experts=0),
}


def _nemotron_h(d: int, pattern: str, H: int, mamba_heads: int, mamba_head: int, state: int, ff: int, ctx: int,
                **fields: Any) -> dict[str, Any]:  # fmt: skip
    """A Nemotron-H config.json (model_type nemotron_h) from the fields its sizes differ in: width ``d``, the layer
    pattern (``hybrid_override_pattern``), ``H`` attention heads, the Mamba-2 heads, their width and state, the MLP
    width (``intermediate_size``) and the context; MoE fields in ``fields``. The rest every Nemotron-H below has
    alike: 8 KV heads of 128 (``num_key_value_heads``; Nemotron 3 Nano's 2 in ``fields``), 8 B/C groups, a conv of
    4, the 131072-token vocabulary and untied embeddings."""
    return {
        "model_type": "nemotron_h", "hidden_size": d, "num_hidden_layers": len(pattern),
        "hybrid_override_pattern": pattern, "num_attention_heads": H, "num_key_value_heads": 8, "head_dim": 128,
        "mamba_num_heads": mamba_heads, "mamba_head_dim": mamba_head, "ssm_state_size": state, "n_groups": 8,
        "conv_kernel": 4, "intermediate_size": ff, "vocab_size": 131072, "max_position_embeddings": ctx,
        "tie_word_embeddings": False, "mlp_hidden_act": "relu2", **fields,
    }  # fmt: skip


#: NVIDIA's Nemotron-H hybrids (nvidia/*), each from its config.json: the Megatron-Bridge model providers
#: (NVIDIA-NeMo/Megatron-Bridge src/megatron/bridge/models/nemotronh/nemotron_h_provider.py: the pattern, width,
#: Mamba heads, head width and state, MLP width and attention heads of each; 8 Mamba groups and 8 query groups of 128
#: for all) and public copies of the config.json files (vocab 131072, untied embeddings, the contexts).
_NEMOTRON_H: dict[str, dict[str, Any]] = {
    # nvidia/Nemotron-H-8B-Base-8K: 52 layers (24 Mamba-2, 4 attention, 24 MLP), 4096 wide, MLP 21504
    "nemotron-h-8b": _nemotron_h(
        4096, "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-", 32, 128, 64, 128, 21504, 8192
    ),
    # nvidia/Nemotron-H-47B-Base-8K: 98 layers, 8192 wide, 256 Mamba heads with a state of 256, MLP 30720
    "nemotron-h-47b": _nemotron_h(
        8192,
        "M-M-M-M-M-M-M-M-M*-M-M-M-M-M-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-M-M---MM---M-M*-M-M-M-M-M-",
        64,
        256,
        64,
        256,
        30720,
        8192,
    ),
    # nvidia/Nemotron-H-56B-Base-8K: 118 layers, 8192 wide, 256 Mamba heads with a state of 256, MLP 32768
    "nemotron-h-56b": _nemotron_h(
        8192,
        "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-"
        "M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-",
        64,
        256,
        64,
        256,
        32768,
        8192,
    ),
    # nvidia/NVIDIA-Nemotron-Nano-9B-v2: 56 layers, 4480 wide, 40 attention heads, 128 Mamba heads of 80, MLP 15680,
    # 131072 positions
    "nemotron-nano-9b-v2": _nemotron_h(
        4480, "M-M-M-MM-M-M-M*-M-M-M*-M-M-M-M*-M-M-M-M*-M-MM-M-M-M-M-M-", 40, 128, 80, 128, 15680, 131072
    ),
    # nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16 config.json: 52 layers (23 Mamba-2, 23 MoE, 6 attention), 2688 wide,
    # 32 query / 2 KV heads, 64 Mamba heads of 64, 128 experts of 1856 (6 per token) and one shared expert of 3712, the
    # state in float32 (mamba_ssm_cache_dtype), 262144 positions; no MTP layer (num_nextn_predict_layers absent)
    "nemotron-3-nano-30b-a3b": _nemotron_h(
        2688,
        "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME",
        32,
        64,
        64,
        128,
        1856,
        262144,
        num_key_value_heads=2,
        n_routed_experts=128,
        num_experts_per_tok=6,
        moe_intermediate_size=1856,
        n_shared_experts=1,
        moe_shared_expert_intermediate_size=3712,
        mamba_ssm_cache_dtype="float32",
    ),
}

#: Published shapes (from each model's config.json) of the models people pair in speculation.
PRESETS: dict[str, ModelSpec] = {
    m.name: m
    for m in (
        _llama("llama-2-7b", 32, 4096, 32, 32, 11008, 32000, 4096),
        _llama("llama-2-13b", 40, 5120, 40, 40, 13824, 32000, 4096),
        _llama("llama-2-70b", 80, 8192, 64, 8, 28672, 32000, 4096),
        _llama("vicuna-7b", 32, 4096, 32, 32, 11008, 32000, 4096),
        _llama("llama-3.1-8b", 32, 4096, 32, 8, 14336, 128256, 131072),
        _llama("llama-3.1-70b", 80, 8192, 64, 8, 28672, 128256, 131072),
        _llama("llama-3.2-1b", 16, 2048, 32, 8, 8192, 128256, 131072, head_dim=64, tie_embeddings=True),
        _llama("llama-3.2-3b", 28, 3072, 24, 8, 8192, 128256, 131072, head_dim=128, tie_embeddings=True),
        _llama("qwen2.5-0.5b", 24, 896, 14, 2, 4864, 151936, 32768, tie_embeddings=True, qkv_bias=True),
        _llama("qwen2.5-1.5b", 28, 1536, 12, 2, 8960, 151936, 32768, tie_embeddings=True, qkv_bias=True),
        _llama("qwen2.5-7b", 28, 3584, 28, 4, 18944, 152064, 32768, qkv_bias=True),
        _llama("qwen2.5-72b", 80, 8192, 64, 8, 29568, 152064, 32768, qkv_bias=True),
        _llama("mistral-7b", 32, 4096, 32, 8, 14336, 32000, 32768),
        _llama(
            "mixtral-8x7b", 32, 4096, 32, 8, 14336, 32000, 32768, n_experts=8, experts_per_token=2, d_ff_expert=14336
        ),
        # Qwen/Qwen3-30B-A3B config.json: 48 layers, 128 experts (8 per token, width 768), no shared expert; q/k norms
        _llama(
            "qwen3-30b-a3b",
            48,
            2048,
            32,
            4,
            6144,
            151936,
            40960,
            head_dim=128,
            n_experts=128,
            experts_per_token=8,
            d_ff_expert=768,
        ),
        _llama("llama-68m", 2, 768, 12, 12, 3072, 32000, 2048),
        _llama("vicuna-68m", 2, 768, 12, 12, 3072, 32000, 2048),  # double7/vicuna-68m: Spec-Bench's SpS draft
        _llama("vicuna-13b", 40, 5120, 40, 40, 13824, 32000, 2048),
        _llama("vicuna-33b", 60, 6656, 52, 52, 17920, 32000, 2048),
        _llama("llama-160m", 12, 768, 12, 12, 3072, 32000, 2048),
        # -- MagicDec's long-context pair (published/magicdec_blog.toml) --
        # togethercomputer/LLaMA-2-7B-32K config.json: the Llama-2-7B architecture (32 layers, 4096 wide, 32 query and
        # 32 KV heads, intermediate 11008, vocab 32000) with max_position_embeddings 32768 (linear RoPE scaling 8)
        _llama("llama-2-7b-32k", 32, 4096, 32, 32, 11008, 32000, 32768),
        # TinyLlama/TinyLlama_v1.1 (as TinyLlama_v1.1_chinese's and TinyLlama-1.1B-Chat-v1.0's config.json): 22 layers,
        # 2048 wide, 32 query and 4 KV heads, intermediate 5632, vocab 32000, 2048 positions; MagicDec's own table
        # (Engine/model.py transformer_configs "tinyllama") gives the same shape
        _llama("tinyllama-1.1b", 22, 2048, 32, 4, 5632, 32000, 2048),
        # multi-head latent attention + DeepSeekMoE (config.json of deepseek-ai/DeepSeek-V3, -R1, -V2-Lite and
        # moonshotai/Kimi-K2-Instruct on the Hugging Face hub); head_dim = qk_nope 128 + qk_rope 64
        # num_nextn_predict_layers: DeepSeek-V3/R1 ship one MTP module, Kimi K2 and V2-Lite none
        _mla("deepseek-v3", 61, 7168, 128, 18432, 129280, 163840, 256, 8, 2048, 1, 3, q_lora=1536, mtp=1),
        _mla("deepseek-r1", 61, 7168, 128, 18432, 129280, 163840, 256, 8, 2048, 1, 3, q_lora=1536, mtp=1),
        _mla("deepseek-v2-lite", 27, 2048, 16, 10944, 102400, 163840, 64, 6, 1408, 2, 1, q_lora=0),
        _mla("kimi-k2", 61, 7168, 64, 18432, 163840, 131072, 384, 8, 2048, 1, 1, q_lora=1536),
        # compressed sparse attention + DeepSeekMoE with MXFP4 experts (config.json of deepseek-ai/DeepSeek-V4-Pro and
        # -Flash, as public copies and vLLM's deepseek_v4 model read them; section 58). compress_ratios: Pro
        # [128, 128, then 4 and 128 alternating, 4] (30 CSA, 31 HCA), Flash [0, 0, then 4 and 128 alternating, 4]
        # (21 CSA, 20 HCA, 2 window-only); index_topk 1024 and 512
        _deepseek_v4("deepseek-v4-pro", 61, 7168, 128, 384, 3072, 1536, 16, 1024, 30, 31),
        _deepseek_v4("deepseek-v4-flash", 43, 4096, 64, 256, 2048, 1024, 8, 512, 21, 20),
        # alternating sliding (window 128) and full attention, sinks, biased MoE with MXFP4 experts (config.json
        # quantization_config: quant_method mxfp4, modules_to_not_convert the attention, router, embedding and head)
        _gpt_oss("gpt-oss-20b", 24, 32),
        _gpt_oss("gpt-oss-120b", 36, 128),
        # -- the models people serve in 2026 (each shape from the config.json of the first id in HF_IDS); the ones
        # whose checkpoints ship no multi-token-prediction module say so (mtp_modules 0: mtp is refused on them) --
        # meta-llama/Llama-3.3-70B-Instruct: the Llama-3.1-70B architecture (80 layers, 8192 wide, 64/8 heads)
        _llama("llama-3.3-70b", 80, 8192, 64, 8, 28672, 128256, 131072, mtp_modules=0),
        _llama4("llama-4-scout", 16, 1, 10485760),  # 16 experts, interleave_moe_layer_step 1: every layer MoE
        _llama4("llama-4-maverick", 128, 2, 1048576),  # 128 experts, step 2: 24 MoE and 24 dense layers
        # Qwen/Qwen3-*: hidden_size, num_hidden_layers, num_attention_heads, intermediate_size, tie_word_embeddings
        _qwen3("qwen3-0.6b", 28, 1024, 16, 3072, tie=True),
        _qwen3("qwen3-1.7b", 28, 2048, 16, 6144, tie=True),
        _qwen3("qwen3-4b", 36, 2560, 32, 9728, tie=True),
        _qwen3("qwen3-8b", 36, 4096, 32, 12288, tie=False),
        _qwen3("qwen3-14b", 40, 5120, 40, 17408, tie=False),
        _qwen3("qwen3-32b", 64, 5120, 64, 25600, tie=False),
        _qwen3_moe("qwen3-235b-a22b", 94, 4096, 64, 4, 128, 1536, 40960),
        _qwen3_moe("qwen3-coder-30b-a3b", 48, 2048, 32, 4, 128, 768, 262144),
        _qwen3_moe("qwen3-coder-480b-a35b", 62, 6144, 96, 8, 160, 2560, 262144),
        # google/gemma-3-*-it text_config: 1B slides over 512 tokens, the others over 1024
        _gemma3("gemma-3-1b", 26, 1152, 4, 1, 256, 6912, 262144, 512, 32768),
        _gemma3("gemma-3-4b", 34, 2560, 8, 4, 256, 10240, 262208, 1024, 131072),
        _gemma3("gemma-3-12b", 48, 3840, 16, 8, 256, 15360, 262208, 1024, 131072),
        _gemma3("gemma-3-27b", 62, 5376, 32, 16, 128, 21504, 262208, 1024, 131072),
        # zai-org/GLM-4.5, -4.6 (same shapes, a longer context), -4.5-Air
        _glm4_moe("glm-4.5", 92, 5120, 160, 12288, 1536, 3, 131072),
        _glm4_moe("glm-4.6", 92, 5120, 160, 12288, 1536, 3, 202752),
        _glm4_moe("glm-4.5-air", 46, 4096, 128, 10944, 1408, 1, 131072),
        # mistralai/Mistral-Small-3.1-24B-Instruct-2503 text_config (3.2 has the same text stack) and
        # Mistral-Large-Instruct-2407 (Mistral Large 2, 123B: a 32768-token vocabulary)
        _llama("mistral-small-3.1-24b", 40, 5120, 32, 8, 32768, 131072, 131072, head_dim=128, mtp_modules=0),
        _llama("mistral-large-2-123b", 88, 12288, 96, 8, 28672, 32768, 131072, mtp_modules=0),
        # moonshotai/Kimi-K2.5 text_config (model_type kimi_k2): Kimi K2's shapes with 262144 positions
        _mla("kimi-k2.5", 61, 7168, 64, 18432, 163840, 262144, 384, 8, 2048, 1, 1, q_lora=1536),
        # MiniMaxAI/MiniMax-M2: full attention in every layer (48 query, 8 KV heads of 128), 256 experts of width
        # 1536 (config ``intermediate_size``), 8 per token, no shared expert; its config declares num_mtp_modules 3
        # but the published weights hold no MTP module (MiniMax-AI/MiniMax-M2 issue #47): mtp_modules 0
        _minimax_m2(),
        _from_hf_dict(_QWEN3_NEXT_80B_A3B, "qwen3-next-80b-a3b"),
        _from_hf_dict(_QWEN3_5_35B_A3B, "qwen3.5-35b-a3b"),
        *(_from_hf_dict(cfg, name) for name, cfg in {**_QWEN3_5_DENSE, **_QWEN3_5_MOE}.items()),
        *(_from_hf_dict(cfg, name) for name, cfg in {**_GRANITE_4_H, **_NEMOTRON_H}.items()),
    )
}


#: The Hugging Face ids each preset stands for (the name people deploy with: vLLM's ``--model``, SGLang's
#: ``--model-path``); an id is matched case-insensitively. Shapes are the same for base and instruct models.
HF_IDS: dict[str, tuple[str, ...]] = {
    "llama-2-7b": ("meta-llama/Llama-2-7b-hf", "meta-llama/Llama-2-7b-chat-hf"),
    "llama-2-13b": ("meta-llama/Llama-2-13b-hf", "meta-llama/Llama-2-13b-chat-hf"),
    "llama-2-70b": ("meta-llama/Llama-2-70b-hf", "meta-llama/Llama-2-70b-chat-hf"),
    "vicuna-7b": ("lmsys/vicuna-7b-v1.3", "lmsys/vicuna-7b-v1.5"),
    "vicuna-13b": ("lmsys/vicuna-13b-v1.3",),
    "vicuna-33b": ("lmsys/vicuna-33b-v1.3",),
    "llama-3.1-8b": (
        "meta-llama/Llama-3.1-8B-Instruct",
        "meta-llama/Llama-3.1-8B",
        "meta-llama/Meta-Llama-3.1-8B-Instruct",
    ),
    "llama-3.1-70b": (
        "meta-llama/Llama-3.1-70B-Instruct",
        "meta-llama/Llama-3.1-70B",
    ),
    "llama-3.2-1b": ("meta-llama/Llama-3.2-1B-Instruct", "meta-llama/Llama-3.2-1B"),
    "llama-3.2-3b": ("meta-llama/Llama-3.2-3B-Instruct", "meta-llama/Llama-3.2-3B"),
    "qwen2.5-0.5b": ("Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-0.5B"),
    "qwen2.5-1.5b": ("Qwen/Qwen2.5-1.5B-Instruct", "Qwen/Qwen2.5-1.5B"),
    "qwen2.5-7b": ("Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-7B"),
    "qwen2.5-72b": ("Qwen/Qwen2.5-72B-Instruct", "Qwen/Qwen2.5-72B"),
    "mistral-7b": (
        "mistralai/Mistral-7B-Instruct-v0.2",
        "mistralai/Mistral-7B-v0.1",
        "mistralai/Mistral-7B-Instruct-v0.3",
    ),
    "mixtral-8x7b": ("mistralai/Mixtral-8x7B-Instruct-v0.1", "mistralai/Mixtral-8x7B-v0.1"),
    "qwen3-30b-a3b": ("Qwen/Qwen3-30B-A3B", "Qwen/Qwen3-30B-A3B-Instruct-2507"),
    "llama-68m": ("JackFram/llama-68m",),
    "vicuna-68m": ("double7/vicuna-68m",),
    "llama-160m": ("JackFram/llama-160m",),
    "llama-2-7b-32k": ("togethercomputer/LLaMA-2-7B-32K",),
    "tinyllama-1.1b": ("TinyLlama/TinyLlama_v1.1", "TinyLlama/TinyLlama-1.1B-Chat-v1.0"),
    "deepseek-v3": ("deepseek-ai/DeepSeek-V3", "deepseek-ai/DeepSeek-V3-0324", "deepseek-ai/DeepSeek-V3-Base"),
    "deepseek-r1": ("deepseek-ai/DeepSeek-R1", "deepseek-ai/DeepSeek-R1-0528"),
    "deepseek-v2-lite": ("deepseek-ai/DeepSeek-V2-Lite", "deepseek-ai/DeepSeek-V2-Lite-Chat"),
    "kimi-k2": ("moonshotai/Kimi-K2-Instruct", "moonshotai/Kimi-K2-Base"),
    "deepseek-v4-pro": ("deepseek-ai/DeepSeek-V4-Pro", "deepseek-ai/DeepSeek-V4-Pro-DSpark"),
    "deepseek-v4-flash": ("deepseek-ai/DeepSeek-V4-Flash", "deepseek-ai/DeepSeek-V4-Flash-DSpark"),
    "gpt-oss-20b": ("openai/gpt-oss-20b",),
    "gpt-oss-120b": ("openai/gpt-oss-120b",),
    "llama-3.3-70b": ("meta-llama/Llama-3.3-70B-Instruct",),
    "llama-4-scout": ("meta-llama/Llama-4-Scout-17B-16E-Instruct", "meta-llama/Llama-4-Scout-17B-16E"),
    "llama-4-maverick": (
        "meta-llama/Llama-4-Maverick-17B-128E-Instruct",
        "meta-llama/Llama-4-Maverick-17B-128E-Instruct-FP8",
        "meta-llama/Llama-4-Maverick-17B-128E",
    ),
    "qwen3-0.6b": ("Qwen/Qwen3-0.6B", "Qwen/Qwen3-0.6B-Base"),
    "qwen3-1.7b": ("Qwen/Qwen3-1.7B", "Qwen/Qwen3-1.7B-Base"),
    "qwen3-4b": ("Qwen/Qwen3-4B", "Qwen/Qwen3-4B-Base"),
    "qwen3-8b": ("Qwen/Qwen3-8B", "Qwen/Qwen3-8B-Base"),
    "qwen3-14b": ("Qwen/Qwen3-14B", "Qwen/Qwen3-14B-Base"),
    "qwen3-32b": ("Qwen/Qwen3-32B",),
    "qwen3-235b-a22b": ("Qwen/Qwen3-235B-A22B", "Qwen/Qwen3-235B-A22B-FP8"),
    "qwen3-coder-30b-a3b": ("Qwen/Qwen3-Coder-30B-A3B-Instruct",),
    "qwen3-coder-480b-a35b": ("Qwen/Qwen3-Coder-480B-A35B-Instruct", "Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8"),
    "gemma-3-1b": ("google/gemma-3-1b-it", "google/gemma-3-1b-pt"),
    "gemma-3-4b": ("google/gemma-3-4b-it", "google/gemma-3-4b-pt"),
    "gemma-3-12b": ("google/gemma-3-12b-it", "google/gemma-3-12b-pt"),
    "gemma-3-27b": ("google/gemma-3-27b-it", "google/gemma-3-27b-pt"),
    "glm-4.5": ("zai-org/GLM-4.5", "zai-org/GLM-4.5-FP8"),
    "glm-4.6": ("zai-org/GLM-4.6", "zai-org/GLM-4.6-FP8"),
    "glm-4.5-air": ("zai-org/GLM-4.5-Air", "zai-org/GLM-4.5-Air-FP8"),
    "mistral-small-3.1-24b": (
        "mistralai/Mistral-Small-3.1-24B-Instruct-2503",
        "mistralai/Mistral-Small-3.1-24B-Base-2503",
        "mistralai/Mistral-Small-3.2-24B-Instruct-2506",
    ),
    "mistral-large-2-123b": ("mistralai/Mistral-Large-Instruct-2407",),
    "kimi-k2.5": ("moonshotai/Kimi-K2.5",),
    "minimax-m2": ("MiniMaxAI/MiniMax-M2",),
    "qwen3-next-80b-a3b": ("Qwen/Qwen3-Next-80B-A3B-Instruct", "Qwen/Qwen3-Next-80B-A3B-Thinking"),
    "qwen3.5-35b-a3b": ("Qwen/Qwen3.5-35B-A3B", "Qwen/Qwen3.5-35B-A3B-Base"),
    "qwen3.5-0.8b": ("Qwen/Qwen3.5-0.8B", "Qwen/Qwen3.5-0.8B-Base"),
    "qwen3.5-2b": ("Qwen/Qwen3.5-2B", "Qwen/Qwen3.5-2B-Base"),
    "qwen3.5-4b": ("Qwen/Qwen3.5-4B", "Qwen/Qwen3.5-4B-Base"),
    "qwen3.5-9b": ("Qwen/Qwen3.5-9B", "Qwen/Qwen3.5-9B-Base"),
    "qwen3.5-27b": ("Qwen/Qwen3.5-27B", "Qwen/Qwen3.5-27B-FP8"),
    "qwen3.5-122b-a10b": ("Qwen/Qwen3.5-122B-A10B", "Qwen/Qwen3.5-122B-A10B-FP8"),
    "qwen3.5-397b-a17b": ("Qwen/Qwen3.5-397B-A17B", "Qwen/Qwen3.5-397B-A17B-FP8"),
    "granite-4.0-h-small": ("ibm-granite/granite-4.0-h-small", "ibm-granite/granite-4.0-h-small-base"),
    "granite-4.0-h-tiny": ("ibm-granite/granite-4.0-h-tiny", "ibm-granite/granite-4.0-h-tiny-base"),
    "granite-4.0-h-micro": ("ibm-granite/granite-4.0-h-micro", "ibm-granite/granite-4.0-h-micro-base"),
    "nemotron-h-8b": (
        "nvidia/Nemotron-H-8B-Base-8K",
        "nvidia/Nemotron-H-8B-Reasoning-128K",
        "nvidia/Nemotron-H-8B-Instruct-8K",
    ),
    "nemotron-h-47b": ("nvidia/Nemotron-H-47B-Base-8K", "nvidia/Nemotron-H-47B-Reasoning-128K"),
    "nemotron-h-56b": ("nvidia/Nemotron-H-56B-Base-8K",),
    "nemotron-nano-9b-v2": ("nvidia/NVIDIA-Nemotron-Nano-9B-v2", "nvidia/NVIDIA-Nemotron-Nano-9B-v2-Base"),
    "nemotron-3-nano-30b-a3b": (
        "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16",
        "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-Base-BF16",
    ),
}

#: other names a preset answers to (the issue's and the docs' short names), matched case-insensitively
ALIASES: dict[str, str] = {
    "llama-4-scout-17b-16e": "llama-4-scout",
    "llama-4-maverick-17b-128e": "llama-4-maverick",
    "mistral-small-3.1": "mistral-small-3.1-24b",
    "mistral-small-3.2": "mistral-small-3.1-24b",
    "mistral-small-24b": "mistral-small-3.1-24b",
    "mistral-large-2": "mistral-large-2-123b",
    "mistral-large": "mistral-large-2-123b",
    "qwen3-coder-30b": "qwen3-coder-30b-a3b",
    "qwen3-coder-480b": "qwen3-coder-480b-a35b",
    "qwen3-235b": "qwen3-235b-a22b",
    "kimi-k2-5": "kimi-k2.5",
    "glm-4.5air": "glm-4.5-air",
    "qwen3.5-35b": "qwen3.5-35b-a3b",
    "qwen3.5-122b": "qwen3.5-122b-a10b",
    "qwen3.5-397b": "qwen3.5-397b-a17b",
    "granite-4-h-small": "granite-4.0-h-small",
    "granite-4-h-tiny": "granite-4.0-h-tiny",
    "granite-4-h-micro": "granite-4.0-h-micro",
    "nemotron-nano-9b": "nemotron-nano-9b-v2",
    "nemotron-3-nano-30b": "nemotron-3-nano-30b-a3b",
}
_BY_HF_ID = {i.lower(): preset for preset, ids in HF_IDS.items() for i in ids}


def hf_id(spec: ModelSpec | str) -> str | None:
    """The Hugging Face id a deployment names this model by (a preset's first id), or None if unknown."""
    name = spec.name if isinstance(spec, ModelSpec) else str(spec)
    ids = HF_IDS.get(name.strip().lower())
    if ids:
        return ids[0]
    return name if "/" in name and not Path(name).exists() else None


def _cache_id(config: Path) -> str | None:
    """The Hugging Face id of a config.json inside a hub cache (``models--ORG--NAME/snapshots/<hash>/config.json``):
    a snapshot is named by its model, not by its hash."""
    snap = config.resolve().parent if config.name == "config.json" else config.resolve()
    repo = snap.parent.parent.name if snap.parent.name == "snapshots" else ""
    return repo[len("models--") :].replace("--", "/") if repo.startswith("models--") else None


def _hf_cache_dirs() -> list[Path]:
    """Where a local Hugging Face hub cache keeps snapshots (HF_HUB_CACHE, HF_HOME/hub, ~/.cache/huggingface/hub)."""
    import os

    dirs = []
    if os.environ.get("HF_HUB_CACHE"):
        dirs.append(Path(os.environ["HF_HUB_CACHE"]))
    if os.environ.get("HF_HOME"):
        dirs.append(Path(os.environ["HF_HOME"]) / "hub")
    dirs.append(Path.home() / ".cache" / "huggingface" / "hub")
    return dirs


def cached_hf_config(model_id: str) -> Path | None:
    """The config.json of ``model_id`` in the local Hugging Face cache (its newest snapshot), never the network."""
    folder = "models--" + model_id.strip().replace("/", "--")
    for root in _hf_cache_dirs():
        snaps = root / folder / "snapshots"
        if not snaps.is_dir():
            continue
        found = sorted(snaps.glob("*/config.json"), key=lambda p: p.stat().st_mtime, reverse=True)
        if found:
            return found[0]
    return None


#: models read from a Hugging Face id this process (the cache or the hub), by lower-cased id: read and announced once
_FROM_HUB: dict[str, ModelSpec] = {}


#: seconds the hub probe waits for an answer (HF_HUB_ETAG_TIMEOUT, when set, instead)
HUB_PROBE_TIMEOUT_S = 5.0


def _hub_probe(model_id: str) -> None:
    """One request for ``config.json``'s metadata, never retried: raises the hub's error (no network, gated, not
    found) at once. huggingface_hub's ``get_hf_file_metadata`` retries only when asked (``retry_on_errors``, which
    versions before 1.0 lack and which is off by default), so it is called with the timeout alone."""
    import os

    import huggingface_hub as hub

    given = os.environ.get("HF_HUB_ETAG_TIMEOUT", "").strip()
    timeout = float(given) if given.replace(".", "", 1).isdigit() and float(given) > 0 else HUB_PROBE_TIMEOUT_S
    hub.get_hf_file_metadata(hub.hf_hub_url(model_id, "config.json"), timeout=timeout)


def _hub_config(model_id: str) -> Path:
    """``config.json`` of ``model_id`` through ``huggingface_hub`` (only that file): from the local cache, or downloaded
    when online. ``HF_HUB_OFFLINE=1`` keeps it to the cache. One line names what is missing."""
    import os

    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        raise SpecroofError(
            f"{model_id!r} is not a preset and not in the local Hugging Face cache, and HF_HUB_OFFLINE is set: "
            "unset it to fetch its config.json, or give the path of its config.json"
        )
    try:
        from huggingface_hub import hf_hub_download
    except ImportError:
        raise SpecroofError(
            f"{model_id!r} is not a preset and not in the local Hugging Face cache: fetching its config.json needs "
            "huggingface_hub (pip install huggingface_hub), or give the path of its config.json"
        ) from None
    try:
        # one HEAD of the file first, without retries and on a short timeout: offline, hf_hub_download retries its
        # request with backoff for some 25 s before it gives up; the probe makes an offline machine's error immediate
        _hub_probe(model_id)
        # the cache the environment names now (the hub reads HF_HUB_CACHE / HF_HOME once, when it is imported)
        cache = os.environ.get("HF_HUB_CACHE") or (
            str(Path(os.environ["HF_HOME"]) / "hub") if os.environ.get("HF_HOME") else None
        )
        return Path(hf_hub_download(model_id, "config.json", cache_dir=cache))
    except Exception as exc:  # the hub's errors (offline, gated, not found, network) all end here as one line
        reason = type(exc).__name__
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise SpecroofError(
            f"could not fetch config.json of {model_id!r} from the Hugging Face hub ({reason}"
            f"{': ' + detail[:160] if detail else ''}): check the id, log in for a gated model, unset HF_HUB_OFFLINE, "
            "or give the path of its config.json"
        ) from None


def _from_hub_id(model_id: str) -> ModelSpec:
    """A model by a Hugging Face id no preset stands for: its config.json from the local cache, else fetched through
    ``huggingface_hub``; named by its id (not its snapshot folder) and announced on stderr once per process."""
    import sys

    key = model_id.strip().lower()
    if key in _FROM_HUB:
        return _FROM_HUB[key]
    cfg = cached_hf_config(model_id)
    where = "the local Hugging Face cache"
    if cfg is None:
        cfg = _hub_config(model_id.strip())
        where = "the Hugging Face hub (config.json only)"
    spec = ModelSpec.from_hf_config(cfg, name=model_id.strip())
    print(f"specroof: read {model_id.strip()} from {where}: {cfg}", file=sys.stderr)
    _FROM_HUB[key] = spec
    return spec


def get_model(name: str | ModelSpec) -> ModelSpec:
    """A preset (``'llama-3.1-8b'``) or one of its :data:`ALIASES`, a Hugging Face id (``'Qwen/Qwen3-8B'``: a
    preset's, else its config.json from the local Hugging Face cache or, through ``huggingface_hub`` when it is
    installed and online, from the hub; ``HF_HUB_OFFLINE=1`` keeps to the cache), a ``config.json`` path or checkpoint
    folder, or the spec itself."""
    if isinstance(name, ModelSpec):
        return name
    if not isinstance(name, str):
        raise SpecroofError(f"a model is a preset name, a config.json path or a ModelSpec (got {type(name).__name__})")
    key = name.strip().lower()
    if key in PRESETS:
        return PRESETS[key]
    if key in ALIASES:
        return PRESETS[ALIASES[key]]
    if key in _BY_HF_ID:
        return PRESETS[_BY_HF_ID[key]]
    path = Path(name)
    if name.endswith(".json") or path.is_dir() or path.is_file():
        return ModelSpec.from_hf_config(path)
    import difflib

    if "/" in key:  # a Hugging Face id that no preset stands for: the local cache, else the hub
        try:
            return _from_hub_id(name)
        except SpecroofError as exc:
            tail = key.rsplit("/", 1)[-1]
            close = difflib.get_close_matches(tail, list(PRESETS), n=1, cutoff=0.3)
            hint = f" (the closest preset is {close[0]!r})" if close else ""
            raise SpecroofError(f"{exc}{hint}") from None
    close = difflib.get_close_matches(key, list(PRESETS) + list(ALIASES), n=3, cutoff=0.5)
    hint = f"; closest: {', '.join(close)}" if close else f"; presets: {', '.join(PRESETS)}"
    raise SpecroofError(f"unknown model preset {name!r}{hint}")

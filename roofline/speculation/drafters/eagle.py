"""EAGLE and multi-token prediction: one decoder layer of the target's shape on its features."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from numpy.typing import ArrayLike

from roofline.core.errors import SpecroofError
from roofline.core.validation import check_count
from roofline.passes.model import ModelSpec
from roofline.speculation.drafters.base import (
    Array,
    Ctx,
    _derived,
    _no_memory,
    _params,
    _steps,
    _tree_levels,
    _verify,
)
from roofline.speculation.drafters.tree_presets import (
    TREE_PRESETS,
)
from roofline.speculation.trees import Tree

#: EAGLE-3 draft heads of the sparse-MoE targets as their published training configs shape them: one dense
#: Llama-style decoder layer (``LlamaForCausalLMEagle3``: the first layer's q/k/v read the 2d-wide concatenation of
#: the token's embedding and the fused hidden state, an ``fc`` fuses three of the target's hidden states, 3d -> d)
#: and its own LM head over a 32,000-token draft vocabulary. From sgl-project/SpecForge ``configs/``:
#: ``deepseek-v3-671b-eagle3.json``, ``deepseek-r1-671b-eagle3.json``, ``kimi-k2-eagle3.json`` and
#: ``gpt-oss-20B-eagle3-dense.json`` (gpt-oss-120b has the same width, 2880: the 20B head's shape stands for it)
EAGLE3_HEADS: dict[str, dict[str, int]] = {
    "deepseek-v3": {"d_model": 7168, "n_heads": 56, "n_kv_heads": 8, "head_dim": 128, "d_ff": 40960, "vocab": 32000},
    "deepseek-r1": {"d_model": 7168, "n_heads": 32, "n_kv_heads": 8, "head_dim": 224, "d_ff": 29568, "vocab": 32000},
    "kimi-k2": {"d_model": 7168, "n_heads": 64, "n_kv_heads": 64, "head_dim": 128, "d_ff": 18432, "vocab": 32000},
    "gpt-oss-20b": {"d_model": 2880, "n_heads": 64, "n_kv_heads": 8, "head_dim": 64, "d_ff": 17280, "vocab": 32000},
    "gpt-oss-120b": {"d_model": 2880, "n_heads": 64, "n_kv_heads": 8, "head_dim": 64, "d_ff": 17280, "vocab": 32000},
    # SpecForge configs/qwen3-30B-A3B-eagle3.1.json: one dense Llama layer, a 32,000-token draft head
    "qwen3-30b-a3b": {"d_model": 2048, "n_heads": 32, "n_kv_heads": 4, "head_dim": 128, "d_ff": 12288, "vocab": 32000},
}


def _eagle3_head(target: ModelSpec, shape: dict[str, int]) -> ModelSpec:
    """The shipped EAGLE-3 head of ``target`` as a one-layer ModelSpec: the doubled q/k/v input (d (H + 2 KV) hd more
    weights) and the fc (3 d^2) counted as extra MLP width, so one pass reads and computes the same."""
    d, H, KV, hd = shape["d_model"], shape["n_heads"], shape["n_kv_heads"], shape["head_dim"]
    extra = d * (H + 2 * KV) * hd + 3 * d * d
    return ModelSpec(
        f"{target.name} eagle3 head", 1, d, H, KV, hd, shape["d_ff"] + -(-extra // (3 * d)), shape["vocab"],
        max_context=target.max_context,
    )  # fmt: skip


@dataclass(frozen=True)
class Eagle:
    """EAGLE-1/2/3: a one-layer draft on the target's features, one pass per tree level (see the module docstring)."""

    version: int = 1
    top_k: int = 10
    name: str = ""

    def __post_init__(self) -> None:
        if self.version not in (1, 2, 3):
            raise SpecroofError(f"EAGLE version must be 1, 2 or 3 (got {self.version})")
        object.__setattr__(self, "name", self.name or ("eagle" if self.version == 1 else f"eagle{self.version}"))

    def layer_spec(self, target: ModelSpec) -> ModelSpec:
        """One decoder layer of the target's shape, its LM head, and the 2d -> d input projection.

        The projection's 2 d^2 weights are counted as extra MLP width (2 d / 3 more columns in
        each of the three MLP matrices; in an MoE layer, of its always-on shared expert): the same
        bytes and FLOPs in one pass. An EAGLE-3 head of a sparse-MoE target with a published head
        (:data:`EAGLE3_HEADS`) is that dense head instead.
        """
        if self.version == 3 and target.name in EAGLE3_HEADS:
            return _derived(("eagle3 head",), target, lambda: _eagle3_head(target, EAGLE3_HEADS[target.name]))
        extra_ff = -(-2 * target.d_model // 3)

        def build() -> ModelSpec:
            changes: dict[str, Any] = {"d_ff": target.d_ff + extra_ff}
            if target.is_moe:  # the projection runs on every token: priced as (more) shared-expert width
                base = (target.d_ff_shared or target.d_ff_expert) * target.n_shared_experts
                changes = {"n_shared_experts": 1, "d_ff_shared": base + extra_ff}
            # the draft layer attends to its whole context (EAGLE-3 heads of gpt-oss do); a hybrid's MTP module is a
            # full-attention layer (section 52)
            return target.one_layer(f"{self.name} layer", mtp_modules=None, **changes)

        return _derived(("eagle layer", self.name), target, build)

    def own_head(self, target: ModelSpec) -> bool:
        """Whether the draft layer has an LM head of its own (an EAGLE-3 head's draft vocabulary), not the target's."""
        return self.version == 3 and target.name in EAGLE3_HEADS

    @property
    def default_tree(self) -> Tree:
        return TREE_PRESETS["eagle" if self.version == 1 else f"eagle{self.version}"]

    def draft_time(self, ctx: Ctx, gamma: npt.NDArray[np.int64], batch: ArrayLike, context: ArrayLike) -> Array:
        return _steps(ctx, self.layer_spec(ctx.target), gamma, batch, context)

    def verify_time(self, ctx: Ctx, gamma: npt.NDArray[np.int64], batch: ArrayLike, context: ArrayLike) -> Array:
        return _verify(ctx, ctx.target, gamma, batch, context)

    def extra_memory_bytes(self, ctx: Ctx, batch: ArrayLike, context: ArrayLike) -> Array:
        layer = self.layer_spec(ctx.target)
        # an EAGLE-3 head keeps its own draft-vocabulary LM head and reads the target's embedding; EAGLE's layer
        # shares the target's LM head
        own = self.own_head(ctx.target)
        shared = layer.embedding_params if own else ctx.target.d_model * ctx.target.vocab_size
        return _no_memory(batch, context) + (_params(layer) - shared) * 2.0

    def tree_passes(self, ctx: Ctx, widths: Sequence[int], context: int) -> tuple[ModelSpec, Sequence[int], int]:
        if self.version == 1:  # a static tree: each level's nodes in one pass
            return self.layer_spec(ctx.target), widths, context
        # EAGLE-2/3 expand the top-k of every level, whatever the verified tree keeps
        return self.layer_spec(ctx.target), [1] + [self.top_k] * (len(widths) - 1), context

    def tree_draft_time(self, ctx: Ctx, widths: Sequence[int], batch: int, context: int) -> float:
        return _tree_levels(ctx, self.tree_passes(ctx, widths, context), batch)


@dataclass(frozen=True)
class MTP(Eagle):
    """Multi-token prediction (DeepSeek-V3): ``modules`` MTP modules, each priced as EAGLE's layer; a chain.

    Each drafted token is one module pass (a target-shaped block, for DeepSeek-V3 an MLA layer
    with all 256 experts, and the 2d -> d projection; the target's embedding and head shared).
    ``modules`` None (``mtp``) is what the target ships (``ModelSpec.mtp_modules``: DeepSeek-V3/R1
    ship one; one when the target does not say); a target that ships none (Kimi K2, gpt-oss) is
    refused. More drafts than modules reuse them in turn, as the engines do (vLLM
    ``spec_step_idx % num_mtp_layers``, SGLang's NEXTN as an EAGLE chain): a module reused past
    its own step was not trained for that step, so one per-token rate is not stretched over them
    (:func:`roofline.speculation.acceptance_kinds.check_reused_modules`). The default draft length is the modules.
    """

    modules: int | None = None

    def __post_init__(self) -> None:
        if self.version not in (1, 2, 3):  # MTP(8): a positional count lands in the inherited first field
            raise SpecroofError(
                f"MTP takes its module count by name: MTP(modules={self.version}) (its first field, version, is the "
                "EAGLE layer it is priced as: 1, 2 or 3); on the command line: --drafter mtp:N"
            )
        if self.modules is not None:
            object.__setattr__(self, "modules", check_count("mtp modules", self.modules, 1))  # np.int64(2) as 2
        n = self.modules
        object.__setattr__(self, "name", self.name or ("mtp" if n is None or n == 1 else f"mtp:{n}"))
        super().__post_init__()

    @property
    def default_gamma(self) -> int:
        return int(self.modules or 1)

    def modules_for(self, target: ModelSpec) -> int:
        """The modules this drafter runs on ``target``: its own count, checked against what the target ships."""
        ships = target.mtp_modules
        if ships == 0:
            raise SpecroofError(
                f"{target.name} ships no multi-token-prediction module (num_nextn_predict_layers 0): draft it with "
                "eagle3 or a draft model instead of mtp"
            )
        if self.modules is None:
            return int(ships or 1)
        if ships is not None and self.modules > ships:
            raise SpecroofError(
                f"{target.name} ships {ships} MTP module{'s' if ships > 1 else ''}: {self.name} needs {self.modules}; "
                f"use mtp (the engines chain the shipped module over gamma steps) with a per-position curve"
            )
        return int(self.modules)

    def trained_steps(self, target: ModelSpec) -> int | None:
        """Draft steps covered by a module trained for that step: the modules the target ships (its config's
        ``num_nextn_predict_layers``); None where the target does not say (``mtp`` then stands for MTP-style heads
        of the target's shape, one per draft step, as before)."""
        if target.mtp_modules is None:
            return None
        return self.modules_for(target)

    def layer_spec(self, target: ModelSpec) -> ModelSpec:
        self.modules_for(target)  # a target that ships no module, or fewer, is refused before it is priced
        return super().layer_spec(target)

    def extra_memory_bytes(self, ctx: Ctx, batch: ArrayLike, context: ArrayLike) -> Array:
        return super().extra_memory_bytes(ctx, batch, context) * self.modules_for(ctx.target)

"""Hugging Face ``transformers``: ``generate`` and assisted generation, timed as a user runs them.

The models are ``LlamaForCausalLM`` built locally from a :class:`roofline.passes.model.ModelSpec`
(random weights: a pass's time does not depend on them) or converted from the harness's
:class:`measure.models.Transformer` (the offline pair, so the assistant's drafts are accepted
as often as the pair's are). Nothing is downloaded.

Assisted generation (``assistant_model=``) drafts with the assistant's own ``generate`` and
verifies with one target pass per round; ``num_assistant_tokens`` with the ``"constant"``
schedule is a fixed gamma, ``"heuristic"`` Hugging Face's schedule (+2 after an all-accepted
round, -1 otherwise). The assistant's confidence threshold (on by default since 4.45: it stops
a draft early and tunes itself from the ROC of past drafts) is switched off, so a round
drafts exactly gamma tokens. Hugging Face's assisted generation decodes one sequence at a time:
batch 1 only.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from measure.frameworks.common import Clock, FrameworkRun, timed
from measure.models import TORCH_DTYPES, Transformer
from roofline.core.errors import SpecroofError
from roofline.passes.model import ModelSpec

NAME = "hf"


def available() -> str | None:
    """None when transformers imports; else why not (one line)."""
    try:
        import transformers  # noqa: F401
    except ImportError as exc:
        return f"transformers is not installed ({exc}): pip install 'specroof[hf]'"
    return None


def version() -> str:
    import transformers

    return str(transformers.__version__)


def llama_config(spec: ModelSpec, norm_eps: float = 1e-5) -> Any:
    """The ``LlamaConfig`` of a dense SwiGLU ``spec`` (rotate-half RoPE, the harness's layout)."""
    from transformers import LlamaConfig

    if spec.is_abstract or spec.is_moe or spec.mlp_kind != "swiglu":
        raise SpecroofError(f"the hf framework builds dense SwiGLU Llama models (got {spec.name!r})")
    return LlamaConfig(
        vocab_size=spec.vocab_size,
        hidden_size=spec.d_model,
        intermediate_size=spec.d_ff,
        num_hidden_layers=spec.n_layers,
        num_attention_heads=spec.n_heads,
        num_key_value_heads=spec.n_kv_heads,
        head_dim=spec.head_dim,
        max_position_embeddings=spec.max_context,
        rms_norm_eps=norm_eps,
        tie_word_embeddings=spec.tie_embeddings,
        attention_bias=spec.qkv_bias,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=0,
    )


def _finish(model: Any, dtype: str, device: str | torch.device) -> Any:
    model = model.to(device=torch.device(device), dtype=TORCH_DTYPES[dtype]).eval()
    gc = model.generation_config
    gc.eos_token_id, gc.pad_token_id, gc.bos_token_id = None, 0, None
    return model


def random_model(spec: ModelSpec, *, dtype: str = "bf16", device: str | torch.device = "cpu", seed: int = 0) -> Any:
    """A ``LlamaForCausalLM`` of ``spec``'s shape with random weights (for timing plain decoding)."""
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = llama_config(spec)
    cfg._attn_implementation = "sdpa"
    return _finish(LlamaForCausalLM(cfg), dtype, device)


def build(model: Transformer, dtype: str, device: str | torch.device) -> Any:
    """The framework's own model of the harness's ``model`` (same shape, same weights)."""
    return from_harness(model, dtype=dtype, device=device)


def from_harness(model: Transformer, *, dtype: str = "bf16", device: str | torch.device = "cpu") -> Any:
    """The harness's model as a ``LlamaForCausalLM`` with the same weights (fused q/k/v and gate/up split)."""
    from transformers import LlamaForCausalLM

    spec = model.spec
    cfg = llama_config(spec, norm_eps=float(model.norm.eps))
    cfg._attn_implementation = "sdpa"
    hf = LlamaForCausalLM(cfg)  # random init, then replaced (meta init would leave RoPE's buffers empty)
    src = {k: v.detach().float().cpu() for k, v in model.state_dict().items()}
    h, kv, hd = spec.n_heads, spec.n_kv_heads, spec.head_dim
    state = {"model.embed_tokens.weight": src["embed_tokens.weight"], "model.norm.weight": src["norm.weight"]}
    state["lm_head.weight"] = src["lm_head.weight"]
    for i in range(spec.n_layers):
        a, m = f"layers.{i}.", f"model.layers.{i}."
        q, k, v = src[a + "self_attn.wqkv.weight"].split([h * hd, kv * hd, kv * hd])
        state |= {m + "self_attn.q_proj.weight": q, m + "self_attn.k_proj.weight": k, m + "self_attn.v_proj.weight": v}
        if spec.qkv_bias:
            bq, bk, bv = src[a + "self_attn.wqkv.bias"].split([h * hd, kv * hd, kv * hd])
            state |= {m + "self_attn.q_proj.bias": bq, m + "self_attn.k_proj.bias": bk, m + "self_attn.v_proj.bias": bv}
        gate, up = src[a + "mlp.w13.weight"].chunk(2)
        state |= {
            m + "self_attn.o_proj.weight": src[a + "self_attn.o_proj.weight"],
            m + "mlp.gate_proj.weight": gate,
            m + "mlp.up_proj.weight": up,
            m + "mlp.down_proj.weight": src[a + "mlp.down_proj.weight"],
            m + "input_layernorm.weight": src[a + "input_layernorm.weight"],
            m + "post_attention_layernorm.weight": src[a + "post_attention_layernorm.weight"],
        }
    hf.load_state_dict(state, strict=True)
    if spec.tie_embeddings:
        hf.tie_weights()
    return _finish(hf, dtype, device)


@contextmanager
def count_calls(model: Any) -> Iterator[list[int]]:
    """Count the forward passes of ``model`` inside the block (a hook; kept out of timed runs)."""
    n = [0]
    handle = model.register_forward_hook(lambda *_: n.__setitem__(0, n[0] + 1))
    try:
        yield n
    finally:
        handle.remove()


def _set_schedule(assistant: Any, gamma: int | str) -> None:
    gc = assistant.generation_config
    gc.assistant_confidence_threshold = 0.0  # drafts exactly gamma tokens (no early stop, no self-tuning)
    if gamma == "heuristic":
        gc.num_assistant_tokens_schedule = "heuristic"
        gc.num_assistant_tokens = 5  # Hugging Face's default start
    else:
        gc.num_assistant_tokens_schedule = "constant"
        gc.num_assistant_tokens = int(gamma)


def generate(
    model: Any,
    prompts: list[list[int]],
    max_new_tokens: int,
    *,
    assistant: Any = None,
    gamma: int | str = 0,
    count: bool = False,
    clock: Clock = time.perf_counter,
) -> FrameworkRun:
    """One ``generate`` call, greedy, exactly ``max_new_tokens`` per sequence; ``clock`` seconds around it.

    With ``assistant`` it is assisted generation at ``gamma`` (an int or ``"heuristic"``);
    ``count=True`` also counts the target's passes (the rounds: each verifies a draft, the first
    also prefills) and the assistant's (the draft passes) with forward hooks, so time another call.
    """
    if assistant is not None and len(prompts) != 1:
        raise SpecroofError(f"Hugging Face assisted generation decodes batch 1 only (got batch {len(prompts)})")
    dev = model.device
    ids = torch.as_tensor(prompts, device=dev)
    kw: dict[str, Any] = dict(
        max_new_tokens=max_new_tokens,
        min_new_tokens=max_new_tokens,
        do_sample=False,
        attention_mask=torch.ones_like(ids),
        pad_token_id=0,
    )
    if assistant is not None:
        _set_schedule(assistant, gamma)
        kw["assistant_model"] = assistant
    rounds = drafts = 0
    with torch.no_grad():
        if count:
            with count_calls(model) as nt, count_calls(assistant if assistant is not None else model) as nd:
                out = model.generate(ids, **kw)
            rounds, drafts = (nt[0], nd[0]) if assistant is not None else (0, 0)
            seconds = float("nan")
        else:
            out, seconds = timed(lambda: model.generate(ids, **kw), dev, clock)
    return FrameworkRun(out[:, ids.shape[1] :].tolist(), seconds, rounds=rounds, draft_passes=drafts)

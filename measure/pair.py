"""A real draft/target pair that works offline: byte-level models trained on the Python standard library.

A pair that needs no download, so measurements run anywhere (offline machines, CI),
made reproducibly: a small byte-level Llama-style target trained on the source
of the standard library (every machine has it), with an early-exit loss after
its first layer so that layer drafts usefully (LayerSkip-style), and a one-layer
draft distilled from the target's distribution. The default pair's weights ship
with the package; other configurations are trained on first use and cached under
``~/.cache/specroof`` (or ``SPECROOF_CACHE``).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sysconfig
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from measure.models import TORCH_DTYPES, Transformer
from roofline.core.errors import SpecroofError
from roofline.passes.model import ModelSpec

VERSION = "pair-v1"


@dataclass(frozen=True)
class PairConfig:
    """Sizes and training budget of the offline pair (defaults build in a few minutes on 2 cores)."""

    target_layers: int = 4
    target_dim: int = 256
    draft_layers: int = 1
    draft_dim: int = 128
    exit_layer: int = 1
    seq_len: int = 128
    batch: int = 16
    target_steps: int = 700
    draft_steps: int = 400
    lr: float = 3e-3
    seed: int = 0
    corpus_bytes: int = 4_000_000

    def target_spec(self) -> ModelSpec:
        h = self.target_dim // 64
        return ModelSpec(
            "pair-target", self.target_layers, self.target_dim, h, h, 64, 3 * self.target_dim, 256, max_context=2048
        )

    def draft_spec(self) -> ModelSpec:
        h = max(1, self.draft_dim // 64)
        return ModelSpec(
            "pair-draft", self.draft_layers, self.draft_dim, h, h, 64, 3 * self.draft_dim, 256, max_context=2048
        )


def corpus(limit: int = 4_000_000) -> tuple[np.ndarray, np.ndarray]:
    """Bytes of the standard library's .py files (sorted, so reproducible): (train, held-out last 5%)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    chunks, total = [], 0
    for f in sorted(root.glob("*.py")):
        b = f.read_bytes()
        chunks.append(b)
        total += len(b)
        if total >= limit:
            break
    data = np.frombuffer(b"\n".join(chunks)[:limit], dtype=np.uint8)
    cut = int(len(data) * 0.95)
    return data[:cut], data[cut:]


def _batches(data: np.ndarray, cfg: PairConfig, gen: np.random.Generator) -> torch.Tensor:
    starts = gen.integers(0, len(data) - cfg.seq_len - 1, cfg.batch)
    return torch.as_tensor(np.stack([data[s : s + cfg.seq_len + 1] for s in starts]).astype(np.int64))


def _cosine(step: int, total: int, lr: float) -> float:
    warm = max(1, total // 20)
    if step < warm:
        return lr * (step + 1) / warm
    return lr * 0.5 * (1 + math.cos(math.pi * (step - warm) / max(1, total - warm)))


def _train(
    model: Transformer,
    steps: int,
    cfg: PairConfig,
    next_batch: Callable[[], torch.Tensor],
    loss_fn: Callable[[torch.Tensor], tuple[torch.Tensor, str]],
    clip: float | None,
    log: Callable[[str], None] | None,
) -> float:
    """AdamW with a cosine schedule over ``steps`` batches; ``loss_fn`` gives the loss and a log line. Seconds."""
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.01)
    t0 = time.perf_counter()
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = _cosine(step, steps, cfg.lr)
        loss, line = loss_fn(next_batch())
        opt.zero_grad()
        loss.backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        if log and step % 100 == 0:
            log(f"step {step}: {line}")
    return time.perf_counter() - t0


def train_pair(
    cfg: PairConfig = PairConfig(), log: Callable[[str], None] | None = None
) -> tuple[Transformer, Transformer, dict]:
    """Train the target (with an early-exit loss) and distil the draft; returns both and training stats."""
    torch.manual_seed(cfg.seed)
    gen = np.random.default_rng(cfg.seed)
    train, held = corpus(cfg.corpus_bytes)

    def next_batch() -> torch.Tensor:
        return _batches(train, cfg, gen)

    target = Transformer(cfg.target_spec(), dtype="fp32")

    def target_loss(xy: torch.Tensor) -> tuple[torch.Tensor, str]:
        logits, early = target.forward_train(xy[:, :-1], exit_layer=cfg.exit_layer)
        loss = F.cross_entropy(logits.reshape(-1, 256), xy[:, 1:].reshape(-1))
        loss_early = F.cross_entropy(early.reshape(-1, 256), xy[:, 1:].reshape(-1))  # type: ignore[union-attr]
        return loss + 0.3 * loss_early, f"target loss {loss.item():.3f} nats/byte, early exit {loss_early.item():.3f}"

    target_s = _train(target, cfg.target_steps, cfg, next_batch, target_loss, 1.0, log)
    draft = Transformer(cfg.draft_spec(), dtype="fp32")

    def draft_loss(xy: torch.Tensor) -> tuple[torch.Tensor, str]:
        with torch.no_grad():
            teacher = F.log_softmax(target.forward_train(xy[:, :-1])[0], -1)
        student = F.log_softmax(draft.forward_train(xy[:, :-1])[0], -1)
        loss = F.kl_div(student, teacher, log_target=True, reduction="batchmean") / cfg.seq_len
        return loss, f"draft KL to target {loss.item():.3f}"

    draft_s = _train(draft, cfg.draft_steps, cfg, next_batch, draft_loss, None, log)
    stats = {"target_train_s": target_s, "draft_train_s": draft_s, "held_out": held_out_loss(target, draft, held, cfg)}
    return target.eval(), draft.eval(), stats


@torch.no_grad()
def held_out_loss(target: Transformer, draft: Transformer, held: np.ndarray, cfg: PairConfig) -> dict[str, float]:
    """Cross-entropy (nats/byte) of target, early exit and draft on held-out text."""
    xy = torch.as_tensor(
        np.stack([held[i : i + cfg.seq_len + 1] for i in range(0, 32 * cfg.seq_len, cfg.seq_len)]).astype(np.int64)
    )
    full, early = target.forward_train(xy[:, :-1], exit_layer=cfg.exit_layer)
    d = draft.forward_train(xy[:, :-1])[0]
    y = xy[:, 1:].reshape(-1)
    return {
        "target": F.cross_entropy(full.reshape(-1, 256), y).item(),
        "early_exit": F.cross_entropy(early.reshape(-1, 256), y).item(),  # type: ignore[union-attr]
        "draft": F.cross_entropy(d.reshape(-1, 256), y).item(),
    }


#: The default pair, built by ``train_pair(PairConfig())`` and shipped in bf16 (about 7 MB).
SHIPPED = Path(__file__).with_name("pair_weights")


def cache_dir() -> Path:
    return Path(os.environ.get("SPECROOF_CACHE", Path.home() / ".cache" / "specroof")) / VERSION


def _save(model: Transformer, path: Path) -> None:
    from safetensors.torch import save_file

    state = {
        k: v.contiguous()
        for k, v in model.state_dict().items()
        if k != "lm_head.weight" or not model.spec.tie_embeddings
    }
    save_file(state, str(path))


def ship(source: Path, dest: Path = SHIPPED) -> None:
    """Copy a built pair into the package in bf16 (halves the size; decoding upcasts as asked)."""
    from safetensors.torch import load_file, save_file

    dest.mkdir(parents=True, exist_ok=True)
    for name in ("target", "draft"):
        state = load_file(str(source / f"{name}.safetensors"))
        save_file({k: v.to(torch.bfloat16).contiguous() for k, v in state.items()}, str(dest / f"{name}.safetensors"))
    (dest / "meta.json").write_text((source / "meta.json").read_text())


def _load(spec: ModelSpec, path: Path, device: str | torch.device, dtype: str) -> Transformer:
    from safetensors.torch import load_file

    m = Transformer(spec, dtype="fp32", init_std=None)
    m.load_state_dict({k: v.float() for k, v in load_file(str(path)).items()})
    m = m.to(device=device, dtype=TORCH_DTYPES[dtype])
    m.device_, m.dtype = torch.device(device), TORCH_DTYPES[dtype]
    return m.eval()


def load_pair(
    cfg: PairConfig = PairConfig(),
    *,
    device: str | torch.device = "cpu",
    dtype: str = "fp32",
    rebuild: bool = False,
    cache: Path | None = None,
    log: Callable[[str], None] | None = None,
    width: int = 1,
) -> tuple[Transformer, Transformer, dict]:
    """The pair: the weights shipped in the package for the default config; another config is trained once and cached.

    ``width`` > 1 returns the target widened that many times (:func:`widen`): the same
    function, memory bound on a CPU from 16 (1.75 GB in bf16) on.
    """
    if cache is None and not rebuild and cfg == PairConfig() and (SHIPPED / "meta.json").exists():
        cache = SHIPPED
    folder = cache or cache_dir()
    meta_path = folder / "meta.json"
    if rebuild or not meta_path.exists() or json.loads(meta_path.read_text()).get("config") != asdict(cfg):
        folder.mkdir(parents=True, exist_ok=True)
        target, draft, stats = train_pair(cfg, log)
        _save(target, folder / "target.safetensors")
        _save(draft, folder / "draft.safetensors")
        meta_path.write_text(json.dumps({"config": asdict(cfg), "stats": stats, "version": VERSION}, indent=2))
    meta = json.loads(meta_path.read_text())
    target = _load(cfg.target_spec(), folder / "target.safetensors", device, "fp32" if width > 1 else dtype)
    draft = _load(cfg.draft_spec(), folder / "draft.safetensors", device, dtype)
    if width > 1:
        target = widen(target, width, dtype=dtype)
    return target, draft, meta["stats"]


def widened_spec(spec: ModelSpec, factor: int) -> ModelSpec:
    """The shape :func:`widen` gives ``spec`` (``factor`` x every width, untied head)."""
    if factor < 1 or factor & (factor - 1):
        raise SpecroofError(f"the widening factor must be a power of two (got {factor})")
    if spec.is_moe or spec.mlp_kind != "swiglu":
        raise SpecroofError("widen() handles dense SwiGLU models only")
    return dataclasses.replace(
        spec,
        name=f"{spec.name}-x{factor}",
        d_model=spec.d_model * factor,
        n_heads=spec.n_heads * factor,
        n_kv_heads=spec.n_kv_heads * factor,
        d_ff=spec.d_ff * factor,
        tie_embeddings=False,
    )


def widen(model: Transformer, factor: int, *, dtype: str = "bf16") -> Transformer:
    """The same function at ``factor`` x the width: a memory-bound twin of a small trained model.

    Net2Net-style exact widening: the residual stream is tiled ``factor`` times (RMSNorm's
    mean square is unchanged by tiling), every head and every MLP neuron is duplicated
    ``factor`` times, and each weight that reads a tiled input is divided by ``factor``,
    so every layer's output is the original output, tiled. Division by a power of two is
    exact in binary floating point; only the order of the now longer sums changes, so
    logits agree with the small model's to rounding. The widened model streams
    ``factor**2`` x the layer weights per pass: on a CPU whose last-level cache holds the
    small pair, it makes the target memory bound while keeping the trained behaviour
    (and so the draft's acceptance) of the pair.
    """
    s, k = model.spec, factor
    wide = widened_spec(s, k)
    hd = s.head_dim
    src = {name: p.detach().float() for name, p in model.state_dict().items()}

    def tile_in(w: torch.Tensor) -> torch.Tensor:  # reads a tiled input: divide, then repeat columns
        return (w / k).repeat(1, k)

    def tile_heads(w: torch.Tensor, heads: int) -> torch.Tensor:  # (heads*hd, d) -> (k*heads*hd, k*d)
        return tile_in(w).view(heads, hd, -1).repeat(k, 1, 1).reshape(k * heads * hd, -1)

    state: dict[str, torch.Tensor] = {
        "embed_tokens.weight": src["embed_tokens.weight"].repeat(1, k),
        "norm.weight": src["norm.weight"].repeat(k),
        "lm_head.weight": tile_in(src["lm_head.weight"]),
    }
    h, kv = s.n_heads, s.n_kv_heads
    for i in range(s.n_layers):
        pre = f"layers.{i}."
        w = src[pre + "self_attn.wqkv.weight"]
        q, kk, v = w.split([h * hd, kv * hd, kv * hd])
        state[pre + "self_attn.wqkv.weight"] = torch.cat([tile_heads(q, h), tile_heads(kk, kv), tile_heads(v, kv)])
        if s.qkv_bias:
            b = src[pre + "self_attn.wqkv.bias"]
            bq, bk, bv = b.split([h * hd, kv * hd, kv * hd])
            state[pre + "self_attn.wqkv.bias"] = torch.cat([bq.repeat(k), bk.repeat(k), bv.repeat(k)])
        state[pre + "self_attn.o_proj.weight"] = tile_in(src[pre + "self_attn.o_proj.weight"]).repeat(k, 1)
        gate, up = src[pre + "mlp.w13.weight"].chunk(2)
        state[pre + "mlp.w13.weight"] = torch.cat([tile_in(gate).repeat(k, 1), tile_in(up).repeat(k, 1)])
        state[pre + "mlp.down_proj.weight"] = tile_in(src[pre + "mlp.down_proj.weight"]).repeat(k, 1)
        for norm in ("input_layernorm", "post_attention_layernorm"):
            state[pre + norm + ".weight"] = src[pre + norm + ".weight"].repeat(k)
    eps = model.norm.eps
    out = Transformer(wide, dtype=dtype, device=model.device, rope=model.rope, norm_eps=eps, init_std=None)
    out.load_state_dict({name: t.to(out.dtype) for name, t in state.items()})
    del state, src
    return out.eval()


def held_out_prompts(n: int, length: int = 64, seed: int = 0) -> list[list[int]]:
    """``n`` prompts of ``length`` bytes from the held-out text (never seen in training)."""
    _, held = corpus()
    gen = np.random.default_rng(seed)
    starts = gen.integers(0, len(held) - length - 1, n)
    return [held[s : s + length].astype(int).tolist() for s in starts]

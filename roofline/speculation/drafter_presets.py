"""Published drafters of the preset targets, by name: EAGLE-3 heads and DFlash block drafters.

A row names the draft checkpoint (its Hugging Face id), the preset target it was trained for and its method. A
DFlash row also carries the draft network's shape and block size as its ``config.json`` gives them, so
``--drafter dflash`` on that target (or ``--drafter dflash:ID``) prices the real drafter instead of a hand-written
config and a guessed block. A row without a shape names a checkpoint whose config was not read here: its shape comes
from the Hugging Face cache or hub (``roofline.passes.model.get_model`` of its id), as any id does.

MTP modules are not listed: they live in the target's own checkpoint (``ModelSpec.mtp_modules``, read from
``num_nextn_predict_layers`` / ``num_mtp_modules``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from roofline.core.errors import SpecroofError
from roofline.passes.model import ModelSpec, get_model


@dataclass(frozen=True)
class PublishedDrafter:
    """One published draft checkpoint: ``repo`` (its Hugging Face id) for the preset ``target``, by ``method``."""

    repo: str
    target: str
    method: str  # "eagle3" | "dflash" | "dspark"
    source: str
    spec: ModelSpec | None = None  # the draft network's shape, where its config.json was read
    block_size: int = (
        0  # DFlash: positions per block (config.json ``block_size``): the anchor and block_size - 1 drafts
    )


def _dflash_qwen3(repo: str, L: int, d: int, H: int, kv: int, ff: int) -> ModelSpec:
    """A DFlash draft stack of Qwen3 layers (``model_type`` qwen3, ``architectures`` DFlashDraftModel). It reads the
    target's embedding and LM head (tied here, so the head is counted once) and conditions on the target's hidden
    states through ``fc``; ``fc``'s weights (one d x d per tapped layer) are left out of the count."""
    return ModelSpec(repo, L, d, H, kv, 128, ff, 151936, max_context=40960, tie_embeddings=True)


def _dflash_qwen3_5(repo: str, L: int, d: int, H: int, kv: int, ff: int, *, sliding: int = 0) -> ModelSpec:
    """A DFlash draft stack for a Qwen3.5 target: ``L`` Qwen3 layers (heads of 128, the 248320-token vocabulary, 262144
    positions), ``sliding`` of them attending over a window of 4096 (config.json ``layer_types`` and
    ``sliding_window``). As for the Qwen3 drafters, the target's embedding and LM head are what it reads (counted once:
    tied here, whatever the config's flag) and ``fc`` (one d x d per tapped layer) is left out of the count."""
    return ModelSpec(
        repo, L, d, H, kv, 128, ff, 248320, max_context=262144, tie_embeddings=True,
        sliding_window=4096 if sliding else 0, n_sliding_layers=sliding,
    )  # fmt: skip


def _dspark(target: str, repo: str, checked: str = "") -> PublishedDrafter:
    """DeepSeek-V4's DSpark draft stage, which ships in the target's own checkpoint: three window-only MoE layers of
    the target's shape that read its embedding and LM head (counted once), one pass per block of 5
    (``dspark_block_size``; docs/cost-model.md, section 58)."""
    source = f"the DSpark paper (section 5.1) and the {repo.split('/')[1]} config.json: three window-only MoE layers "
    spec = get_model(target).one_layer(repo, n_layers=3, tie_embeddings=True)
    return PublishedDrafter(repo, target, "dspark", source + "of the target's shape" + checked, spec=spec, block_size=5)


PUBLISHED_DRAFTERS: tuple[PublishedDrafter, ...] = (
    PublishedDrafter(
        "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "llama-3.1-8b", "eagle3", "the EAGLE authors' EAGLE-3 head"
    ),
    PublishedDrafter(
        "yuhuili/EAGLE3-LLaMA3.3-Instruct-70B", "llama-3.3-70b", "eagle3", "the EAGLE authors' EAGLE-3 head"
    ),
    # Red Hat AI's EAGLE-3 heads in the speculators format (vLLM loads them as method eagle3)
    PublishedDrafter("RedHatAI/Qwen3-8B-speculator.eagle3", "qwen3-8b", "eagle3", "Red Hat AI's EAGLE-3 head"),
    PublishedDrafter("RedHatAI/Qwen3-32B-speculator.eagle3", "qwen3-32b", "eagle3", "Red Hat AI's EAGLE-3 head"),
    PublishedDrafter(
        "lmsys/SGLang-EAGLE3-Qwen3-Coder-480B-A35B-Instruct-SpecForge-EigenAI",
        "qwen3-coder-480b-a35b",
        "eagle3",
        "LMSYS SpecForge's EAGLE-3 head",
    ),
    # z-lab/Qwen3-8B-DFlash-b16 config.json: 5 Qwen3 layers of the target's width (hidden 4096, intermediate 12288,
    # 32 query / 8 KV heads of 128), block_size 16, dflash_config.target_layer_ids [1, 9, 17, 25, 33]
    PublishedDrafter(
        "z-lab/Qwen3-8B-DFlash-b16",
        "qwen3-8b",
        "dflash",
        "z-lab/Qwen3-8B-DFlash-b16 config.json",
        spec=_dflash_qwen3("z-lab/Qwen3-8B-DFlash-b16", 5, 4096, 32, 8, 12288),
        block_size=16,
    ),  # fmt: skip
    # z-lab/Qwen3-Coder-30B-A3B-DFlash config.json, as a public copy reads it (ZinYY/AdaFlash,
    # configs/qwen3-coder-30b-dflash.json, which its scripts load beside this id): DFlashDraftModel, 8 Qwen3 layers of
    # 2048 (MLP 6144, 32 query / 4 KV heads of 128), all full attention, block_size 16, target_layer_ids
    # [1, 12, 23, 34, 45] of the 48-layer target. 8 layers and fc are 0.47B, 0.95 GB in BF16: the 0.88 GiB of
    # safetensors a public manifest lists for it. (The shape had first been derived, section 53; the copy confirms it.)
    PublishedDrafter(
        "z-lab/Qwen3-Coder-30B-A3B-DFlash",
        "qwen3-coder-30b-a3b",
        "dflash",
        "z-lab/Qwen3-Coder-30B-A3B-DFlash config.json (a public copy): 8 Qwen3 layers of 2048, block 16; 0.47B, "
        "the published 0.88 GiB in BF16",
        spec=ModelSpec(
            "z-lab/Qwen3-Coder-30B-A3B-DFlash",
            8,
            2048,
            32,
            4,
            128,
            6144,
            151936,
            max_context=262144,
            tie_embeddings=True,
        ),
        block_size=16,
    ),  # fmt: skip
    # z-lab/Qwen3-4B-DFlash-b16 config.json, as public copies read it (a training script that embeds it, an Ascend
    # port that says it matches it): 5 Qwen3 layers of 2560 (MLP 9728, 32 query / 8 KV heads of 128), block_size 16,
    # target_layer_ids [1, 9, 17, 25, 33] of the 36-layer target; 0.54B with fc, the 1.00 GiB of safetensors listed
    PublishedDrafter(
        "z-lab/Qwen3-4B-DFlash-b16",
        "qwen3-4b",
        "dflash",
        "z-lab/Qwen3-4B-DFlash-b16 config.json (public copies): 5 Qwen3 layers of 2560, block 16",
        spec=_dflash_qwen3("z-lab/Qwen3-4B-DFlash-b16", 5, 2560, 32, 8, 9728),
        block_size=16,
    ),
    # -- the Qwen3.5 family's DFlash drafters (z-lab/dflash README.md: 4B, 9B, 27B, 35B-A3B, 122B-A10B; 397B-A17B
    # "coming soon"), block 16 each. Their layer counts, widths and taps come from config.json copies where one was
    # read, else from public reimplementations that load these exact checkpoints; each checked against its published
    # file size in BF16 (layers + fc; docs/cost-model.md, section 53) --
    # z-lab/Qwen3.5-4B-DFlash config.json (a verbatim public copy, 2026-08): 6 layers of 2560 (MLP 9216, 32 query /
    # 8 KV heads of 128), the first 5 sliding over 4096 tokens, block_size 16, target_layer_ids [1, 5, 9, ..., 29]
    # (8 taps); 634.4M parameters with fc, as a public count of its tensors gives. (An earlier revision, which a
    # DFlash benchmark README describes, tapped [1, 8, 15, 22, 29] with block 16.)
    PublishedDrafter(
        "z-lab/Qwen3.5-4B-DFlash",
        "qwen3.5-4b",
        "dflash",
        "z-lab/Qwen3.5-4B-DFlash config.json",
        spec=_dflash_qwen3_5("z-lab/Qwen3.5-4B-DFlash", 6, 2560, 32, 8, 9216, sliding=5),
        block_size=16,
    ),
    # z-lab/Qwen3.5-9B-DFlash: as its config.json and safetensors read in unverbraucht/hipfire
    # docs/DFLASH_ARCHITECTURE.md: 5 layers of 4096 (MLP 12288, 32 / 8 heads of 128), all full attention, block 16,
    # taps [1, 8, 15, 22, 29] of the 32-layer target; 58 tensors, 2.1 GB in BF16 (1.05B parameters with fc)
    PublishedDrafter(
        "z-lab/Qwen3.5-9B-DFlash",
        "qwen3.5-9b",
        "dflash",
        "z-lab/Qwen3.5-9B-DFlash config.json (as a public port reads it)",
        spec=_dflash_qwen3_5("z-lab/Qwen3.5-9B-DFlash", 5, 4096, 32, 8, 12288),
        block_size=16,
    ),
    # z-lab/Qwen3.5-27B-DFlash: its shape as Luce-Org's lucebox-hub DFlash runtime loads its BF16 safetensors
    # (dflash/include/dflash27b.h) and as a public Rust port quotes its config.json ("Reference config"): 5 layers of
    # 5120 (MLP 17408, 32 / 8 heads of 128), block 16, taps [1, 16, 31, 46, 61], all full attention (the same-shaped
    # Qwen3.6-27B drafter slides 4 of its 5 layers; this one does not). That is 1.73B parameters with fc, 3.46 GB in BF16: the published
    # 3.46 GB (3.22 GiB of safetensors)
    PublishedDrafter(
        "z-lab/Qwen3.5-27B-DFlash",
        "qwen3.5-27b",
        "dflash",
        "a public loader of this checkpoint and a quoted copy of its config.json: 5 layers of 5120, block 16; its "
        "1.73B parameters are the published 3.46 GB in BF16",
        spec=_dflash_qwen3_5("z-lab/Qwen3.5-27B-DFlash", 5, 5120, 32, 8, 17408),
        block_size=16,
    ),
    # z-lab/Qwen3.5-35B-A3B-DFlash config.json (a public copy in a DFlash backend's tests, "the published config"):
    # 8 layers of 2048 (MLP 6144, 32 query / 4 KV heads of 128), all full attention, block_size 16, target_layer_ids
    # [1, 10, 19, 28, 37] of the 40-layer target; 0.47B parameters with fc (no published size was found to check)
    PublishedDrafter(
        "z-lab/Qwen3.5-35B-A3B-DFlash",
        "qwen3.5-35b-a3b",
        "dflash",
        "z-lab/Qwen3.5-35B-A3B-DFlash config.json (a public copy)",
        spec=_dflash_qwen3_5("z-lab/Qwen3.5-35B-A3B-DFlash", 8, 2048, 32, 4, 6144),
        block_size=16,
    ),
    # z-lab/Qwen3.5-122B-A10B-DFlash config.json (a trimmed public copy in a C++ runtime's tests): 6 layers of 3072
    # (MLP 9216, 32 / 8 heads of 128), use_sliding_window with a window of 4096, block_size 16, target_layer_ids
    # [1, 7, 14, 20, 26, 32, 39, 45]. The copy drops layer_types, so every layer is priced as full attention (an upper
    # bound on its context reads). 0.77B parameters with fc: the published 1.5 GB in BF16
    PublishedDrafter(
        "z-lab/Qwen3.5-122B-A10B-DFlash",
        "qwen3.5-122b-a10b",
        "dflash",
        "z-lab/Qwen3.5-122B-A10B-DFlash config.json (a trimmed public copy: layer_types not given, all layers priced "
        "as full attention)",
        spec=_dflash_qwen3_5("z-lab/Qwen3.5-122B-A10B-DFlash", 6, 3072, 32, 8, 9216),
        block_size=16,
    ),
    # published by z-lab beside it (the DFlash README's model list); their config.json was not read here
    PublishedDrafter(
        "z-lab/LLaMA3.1-8B-Instruct-DFlash-UltraChat", "llama-3.1-8b", "dflash", "z-lab DFlash model list"
    ),
    PublishedDrafter("z-lab/gpt-oss-20b-DFlash", "gpt-oss-20b", "dflash", "z-lab DFlash model list"),
    PublishedDrafter("z-lab/gpt-oss-120b-DFlash", "gpt-oss-120b", "dflash", "z-lab DFlash model list"),
    PublishedDrafter("z-lab/Kimi-K2.5-DFlash", "kimi-k2.5", "dflash", "z-lab DFlash model list"),
    # -- DeepSeek-V4's DSpark drafters (docs/cost-model.md, section 58): the draft stage ships in the target's own
    # checkpoint (deepseek-ai/DeepSeek-V4-Pro-DSpark, -Flash-DSpark; config.json dspark_block_size 5,
    # dspark_target_layer_ids the last three layers), "three MoE layers with mHC and a sliding window attention of
    # 128" (the DSpark paper, section 5.1) that share the target's embedding and LM head: a block drafter of three
    # window-only layers of the target's shape, one pass for the block. Its Markov head (rank 512 / 256) and
    # confidence head are left out (a few hundred million weights); adaptive verification is not priced --
    _dspark(
        "deepseek-v4-pro", "deepseek-ai/DeepSeek-V4-Pro-DSpark", "; 889 GB with the target, the checkpoint's 892.7 GB"
    ),
    _dspark("deepseek-v4-flash", "deepseek-ai/DeepSeek-V4-Flash-DSpark"),
)

_BY_REPO = {p.repo.lower(): p for p in PUBLISHED_DRAFTERS}


def published(target: str, method: str) -> PublishedDrafter | None:
    """The published ``method`` drafter of the preset ``target`` (its first row), or None."""
    t = str(target).strip().lower()
    return next((p for p in PUBLISHED_DRAFTERS if p.target == t and p.method == method), None)


def draft_repos() -> dict[tuple[str, str], str]:
    """(preset target, method) -> draft checkpoint id, for the engine flags (``--speculative-draft-model-path``)."""
    out: dict[tuple[str, str], str] = {}
    for p in PUBLISHED_DRAFTERS:
        out.setdefault((p.target, p.method), p.repo)
    return out


def _block_size(spec: ModelSpec, row: PublishedDrafter | None, source: Any) -> int:
    if row is not None and row.block_size:
        return row.block_size
    return 0 if source is None else _config_block_size(source)


def _config_block_size(path: Any) -> int:
    """``block_size`` of a DFlash config.json (top level, or under ``dflash_config``), 0 when absent."""
    import json
    from pathlib import Path

    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    try:
        data = json.loads(p.read_text())
    except (OSError, ValueError):
        return 0
    if not isinstance(data, dict):
        return 0
    inner = data.get("dflash_config")
    value = data.get("block_size", inner.get("block_size") if isinstance(inner, dict) else None)
    return int(value) if isinstance(value, int) and not isinstance(value, bool) and value > 1 else 0


def dflash(name: str, target: Any = None) -> tuple[ModelSpec, int, str]:
    """The DFlash drafter ``name`` names, as (its draft network, its block size or 0, its label): ``dflash`` (the
    target's published one), ``dflash:ID`` (a published id, or any Hugging Face id or config.json path of a DFlash
    draft), or a published DFlash id on its own. :func:`roofline.speculation.drafters.as_drafter` makes the block drafter."""
    text = name.strip()
    kind, sep, arg = text.partition(":")
    arg = arg.strip() if sep else ("" if kind.lower() == "dflash" else text)
    if not arg:
        tname = getattr(target, "name", target)
        row = published(str(tname), "dflash") if tname is not None else None
        if row is None:
            have = ", ".join(sorted({p.target for p in PUBLISHED_DRAFTERS if p.method == "dflash"}))
            where = f"for --target {tname}" if tname is not None else "without a --target"
            raise SpecroofError(
                f"no published DFlash drafter {where}: published for {have}; or name one with "
                "--drafter dflash:ID_OR_CONFIG (a Hugging Face id or a config.json path)"
            )
        arg = row.repo
    row = _BY_REPO.get(arg.lower())
    if row is not None and row.spec is not None:
        spec, source = row.spec, None
    else:
        spec = get_model(arg)
        from roofline.passes.model import cached_hf_config

        source = cached_hf_config(arg) if "/" in arg and not arg.endswith(".json") else arg
    size = _block_size(spec, row, source)
    label = f"dflash {spec.name}" + (f" (block {size})" if size else "")
    return spec, size, label


def is_dflash_name(key: str) -> bool:
    """Whether a drafter name (lower-cased) asks for a DFlash drafter: ``dflash``, ``dflash:...`` or a published id."""
    k = key.strip()
    return k == "dflash" or k.startswith("dflash:") or (k in _BY_REPO and _BY_REPO[k].method == "dflash")


def published_spec(name: str) -> ModelSpec | None:
    """The draft network of a published drafter id whose shape is listed here (``block:z-lab/...-DFlash`` prices it
    without the hub), or None."""
    row = _BY_REPO.get(str(name).strip().lower())
    return row.spec if row is not None else None

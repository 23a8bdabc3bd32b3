"""An engine setting as the launch flags that deploy it (:func:`emit_flags`), and back (:func:`read_engine_config`):
SGLang's server flags, vLLM's ``--speculative-config`` JSON, TensorRT-LLM's ``speculative_config`` block, and the
whole launch lines around them (docs/cost-model.md, sections 9 and 30).

One module despite its length: the flags out (:func:`emit_flags`) and in (:func:`read_engine_config`) are two
directions of one mapping over the same option tables, so a new option is added to both at once.

Option names are the engines' own (read in sgl-project/sglang
``python/sglang/srt/server_args.py``; vllm-project/vllm ``vllm/config/speculative.py``;
NVIDIA/TensorRT-LLM ``tensorrt_llm/llmapi/llm_args.py`` ``EagleDecodingConfig``,
``Eagle3DecodingConfig``, ``MTPDecodingConfig``). Every constraint an engine checks at
start-up is checked by :class:`roofline.speculation.engine_trees.EngineSetting` when the setting is
made, so what this module prints is a setting the engine takes.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from roofline.core.errors import SpecroofError
from roofline.core.validation import check_tp
from roofline.passes.model import ModelSpec, get_model, hf_id
from roofline.speculation.drafter_presets import draft_repos
from roofline.speculation.engine_trees import FRAMEWORKS, EngineSetting

#: Hugging Face repositories of preset targets, as the EAGLE checkpoints below were trained for
#: (the target and draft ids vLLM's own tests pair: vllm-project/vllm tests/v1/spec_decode/test_eagle.py)
TARGET_REPOS = {"llama-3.1-8b": "meta-llama/Llama-3.1-8B-Instruct"}

#: public draft checkpoints per (preset target, drafter): EAGLE-2 runs EAGLE-1's weights with a dynamic tree
DRAFT_REPOS = {
    ("llama-3.1-8b", "eagle"): "yuhuili/EAGLE-LLaMA3.1-Instruct-8B",
    ("llama-3.1-8b", "eagle2"): "yuhuili/EAGLE-LLaMA3.1-Instruct-8B",
    ("llama-3.1-8b", "eagle3"): "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
} | {k: v for k, v in draft_repos().items() if k[1] in ("eagle3", "dflash")}  # the presets' published heads, blocks

#: each engine's name for a drafter: SGLang --speculative-algorithm, vLLM "method", TensorRT-LLM decoding_type
#: (a separate draft model: SGLang STANDALONE, vLLM draft_model, TensorRT-LLM DraftTarget; n-gram lookup:
#: SGLang NGRAM, vLLM ngram, TensorRT-LLM NGram; a DFlash block drafter: SGLang DFLASH, vLLM dflash, none in
#: TensorRT-LLM; sgl-project/sglang docs/advanced_features/speculative_decoding.md, vllm-project/vllm
#: docs/features/spec_decode)
_METHODS = {
    "sglang": {
        "eagle": "EAGLE",
        "eagle2": "EAGLE",
        "eagle3": "EAGLE3",
        "mtp": "NEXTN",
        "model": "STANDALONE",
        "prompt-lookup": "NGRAM",
        "dflash": "DFLASH",
    },
    "vllm": {
        "eagle": "eagle",
        "eagle2": "eagle",
        "eagle3": "eagle3",
        "mtp": "mtp",
        "model": "draft_model",
        "prompt-lookup": "ngram",
        "medusa": "medusa",
        "dflash": "dflash",
    },
    "trtllm": {
        "eagle": "Eagle",
        "eagle2": "Eagle",
        "eagle3": "Eagle3",
        "mtp": "MTP",
        "model": "DraftTarget",
        "prompt-lookup": "NGram",
        "medusa": "Medusa",
    },
}
#: drafters whose proposals need no checkpoint of their own
_NO_DRAFT_CHECKPOINT = {"mtp", "prompt-lookup"}


def _name(value: Any) -> str:
    return str(getattr(value, "name", value)).strip()


def _convert(setting: EngineSetting, engine: str) -> EngineSetting:
    """The same round under another engine's knobs; only chains mean the same thing everywhere."""
    if engine == setting.framework:
        return setting
    if not setting.is_chain:
        raise SpecroofError(
            f"a {setting.framework} tree ({setting.label}) has no {engine} equivalent: plan with that engine instead"
        )
    return EngineSetting(engine, setting.num_steps, 1, setting.num_steps + 1)


def knobs_for(setting: EngineSetting, drafter: Any) -> dict[str, Any]:
    """``setting`` under the engine's own option names for ``drafter``: SGLang's DFLASH takes its round as one
    ``speculative_dflash_block_size`` (its argument check overrides the tree knobs); every other drafter, the
    setting's own knobs."""
    if setting.framework == "sglang" and _name(drafter).lower().split(":")[0] == "dflash":
        if not setting.is_chain:
            raise SpecroofError("SGLang's DFLASH verifies one block, a chain: give a chain setting")
        return {"speculative_dflash_block_size": setting.num_draft_tokens}
    return setting.knobs()


def emit_flags(
    setting: EngineSetting,
    engine: str | None = None,
    *,
    target: Any,
    drafter: Any,
    draft_model: str | None = None,
    target_model: str | None = None,
    tp: int | None = None,
) -> str:
    """The command line (SGLang, vLLM) or config file (TensorRT-LLM) that deploys ``setting``.

    ``engine`` defaults to the setting's own; a chain converts to any engine, a tree does
    not. ``target`` and ``drafter`` are specroof's names (``llama-3.1-8b``, ``eagle3``);
    ``target_model`` / ``draft_model`` are the checkpoints to load (Hugging Face ids or
    paths), looked up in :data:`TARGET_REPOS` / :data:`DRAFT_REPOS` when not given. An MTP
    drafter lives in the target's own checkpoint and needs no draft model. ``tp`` adds the
    engine's tensor-parallel flag (SGLang ``--tp-size``, vLLM ``--tensor-parallel-size``,
    TensorRT-LLM ``--tp_size``), which :func:`read_engine_config` reads back.
    """
    if not isinstance(setting, EngineSetting):
        raise SpecroofError(f"setting must be an EngineSetting (got {type(setting).__name__})")
    eng = setting.framework if engine is None else str(engine).strip().lower()
    if eng not in FRAMEWORKS:
        raise SpecroofError(f"unknown engine {engine!r} for --emit; choose one of {', '.join(FRAMEWORKS)}")
    s = _convert(setting, eng)
    t_name, d_name = _name(target), _name(drafter).lower()
    d_name = "eagle" if d_name == "eagle1" else d_name
    if d_name not in _METHODS[eng]:
        raise SpecroofError(f"drafter {d_name!r} has no {eng} method: use one of {', '.join(_METHODS[eng])}")
    model = target_model or TARGET_REPOS.get(t_name.lower()) or hf_id(t_name) or t_name
    draft = draft_model or (None if d_name in _NO_DRAFT_CHECKPOINT else DRAFT_REPOS.get((t_name.lower(), d_name)))
    if draft is None and d_name not in _NO_DRAFT_CHECKPOINT:
        raise SpecroofError(
            f"no known {d_name} draft checkpoint for target {t_name!r}: give --draft-model (a Hugging Face id or path)"
        )
    method = _METHODS[eng][d_name]
    if eng == "sglang":
        args = ["python", "-m", "sglang.launch_server", "--model-path", model, "--speculative-algorithm", method]
        if tp is not None:
            args[5:5] = ["--tp-size", str(tp)]
        if draft is not None:
            args += ["--speculative-draft-model-path", draft]
        for key, value in knobs_for(s, d_name).items():
            args += ["--" + key.replace("_", "-"), str(value)]
        return shlex.join(args)
    if eng == "vllm":
        config: dict[str, Any] = {"method": method}
        if draft is not None:
            config["model"] = draft
        config.update(s.knobs())
        if d_name == "prompt-lookup":  # the longest n-gram vLLM matches in the prompt (its docs' example value)
            config["prompt_lookup_max"] = 4
        args = ["vllm", "serve", model, "--speculative-config", json.dumps(config)]
        if tp is not None:
            args[3:3] = ["--tensor-parallel-size", str(tp)]
        if s.choices is not None:  # tree drafting runs on vLLM's tree attention backend only
            args += ["--attention-backend", "TREE_ATTN"]
        return shlex.join(args)
    # TensorRT-LLM reads speculative_config from the YAML given to trtllm-serve --extra_llm_api_options
    lines = ["speculative_config:", f"  decoding_type: {method}"]
    if d_name == "mtp":
        if not s.is_chain:
            raise SpecroofError("TensorRT-LLM's MTPDecodingConfig drafts a chain: give an MTP setting with topk 1")
        lines.append(f"  num_nextn_predict_layers: {s.num_steps}")
    else:
        lines += [f"  {k}: {str(v).lower() if isinstance(v, bool) else v}" for k, v in s.knobs().items()]
        if draft is not None:
            lines.append(f"  speculative_model: {draft}")
    serve = ["trtllm-serve", model, *(["--tp_size", str(tp)] if tp is not None else []), "--extra_llm_api_options"]
    head = f"# {shlex.join([*serve, 'speculative.yaml'])}"
    return "\n".join([head, *lines])


# -- knobs in: the engines' own configuration read back into a setting --------------------------------------------

#: each engine's method names, read back into specroof's drafter grammar (the inverse of :data:`_METHODS`, with the
#: aliases the engines accept: SGLang's NEXTN is its MTP, vLLM's deprecated per-model MTP names are ``mtp``)
_READ_METHODS = {
    "sglang": {"EAGLE": "eagle", "EAGLE3": "eagle3", "NEXTN": "mtp", "MTP": "mtp", "STANDALONE": "model",
               "NGRAM": "prompt-lookup", "LOOKAHEAD": "prompt-lookup", "DFLASH": "dflash"},
    "vllm": {"eagle": "eagle", "eagle3": "eagle3", "mtp": "mtp", "deepseek_mtp": "mtp", "draft_model": "model",
             "ngram": "prompt-lookup", "[ngram]": "prompt-lookup", "medusa": "medusa", "dflash": "dflash"},
    "trtllm": {"Eagle": "eagle", "Eagle3": "eagle3", "MTP": "mtp", "DraftTarget": "model", "NGram": "prompt-lookup",
               "Medusa": "medusa"},
}  # fmt: skip

#: SGLang's --dtype and vLLM's --dtype values, as specroof's arithmetic dtypes (``auto``: the model's own)
_DTYPES = {"bfloat16": "bf16", "bf16": "bf16", "float16": "fp16", "half": "fp16", "fp16": "fp16",
           "float32": "fp32", "float": "fp32", "fp32": "fp32", "auto": None}  # fmt: skip

#: --quantization values whose weights specroof prices, as weight formats (roofline.passes.dtypes.weight_format); the
#: others (mxfp4: gpt-oss's experts, already the model's own expert format; compressed-tensors; ...) are noted
_QUANTIZATION = {"fp8": "fp8", "awq": "int4,kernel:awq", "awq_marlin": "int4,kernel:awq",
                 "gptq": "int4,kernel:gptq", "gptq_marlin": "int4,kernel:gptq", "marlin": "int4,kernel:marlin"}  # fmt: skip

#: flags that take no value (so the next token is not theirs)
_SWITCHES = {"--trust-remote-code", "--enable-torch-compile", "--disable-radix-cache", "--disable-cuda-graph",
             "--enforce-eager", "--enable-expert-parallel", "--enable-dp-attention", "--enable-prefix-caching",
             "--no-enable-prefix-caching", "--disable-log-requests", "--enable-chunked-prefill",
             "--trust_remote_code", "--enable-metrics", "--skip-server-warmup"}  # fmt: skip

#: SGLang's own choice when the three tree knobs are not given (server_args.py auto_choose_speculative_params):
#: (5, 4, 8) for Llama-architecture targets, (3, 1, 4) for the others (DeepSeek, gpt-oss, Qwen, ...)
_SGLANG_AUTO = {"llama": (5, 4, 8), "other": (3, 1, 4)}


@dataclass(frozen=True)
class EngineConfig:
    """An engine's speculative configuration as specroof reads it (:func:`read_engine_config`).

    ``setting`` is the round the engine runs (chain or tree, :class:`roofline.speculation.engine_trees.EngineSetting`);
    ``drafter`` the drafter in specroof's grammar (``eagle3``, ``mtp``, ``model:NAME``, ``prompt-lookup``);
    ``method`` the engine's own name for it as written; ``target``, ``tp``, ``dtype``, ``weight_dtype`` what a
    whole command line said about the target (None: not given); ``draft_tp`` vLLM's
    ``draft_tensor_parallel_size``; ``source`` what was read; ``notes`` what was assumed or left out.
    """

    engine: str
    setting: EngineSetting
    drafter: str
    method: str
    draft_model: str | None = None
    target: str | None = None
    tp: int | None = None
    dtype: str | None = None
    weight_dtype: str | None = None
    draft_tp: int | None = None
    source: str = ""
    notes: tuple[str, ...] = ()

    def knobs(self) -> dict[str, Any]:
        """The setting under the engine's own option names (:func:`knobs_for`)."""
        return knobs_for(self.setting, self.drafter)

    @property
    def label(self) -> str:
        return f"{self.engine} {self.method}: " + " ".join(f"{k}={v}" for k, v in self.knobs().items())

    def target_spec(self, default: Any = None) -> ModelSpec:
        """The target as a :class:`roofline.passes.model.ModelSpec` (a preset, a preset's Hugging Face id, a config path);
        ``default`` when the configuration named none."""
        name = self.target if self.target is not None else default
        if name is None:
            raise SpecroofError("the engine configuration names no target model: give the target (--target)")
        return get_model(name)

    def to_json(self) -> dict[str, Any]:
        return {
            "engine": self.engine, "method": self.method, "drafter": self.drafter, "knobs": self.knobs(),
            "label": self.setting.label, "draft_model": self.draft_model, "target": self.target, "tp": self.tp,
            "dtype": self.dtype, "weight_dtype": self.weight_dtype, "draft_tp": self.draft_tp, "source": self.source,
            "notes": list(self.notes),
        }  # fmt: skip


def _text_of(text: Any) -> str:
    """The configuration's text: ``@file`` reads the file."""
    if not isinstance(text, str) or not text.strip():
        raise SpecroofError("--engine-config must be a non-empty string (flags, JSON, YAML, a command line or @FILE)")
    t = text.strip()
    if t.startswith("@"):
        path = Path(t[1:].strip())
        if not path.is_file():
            raise SpecroofError(f"--engine-config @{path}: no such file")
        try:
            t = path.read_text()
        except UnicodeDecodeError:
            raise SpecroofError(f"--engine-config @{path}: not a text file") from None
        if not t.strip():
            raise SpecroofError(f"--engine-config @{path}: the file is empty")
        t = t.strip()
    return t


def _whole(knob: str, value: Any, minimum: int = 1) -> int:
    """A knob's whole-number value (a string from a command line, or a JSON/YAML number), or one line naming it."""
    v = value
    if isinstance(v, str):
        try:
            v = int(v.strip())
        except ValueError:
            raise SpecroofError(f"{knob} must be a whole number (got {value!r})") from None
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise SpecroofError(f"{knob} must be a whole number >= {minimum} (got {value!r})")
    return v


def _flag_map(tokens: Sequence[str], where: str) -> tuple[list[str], dict[str, str]]:
    """(positional arguments, flags) of a command line: ``--flag value``, ``--flag=value``, ``-tp N``; a flag given
    twice is refused (the engines take the last one silently, which hides a typo)."""
    pos: list[str] = []
    flags: dict[str, str] = {}
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok.startswith("-") and len(tok) > 1 and not _is_number(tok):
            name, eq, value = tok.partition("=")
            key = name.replace("_", "-") if name.startswith("--") else name
            if not eq:
                if (
                    key in _SWITCHES
                    or i + 1 >= len(tokens)
                    or (tokens[i + 1].startswith("-") and not _is_number(tokens[i + 1]))
                ):
                    value = "true"
                else:
                    value = tokens[i + 1]
                    i += 1
            if key in flags:
                raise SpecroofError(f"{name} is given twice in {where}: give it once")
            flags[key] = value
        else:
            pos.append(tok)
        i += 1
    return pos, flags


def _is_number(tok: str) -> bool:
    try:
        float(tok)
    except ValueError:
        return False
    return True


def _pick(flags: dict[str, str], *names: str) -> str | None:
    """The value of the first of ``names`` given (an engine's aliases for one option)."""
    given = [n for n in names if n in flags]
    if len(given) > 1:
        raise SpecroofError(f"{given[0]} and {given[1]} set the same option: give one")
    return flags[given[0]] if given else None


def _dtype(value: str | None, flag: str) -> str | None:
    if value is None:
        return None
    key = value.strip().lower()
    if key not in _DTYPES:
        raise SpecroofError(f"{flag} {value!r} is not a dtype specroof prices: use one of {', '.join(_DTYPES)}")
    return _DTYPES[key]


def _quantization(value: str | None, flag: str, notes: list[str]) -> str | None:
    if value is None:
        return None
    key = value.strip().lower()
    if key in _QUANTIZATION:
        return _QUANTIZATION[key]
    notes.append(
        f"{flag} {value} is not priced as a weight format: the weights are priced in the model's dtype "
        "(give --weight-dtype to price another format)"
    )
    return None


def _target_of(target: Any, named: str | None, notes: list[str]) -> ModelSpec | None:
    """The target ModelSpec, from the caller or the command line's model flag; None when neither resolves."""
    for cand in (named, target):
        if cand is None:
            continue
        try:
            return get_model(cand)
        except SpecroofError:
            if cand is named:
                notes.append(f"the model {named!r} is not a preset, a preset's Hugging Face id or a local config")
    return None


def _check_tp(spec: ModelSpec | None, tp: int | None, flag: str) -> None:
    if spec is not None and tp is not None:
        try:
            check_tp(spec, tp)
        except SpecroofError as exc:
            raise SpecroofError(f"{flag} {tp}: {str(exc).removeprefix(f'--tp {tp} ')}") from None


def _method(engine: str, given: str, flag: str) -> str:
    table = _READ_METHODS[engine]
    for name, ours in table.items():
        if name.lower() == given.strip().lower():
            return ours
    names = ", ".join(dict.fromkeys(table))
    raise SpecroofError(f"{flag}: unknown method {given!r}; {engine} speculates with {names}")


def _drafter_spec(kind: str, draft_model: str | None, flag: str) -> str:
    if kind == "dflash":  # the block drafter the engine loads, when the configuration names it
        return f"dflash:{draft_model}" if draft_model else kind
    if kind != "model":
        return kind
    if not draft_model:
        raise SpecroofError(f"{flag}: a draft-model method needs the draft model's path or Hugging Face id")
    return f"model:{draft_model}"


#: the block a DFlash drafter is trained with, SGLang's default when neither flag gives one (it reads the draft's
#: config.json; every published z-lab drafter has block_size 16)
DFLASH_BLOCK = 16


def _dflash_block(flags: dict[str, str], draft_tokens: str | None, notes: list[str]) -> tuple[int, int, int]:
    """SGLang DFLASH's round as (steps, topk, draft tokens): one block of ``--speculative-dflash-block-size`` tokens,
    which ``--speculative-num-draft-tokens`` must equal when both are given (server_args.py refuses otherwise)."""
    raw = flags.get("--speculative-dflash-block-size")
    block = None if raw is None else _whole("--speculative-dflash-block-size", raw, 2)
    n = None if draft_tokens is None else _whole("--speculative-num-draft-tokens", draft_tokens, 2)
    if block is not None and n is not None and block != n:
        raise SpecroofError(
            f"--speculative-num-draft-tokens {n} and --speculative-dflash-block-size {block}: SGLang's DFLASH takes "
            "them equal (one block verified whole): give one"
        )
    b = block or n
    if b is None:
        b = DFLASH_BLOCK
        notes.append(f"no block size given: the draft checkpoint's own, {DFLASH_BLOCK} for every published DFlash")
    return b - 1, 1, b


def _sglang(flags: dict[str, str], target: Any, where: str, notes: list[str]) -> EngineConfig:
    algo = _pick(flags, "--speculative-algorithm", "--speculative-algo")
    if algo is None:
        raise SpecroofError(f"--speculative-algorithm is missing from {where}: SGLang speculates only when it is given")
    kind = _method("sglang", algo, "--speculative-algorithm")
    draft = _pick(flags, "--speculative-draft-model-path", "--speculative-draft-model", "--speculative-draft")
    model = _pick(flags, "--model-path", "--model")
    tp_raw = _pick(flags, "--tp-size", "--tp", "--tensor-parallel-size")
    tp = None if tp_raw is None else _whole("--tp-size", tp_raw)
    spec = _target_of(target, model, notes)
    _check_tp(spec, tp, "--tp-size")
    knobs = {k: flags.get(f"--speculative-{k}") for k in ("num-steps", "eagle-topk", "num-draft-tokens")}
    if kind == "prompt-lookup":  # SGLang's n-gram drafter verifies num_draft_tokens - 1 drafts per round
        n = _whole("--speculative-num-draft-tokens", knobs["num-draft-tokens"] or "", 2)
        setting = EngineSetting.sglang(n - 1, 1, n)
    elif kind == "dflash":
        setting = EngineSetting.sglang(*_dflash_block(flags, knobs["num-draft-tokens"], notes))
    else:
        if all(v is None for v in knobs.values()):
            # SGLang picks by the target's architecture: LlamaForCausalLM (Llama, Vicuna) gets the tree, the others a
            # chain; a target it cannot name is taken as one of the others
            llama = spec is not None and not spec.is_moe and "llama" in (spec.name + (model or "")).lower()
            s, k, n = _SGLANG_AUTO["llama" if llama and kind != "model" else "other"]
            which = spec.name if spec is not None else "a target not named"
            notes.append(
                f"no tree knobs given: SGLang's own choice for {which}, steps {s}, topk {k}, draft tokens {n} "
                "(server_args.py auto_choose_speculative_params: Llama-architecture targets get (5, 4, 8))"
            )
        else:
            missing = [f"--speculative-{k}" for k, v in knobs.items() if v is None]
            if missing:
                raise SpecroofError(
                    f"{missing[0]} is missing: SGLang takes --speculative-num-steps, --speculative-eagle-topk and "
                    "--speculative-num-draft-tokens together (or none: its own choice)"
                )
            s = _whole("--speculative-num-steps", knobs["num-steps"])
            k = _whole("--speculative-eagle-topk", knobs["eagle-topk"])
            n = _whole("--speculative-num-draft-tokens", knobs["num-draft-tokens"], 2)
            if k == 1 and n != s + 1:
                raise SpecroofError(
                    f"--speculative-num-draft-tokens {n} with --speculative-eagle-topk 1: a chain of {s} steps verifies "
                    f"{s + 1} tokens (SGLang rewrites it to {s + 1} with a warning): give {s + 1}"
                )
            pool = k + (s - 1) * k * k
            if n - 1 > pool:
                raise SpecroofError(
                    f"--speculative-num-draft-tokens {n}: {s} steps of top-{k} score {pool} candidates, fewer than the "
                    f"{n - 1} drafts it asks to verify (SGLang's torch.topk over them fails): give at most {pool + 1}"
                )
        setting = EngineSetting.sglang(s, k, n)
    return EngineConfig(
        "sglang", setting, _drafter_spec(kind, draft, "--speculative-algorithm"), algo.strip().upper(), draft, model,
        tp, _dtype(flags.get("--dtype"), "--dtype"), _quantization(flags.get("--quantization"), "--quantization", notes),
        None, where, tuple(notes),
    )  # fmt: skip


#: vLLM's speculative_config keys specroof reads; the others are the engine's business (noted, not refused)
_VLLM_KEYS = {"method", "model", "num_speculative_tokens", "speculative_token_tree", "draft_tensor_parallel_size",
              "prompt_lookup_max", "prompt_lookup_min"}  # fmt: skip


def _vllm_method(cfg: dict[str, Any]) -> str:
    """vLLM's method, inferred from the draft model's name when not given (SpeculativeConfig.__post_init__)."""
    method = cfg.get("method")
    model = str(cfg.get("model") or "")
    if method is None:
        low = model.lower()
        if low in ("ngram", "[ngram]"):
            return "ngram"
        if "eagle3" in low:
            return "eagle3"
        if "eagle-" in low:
            return "eagle"
        if not model:
            raise SpecroofError('speculative-config: give "method" (eagle, eagle3, mtp, ngram, draft_model, medusa)')
        return "draft_model"
    if not isinstance(method, str):
        raise SpecroofError(f'speculative-config "method" must be a string (got {method!r})')
    return method


def _vllm(cfg: Any, target: Any, where: str, notes: list[str], *, model: str | None = None, tp: int | None = None,
          dtype: str | None = None, weight_dtype: str | None = None) -> EngineConfig:  # fmt: skip
    if not isinstance(cfg, dict):
        raise SpecroofError(f"--speculative-config must be a JSON object (got {type(cfg).__name__})")
    if "tensor_parallel_size" in cfg:
        raise SpecroofError(
            'speculative-config "tensor_parallel_size" is not vLLM\'s key: use "draft_tensor_parallel_size"'
        )
    method = _vllm_method(cfg)
    kind = _method("vllm", method, 'speculative-config "method"')
    other = sorted(set(cfg) - _VLLM_KEYS)
    if other:
        notes.append(f"speculative-config keys not priced: {', '.join(other)}")
    spec = _target_of(target, model, notes)
    n_raw = cfg.get("num_speculative_tokens")
    tree = cfg.get("speculative_token_tree")
    if n_raw is None and tree is None:
        if kind == "mtp" and spec is not None and spec.mtp_modules:
            n_raw = spec.mtp_modules  # vLLM defaults to the checkpoint's n_predict
            notes.append(
                f"num_speculative_tokens not given: vLLM's default, the {n_raw} MTP module(s) the target ships"
            )
        else:
            raise SpecroofError('speculative-config "num_speculative_tokens" is required for this method')
    n = None if n_raw is None else _whole('speculative-config "num_speculative_tokens"', n_raw)
    if kind == "mtp" and n is not None and spec is not None and spec.mtp_modules:
        m = spec.mtp_modules
        if n > m and n % m:
            raise SpecroofError(
                f'speculative-config "num_speculative_tokens" {n} must be a multiple of the {m} MTP modules {spec.name} '
                "ships (vLLM reuses them in turn)"
            )
    if tree is not None:
        if isinstance(tree, str):
            import ast

            try:
                tree = ast.literal_eval(tree)
            except (ValueError, SyntaxError):
                raise SpecroofError(
                    'speculative-config "speculative_token_tree" must be rank paths such as "[(0,), (1,), (0, 0)]"'
                ) from None
        if not isinstance(tree, (list, tuple)):
            raise SpecroofError('speculative-config "speculative_token_tree" must be a list of rank paths')
        setting = EngineSetting.vllm(n, tree=tree)
    else:
        assert n is not None
        setting = EngineSetting.vllm(n)
    dtp = cfg.get("draft_tensor_parallel_size")
    draft_tp = None if dtp is None else _whole('speculative-config "draft_tensor_parallel_size"', dtp)
    if draft_tp is not None and tp is not None and draft_tp not in (1, tp):
        raise SpecroofError(
            f'speculative-config "draft_tensor_parallel_size" {draft_tp} must be 1 or the target\'s tensor parallel '
            f"size {tp} (vllm/config/speculative.py)"
        )
    if draft_tp is not None and draft_tp > 1 and tp is None:
        _check_tp(spec, draft_tp, 'speculative-config "draft_tensor_parallel_size"')
    draft = cfg.get("model")
    draft = None if draft is None or kind in ("prompt-lookup", "mtp") else str(draft)
    _check_tp(spec, tp, "--tensor-parallel-size")
    return EngineConfig("vllm", setting, _drafter_spec(kind, draft, 'speculative-config "model"'), method, draft,
                        model, tp, dtype, weight_dtype, draft_tp, where, tuple(notes))  # fmt: skip


def _vllm_line(flags: dict[str, str], pos: list[str], target: Any, where: str, notes: list[str]) -> EngineConfig:
    raw = _pick(flags, "--speculative-config", "-sc")
    if raw is None:
        raise SpecroofError(f"--speculative-config is missing from {where}: vLLM speculates only when it is given")
    try:
        cfg = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise SpecroofError(f"--speculative-config is not valid JSON: {exc.msg} at column {exc.colno}") from None
    model = _pick(flags, "--model") or (pos[0] if pos else None)
    tp_raw = _pick(flags, "--tensor-parallel-size", "-tp")
    tp = None if tp_raw is None else _whole("--tensor-parallel-size", tp_raw)
    dtype = _dtype(flags.get("--dtype"), "--dtype")
    wdt = _quantization(flags.get("--quantization") or flags.get("-q"), "--quantization", notes)
    return _vllm(cfg, target, where, notes, model=model, tp=tp, dtype=dtype, weight_dtype=wdt)


def _yaml_scalar(text: str) -> Any:
    t = text.strip()
    if not t:
        return None
    if t[0] in "\"'" and t[-1] == t[0] and len(t) >= 2:
        return t[1:-1]
    low = t.lower()
    if low in ("true", "yes", "on"):
        return True
    if low in ("false", "no", "off"):
        return False
    if low in ("null", "~", "none"):
        return None
    if t[0] in "[{":
        try:
            return json.loads(t)
        except json.JSONDecodeError:
            import ast

            try:
                return ast.literal_eval(t)
            except (ValueError, SyntaxError):
                raise SpecroofError(f"cannot read the YAML value {t!r} (flow lists take JSON's form)") from None
    for cast in (int, float):
        try:
            return cast(t)
        except ValueError:
            pass
    return t


def read_yaml_subset(text: str) -> dict[str, Any]:
    """The YAML that TensorRT-LLM's documentation writes for ``--extra_llm_api_options``: nested mappings by
    indentation, scalars, ``[...]`` flow lists and ``- item`` block lists, ``#`` comments. Anchors, multi-line
    strings and documents are refused in one line (PyYAML is not a dependency)."""
    root: dict[str, Any] = {}
    stack: list[tuple[int, Any]] = [(-1, root)]
    pending: tuple[int, dict[str, Any], str] | None = None  # a key whose value is a block below it
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.split(" #", 1)[0].rstrip() if not raw.lstrip().startswith("#") else ""
        if not line.strip() or line.strip() == "---":
            continue
        tail = line.partition(":")[2].strip() if ":" in line else line.strip().lstrip("-").strip()
        if tail.startswith(("&", "*", "|", ">", "!")):
            raise SpecroofError(f"YAML line {lineno}: anchors, tags and block strings are not read: {raw.strip()!r}")
        indent = len(line) - len(line.lstrip(" "))
        body = line.strip()
        if pending is not None:
            p_indent, p_parent, p_key = pending
            pending = None
            if indent > p_indent:
                container: Any = [] if body.startswith("- ") or body == "-" else {}
                p_parent[p_key] = container
                stack.append((p_indent, container))
        while stack and indent <= stack[-1][0]:
            stack.pop()
        if not stack:
            raise SpecroofError(f"YAML line {lineno}: bad indentation: {raw.strip()!r}")
        parent = stack[-1][1]
        if body.startswith("-"):
            if not isinstance(parent, list):
                raise SpecroofError(f"YAML line {lineno}: a list item where a key was expected: {raw.strip()!r}")
            parent.append(_yaml_scalar(body[1:]))
            continue
        key, sep, value = body.partition(":")
        if not sep or not key.strip() or not isinstance(parent, dict):
            raise SpecroofError(f"YAML line {lineno}: expected 'key: value': {raw.strip()!r}")
        key = key.strip().strip("\"'")
        if key in parent:
            raise SpecroofError(f"YAML line {lineno}: {key!r} is given twice")
        if value.strip():
            parent[key] = _yaml_scalar(value)
        else:
            parent[key] = None
            pending = (indent, parent, key)
    return root


def _trtllm(doc: Any, target: Any, where: str, notes: list[str], *, model: str | None = None,
            tp: int | None = None) -> EngineConfig:  # fmt: skip
    if not isinstance(doc, dict):
        raise SpecroofError("TensorRT-LLM's options must be a mapping with a speculative_config block")
    cfg = doc.get("speculative_config", doc if "decoding_type" in doc else None)
    if not isinstance(cfg, dict):
        raise SpecroofError("the TensorRT-LLM options hold no speculative_config block (with its decoding_type)")
    dtype_ = cfg.get("decoding_type")
    if dtype_ is None:
        raise SpecroofError(
            "speculative_config.decoding_type is missing: Eagle3, Eagle, MTP, NGram, DraftTarget, Medusa"
        )
    kind = _method("trtllm", str(dtype_), "speculative_config.decoding_type")
    tp_doc = doc.get("tensor_parallel_size", doc.get("tp_size"))
    if tp is None and tp_doc is not None:
        tp = _whole("tensor_parallel_size", tp_doc)
    spec = _target_of(target, model, notes)
    _check_tp(spec, tp, "--tp_size")
    if kind == "mtp":
        n = _whole("speculative_config.num_nextn_predict_layers", cfg.get("num_nextn_predict_layers", 1))
        setting = EngineSetting.trtllm(n)
    elif cfg.get("eagle_choices") is not None:
        ch = cfg["eagle_choices"]
        if not isinstance(ch, (list, tuple)):
            raise SpecroofError("speculative_config.eagle_choices must be a list of rank paths such as [[0], [0, 0]]")
        setting = EngineSetting.trtllm(
            None
            if cfg.get("max_draft_len") is None
            else _whole("speculative_config.max_draft_len", cfg["max_draft_len"]),
            choices=ch,
        )
    else:
        s = _whole("speculative_config.max_draft_len", cfg.get("max_draft_len"))
        if cfg.get("use_dynamic_tree"):
            k = _whole("speculative_config.dynamic_tree_max_topK", cfg.get("dynamic_tree_max_topK"))
            m = cfg.get("max_total_draft_tokens")
            m = None if m is None else _whole("speculative_config.max_total_draft_tokens", m)
            if m is not None and not s <= m <= k * s:
                raise SpecroofError(
                    f"speculative_config.max_total_draft_tokens {m} must lie in [max_draft_len, dynamic_tree_max_topK x "
                    f"max_draft_len] = [{s}, {k * s}]"
                )
            setting = EngineSetting.trtllm(s, k, m)
        else:
            setting = EngineSetting.trtllm(s)
    draft = cfg.get("speculative_model", cfg.get("speculative_model_dir"))
    draft = None if draft is None or kind in ("mtp", "prompt-lookup") else str(draft)
    return EngineConfig("trtllm", setting, _drafter_spec(kind, draft, "speculative_config.speculative_model"),
                        str(dtype_), draft, model, tp, None, None, None, where, tuple(notes))  # fmt: skip


def read_engine_config(text: str, *, target: Any = None) -> EngineConfig:
    """Read an engine's speculative configuration: what ``plan --emit`` prints parses back to the same setting.

    ``text`` is any of: vLLM's ``--speculative-config`` JSON; SGLang's speculative launch flags
    (``--speculative-algorithm EAGLE3 --speculative-num-steps 5 ...``); TensorRT-LLM's
    ``speculative_config`` YAML (or JSON with ``decoding_type``); a whole ``vllm serve ...``,
    ``python -m sglang.launch_server ...`` or ``trtllm-serve ...`` command line, whose model, tensor-parallel and
    dtype flags are read too; or ``@FILE`` holding one of these. ``target`` (a preset, Hugging Face id or
    ModelSpec) stands for the target when the text names none: it sets SGLang's own default knobs, vLLM's MTP
    default and the tensor-parallel check. Every engine constraint specroof knows is checked, each failure one line
    naming the knob (an unknown method, more draft tokens than SGLang's candidates, a tree whose path has no
    parent, a TP that does not divide the model's heads).
    """
    t = _text_of(text)
    notes: list[str] = []
    if t.startswith("{"):
        try:
            cfg = json.loads(t)
        except json.JSONDecodeError as exc:
            raise SpecroofError(f"--engine-config is not valid JSON: {exc.msg} at line {exc.lineno}") from None
        if isinstance(cfg, dict) and (
            "decoding_type" in cfg or "decoding_type" in (cfg.get("speculative_config") or {})
        ):
            return _trtllm(cfg, target, "TensorRT-LLM speculative_config (JSON)", notes)
        if isinstance(cfg, dict) and isinstance(cfg.get("speculative_config"), dict):
            cfg = cfg["speculative_config"]
        return _vllm(cfg, target, "vLLM --speculative-config", notes)
    lines = [ln for ln in t.splitlines() if ln.strip()]
    first = lines[0].strip() if lines else ""
    if "speculative_config:" in t or "decoding_type:" in t:
        model, tp = None, None
        # the header plan --emit trtllm prints: '# trtllm-serve MODEL [--tp_size N] --extra_llm_api_options ...'
        head = shlex.split(first.lstrip("#").strip() or "x") if first.startswith("#") else []
        if head and head[0] == "trtllm-serve":
            pos, flags = _flag_map(head[1:], "the trtllm-serve header")
            model = pos[0] if pos else None
            tp_raw = _pick(flags, "--tp-size")
            tp = None if tp_raw is None else _whole("--tp_size", tp_raw)
        return _trtllm(read_yaml_subset(t), target, "TensorRT-LLM speculative_config (YAML)", notes, model=model, tp=tp)
    try:
        tokens = shlex.split(" ".join(ln.rstrip("\\").strip() for ln in t.splitlines()))
    except ValueError as exc:
        raise SpecroofError(f"cannot split --engine-config into flags: {exc}") from None
    if not tokens:
        raise SpecroofError("--engine-config holds no flags")
    head = tokens[:3]
    if tokens[0] == "vllm" and len(tokens) > 1 and tokens[1] == "serve":
        pos, flags = _flag_map(tokens[2:], "the vllm serve command")
        return _vllm_line(flags, pos, target, "vllm serve command line", notes)
    if tokens[0].startswith("python") and len(tokens) > 2 and tokens[1] == "-m":
        module = tokens[2]
        pos, flags = _flag_map(tokens[3:], f"the {module} command")
        if module.startswith("sglang"):
            return _sglang(flags, target, "python -m sglang.launch_server command line", notes)
        if module.startswith("vllm"):
            return _vllm_line(flags, pos, target, f"python -m {module} command line", notes)
        raise SpecroofError(f"--engine-config: {' '.join(head)} is not a vLLM, SGLang or TensorRT-LLM command")
    if tokens[0] == "trtllm-serve":
        pos, flags = _flag_map(tokens[1:], "the trtllm-serve command")
        opt = _pick(flags, "--extra-llm-api-options", "--config")
        if opt is None or not Path(opt).is_file():
            raise SpecroofError(
                "--extra_llm_api_options: give the YAML file's text as --engine-config (or @FILE): "
                f"{opt or 'no options file'} is not readable here"
            )
        tp_raw = _pick(flags, "--tp-size")
        tp = None if tp_raw is None else _whole("--tp_size", tp_raw)
        return _trtllm(read_yaml_subset(Path(opt).read_text()), target, "trtllm-serve command line", notes,
                       model=pos[0] if pos else None, tp=tp)  # fmt: skip
    if tokens[0] in ("sglang",) and len(tokens) > 1:
        pos, flags = _flag_map(
            tokens[2:] if tokens[1] in ("serve", "launch_server") else tokens[1:], "the sglang command"
        )
        return _sglang(flags, target, "sglang command line", notes)
    if tokens[0].startswith("-"):
        pos, flags = _flag_map(tokens, "--engine-config")
        if any(k.startswith("--speculative-") and k != "--speculative-config" for k in flags):
            return _sglang(flags, target, "SGLang speculative flags", notes)
        if "--speculative-config" in flags:
            return _vllm_line(flags, pos, target, "vLLM flags", notes)
        raise SpecroofError(
            "--engine-config flags hold no speculative option (--speculative-algorithm ... for SGLang, "
            "--speculative-config '{...}' for vLLM)"
        )
    raise SpecroofError(
        f"--engine-config: cannot read {first[:40]!r}: give vLLM's JSON, SGLang's flags, TensorRT-LLM's YAML, "
        "a vllm serve / python -m sglang.launch_server command line, or @FILE"
    )

"""An engine setting as the launch flags that deploy it: SGLang's server flags, vLLM's ``--speculative-config``
JSON, TensorRT-LLM's ``speculative_config`` block.

Option names are the engines' own (read in sgl-project/sglang
``python/sglang/srt/server_args.py``; vllm-project/vllm ``vllm/config/speculative.py``;
NVIDIA/TensorRT-LLM ``tensorrt_llm/llmapi/llm_args.py`` ``EagleDecodingConfig``,
``Eagle3DecodingConfig``, ``MTPDecodingConfig``). Every constraint an engine checks at
start-up is checked by :class:`roofline.engine_trees.EngineSetting` when the setting is
made, so what this module prints is a setting the engine takes.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from roofline.engine_trees import FRAMEWORKS, EngineSetting
from roofline.errors import SpecroofError
from roofline.model import hf_id

#: Hugging Face repositories of preset targets, as the EAGLE checkpoints below were trained for
#: (the target and draft ids vLLM's own tests pair: vllm-project/vllm tests/v1/spec_decode/test_eagle.py)
TARGET_REPOS = {"llama-3.1-8b": "meta-llama/Llama-3.1-8B-Instruct"}

#: public draft checkpoints per (preset target, drafter): EAGLE-2 runs EAGLE-1's weights with a dynamic tree
DRAFT_REPOS = {
    ("llama-3.1-8b", "eagle"): "yuhuili/EAGLE-LLaMA3.1-Instruct-8B",
    ("llama-3.1-8b", "eagle2"): "yuhuili/EAGLE-LLaMA3.1-Instruct-8B",
    ("llama-3.1-8b", "eagle3"): "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
}

#: each engine's name for a drafter: SGLang --speculative-algorithm, vLLM "method", TensorRT-LLM decoding_type
#: (a separate draft model: SGLang STANDALONE, vLLM draft_model, TensorRT-LLM DraftTarget; n-gram lookup:
#: SGLang NGRAM, vLLM ngram, TensorRT-LLM NGram; sgl-project/sglang docs/advanced_features/speculative_decoding.md,
#: vllm-project/vllm docs/features/spec_decode)
_METHODS = {
    "sglang": {
        "eagle": "EAGLE",
        "eagle2": "EAGLE",
        "eagle3": "EAGLE3",
        "mtp": "NEXTN",
        "model": "STANDALONE",
        "prompt-lookup": "NGRAM",
    },
    "vllm": {
        "eagle": "eagle",
        "eagle2": "eagle",
        "eagle3": "eagle3",
        "mtp": "mtp",
        "model": "draft_model",
        "prompt-lookup": "ngram",
        "medusa": "medusa",
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


def emit_flags(
    setting: EngineSetting,
    engine: str | None = None,
    *,
    target: Any,
    drafter: Any,
    draft_model: str | None = None,
    target_model: str | None = None,
) -> str:
    """The command line (SGLang, vLLM) or config file (TensorRT-LLM) that deploys ``setting``.

    ``engine`` defaults to the setting's own; a chain converts to any engine, a tree does
    not. ``target`` and ``drafter`` are specroof's names (``llama-3.1-8b``, ``eagle3``);
    ``target_model`` / ``draft_model`` are the checkpoints to load (Hugging Face ids or
    paths), looked up in :data:`TARGET_REPOS` / :data:`DRAFT_REPOS` when not given. An MTP
    drafter lives in the target's own checkpoint and needs no draft model.
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
            f"no known {d_name} draft checkpoint for target {t_name!r}: give draft_model (a Hugging Face id or path)"
        )
    method = _METHODS[eng][d_name]
    if eng == "sglang":
        args = ["python", "-m", "sglang.launch_server", "--model-path", model, "--speculative-algorithm", method]
        if draft is not None:
            args += ["--speculative-draft-model-path", draft]
        for key, value in s.knobs().items():
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
    head = f"# {shlex.join(['trtllm-serve', model, '--extra_llm_api_options', 'speculative.yaml'])}"
    return "\n".join([head, *lines])

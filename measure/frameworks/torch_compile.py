"""The harness under ``torch.compile``: each layer's attention and MLP compiled by inductor, shapes dynamic.

What is compiled is every layer's attention block (fused QKV, rotary, the cache write,
attention, output projection) and its MLP, as :func:`torch.compile` functions, one set per
model, whose token count and key length turn dynamic on their first change (decoding changes
the key length every step and speculation the query count: static shapes would compile once
per step). The decoding loops are the harness's own
(:mod:`measure.frameworks.torch_eager`), the norms, residual adds, embedding and head stay eager.
CUDA graphs are not used: the attention reads a length-dependent slice of the static cache,
a new shape every step, and a graph per shape would be recorded without end (a GPU run of this
framework measures inductor's kernels launched one graph at a time).

The first call of each new shape family compiles (about 40 s for the offline pair on a busy
2-core CPU, then 27 s more for the verify pass's masked shapes); :func:`build` compiles the
model's modules in place and the engine measurement's untimed warm-up pays for it.
"""

from __future__ import annotations

import types
import warnings
from typing import Any

import torch

from measure.frameworks.torch_eager import generate as generate  # noqa: PLC0414 -- the same loops, compiled layers
from measure.models import Transformer

NAME = "torch-compile"

#: inductor options: no oneDNN weight prepacking on the CPU
OPTIONS = {"cpp.weight_prepack": False}


def _no_onednn_fusion() -> None:
    """Keep inductor's oneDNN linear fusions out of this process's compiles (its eager kernels keep oneDNN).

    Target and draft share the compiled functions' code, so their widths become symbolic, and
    on torch 2.13 the fused oneDNN linear then fails an assertion in lowering (seen in one of
    three compiles of the offline pair). The fusions are registered once per process, when the
    first compile initialises its passes: initialise them now with oneDNN switched off.
    """
    try:
        from torch._inductor.fx_passes.post_grad import lazy_init
    except ImportError:  # another torch: nothing to keep out
        return
    with torch.backends.mkldnn.flags(enabled=False):
        lazy_init()


def available() -> str | None:
    """None where inductor can compile here (it needs a C++ compiler on the CPU)."""
    import shutil

    if not hasattr(torch, "compile"):
        return f"torch {torch.__version__} has no torch.compile"
    if not any(shutil.which(c) for c in ("g++", "c++", "clang++")):
        return "inductor needs a C++ compiler on the CPU (g++ or clang++) and none is on the PATH"
    return None


def version() -> str:
    return f"torch {torch.__version__} inductor"


def _own_code(fn: Any, name: str) -> Any:
    """``fn`` behind a function with its own code object, so each model gets its own compiled graphs.

    Dynamo keys what it compiled by code object. Shared between a target and its draft, their
    widths would differ between calls and become symbolic; kept apart, only what changes within
    one model (tokens per pass, the key length) becomes dynamic, on the recompile that sees it
    change (automatic dynamic shapes).
    """

    def call(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    code = call.__code__.replace(co_name=name, co_qualname=name)
    return types.FunctionType(code, call.__globals__, name, None, call.__closure__)


def build(model: Transformer, dtype: str, device: Any) -> Transformer:
    """``model`` with every layer's attention and MLP compiled (in place; the weights are not copied)."""
    if getattr(model, "_specroof_compiled", False):
        return model
    with warnings.catch_warnings():
        # importing inductor defines a torch.jit.script_method class inside torch, which warns about itself
        warnings.filterwarnings("ignore", message=".*torch.jit.script_method.*", category=DeprecationWarning)
        _no_onednn_fusion()
        tag = f"{model.spec.name.replace('-', '_')}_{id(model):x}"
        for layer in model.layers:
            attn, mlp = layer.self_attn, layer.mlp
            attn.forward = torch.compile(_own_code(attn.forward, f"attn_{tag}"), options=OPTIONS)  # type: ignore[method-assign]
            mlp.forward = torch.compile(_own_code(mlp.forward, f"mlp_{tag}"), options=OPTIONS)  # type: ignore[method-assign]
    model._specroof_compiled = True  # type: ignore[attr-defined]
    return model

"""The harness under ``torch.compile``: each layer's attention and MLP compiled by inductor, shapes dynamic.

What is compiled is every layer's attention block (fused QKV, rotary, the cache write,
attention, output projection) and its MLP, as :func:`torch.compile` functions, one set per
model, whose token count and key length turn dynamic on their first change (decoding changes
the key length every step and speculation the query count: static shapes would compile once
per step). The decoding loops are the harness's own
(:mod:`measure.frameworks.torch_eager`), the norms, residual adds, embedding and head stay eager.
Inside the compiled layers every projection is traced as ``F.linear`` and inductor picks its kernel
(:func:`_traceable_linears`: the harness's per-shape oneDNN choice cannot be lowered there).
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
from measure.models import COPY_KERNELS, PROBE_ROWS, Linear, Transformer, fastest_linears

NAME = "torch-compile"

#: inductor options: no oneDNN weight prepacking on the CPU
OPTIONS: dict[str, Any] = {"cpp.weight_prepack": False}


def _traceable_linears(model: Transformer) -> None:
    """Every layer's projections as ``F.linear``, so inductor lowers them to its own GEMMs; the head keeps its kernel.

    The harness picks each weight's fastest CPU kernel and on this EPYC (AVX2) that is often
    oneDNN's inner product, ``mkldnn._linear_pointwise``, called on the weight as it is.
    Inductor lowers that op only for a weight it packed itself while freezing, a graph
    constant: it asserts ``w.get_name() in V.graph.constants`` (torch/_inductor/mkldnn_lowerings.py,
    ``linear_unary``), and here the weight is a graph input, so lowering failed with a bare
    ``LoweringException: AssertionError``. Traced as ``F.linear`` (aten ``mm``/``addmm``) the
    compiled layers take inductor's own kernel choice, which is what this framework measures.
    The head runs eager and keeps the kernel timed fastest for it (:meth:`Transformer.choose_kernels`).
    """
    if model.auto_kernels and model.device.type == "cpu" and not model.lm_head.weight.is_meta:
        head = model.lm_head
        stream = model.stream_bytes()
        head.kernels = fastest_linears(head.weight, head.bias, PROBE_ROWS, stream_bytes=stream)
        for kind in set(head.kernels.values()) & set(COPY_KERNELS):
            head.weight_copy(kind)  # made now, not inside the first timed pass
    model.auto_kernels = False  # setup_cache must not choose the layers' kernels again
    for layer in model.layers:
        for mod in layer.modules():
            if isinstance(mod, Linear):
                mod.kernels = {}


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
        _traceable_linears(model)
        tag = f"{model.spec.name.replace('-', '_')}_{id(model):x}"
        for layer in model.layers:
            attn, mlp = layer.self_attn, layer.mlp
            attn.forward = torch.compile(_own_code(attn.forward, f"attn_{tag}"), options=OPTIONS)  # type: ignore[method-assign]
            mlp.forward = torch.compile(_own_code(mlp.forward, f"mlp_{tag}"), options=OPTIONS)  # type: ignore[method-assign]
    model._specroof_compiled = True  # type: ignore[attr-defined]
    return model

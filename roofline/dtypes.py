"""Dtypes: storage sizes, and which dtype the arithmetic and the activations run in.

The bottom of the analytic package (it imports only :mod:`roofline.errors`): the cost
model, the hardware profiles and the pricing all name dtypes through these helpers.
"""

from __future__ import annotations

from roofline.errors import SpecroofError

#: Every dtype a profile may list, with its storage size in bytes.
DTYPE_BYTES: dict[str, float] = {
    "fp32": 4.0,
    "tf32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "int4": 0.5,
    "fp4": 0.5,
}

#: the floating-point dtypes a model's activations and arithmetic run in
FLOAT_DTYPES = ("fp32", "bf16", "fp16")

#: the dtype every pricing function uses when none is given (docs/cost-model.md, glossary)
DEFAULT_DTYPE = "bf16"


def weight_only(dtype: str, weight_dtype: str | None) -> tuple[str, str | None]:
    """(arithmetic dtype, weight dtype): ``dtype="int4"`` alone means weight-only int4 with bf16 arithmetic.

    GPUs have no int4 matrix units worth the name, so an int4 model stores its weights in
    int4 and multiplies in bf16. int8 and fp8 stay compute dtypes (W8A8) unless a weight
    dtype is given.
    """
    if weight_dtype is None and dtype == "int4":
        return "bf16", "int4"
    return dtype, weight_dtype


def activation_dtype(weight_dtype: str, default: str = "fp16") -> str:
    """The dtype activations and the KV cache take by default: the weights' own if they are floats, else ``default``."""
    return weight_dtype if weight_dtype in FLOAT_DTYPES else default


def dtype_bytes(dtype: str) -> float:
    """Bytes per element of ``dtype`` (``'bf16' -> 2.0``); unknown dtypes raise."""
    try:
        return DTYPE_BYTES[dtype]
    except KeyError:
        raise SpecroofError(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPE_BYTES)}") from None

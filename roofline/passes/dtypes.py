"""Dtypes: storage sizes, which dtype the arithmetic and the activations run in, and quantised weight formats.

The bottom of the analytic package (it imports only :mod:`roofline.core.errors`): the cost
model, the hardware profiles and the pricing all name dtypes through these helpers.

A weight format (``--weight-dtype``; docs/cost-model.md, section 16) is validated here and
nowhere else: ``WIDTH[,group:G][,kernel:K]`` with ``WIDTH`` one of ``int8``, ``int4``,
``fp8`` or ``bits:B`` (B bits per weight, fractional allowed: EXL2's 2.5 bpw), ``group:G``
weights sharing one scale (and zero) whose bits are counted in the bytes, and ``kernel:K``
the dequantising kernel family whose streaming efficiency prices it (:data:`WEIGHT_KERNELS`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from roofline.core.errors import SpecroofError

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
    """Bytes per element of ``dtype`` (``'bf16' -> 2.0``) or of a weight format (``'bits:4,group:128'`` ->
    (4 + 32/128) / 8, its group scales and zeros included); unknown dtypes raise."""
    try:
        return DTYPE_BYTES[dtype]
    except (KeyError, TypeError):
        pass
    if isinstance(dtype, str) and ("," in dtype or ":" in dtype):
        return weight_format(dtype).bytes_per_weight
    raise SpecroofError(
        f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPE_BYTES)} "
        f"(weights also take a format: {WEIGHT_FORMAT_GRAMMAR})"
    ) from None


# -- quantised weight formats ---------------------------------------------------------------

#: the grammar, as errors and the CLI's help print it
WEIGHT_FORMAT_GRAMMAR = "int8|int4|fp8|bits:B[,group:G][,kernel:gptfast|torchao|marlin|gptq|awq|exl2]"

#: the widths a format may start with, in bits per weight (``bits:B`` gives any other)
FORMAT_WIDTHS = {"int8": 8.0, "int4": 4.0, "fp8": 8.0}


@dataclass(frozen=True)
class WeightKernel:
    """A family of dequantising kernels: how it stores a group's parameters and how fast it streams.

    ``group_bits``: bits of scale (and zero) stored per group of weights; ``default_group``:
    the group size its checkpoints use when the format names none (0: per channel, no group
    term); ``bandwidth_ratio``: the share of the dense (bf16) streaming rate its kernels reach
    at decode (None: the engine's own ``[weight_only]`` ratio for the width, fitted on
    gpt-fast's rows); ``estimated``: no microbenchmark of the family itself, another
    family's figure stands in (the error band says so); ``groups``: whether a group size
    may be given (EXL2's bits per weight already include its scales).
    """

    name: str
    group_bits: float
    default_group: int
    bandwidth_ratio: float | None
    source: str
    estimated: bool = False
    groups: bool = True


#: kernel families (``kernel:K``), each number with its source
WEIGHT_KERNELS: dict[str, WeightKernel] = {
    "gptfast": WeightKernel(
        "gptfast",
        group_bits=32.0,
        default_group=32,
        bandwidth_ratio=None,
        source="gpt-fast quantize.py: int4 groups of 32 with a bf16 scale and a bf16 zero (32 bits per group), "
        "int8 per channel; the rate is the engine's [weight_only] ratio, fitted on gpt-fast's A100 rows",
    ),
    "torchao": WeightKernel(
        "torchao",
        group_bits=32.0,
        default_group=64,
        bandwidth_ratio=None,
        source="torchao quantization README (pytorch/ao, torchao/quantization/README.md, CUDA backend | NVIDIA-H100): "
        "int4wo-64 (tinygemm, bf16 scale and zero per group of 64), int8wo and float8wo per channel; the rate is "
        "the engine's [weight_only] ratio (compiled: int8/int4 fitted on gpt-fast, fp8 from that README)",
    ),
    "marlin": WeightKernel(
        "marlin",
        group_bits=16.0,
        default_group=128,
        bandwidth_ratio=1.0,
        source="IST-DASLab/marlin README, Benchmarks: at group size 128 Marlin reaches 'the maximum possible 3.87x' "
        "over FP16 (the byte ratio 16 / 4.125, an fp16 scale per group: 0.125 bits) 'at all batchsizes' up to "
        "16-32 on an A10: it streams at the dense rate; vLLM and SGLang run GPTQ and AWQ checkpoints through it",
    ),
    "gptq": WeightKernel(
        "gptq",
        group_bits=20.0,
        default_group=128,
        bandwidth_ratio=1.0,
        estimated=True,
        source="GPTQ checkpoints (AutoGPTQ/ExLlama kernels): an fp16 scale and a packed 4-bit zero per group of "
        "128 (20 bits); no kernel microbenchmark of its own found: Marlin's dense-rate figure stands in",
    ),
    "awq": WeightKernel(
        "awq",
        group_bits=20.0,
        default_group=128,
        bandwidth_ratio=1.0,
        estimated=True,
        source="AWQ checkpoints (llm-awq / AutoAWQ GEMV kernels): an fp16 scale and a packed 4-bit zero per group "
        "of 128 (20 bits); no kernel microbenchmark of its own found: Marlin's dense-rate figure stands in",
    ),
    "exl2": WeightKernel(
        "exl2",
        group_bits=0.0,
        default_group=0,
        bandwidth_ratio=1.0,
        estimated=True,
        groups=False,
        source="turboderp/exllamav2 README, EXL2 quantization: 'any average bitrate between 2 and 8 bits per "
        "weight', the figure counting its scales; no kernel microbenchmark found: Marlin's dense-rate figure "
        "stands in",
    ),
}

#: names that mean another family
KERNEL_ALIASES = {"tinygemm": "torchao", "gpt-fast": "gptfast", "exllamav2": "exl2", "exllama": "gptq"}

_NUMBER = re.compile(r"^[0-9]+(\.[0-9]+)?$")


@dataclass(frozen=True)
class WeightFormat:
    """A parsed weight format: bits per weight, group size, kernel family (None: the engine's own kernels).

    ``name`` is the canonical spelling (what a Pricing stores and a time model looks up);
    ``width`` the format it started from (``int8``, ``int4``, ``fp8`` or ``bits``).
    """

    name: str
    width: str
    bits: float
    group: int
    kernel: WeightKernel | None

    @property
    def group_bits(self) -> float:
        """Scale and zero bits per group: the kernel's, else a 16-bit scale and a 16-bit zero."""
        return self.kernel.group_bits if self.kernel is not None else 32.0

    @property
    def bits_per_weight(self) -> float:
        """Stored bits per weight, the group's scale (and zero) spread over its weights."""
        return self.bits + (self.group_bits / self.group if self.group else 0.0)

    @property
    def bytes_per_weight(self) -> float:
        return self.bits_per_weight / 8.0

    @property
    def plain(self) -> bool:
        """``int8``/``int4``/``fp8`` alone: the engine's own convention (its ratio and bytes factor), unchanged."""
        return self.name in FORMAT_WIDTHS

    @property
    def estimated(self) -> bool:
        return self.kernel is not None and self.kernel.estimated

    def bandwidth_ratio(self, engine_ratios: dict[str, float] | None) -> float:
        """The share of the dense streaming rate this format's kernels reach under an engine with ``engine_ratios``.

        A kernel with its own figure uses it; otherwise the engine's ratio for the width
        (``int4``, ``int8``, ``fp8``); ``bits:B`` with no kernel streams at the dense rate.
        """
        if self.kernel is not None and self.kernel.bandwidth_ratio is not None:
            return self.kernel.bandwidth_ratio
        if self.width in FORMAT_WIDTHS and engine_ratios:
            return float(engine_ratios.get(self.width, 1.0))
        return 1.0


def weight_format(text: str) -> WeightFormat:
    """Parse and validate a weight format (``int4``, ``bits:2.5,kernel:exl2``, ``int4,group:128,kernel:marlin``).

    One line naming the field and the allowed range for anything wrong.
    """
    if not isinstance(text, str) or not text.strip():
        raise SpecroofError(f"weight format must be a non-empty string ({WEIGHT_FORMAT_GRAMMAR}), got {text!r}")
    parts = [p.strip() for p in text.strip().lower().split(",")]
    head, rest = parts[0], parts[1:]
    if head in FORMAT_WIDTHS:
        width, bits = head, FORMAT_WIDTHS[head]
    elif head.startswith("bits:"):
        value = head.removeprefix("bits:")
        if not _NUMBER.match(value):
            raise SpecroofError(f"bits in {text!r} must be a number of bits per weight in [1, 16] (got {value!r})")
        width, bits = "bits", float(value)
        if not 1.0 <= bits <= 16.0:
            raise SpecroofError(f"bits in {text!r} must lie in [1, 16] bits per weight (got {value})")
    else:
        raise SpecroofError(
            f"weight format {text!r} must start with int8, int4, fp8 or bits:B ({WEIGHT_FORMAT_GRAMMAR})"
        )
    group: int | None = None
    kernel: WeightKernel | None = None
    for part in rest:
        key, sep, value = part.partition(":")
        if key == "group" and sep and group is None:
            if not value.isdigit() or not 8 <= int(value) <= 65536:
                raise SpecroofError(
                    f"group in {text!r} must be a whole number of weights in [8, 65536] (got {value!r})"
                )
            group = int(value)
        elif key == "kernel" and sep and kernel is None:
            name = KERNEL_ALIASES.get(value, value)
            if name not in WEIGHT_KERNELS:
                raise SpecroofError(f"kernel in {text!r} must be one of {', '.join(WEIGHT_KERNELS)} (got {value!r})")
            kernel = WEIGHT_KERNELS[name]
        else:
            raise SpecroofError(
                f"cannot read {part!r} in weight format {text!r}: after the width come group:G and kernel:K, "
                f"once each ({WEIGHT_FORMAT_GRAMMAR})"
            )
    if kernel is not None and not kernel.groups and group is not None:
        raise SpecroofError(
            f"kernel {kernel.name} counts its scales in the bits per weight: drop group:{group} from {text!r}"
        )
    if group is None and kernel is not None and width in ("int4", "bits") and bits < 8:
        group = kernel.default_group or None  # the family's checkpoints group unless told otherwise
    parts_out = [width if width != "bits" else f"bits:{bits:g}"]
    if group:
        parts_out.append(f"group:{group}")
    if kernel is not None:
        parts_out.append(f"kernel:{kernel.name}")
    return WeightFormat(",".join(parts_out), width, bits, group or 0, kernel)


def canonical_weight_dtype(text: str | None) -> str | None:
    """The one spelling of a weight dtype or format (None and plain dtypes unchanged; unknown ones raise)."""
    if text is None or text in DTYPE_BYTES:
        return text
    return weight_format(text).name


def default_kv_dtype(dtype: str) -> str | None:
    """The KV cache's dtype when none is given: the arithmetic dtype if it is a float (None: the activations'),
    else bf16.

    An 8-bit arithmetic dtype (W8A8 fp8 or int8) quantises the GEMMs' inputs, not the cache:
    vLLM's and SGLang's ``--kv-cache-dtype auto`` keep the model's 16-bit dtype and store
    fp8 KV only when asked (``--kv-cache-dtype fp8``), and TensorRT-LLM quantises the KV cache
    only with its own ``kv_cache_quant_algo``. So an fp8 KV cache is ``--kv-dtype fp8``, never
    implied by ``--dtype fp8``.
    """
    return None if dtype in FLOAT_DTYPES else "bf16"

"""Pricing: everything that turns a model's bytes and FLOPs into seconds, resolved once.

A :class:`Pricing` holds the hardware profile (loaded, offloaded if asked), the engine
(loaded), the dtypes, tensor parallelism and the efficiency switch, and builds their
:class:`roofline.costing.timemodel.TimeModel` once. Every pricing function (``pass_time``,
``crossover_tokens``, ``speedup``, ``predict_speedup``, ``plan``, ``recommend``,
``best_tree_size``, ``trees_vs_batch``, ``compare_policies``, ...) takes one where it takes
a hardware profile, so a sweep or a notebook resolves names once instead of at every
level::

    pr = Pricing.of("h100-sxm-80gb", engine="compiled", weight_dtype="int4")
    pass_time("llama-3.1-8b", pr)
    speedup(pr, "llama-3.1-8b", "eagle3", 0.8, 4)

A hardware profile or a name still works (``pass_time(spec, "h100", engine="compiled")``):
:func:`pricing_of` builds the Pricing from the keyword options. A Pricing together with
an option that contradicts it is an error, not a silent override.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from time import monotonic
from typing import Any

import numpy as np

from roofline.core.errors import SpecroofError
from roofline.core.validation import RANGES, check_count, check_number
from roofline.costing.engine import Engine, load_engine
from roofline.costing.hardware import Hardware, builtin_profile_dir, load_hardware, profile_path
from roofline.costing.measured_engine import MeasuredEngine
from roofline.costing.timemodel import TimeModel
from roofline.passes.dtypes import (
    DEFAULT_DTYPE,
    DTYPE_BYTES,
    FORMAT_WIDTHS,
    canonical_weight_dtype,
    default_kv_dtype,
    dtype_bytes,
    weight_format,
    weight_only,
)

#: the context every speculation and pass-time function prices at when none is given (docs/cost-model.md, glossary)
DEFAULT_CONTEXT = 1024

#: the options a Pricing is made of, in the order of its fields after ``hardware``
OPTIONS = ("engine", "dtype", "weight_dtype", "kv_dtype", "tp", "offload", "efficiency", "overhead_s")


@dataclass(frozen=True)
class Pricing:
    """The hardware, engine and numeric options a pass is priced with, resolved and validated once.

    ``dtype`` is the arithmetic/activation dtype (default bf16; ``"int4"`` alone means
    weight-only int4 with bf16 arithmetic); ``weight_dtype`` the weights' storage dtype or
    format when it differs (weight-only quantisation: ``int8``, ``int4``, ``fp8`` or
    ``bits:B[,group:G][,kernel:K]``, :func:`roofline.passes.dtypes.weight_format`); ``kv_dtype``
    the KV cache's (default: the activations' when they are a float, bf16 under an 8-bit
    arithmetic dtype: :func:`roofline.passes.dtypes.default_kv_dtype`). ``tp`` devices split the target's weights, KV and work. ``offload`` names
    the host link the target's weights stream over every pass (``hardware`` is then the
    offloaded profile). ``efficiency`` scales datasheet ceilings by the profile's achievable
    fractions; ``overhead_s`` replaces the fixed per-pass overheads. Build one with
    :meth:`of`; change one with :meth:`with_`.
    """

    hardware: Hardware
    engine: Engine | None = None
    dtype: str = DEFAULT_DTYPE
    weight_dtype: str | None = None
    kv_dtype: str | None = None
    tp: int = 1
    offload: str | float | None = None
    efficiency: bool = False
    overhead_s: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.hardware, Hardware):
            raise SpecroofError(
                f"Pricing needs a loaded Hardware (got {type(self.hardware).__name__}); use Pricing.of(name, ...)"
            )
        if self.engine is not None and not isinstance(self.engine, Engine):
            raise SpecroofError(f"Pricing needs a loaded Engine or None (got {type(self.engine).__name__})")
        if self.engine is not None and self.engine.measured:
            # an engine fitted on the user's machine prices only through the hardware profile it was fitted against
            MeasuredEngine(self.engine, self.engine.measured).check_hardware(self.hardware)
        for key in ("dtype", "kv_dtype"):
            value = getattr(self, key)
            if value is not None and value not in DTYPE_BYTES:
                dtype_bytes(value)  # unknown dtypes name the choices
                raise SpecroofError(f"{key} must be a plain dtype ({', '.join(DTYPE_BYTES)}), not a weight format")
        if self.weight_dtype is not None:
            dtype_bytes(self.weight_dtype)  # a dtype or a weight format; anything else names the grammar
        if isinstance(self.tp, bool) or not isinstance(self.tp, int) or self.tp < 1:
            raise SpecroofError(f"tp must be an integer >= 1 (got {self.tp!r})")
        node = self.hardware.max_tp
        if node is not None and self.tp > node:
            # a TP all-reduce is priced over one node's link (its NCCL tables are one node's): past the node it would
            # run over the network, at a bandwidth and latency no profile lists (docs/cost-model.md, section 63)
            raise SpecroofError(
                f"tp {self.tp} spans {-(-self.tp // node)} nodes of {node} GPUs ({self.hardware.id}): a tensor-parallel "
                f"all-reduce is priced over one node's {'link' if self.hardware.interconnect_bytes_per_s else 'GPUs'} "
                f"only; across nodes it runs over the network, which no profile lists. Price tp <= {node} (fewer bits "
                "per weight with --weight-dtype if the model does not fit), or an MoE model's experts across nodes "
                "with serve --ep N --ep-link-GB-s"
            )
        if self.overhead_s is not None and not (math.isfinite(self.overhead_s) and self.overhead_s >= 0):
            raise SpecroofError(f"overhead_s must be >= 0 and finite (got {self.overhead_s})")
        if self.offload is not None and self.hardware.weights_link_bytes_per_s is None:
            raise SpecroofError(
                "offload is set but the hardware streams no weights: build it with Pricing.of(..., offload=)"
            )
        # the profile must have a ceiling for the arithmetic dtype, and a measured profile refuses an engine:
        # both are found here, once, rather than at the first pass priced
        self.time_model.peak(self.dtype)

    @classmethod
    def of(
        cls,
        hardware: Pricing | Hardware | str | Path,
        *,
        engine: Engine | str | Path | None = None,
        dtype: str | None = None,
        weight_dtype: str | None = None,
        kv_dtype: str | None = None,
        tp: int | None = None,
        offload: str | float | None = None,
        efficiency: bool | None = None,
        overhead_s: float | None = None,
    ) -> Pricing:
        """A Pricing from a profile name/path/object and options (None: the default), names resolved once.

        ``hardware`` may be a Pricing: the options given then change it (as `with_`).
        """
        # checked at the entry, before any cache: a numpy tp is a tp, 10**30 or NaN is one line
        if tp is not None:
            try:
                tp = check_count("tp", tp, 1, int(RANGES["tp"].hi))
            except SpecroofError:
                raise SpecroofError(f"tp must be an integer >= 1 and <= {int(RANGES['tp'].hi)} (got {tp!r})") from None
        if overhead_s is not None:
            try:
                overhead_s = check_number("overhead_s", overhead_s, 0.0, RANGES["seconds"].hi)
            except SpecroofError:
                raise SpecroofError(f"overhead_s must be >= 0 and finite (got {overhead_s!r})") from None
        if efficiency is not None and not isinstance(efficiency, (bool, np.bool_)):
            raise SpecroofError(f"efficiency must be True, False or None (got {efficiency!r})")
        efficiency = None if efficiency is None else bool(efficiency)
        given: dict[str, Any] = {
            "engine": engine,
            "dtype": dtype,
            "weight_dtype": weight_dtype,
            "kv_dtype": kv_dtype,
            "tp": tp,
            "offload": offload,
            "efficiency": efficiency,
            "overhead_s": overhead_s,
        }
        if isinstance(hardware, Pricing):
            return hardware.with_(**{k: v for k, v in given.items() if v is not None})
        if all(isinstance(v, (str, int, float, bool, type(None))) for v in given.values()):
            # plain options: one Pricing per (profile as loaded, options); load_hardware re-reads a file that
            # changed on disk, so a rewritten profile gets a new Pricing
            return _of_loaded(_Same(load_hardware(hardware)), **given)
        return _build(hardware, **given)

    def with_(self, **changes: Any) -> Pricing:
        """This pricing with some options changed (``hardware=`` too); the rest stay as they are."""
        unknown = sorted(set(changes) - {"hardware", *OPTIONS})
        if unknown:
            raise SpecroofError(f"unknown pricing option {unknown[0]!r} (known: hardware, {', '.join(OPTIONS)})")
        fields: dict[str, Any] = {k: getattr(self, k) for k in OPTIONS}
        fields.update({k: v for k, v in changes.items() if k != "hardware"})
        # the offloaded profile is rebuilt from the on-device one, so a link is never applied twice
        hw = changes.get("hardware", self.hardware.on_device())
        return _build(hw, **fields)

    # -- what the pricing functions read ------------------------------------------------

    @cached_property
    def time_model(self) -> TimeModel:
        """The composition's parameters for this hardware and engine, built once per Pricing.

        A weight format (``int4,group:128,kernel:marlin``) gets its kernel family's streaming
        ratio here, under an engine, and counts its group scales in its own bytes (bytes factor
        1); the plain ``int8``/``int4``/``fp8`` keep the engine's ``[weight_only]`` terms.
        """
        tm = self.hardware.time_model(self.efficiency, self.engine)
        fmt = self.weight_format
        if fmt is None or fmt.plain:
            return tm
        ratios = dict(tm.weight_bandwidth_ratio)
        factors = dict(tm.weight_bytes_factor)
        if self.engine is not None and self.hardware.weights_link_bytes_per_s is None:
            ratios[fmt.name] = fmt.bandwidth_ratio(dict(self.engine.weight_bandwidth_ratio))
        factors[fmt.name] = 1.0
        return dataclasses.replace(tm, weight_bandwidth_ratio=ratios, weight_bytes_factor=factors)

    @property
    def weight_format(self) -> Any:
        """The parsed :class:`roofline.passes.dtypes.WeightFormat` of quantised weights (None for float weights)."""
        wdt = self.weight_dtype
        if wdt is None or (wdt in DTYPE_BYTES and wdt not in FORMAT_WIDTHS):
            return None
        return weight_format(wdt)

    @property
    def stored_weight_dtype(self) -> str:
        """The dtype the weights are stored in (the arithmetic dtype unless weight-only quantised)."""
        return self.weight_dtype or self.dtype

    @property
    def round_host_s(self) -> float:
        """Host seconds per speculative round outside the passes (the engine's; 0 for the pure roofline)."""
        return self.engine.round_s + self.engine.round_fixed_s if self.engine is not None else 0.0

    def round_fixed_for(self, drafter: Any = None) -> float:
        """The engine's fixed worker time per round (``round_fixed_s``) that ``drafter``'s rounds pay: all of it for
        the drafters SGLang runs through its EAGLE worker (a multi-step draft loop, the tree build, a draft-extend
        pass); none for a drafter whose round is one draft pass, the verify and the acceptance
        (``one_pass_round``: a block drafter, SGLang's DFlashWorker; docs/cost-model.md, section 55)."""
        e = self.engine
        if e is None or not e.round_fixed_s or getattr(drafter, "one_pass_round", False):
            return 0.0
        return e.round_fixed_s

    def round_host_at(self, batch: Any, drafter: Any = None) -> Any:
        """Host seconds of a speculative round of ``batch`` sequences outside its passes: the engine's per-round,
        per-sequence and (where a round does not hide it) per-step host time (:meth:`Engine.round_host_s`), with
        the fixed worker time that ``drafter``'s rounds pay (:meth:`round_fixed_for`)."""
        e = self.engine
        if e is None:
            return 0.0
        # the worker time the engine prices into every round, less what this drafter's worker does not run
        skip = e.round_fixed_s - self.round_fixed_for(drafter)
        if not (e.round_per_seq_s or e.step_hidden_only_when_plain or e.spec_step_overlap is True):
            return e.round_s + e.round_fixed_s - skip
        t = e.round_host_s(batch) - skip
        return float(t) if np.ndim(t) == 0 else t

    @cached_property
    def draft_passes(self) -> Pricing:
        """The pricing of a round's draft passes: this one, without the per-step host time where the engine runs
        the drafts inside the step the verify pass pays for (:meth:`Engine.for_draft_passes`); built once."""
        e = self.engine
        if e is None or e.for_draft_passes() is e:
            return self
        return self.with_(engine=e.for_draft_passes())

    @property
    def engine_name(self) -> str:
        return self.engine.name if self.engine is not None else "roofline"

    @property
    def memory_bytes(self) -> float:
        """Device memory over the ``tp`` devices (inf when the profile lists none)."""
        cap = self.hardware.memory_bytes
        return math.inf if cap is None else cap * self.tp

    @property
    def offloaded(self) -> bool:
        return self.hardware.weights_link_bytes_per_s is not None

    def on_device(self) -> Pricing:
        """The same options with the weights in device memory (a draft model's own weights live there)."""
        return self if not self.offloaded else self.with_(offload=None)

    def describe(self) -> str:
        """One line: hardware, engine, dtypes, TP."""
        parts = [self.hardware.id, f"engine {self.engine_name}", self.dtype]
        if self.weight_dtype:
            parts.append(f"{self.weight_dtype} weights")
        if self.kv_dtype:
            parts.append(f"{self.kv_dtype} KV")
        if self.tp > 1:
            parts.append(f"TP {self.tp}")
        return ", ".join(parts)

    def __hash__(self) -> int:
        # Hardware and Engine hold dicts: hash what identifies them; equal Pricings still hash equal
        return hash(
            (
                self.hardware.id,
                self.hardware.bandwidth_bytes_per_s,
                self.engine.name if self.engine is not None else None,
                self.dtype,
                self.weight_dtype,
                self.kv_dtype,
                self.tp,
                self.offload,
                self.efficiency,
                self.overhead_s,
            )
        )


def _build(
    hardware: Hardware | str | Path,
    *,
    engine: Engine | str | Path | None = None,
    dtype: str | None = None,
    weight_dtype: str | None = None,
    kv_dtype: str | None = None,
    tp: int | None = None,
    offload: str | float | None = None,
    efficiency: bool | None = None,
    overhead_s: float | None = None,
) -> Pricing:
    hw = load_hardware(hardware)
    # weights stored in the arithmetic dtype are not weight-only quantised: one spelling for one pricing
    cdt, wdt = weight_only(dtype or DEFAULT_DTYPE, None if weight_dtype == dtype else weight_dtype)
    wdt = canonical_weight_dtype(wdt)  # one spelling per format: "INT4 , kernel:Marlin" is int4,group:128,kernel:marlin
    # an 8-bit arithmetic dtype leaves the KV cache in bf16 unless kv_dtype says otherwise (default_kv_dtype)
    kv_dtype = kv_dtype if kv_dtype is not None else default_kv_dtype(cdt)
    link: str | float | None = offload
    if offload is not None:
        hw = hw.on_device().offloaded(offload)
    elif hw.weights_link_bytes_per_s is not None:
        link = hw.weights_link_bytes_per_s  # an already offloaded profile keeps its link
    if tp is not None and (
        isinstance(tp, bool) or not isinstance(tp, (int, float, np.integer)) or not float(tp).is_integer()
    ):
        raise SpecroofError(f"tp must be an integer >= 1 (got {tp!r})")
    return Pricing(
        hardware=hw,
        engine=load_engine(engine),
        dtype=cdt,
        weight_dtype=wdt,
        kv_dtype=kv_dtype,
        tp=1 if tp is None else int(tp),
        offload=link,
        efficiency=bool(efficiency),
        overhead_s=None if overhead_s is None else float(overhead_s),
    )


class _Same:
    """A cache key that is one particular object (Hardware holds dicts: it has no hash of its own)."""

    __slots__ = ("obj",)

    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def __hash__(self) -> int:
        return id(self.obj)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Same) and other.obj is self.obj


@functools.lru_cache(maxsize=512)
def _of_loaded(hardware: _Same, **given: Any) -> Pricing:
    """Pricings of the same loaded profile and options are shared: a frozen Pricing (and its time model) is safe
    to reuse, and the key holds the profile, so its id is never reused while cached."""
    return _build(hardware.obj, **given)


def pricing_of(hardware: Pricing | Hardware | str | Path, **options: Any) -> Pricing:
    """The Pricing a pricing function uses: ``hardware`` itself when it is one, else one built from ``options``.

    Options left at None take the Pricing's defaults. A Pricing together with an option that
    changes it raises ("give a Pricing or engine=, not both"): the function would otherwise
    have to guess which of the two the caller meant.
    """
    if type(hardware) is Pricing:
        for v in options.values():
            if v is not None:
                break
        else:  # a Pricing and no option: the scalar calls' usual case, answered without building the dict below
            return hardware
    if type(hardware) is str:
        for v in options.values():
            if v is not None:
                break
        else:  # a profile's name and no option: the scalar calls' other usual case, keyed by the name alone
            return _named(hardware, hardware, options)
        if all(type(v) in _PLAIN for v in options.values()):
            return _named(hardware, (hardware, *options.items()), options)
    given = {k: v for k, v in options.items() if v is not None}
    if isinstance(hardware, Pricing):
        for key, value in given.items():
            if hardware.with_(**{key: value}) != hardware:
                raise SpecroofError(f"give a Pricing or {key}=, not both (the Pricing already sets {key})")
        return hardware
    return Pricing.of(hardware, **given)


def pricing_for(
    hardware: Pricing | Hardware | str | Path,
    dtype: str | None = None,
    weight_dtype: str | None = None,
    kv_dtype: str | None = None,
    efficiency: bool | None = None,
    overhead_s: float | None = None,
    tp: int | None = None,
    engine: Any = None,
) -> Pricing:
    """:func:`pricing_of` with the pricing functions' options passed by position: a Pricing with none of them set is
    returned as it is without building a keyword dict (a scalar call's usual case, ~0.4 us of its ~10)."""
    if (
        type(hardware) is Pricing
        and dtype is None
        and weight_dtype is None
        and kv_dtype is None
        and efficiency is None
        and overhead_s is None
        and tp is None
        and engine is None
    ):
        return hardware
    return pricing_of(
        hardware,
        dtype=dtype,
        weight_dtype=weight_dtype,
        kv_dtype=kv_dtype,
        efficiency=efficiency,
        overhead_s=overhead_s,
        tp=tp,
        engine=engine,
    )


_PLAIN = (str, int, float, bool, type(None))

#: seconds a built-in profile's file is trusted unchanged between two stats of it (see ``_named``)
BUILTIN_RECHECK_S = 0.5

#: profile name or path (with the options, where any is set) -> (the file load_hardware reads, its mtime, the Pricing,
#: the monotonic time until which that mtime is trusted: -inf for a path the caller gave): a Pricing asked for by name
#: is found again without load_hardware's path resolution and Pricing.of's keyword handling on every call; a
#: rewritten file gets a new Pricing, as there
_NAMED: dict[Any, tuple[str, int, Pricing, float]] = {}


def _stamp(path: str) -> int:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return -1


def _named(text: str, key: Any, options: dict[str, Any]) -> Pricing:
    """``Pricing.of(text, **options)`` (options at None left out) for plain options, looked up by ``key`` (the text,
    with the options where any is set) and the profile file's mtime.

    A stat costs about 3 us where system calls are slow (a sandboxed VM), a fifth of a scalar call's budget (issue
    #27), so a built-in profile asked for by name (a file of the package's ``hardware_profiles/``, rewritten only by
    editing the package) has its mtime read at most every ``BUILTIN_RECHECK_S`` seconds; a profile the caller gave
    by path is theirs to rewrite at any moment, and the next call must see it: one stat per call."""
    hit = _NAMED.get(key)
    if hit is not None:
        path, stamp, pr, trusted_until = hit
        now = monotonic()
        if now < trusted_until:
            return pr
        if _stamp(path) == stamp:
            if trusted_until != -math.inf:  # a built-in profile, unchanged: trusted for another interval
                _NAMED[key] = (path, stamp, pr, now + BUILTIN_RECHECK_S)
            return pr
    # the file load_hardware reads (a name once resolved to a built-in profile stays it while that file is
    # unchanged)
    try:
        path = str(profile_path(text))
    except SpecroofError:  # an unknown name: Pricing.of says so
        path = ""
    stamp = _stamp(path) if path else -1  # before the load: a file rewritten meanwhile is read again next time
    pr = Pricing.of(text, **{k: v for k, v in options.items() if v is not None})
    if stamp != -1:
        if len(_NAMED) > 512:
            _NAMED.clear()
        # a name that resolved to a built-in profile, not a path the caller gave (even to one of those files)
        builtin = not text.endswith(".toml") and os.path.dirname(path) == builtin_profile_dir()
        _NAMED[key] = (path, stamp, pr, monotonic() + BUILTIN_RECHECK_S if builtin else -math.inf)
    return pr


def replace_hardware(pricing: Pricing, hardware: Pricing | Hardware | str | Path) -> Pricing:
    """``pricing`` on another profile (the draft passes' own, for one): same engine, dtypes and options.

    A Pricing given as ``hardware`` is taken as it is.
    """
    if isinstance(hardware, Pricing):
        return hardware
    return dataclasses.replace(pricing, hardware=load_hardware(hardware), offload=None)

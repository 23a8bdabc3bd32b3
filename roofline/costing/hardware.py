"""Hardware profiles: load, validate and list accelerators; ridge points and ceilings.

One module despite its length: the profile's parser (:func:`parse_profile`) and writer (:func:`profile_data`) are
inverses over the same keys and units, kept beside the :class:`Hardware` they build.

A profile is a TOML file (``hardware_profiles/<id>.toml``) whose keys carry
their units (``bandwidth_GB_per_s``, ``bf16_TFLOP_per_s``), one ``source`` per
block. A profile written by ``measure`` adds a ``[measured]`` block whose
achieved figures override the datasheet ceilings. Inside the code everything
is SI: bytes, bytes/s, FLOP/s, seconds.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import math
import os
import re
import tomllib
import warnings
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from roofline.core.errors import SpecroofError, _short, check_min
from roofline.core.validation import RANGES, check_count, check_number, check_quantity

# the dtype helpers live in roofline.passes.dtypes (the cost model needs them without the profiles); re-exported here
from roofline.passes.dtypes import DTYPE_BYTES as DTYPE_BYTES
from roofline.passes.dtypes import FLOAT_DTYPES as FLOAT_DTYPES
from roofline.passes.dtypes import activation_dtype as activation_dtype
from roofline.passes.dtypes import dtype_bytes as dtype_bytes
from roofline.passes.dtypes import weight_only as weight_only

if TYPE_CHECKING:
    from roofline.costing.engine import Engine
    from roofline.costing.timemodel import TimeModel

_GB = 1e9
_GIB = 2.0**30
_COMPUTE_KEY = re.compile(r"^(?P<dtype>[a-z0-9]+)_(?P<unit>TFLOP_per_s|TOP_per_s)$")
_TOP_LEVEL = {"name", "vendor", "kind", "aliases", "tdp_W", "notes"}
_BLOCKS = {"memory", "compute", "interconnect", "overhead", "efficiency", "measured"}


@dataclass(frozen=True)
class Measured:
    """Achieved figures from ``measure`` that override the datasheet when present.

    Units: ``bandwidth_bytes_per_s`` in bytes/s, ``peak_flop_per_s`` in FLOP/s per dtype,
    ``pass_overhead_s`` and ``layer_overhead_s`` in seconds.
    """

    bandwidth_bytes_per_s: float | None = None
    peak_flop_per_s: dict[str, float] = field(default_factory=dict)
    pass_overhead_s: float | None = None
    layer_overhead_s: float | None = None
    #: tokens per pass at which matrix units reach half their peak (0: the pure roofline)
    matmul_half_tokens: float = 0.0
    provenance: dict[str, Any] = field(default_factory=dict)
    #: bytes/s of one-token passes, when matrix-vector kernels stream at another rate than GEMMs
    gemv_bandwidth_bytes_per_s: float | None = None
    #: FLOP/s of the attention products (scores and values), when they run below the GEMM peak
    attention_flop_per_s: float | None = None
    #: share of the shorter of an operator's memory and compute time hidden under the longer
    #: (1: the roofline's max, GPUs; 0: they add up, as on CPUs whose cores both stream and compute)
    overlap: float | None = None
    #: bytes/s of passes of a few rows, by range: {max rows: rate}, each range the rows above the
    #: next smaller key (above one) up to its own (a harness's kernel per row range; TimeModel's field)
    rows_bandwidth_bytes_per_s: dict[int, float] = field(default_factory=dict)


#: GPUs one node's scale-up link joins where a profile does not say (an HGX/DGX board: 8)
GPUS_PER_NODE = 8


@dataclass(frozen=True)
class Hardware:
    """One accelerator: datasheet ceilings (SI units) plus optional measured overrides."""

    id: str
    name: str
    bandwidth_bytes_per_s: float
    peak_flop_per_s: dict[str, float]
    memory_bytes: float | None = None
    vendor: str = ""
    kind: str = "gpu"
    aliases: tuple[str, ...] = ()
    interconnect_bytes_per_s: float | None = None
    #: GPUs one scale-up link joins (NVLink, Infinity Fabric): 8 on an HGX board, 72 in an NVL72 rack. Tensor
    #: parallelism is priced over that link only, so a wider TP is refused (docs/cost-model.md, section 63)
    gpus_per_node: int = GPUS_PER_NODE
    launch_overhead_s: float | None = None
    efficiency_memory: float = 1.0
    efficiency_compute: float = 1.0
    #: best-shape GEMM share per dtype where it differs from ``efficiency_compute`` (fp8 GEMMs reach less)
    efficiency_compute_dtype: dict[str, float] = field(default_factory=dict)
    #: the ``[efficiency]`` shares are a family's figures, not this GPU's own measurement: predictions
    #: priced with them deserve a wider error band
    efficiency_estimated: bool = False
    tdp_w: float | None = None
    notes: str = ""
    sources: dict[str, str] = field(default_factory=dict)
    measured: Measured | None = None
    path: str | None = None
    #: weights live in host memory and stream to the device over a link at this rate (bytes/s) every
    #: pass; None: weights in device memory. Set with :meth:`offloaded`.
    weights_link_bytes_per_s: float | None = None
    weights_link: str = ""

    def __post_init__(self) -> None:
        """Every figure checked where a Hardware is made, so ``replace``, ``offloaded`` and a profile refuse alike.

        A NaN bandwidth would price every pass at NaN, a negative one at a negative time and 0 at a
        ZeroDivisionError deep in the cost model: each is refused here, naming the field and its range.
        Numbers are stored as floats, so ``np.float64(3.35e12)`` and ``3_350_000_000_000`` price alike.
        """
        ranged = {
            "bandwidth_bytes_per_s": "bandwidth",
            "memory_bytes": "memory",
            "interconnect_bytes_per_s": "bandwidth",
            "launch_overhead_s": "latency",
            "tdp_w": "power",
            "weights_link_bytes_per_s": "bandwidth",
        }
        for key, kind in ranged.items():
            value = getattr(self, key)
            if value is not None or key == "bandwidth_bytes_per_s":
                object.__setattr__(self, key, float(check_quantity(f"Hardware {key}", value, kind)))
        object.__setattr__(self, "gpus_per_node", check_count("Hardware gpus_per_node", self.gpus_per_node, 1, 1024))
        for key in ("efficiency_memory", "efficiency_compute"):
            object.__setattr__(self, key, check_number(f"Hardware {key}", getattr(self, key), 0.0, 1.0, lo_open=True))
        for key, kind, lo_open in (("peak_flop_per_s", "flops", False), ("efficiency_compute_dtype", "", True)):
            table = getattr(self, key)
            if not isinstance(table, dict):
                raise SpecroofError(f"Hardware {key} must be a dict of dtype -> number (got {table!r})")
            checked = {
                d: float(check_quantity(f"Hardware {key}[{d!r}]", v, kind))
                if kind
                else check_number(f"Hardware {key}[{d!r}]", v, 0.0, 1.0, lo_open=lo_open)
                for d, v in table.items()
            }
            object.__setattr__(self, key, checked)

    # -- effective ceilings -------------------------------------------------
    def compute_efficiency(self, dtype: str) -> float:
        """The best-shape GEMM share of the datasheet peak for ``dtype`` (its own figure, else the profile's)."""
        return self.efficiency_compute_dtype.get(dtype, self.efficiency_compute)

    def bandwidth(self, efficiency: bool = False) -> float:
        """Memory bandwidth in bytes/s: measured if present, else datasheet (x efficiency if asked)."""
        if self.measured is not None and self.measured.bandwidth_bytes_per_s:
            return self.measured.bandwidth_bytes_per_s
        return self.bandwidth_bytes_per_s * (self.efficiency_memory if efficiency else 1.0)

    def peak(self, dtype: str, efficiency: bool = False) -> float:
        """Dense peak FLOP/s for ``dtype``: measured if present, else datasheet (x efficiency if asked)."""
        dtype_bytes(dtype)
        if self.measured is not None and dtype in self.measured.peak_flop_per_s:
            return self.measured.peak_flop_per_s[dtype]
        if dtype not in self.peak_flop_per_s:
            have = ", ".join(self.peak_flop_per_s) or "none"
            raise SpecroofError(
                f"hardware {self.id!r} has no verified {dtype} peak (it has: {have}); "
                "pick another dtype or load a measured profile"
            )
        return self.peak_flop_per_s[dtype] * (self.compute_efficiency(dtype) if efficiency else 1.0)

    @property
    def dtypes(self) -> tuple[str, ...]:
        """Dtypes with a compute ceiling (datasheet or measured)."""
        extra = tuple(self.measured.peak_flop_per_s) if self.measured else ()
        return tuple(dict.fromkeys((*self.peak_flop_per_s, *extra)))

    @property
    def pass_overhead_s(self) -> float:
        """Fixed time per forward pass in seconds (measured or fitted; 0 for a datasheet profile)."""
        if self.measured is not None and self.measured.pass_overhead_s is not None:
            return self.measured.pass_overhead_s
        return 0.0

    @property
    def matmul_half_tokens(self) -> float:
        """Tokens per pass at which compute reaches half its peak (measured/fitted; 0 for a datasheet profile).

        Small matrix products do not fill the matrix units: compute time is modelled as
        flops / peak x (1 + half_tokens / tokens), which moves the knee left by half_tokens.
        """
        return self.measured.matmul_half_tokens if self.measured is not None else 0.0

    def gemv_bandwidth(self, efficiency: bool = False) -> float:
        """Bandwidth (bytes/s) of one-token passes: measured matrix-vector rate if fitted, else :meth:`bandwidth`."""
        if self.measured is not None and self.measured.gemv_bandwidth_bytes_per_s:
            return self.measured.gemv_bandwidth_bytes_per_s
        return self.bandwidth(efficiency)

    @property
    def overlap(self) -> float:
        """Memory/compute overlap in [0, 1]: measured or fitted, else 1 (the roofline's max)."""
        if self.measured is not None and self.measured.overlap is not None:
            return self.measured.overlap
        return 1.0

    def attention_peak(self, dtype: str, efficiency: bool = False) -> float:
        """FLOP/s of the attention products: measured/fitted if present, else :meth:`peak`."""
        if self.measured is not None and self.measured.attention_flop_per_s:
            return self.measured.attention_flop_per_s
        return self.peak(dtype, efficiency)

    @property
    def layer_overhead_s(self) -> float:
        """Fixed time per layer per pass in seconds (fitted; 0 for a datasheet profile)."""
        if self.measured is not None and self.measured.layer_overhead_s is not None:
            return self.measured.layer_overhead_s
        return 0.0

    def time_model(self, efficiency: bool = False, engine: Engine | None = None) -> TimeModel:
        """The parameters of a pass's time on this device (measured where the profile has them), SI units.

        ``engine`` adds the software's terms (:mod:`roofline.costing.engine`): its achieved fractions
        scale what this GPU can reach (datasheet x the profile's ``[efficiency]``, the
        per-family streaming and GEMM efficiency), its per-pass and per-layer times join the profile's,
        and its host time, all-reduce latency and quantised-weight rates enter the
        composition. A measured profile is a (device, engine) pair already: its figures
        include the software that measured them (``[measured] engine``), so adding an
        engine to it is refused rather than counted twice.
        """
        from roofline.costing.collectives import nccl_model
        from roofline.costing.kv_efficiency import kv_read_model
        from roofline.costing.timemodel import TimeModel

        measured = self.measured is not None
        if engine is not None and measured:
            under = (
                self.measured.provenance.get("engine") if self.measured else None
            ) or "the software that measured it"
            raise SpecroofError(
                f"{self.id} is a measured profile: its figures already include {under}; "
                f"price it without --engine, or use the datasheet profile with --engine {engine.name}"
            )
        peaks = {d: self.peak(d, efficiency) for d in self.dtypes}
        bw = self.bandwidth(efficiency)
        if engine is not None and not measured:
            # an engine reaches a share of what the GPU itself can reach (its streaming and best-GEMM efficiency,
            # per GPU family from its profile), so one engine profile serves GPUs whose ceilings differ
            peaks = {
                d: p * self.compute_efficiency(d) * engine.compute_fraction for d, p in self.peak_flop_per_s.items()
            }
            bw = self.bandwidth_bytes_per_s * self.efficiency_memory * engine.bandwidth_fraction
        attn = self.measured.attention_flop_per_s if self.measured is not None else None
        gemv = self.measured.gemv_bandwidth_bytes_per_s if self.measured is not None else None
        rows_bw = tuple(sorted(self.measured.rows_bandwidth_bytes_per_s.items())) if self.measured is not None else ()
        e = engine
        return TimeModel(
            bandwidth_bytes_per_s=bw,
            peak_flop_per_s=peaks,
            gemv_bandwidth_bytes_per_s=gemv or None,
            rows_bandwidth_bytes_per_s=rows_bw,
            attention_flop_per_s=attn or None,
            matmul_half_tokens=self.matmul_half_tokens,
            overlap=self.overlap,
            pass_overhead_s=self.pass_overhead_s + (e.device_pass_s if e else 0.0),
            layer_overhead_s=self.layer_overhead_s + (e.device_layer_s if e else 0.0),
            weights_link_bytes_per_s=self.weights_link_bytes_per_s,
            interconnect_bytes_per_s=self.interconnect_bytes_per_s,
            allreduce_latency_s=e.allreduce_latency_s if e else 0.0,
            nccl=nccl_model(self.id, e.allreduce) if e else None,
            host_pass_s=e.host_pass_s if e else 0.0,
            host_layer_s=e.host_layer_s if e else 0.0,
            weight_bandwidth_ratio=dict(e.weight_bandwidth_ratio) if e else {},
            weight_bytes_factor=dict(e.weight_bytes_factor) if e else {},
            name=self.id + (f" + {e.name}" if e else ""),
            engine=e,
            kv_read=kv_read_model(self, e),
        )

    def ridge(self, dtype: str, efficiency: bool = False) -> float:
        """Ridge point in FLOP/byte: peak FLOP/s over bandwidth."""
        return self.peak(dtype, efficiency) / self.bandwidth(efficiency)

    def ridge_points(self) -> dict[str, float]:
        """Ridge point (FLOP/byte) for every dtype this profile has a ceiling for."""
        return {d: self.ridge(d) for d in self.dtypes}

    def attainable(self, intensity: Any, dtype: str, efficiency: bool = False) -> npt.NDArray[np.float64]:
        """Attainable FLOP/s at arithmetic intensity (FLOP/byte): min(peak, intensity x bandwidth)."""
        x = check_min("intensity", intensity, 0.0)
        return np.minimum(self.peak(dtype, efficiency), x * self.bandwidth(efficiency))

    def offloaded(self, link: str | float = "pcie4-x16") -> Hardware:
        """This device with the model's weights in host memory, streamed over ``link`` every pass.

        ``link``: a name from :data:`HOST_LINKS` or a rate in bytes/s. The KV cache and
        activations stay in device memory. This is the regime of Sequoia's offloading
        experiments: a pass costs weight bytes / link rate, tens of times a decode step on
        device, so hundreds of draft-tree nodes verify for free.
        """
        if isinstance(link, str):
            key = link.lower()
            if key not in HOST_LINKS:
                raise SpecroofError(
                    f"unknown host link {link!r}; choose one of {', '.join(HOST_LINKS)} or a rate in bytes/s"
                )
            rate, name = HOST_LINKS[key][0], key
        else:  # a rate: numpy scalars too; NaN, <= 0, 10**400 or past any link (1 PB/s) refused in one line
            lo, hi = RANGES["bandwidth"].lo, RANGES["bandwidth"].hi
            try:
                rate = check_number("host link rate", link, lo, hi)
            except SpecroofError:
                raise SpecroofError(
                    f"a host link rate must be a number of bytes/s in [{lo:g}, {hi:g}] or one of "
                    f"{', '.join(HOST_LINKS)} (got {_short(link)})"
                ) from None
            name = f"{rate / 1e9:g} GB/s link"
        return dataclasses.replace(
            self,
            id=f"{self.id}+offload-{name}",
            name=f"{self.name}, weights offloaded over {name}",
            weights_link_bytes_per_s=rate,
            weights_link=name,
        )

    def on_device(self) -> Hardware:
        """This device with weights in its own memory (undoes :meth:`offloaded`; a draft model lives here)."""
        if self.weights_link_bytes_per_s is None:
            return self
        base = self.id.split("+offload-")[0]
        return dataclasses.replace(
            self,
            id=base,
            name=self.name.split(", weights offloaded")[0],
            weights_link_bytes_per_s=None,
            weights_link="",
        )

    def replace(self, **changes: Any) -> Hardware:
        """A copy with fields changed, e.g. ``hw.replace(bandwidth_bytes_per_s=3.35e12)``."""
        return dataclasses.replace(self, **changes)

    @property
    def max_tp(self) -> int | None:
        """The widest tensor parallelism priced on this device: the GPUs its node's link joins (a TP all-reduce past
        them runs over a network no profile lists: docs/cost-model.md, section 63); None for accelerators that are
        not GPUs (a TPU slice's ICI joins many chips)."""
        return self.gpus_per_node if self.kind == "gpu" else None

    def summary(self) -> dict[str, Any]:
        """Flat dict of the headline figures in human units (for tables and ``--json``)."""
        row: dict[str, Any] = {
            "id": self.id,
            "name": self.name,
            "vendor": self.vendor,
            "kind": self.kind,
            "memory_GB": None if self.memory_bytes is None else self.memory_bytes / _GB,
            "bandwidth_GB_per_s": self.bandwidth() / _GB,
        }
        for d in DTYPE_BYTES:
            row[f"{d}_TFLOP_per_s"] = self.peak(d) / 1e12 if d in self.dtypes else None
        row["ridge_bf16_flop_per_byte"] = self.ridge("bf16") if "bf16" in self.dtypes else None
        row["interconnect_GB_per_s"] = (
            None if self.interconnect_bytes_per_s is None else self.interconnect_bytes_per_s / _GB
        )
        row["gpus_per_node"] = self.gpus_per_node
        row["measured"] = self.measured is not None
        return row


# -- parsing and validation ---------------------------------------------------


#: host-to-device links for weight offloading: (bytes/s per direction, source). Theoretical per-direction
#: rates of a x16 link (transfer rate x lanes x 128b/130b encoding); pinned-memory copies reach ~80-90%.
HOST_LINKS: dict[str, tuple[float, str]] = {
    "pcie3-x16": (15.75e9, "PCI-SIG PCIe 3.0: 8 GT/s per lane, 128b/130b; x16 = 15.75 GB/s per direction"),
    "pcie4-x16": (31.5e9, "PCI-SIG PCIe 4.0: 16 GT/s per lane, 128b/130b; x16 = 31.5 GB/s per direction"),
    "pcie5-x16": (63.0e9, "PCI-SIG PCIe 5.0: 32 GT/s per lane, 128b/130b; x16 = 63 GB/s per direction"),
}


#: memory bandwidth (bytes/s) a device of each kind plausibly has; outside, the unit is probably wrong
_PLAUSIBLE_BANDWIDTH = {"gpu": (50e9, 50e12), "cpu": (5e9, 5e12)}


def _plausible(where: str, kind: str, bandwidth: float) -> None:
    """Warn when a bandwidth is off by about 1000x for its kind of device: a unit written wrong."""
    lo, hi = _PLAUSIBLE_BANDWIDTH.get(kind, (1e9, 100e12))
    if bandwidth < lo:
        hint = f"{bandwidth / _GB:g} GB/s is far below any {kind}'s; was it written in TB/s? (then {bandwidth / _GB * 1000:g})"
    elif bandwidth > hi:
        hint = f"{bandwidth / _GB:g} GB/s is far above any {kind}'s; was it written in MB/s? (then {bandwidth / _GB / 1000:g})"
    else:
        return
    warnings.warn(f"{where}: memory.bandwidth_GB_per_s = {hint}", stacklevel=3)


def _num(where: str, key: str, value: Any, *, positive: bool = True) -> float:
    """A finite number from a profile (positive unless told, never negative): an error naming the field otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpecroofError(f"{where}: field {key!r} must be a number (got {value!r})")
    if not math.isfinite(value):
        raise SpecroofError(f"{where}: field {key!r} must be a finite number (got {value!r})")
    if positive and not value > 0:
        raise SpecroofError(f"{where}: field {key!r} must be positive (got {value!r})")
    if value < 0:
        raise SpecroofError(f"{where}: field {key!r} cannot be negative (got {value!r})")
    for suffix, kind, scale in _PHYSICAL:  # far beyond any device: a typo or a unit slip, not a new GPU
        if key.endswith(suffix) and value > 0:
            check_quantity(f"{where}: {key}", float(value) * scale, kind)
    return float(value)


#: profile fields checked against roofline.core.validation's physical ranges, by unit suffix
_PHYSICAL = (
    ("_GB_per_s", "bandwidth", 1e9),
    ("_TFLOP_per_s", "flops", 1e12),
    ("_TOP_per_s", "flops", 1e12),
    ("capacity_GB", "memory", 1e9),
)


def _compute_block(where: str, block: dict[str, Any]) -> dict[str, float]:
    peaks: dict[str, float] = {}
    for key, value in block.items():
        if key in ("source", "unverified"):
            continue
        m = _COMPUTE_KEY.match(key)
        if m is None:
            raise SpecroofError(
                f"{where}: field {key!r} has no unit; write it as e.g. 'bf16_TFLOP_per_s' or 'int8_TOP_per_s'"
            )
        dtype = m.group("dtype")
        if dtype not in DTYPE_BYTES:
            raise SpecroofError(f"{where}: unknown dtype {dtype!r} in {key!r}; known: {', '.join(DTYPE_BYTES)}")
        peaks[dtype] = _num(where, key, value) * 1e12
    return peaks


def _check_keys(where: str, block: dict[str, Any], allowed: set[str]) -> None:
    for key in block:
        if key not in allowed:
            hint = difflib.get_close_matches(key, sorted(allowed), n=1)
            extra = f" (did you mean {hint[0]!r}?)" if hint else f"; allowed: {', '.join(sorted(allowed))}"
            raise SpecroofError(f"{where}: unknown field {key!r}{extra}")


def parse_profile(data: dict[str, Any], where: str, profile_id: str) -> Hardware:
    """Validate a profile dict (as read from TOML) and build a :class:`Hardware`.

    Errors name ``where`` (the file), the field and the problem.
    """
    _check_keys(where, data, _TOP_LEVEL | _BLOCKS)
    if "name" not in data:
        raise SpecroofError(f"{where}: missing field 'name'")
    mem = data.get("memory")
    if not isinstance(mem, dict):
        raise SpecroofError(f"{where}: missing block [memory] with bandwidth_GB_per_s")
    mem_keys = {"capacity_GB", "capacity_GiB", "bandwidth_GB_per_s", "type", "source", "unverified"}
    if "bandwidth" in mem or "capacity" in mem:
        bad = "bandwidth" if "bandwidth" in mem else "capacity"
        raise SpecroofError(
            f"{where}: field 'memory.{bad}' has no unit; write {'bandwidth_GB_per_s' if bad == 'bandwidth' else 'capacity_GB'}"
        )
    _check_keys(f"{where} [memory]", mem, mem_keys)
    if "bandwidth_GB_per_s" not in mem:
        raise SpecroofError(f"{where}: missing field 'memory.bandwidth_GB_per_s' (memory bandwidth)")
    bandwidth = _num(f"{where} [memory]", "bandwidth_GB_per_s", mem["bandwidth_GB_per_s"]) * _GB
    _plausible(where, str(data.get("kind", "gpu")), bandwidth)
    capacity = None
    if "capacity_GB" in mem:
        capacity = _num(f"{where} [memory]", "capacity_GB", mem["capacity_GB"]) * _GB
    elif "capacity_GiB" in mem:
        capacity = _num(f"{where} [memory]", "capacity_GiB", mem["capacity_GiB"]) * _GIB
    sources = {"memory": str(mem.get("source", ""))}

    comp = data.get("compute", {})
    peaks = _compute_block(f"{where} [compute]", comp)
    sources["compute"] = str(comp.get("source", ""))

    link = data.get("interconnect", {})
    _check_keys(f"{where} [interconnect]", link, {"link", "per_direction_GB_per_s", "gpus_per_node", "source"})
    inter = None
    node = link.get("gpus_per_node", GPUS_PER_NODE)
    if isinstance(node, bool) or not isinstance(node, int) or not 1 <= node <= 1024:
        raise SpecroofError(f"{where} [interconnect]: gpus_per_node must be a whole number in [1, 1024] (got {node!r})")
    if "per_direction_GB_per_s" in link:
        inter = _num(f"{where} [interconnect]", "per_direction_GB_per_s", link["per_direction_GB_per_s"]) * _GB
    if link:
        sources["interconnect"] = str(link.get("source", ""))

    over = data.get("overhead", {})
    _check_keys(f"{where} [overhead]", over, {"launch_us", "source"})
    launch = None
    if "launch_us" in over:
        launch = _num(f"{where} [overhead]", "launch_us", over["launch_us"]) * 1e-6
        sources["overhead"] = str(over.get("source", ""))

    eff = data.get("efficiency", {})
    per_dtype = {f"{d}_compute" for d in DTYPE_BYTES}
    _check_keys(f"{where} [efficiency]", eff, {"memory", "compute", "estimated", "source"} | per_dtype)
    effs = {}
    for key in ("memory", "compute", *sorted(per_dtype & set(eff))):
        v = _num(f"{where} [efficiency]", key, eff.get(key, 1.0))
        if v > 1.0:
            raise SpecroofError(f"{where} [efficiency]: field {key!r} must lie in (0, 1] (got {v})")
        effs[key] = v
    for key in sorted(per_dtype & set(eff)):
        if key.removesuffix("_compute") not in peaks:
            raise SpecroofError(
                f"{where} [efficiency]: field {key!r} names a dtype with no peak in [compute] (it has: {', '.join(peaks) or 'none'})"
            )
    estimated = eff.get("estimated", False)
    if not isinstance(estimated, bool):
        raise SpecroofError(f"{where} [efficiency]: field 'estimated' must be true or false (got {estimated!r})")
    if eff:
        sources["efficiency"] = str(eff.get("source", ""))
        if not sources["efficiency"]:
            raise SpecroofError(f"{where} [efficiency]: missing field 'source' (every block names its source)")

    for block in ("memory", "compute"):
        if block in data and not sources.get(block):
            raise SpecroofError(f"{where} [{block}]: missing field 'source' (every block names its source)")

    measured = _measured_block(where, data["measured"]) if "measured" in data else None
    tdp = data.get("tdp_W")
    aliases = data.get("aliases", [])
    if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
        raise SpecroofError(f"{where}: field 'aliases' must be a list of strings")
    return Hardware(
        id=profile_id,
        name=str(data["name"]),
        vendor=str(data.get("vendor", "")),
        kind=str(data.get("kind", "gpu")),
        aliases=tuple(aliases),
        memory_bytes=capacity,
        bandwidth_bytes_per_s=bandwidth,
        peak_flop_per_s=peaks,
        interconnect_bytes_per_s=inter,
        gpus_per_node=node,
        launch_overhead_s=launch,
        efficiency_memory=effs["memory"],
        efficiency_compute=effs["compute"],
        efficiency_compute_dtype={k.removesuffix("_compute"): v for k, v in effs.items() if k.endswith("_compute")},
        efficiency_estimated=estimated,
        tdp_w=None if tdp is None else _num(where, "tdp_W", tdp),
        notes=str(data.get("notes", "")),
        sources=sources,
        measured=measured,
    )


def _measured_block(where: str, block: dict[str, Any]) -> Measured:
    w = f"{where} [measured]"
    known = {
        "bandwidth_GB_per_s",
        "gemv_bandwidth_GB_per_s",
        "rows_bandwidth_GB_per_s",
        "attention_TFLOP_per_s",
        "pass_overhead_us",
        "layer_overhead_us",
        "compute",
        "matmul_half_tokens",
        "overlap",
    }
    bw = gemv = attn = overlap = None
    if "overlap" in block:
        overlap = _num(w, "overlap", block["overlap"], positive=False)
        if not 0.0 <= overlap <= 1.0:
            raise SpecroofError(f"{w}: field 'overlap' must lie in [0, 1] (got {overlap})")
    if "bandwidth_GB_per_s" in block:
        bw = _num(w, "bandwidth_GB_per_s", block["bandwidth_GB_per_s"]) * _GB
    if "gemv_bandwidth_GB_per_s" in block:
        gemv = _num(w, "gemv_bandwidth_GB_per_s", block["gemv_bandwidth_GB_per_s"]) * _GB
    if "attention_TFLOP_per_s" in block:
        attn = _num(w, "attention_TFLOP_per_s", block["attention_TFLOP_per_s"]) * 1e12
    rows_bw: dict[int, float] = {}
    ranges = block.get("rows_bandwidth_GB_per_s", {})
    if not isinstance(ranges, dict):
        raise SpecroofError(
            f"{w}: 'rows_bandwidth_GB_per_s' must be a table of max rows = GB/s, e.g. {{ \"2\" = 11.5 }} (got {ranges!r})"
        )
    for key, value in ranges.items():
        top = str(key).strip()
        if not top.isdigit() or int(top) < 2:
            raise SpecroofError(
                f"{w}: a key of 'rows_bandwidth_GB_per_s' is the max rows of its range, a whole number >= 2 "
                f"(one-token passes are gemv_bandwidth_GB_per_s's; got {key!r})"
            )
        rows_bw[int(top)] = _num(f"{w} (passes of up to {top} rows)", "rows_bandwidth_GB_per_s", value) * _GB
    peaks = _compute_block(f"{w}.compute", block.get("compute", {}))
    pass_over = None
    if "pass_overhead_us" in block:
        pass_over = _num(w, "pass_overhead_us", block["pass_overhead_us"], positive=False) * 1e-6
    layer_over = None
    if "layer_overhead_us" in block:
        layer_over = _num(w, "layer_overhead_us", block["layer_overhead_us"], positive=False) * 1e-6
    half = _num(w, "matmul_half_tokens", block.get("matmul_half_tokens", 0.0), positive=False)
    if half < 0:
        raise SpecroofError(f"{w}: field 'matmul_half_tokens' must be >= 0 (got {half})")
    provenance = {k: v for k, v in block.items() if k not in known}  # the rest is provenance
    return Measured(bw, peaks, pass_over, layer_over, half, provenance, gemv, attn, overlap, rows_bw)


# -- writing profiles ---------------------------------------------------------


def profile_data(hw: Hardware) -> dict[str, Any]:
    """``hw`` as the dict a profile TOML holds (units in the key names); :func:`parse_profile` reads it back."""
    data: dict[str, Any] = {"name": hw.name, "vendor": hw.vendor, "kind": hw.kind}
    if hw.aliases:
        data["aliases"] = list(hw.aliases)
    if hw.tdp_w is not None:
        data["tdp_W"] = hw.tdp_w
    if hw.notes:
        data["notes"] = hw.notes
    mem: dict[str, Any] = {"bandwidth_GB_per_s": hw.bandwidth_bytes_per_s / _GB}
    if hw.memory_bytes is not None:
        mem["capacity_GB"] = hw.memory_bytes / _GB
    mem["source"] = hw.sources.get("memory") or "unknown"
    data["memory"] = mem
    data["compute"] = {**_peaks_data(hw.peak_flop_per_s), "source": hw.sources.get("compute") or "unknown"}
    node = hw.gpus_per_node != GPUS_PER_NODE
    if hw.interconnect_bytes_per_s is not None or "interconnect" in hw.sources or node:
        link: dict[str, Any] = {}
        if hw.interconnect_bytes_per_s is not None:
            link["per_direction_GB_per_s"] = hw.interconnect_bytes_per_s / _GB
        if node:
            link["gpus_per_node"] = hw.gpus_per_node
        link["source"] = hw.sources.get("interconnect", "")
        data["interconnect"] = link
    if hw.launch_overhead_s is not None:
        data["overhead"] = {"launch_us": hw.launch_overhead_s * 1e6, "source": hw.sources.get("overhead", "")}
    if hw.efficiency_memory != 1.0 or hw.efficiency_compute != 1.0 or "efficiency" in hw.sources:
        data["efficiency"] = {
            "memory": hw.efficiency_memory,
            "compute": hw.efficiency_compute,
            **{f"{d}_compute": v for d, v in hw.efficiency_compute_dtype.items()},
            "estimated": hw.efficiency_estimated,
            "source": hw.sources.get("efficiency") or "unknown",
        }
    if hw.measured is not None:
        data["measured"] = measured_data(hw.measured)
    return data


def _peaks_data(peaks: dict[str, float]) -> dict[str, float]:
    return {f"{d}_{'TOP' if d.startswith('int') else 'TFLOP'}_per_s": v / 1e12 for d, v in peaks.items()}


def measured_data(m: Measured) -> dict[str, Any]:
    """A ``[measured]`` block as a dict: the figures (units in the names), then their provenance."""
    out: dict[str, Any] = {}
    if m.bandwidth_bytes_per_s is not None:
        out["bandwidth_GB_per_s"] = m.bandwidth_bytes_per_s / _GB
    if m.gemv_bandwidth_bytes_per_s is not None:
        out["gemv_bandwidth_GB_per_s"] = m.gemv_bandwidth_bytes_per_s / _GB
    if m.rows_bandwidth_bytes_per_s:
        out["rows_bandwidth_GB_per_s"] = {str(k): v / _GB for k, v in sorted(m.rows_bandwidth_bytes_per_s.items())}
    if m.attention_flop_per_s is not None:
        out["attention_TFLOP_per_s"] = m.attention_flop_per_s / 1e12
    if m.pass_overhead_s is not None:
        out["pass_overhead_us"] = m.pass_overhead_s * 1e6
    if m.layer_overhead_s is not None:
        out["layer_overhead_us"] = m.layer_overhead_s * 1e6
    if m.matmul_half_tokens:
        out["matmul_half_tokens"] = m.matmul_half_tokens
    if m.overlap is not None:
        out["overlap"] = m.overlap
    out.update({k: (v if isinstance(v, (str, int, float, bool, list)) else str(v)) for k, v in m.provenance.items()})
    if m.peak_flop_per_s:
        out["compute"] = _peaks_data(m.peak_flop_per_s)
    return out


def write_profile(hw: Hardware, path: str | Path) -> Path:
    """Write ``hw`` as a profile TOML (the one writer: datasheet blocks, aliases, notes, efficiency, measured)."""
    import tomli_w

    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(tomli_w.dumps(profile_data(hw)))
    return p


# -- finding profiles ---------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _builtin_paths() -> dict[str, Path]:
    root = resources.files("hardware_profiles")
    return {Path(p.name).stem: Path(str(p)) for p in root.iterdir() if p.name.endswith(".toml")}


@functools.cache
def builtin_profile_dir() -> str:
    """The folder of the built-in profiles, as the paths :func:`profile_path` gives for their names are spelt."""
    return str(resources.files("hardware_profiles"))


def load_profile_file(path: str | Path) -> Hardware:
    """Load and validate one profile TOML file."""
    p = Path(path)
    if not p.is_file():
        raise SpecroofError(f"hardware profile file {str(p)!r} does not exist")
    try:
        data = tomllib.loads(p.read_text())
    except UnicodeDecodeError:
        raise SpecroofError(f"{p}: not a text file (a hardware profile is UTF-8 TOML)") from None
    except tomllib.TOMLDecodeError as exc:
        raise SpecroofError(f"{p}: not valid TOML ({exc})") from None
    hw = parse_profile(data, str(p), p.stem)
    return dataclasses.replace(hw, path=str(p))


def _tokens(text: str) -> set[str]:
    return {t for t in re.split(r"[^a-z0-9]+", text.lower()) if t}


def resolve_hardware_name(name: str) -> str:
    """Map a user's name (``'H100 SXM'``, ``'a100-80gb-sxm4'``) to a built-in profile id.

    Exact ids and aliases win; otherwise every word of ``name`` must appear in a
    profile's id, name or aliases. Ambiguous names list the choices; unknown names
    suggest the closest ids.
    """
    paths = _builtin_paths()
    key = name.strip().lower()
    if key in paths:
        return key
    profiles = {pid: load_profile_file(p) for pid, p in paths.items()}
    for pid, hw in profiles.items():
        if key in (a.lower() for a in hw.aliases):
            return pid
    want = _tokens(key)
    hits = []
    for pid, hw in profiles.items():
        have = _tokens(pid) | _tokens(hw.name) | set().union(*(_tokens(a) for a in hw.aliases))
        if want and want <= have:
            hits.append(pid)
    if len(hits) == 1:
        return hits[0]
    if hits:
        raise SpecroofError(f"hardware name {name!r} is ambiguous; choose one of: {', '.join(sorted(hits))}")
    close = difflib.get_close_matches(key, list(paths), n=4, cutoff=0.4)
    hint = f"; closest: {', '.join(close)}" if close else ""
    raise SpecroofError(f"unknown hardware {name!r}{hint} (see `specroof hardware list`)")


def profile_path(name_or_path: str | Path) -> Path:
    """The file :func:`load_hardware` reads for ``name_or_path``: a ``.toml`` name or an existing file is itself,
    anything else a built-in profile's id, alias or name (:func:`resolve_hardware_name`; unknown: SpecroofError)."""
    text = str(name_or_path)
    # os.path.isfile, not Path.is_file: one stat without building a Path (the named Pricing's lookup calls this)
    if text.endswith(".toml") or os.path.isfile(text):
        return Path(text)
    return _builtin_paths()[_resolve_cached(text)]


def load_hardware(name_or_path: str | Path | Hardware) -> Hardware:
    """Load a built-in profile by id/alias/name, or a TOML file by path."""
    if isinstance(name_or_path, Hardware):
        return name_or_path
    path = str(profile_path(name_or_path))
    try:
        stamp = os.stat(path).st_mtime_ns
    except OSError:
        stamp = -1
    return _load_cached(path, stamp)


@functools.lru_cache(maxsize=256)
def _resolve_cached(name: str) -> str:
    return resolve_hardware_name(name)


@functools.lru_cache(maxsize=256)
def _load_cached(path: str, stamp: int) -> Hardware:
    """A profile read once per file version (``stamp``: its mtime): Hardware is frozen, so sharing it is safe."""
    return load_profile_file(path)


def list_hardware() -> pd.DataFrame:
    """All built-in profiles as a DataFrame (one row each, unit-suffixed columns)."""
    rows = [load_profile_file(p).summary() for _, p in sorted(_builtin_paths().items())]
    return pd.DataFrame(rows)

"""Engine profiles: what the software that runs the model adds to the hardware roofline.

The datasheet roofline prices bytes and FLOPs. A real engine also pays for launching
kernels from a host thread, for the floor of tiny kernels, for the bookkeeping of a
speculative round, for the latency of every all-reduce, and it reaches only a fraction
of the datasheet bandwidth (less again when it dequantises int8/int4 weights on the
fly). An :class:`Engine` holds those terms, SI units; ``engine_profiles/*.toml`` ship
three (``eager``, ``compiled``, ``serving``), each number with its source or the command
that fitted it. ``e_m``, ``e_c`` are the GPU's own streaming and GEMM efficiency (its
profile's ``[efficiency]``); docs/cost-model.md (section 6) writes the composition out:

    t_device = roofline(bytes / (f_bw e_m B), FLOPs / (f_c e_c P)) + pass + L x layer + 2L x (lat_ar + ar bytes / link)
    t_host   = host_pass + L x host_layer
    t_pass   = max(t_device, t_host)            (the host launches ahead while the GPU works)

``engine=None`` everywhere is the pure datasheet roofline: no term above is added.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from roofline.core.errors import SpecroofError

#: the all-reduce implementations an engine profile may name (``[collectives] allreduce``, docs/cost-model.md,
#: section 60): the engine's own small-message kernel, or NCCL's
ALLREDUCE_IMPLS = ("custom", "nccl")

ENGINE_DIR = Path(__file__).resolve().parents[2] / "engine_profiles"

#: the engine a measured profile (``specroof measure bench/fit``) was measured under: its figures include it
HARNESS_ENGINE = "eager PyTorch (specroof's measure harness: static KV cache, one launch per operator)"

#: weight dtypes whose kernels dequantise on the fly (their bandwidth is the engine's, per dtype)
QUANTISED_WEIGHTS = ("int8", "int4", "fp8")

#: the operators whose kernels an eager engine issues one by one, per instance (docs/cost-model.md, section 6):
#: per layer two norms, the q/k/v projections, rotary embedding, the KV-cache write, attention, the output
#: projection, each MLP matrix, the activation (and its gate product), two residual adds; MoE layers add the
#: router's kernels and each touched expert's gather/scatter; per pass the embedding, the final norm, the LM
#: head and the sampling/stopping kernels of the decoding loop. Transformers' MoE forward (docs/cost-model.md,
#: section 53) adds ``moe_layer`` (kernels an MoE layer issues once whatever the experts: the expert mask, or the
#: sort, gathers and grouped GEMMs of a grouped experts kernel), ``grouped_experts`` (1: the routed experts run as
#: those per-layer kernels, none per expert; 0: a loop over the experts hit), ``sync`` and ``expert_sync`` (host
#: reads of a device value, per MoE layer and per expert hit, each a wait for the device to drain)
LAUNCH_KEYS = (
    "norm",
    "qkv",
    "rotary",
    "kv_update",
    "attention",
    "out_proj",
    "mlp_matrix",
    "activation",
    "residual",
    "router",
    "expert",
    "moe_layer",
    "grouped_experts",
    "sync",
    "expert_sync",
    "embed",
    "lm_head",
    "sampling",
)

#: names that stand for another engine (kept so the published rows and old commands keep their meaning)
ALIASES = {"eager": "hf", "serving": "vllm"}

#: the Transformers major version ``--engine hf`` prices when none is installed (docs/cost-model.md, section 53): the
#: current major, whose MoE layers run grouped experts kernels (``experts_implementation`` "grouped_mm")
HF_DEFAULT_MAJOR = 5
#: the Transformers majors with a profile of their own (``hf-4``: the loop over the experts hit; ``hf-5``: grouped)
HF_MAJORS = (4, 5)


@functools.lru_cache(maxsize=1)
def installed_transformers_major() -> int | None:
    """The major version of the installed ``transformers`` distribution (its metadata, never an import), or None.
    Read once per process: a metadata lookup scans the installed distributions (about 0.6 ms), and every
    ``load_engine("hf")`` asks."""
    from importlib import metadata

    try:
        version = metadata.version("transformers")
    except metadata.PackageNotFoundError:
        return None
    head = version.split(".", 1)[0]
    return int(head) if head.isdigit() else None


def hf_engine_name(major: int | None = None) -> str:
    """The profile ``--engine hf`` stands for: the installed Transformers major's (``hf-4``, ``hf-5``), or the current
    major's (:data:`HF_DEFAULT_MAJOR`) when none is installed or the installed one has no profile; ``hf`` itself is the
    current major's profile."""
    m = installed_transformers_major() if major is None else major
    if m is None or m not in HF_MAJORS or m == HF_DEFAULT_MAJOR:
        return "hf"
    return f"hf-{m}"


def hf_version_text() -> str:
    """What ``--engine hf`` prices a mixture's experts as, for the output: the installed Transformers major's forward,
    or the current major's when none is installed (section 53)."""
    m = installed_transformers_major()
    name = hf_engine_name(m)
    how = "a loop over the experts hit" if name == "hf-4" else "grouped experts GEMMs"
    if m is None:
        return f"no transformers installed: priced as transformers {HF_DEFAULT_MAJOR}, MoE experts as {how}; --engine hf-4 prices 4's loop"
    if m not in HF_MAJORS:
        return f"transformers {m} installed, priced as {HF_DEFAULT_MAJOR}: MoE experts as {how}"
    other = "hf-5" if name == "hf-4" else "hf-4"
    return f"transformers {m} installed: MoE experts as {how}; --engine {other} prices the other major"


@dataclass(frozen=True)
class Engine:
    """The software terms of a pass and of a speculative round, seconds and fractions (see the module docstring)."""

    name: str
    description: str = ""
    #: achieved share of what the GPU can reach (datasheet x its profile's [efficiency]: the streaming
    #: bandwidth and best-shape GEMM rate of that GPU family), in (0, 1]
    bandwidth_fraction: float = 1.0
    compute_fraction: float = 1.0
    #: device-side fixed time per pass and per layer (kernels too small to reach the roofline)
    device_pass_s: float = 0.0
    device_layer_s: float = 0.0
    #: host-side time per pass and per layer (Python, dispatch, launches); overlaps the device's work
    host_pass_s: float = 0.0
    host_layer_s: float = 0.0
    #: host time per speculative round outside the passes (acceptance, tree buffers, cache bookkeeping)
    round_s: float = 0.0
    #: eager engines: host seconds to issue one kernel (Python, the framework's dispatch, the driver's launch);
    #: the kernels a pass issues are counted from the model (``launches`` per instance of each operator)
    host_launch_s: float = 0.0
    #: kernels per instance of each operator of the pass (keys: :data:`LAUNCH_KEYS`); empty: not an eager engine
    launches: Mapping[str, float] = field(default_factory=dict)
    #: host seconds per step outside the model's kernels (the scheduler, input preparation, the generate loop),
    #: plus a share per running sequence; ``step_overlap``: it runs while the device works (an overlap scheduler)
    host_step_s: float = 0.0
    host_step_per_seq_s: float = 0.0
    step_overlap: bool = False
    #: share of the engine's streaming rate that its attention kernels reach on the (paged) KV cache, in (0, 1]
    kv_bandwidth_fraction: float = 1.0
    #: passes over the fp32 logits (batch x tokens x vocab x 4 bytes) that sampling makes on the device
    sampling_passes: float = 0.0
    #: the fused-MoE kernel (docs/cost-model.md, section 40): device seconds per MoE layer and pass that the call
    #: takes whatever it streams (routing alignment, two grouped GEMMs, activation, combine: each kernel's floor),
    #: and per distinct routed expert a layer's tokens touch (the tiles of one expert's slice, their pipeline's fill)
    moe_layer_s: float = 0.0
    moe_expert_s: float = 0.0
    #: the fused-MoE kernel's tile efficiency (docs/cost-model.md, section 56): a tile of BLOCK_SIZE_M rows runs its
    #: FLOPs at BLOCK_SIZE_M / (BLOCK_SIZE_M + this) of the GPU's best-shape GEMM rate (0: at the engine's GEMM rate)
    moe_tile_half_rows: float = 0.0
    #: latency of one tensor-parallel all-reduce of a hidden state, on top of its bytes over the link
    allreduce_latency_s: float = 0.0
    #: the all-reduce the engine runs (docs/cost-model.md, section 60): ``custom``, its own small-message kernel
    #: (``allreduce_latency_s`` plus the bytes over the link), or ``nccl``, NCCL's, priced from public tables
    allreduce: str = "custom"
    #: tensor parallelism shards the layers only and every rank holds and runs the whole LM head (gpt-fast's
    #: ``apply_tp``); False: the head is split over the ranks (vLLM's ``ParallelLMHead``, SGLang, TensorRT-LLM)
    lm_head_replicated: bool = False
    #: per quantised weight dtype: bandwidth its kernels reach relative to bf16's, in (0, 1]
    weight_bandwidth_ratio: Mapping[str, float] = field(default_factory=dict)
    #: per quantised weight dtype: bytes streamed per weight byte (group scales and zeros: int4 g32 bf16 -> 1.25)
    weight_bytes_factor: Mapping[str, float] = field(default_factory=dict)
    #: whether a draft model's or EAGLE/MTP layer's passes are sharded over the target's tensor-parallel devices
    #: (vLLM, SGLang, TensorRT-LLM, gpt-fast) or run whole on one device (Hugging Face); ``[speculative]``
    draft_tensor_parallel: bool = False
    #: ``[speculative]`` terms of a round at batch (docs/cost-model.md, section 32). Whether the per-step host time
    #: hides under the device in a speculative round (None: as in plain decoding, ``step_overlap``): SGLang's
    #: overlap scheduler is switched off for EAGLE before its spec v2, so the step it hides under plain decoding
    #: shows in every round
    spec_step_overlap: bool | None = None
    #: host seconds per speculative round per running sequence (the per-request accept/commit loop on the host)
    round_per_seq_s: float = 0.0
    #: seconds per speculative round between its passes that no scheduler overlap hides (docs/cost-model.md, section
    #: 37): the tree and mask build, the acceptance kernels and the synchronisation that reads them, the attention
    #: metadata of the verify and draft-extend passes; SGLang's EAGLE worker, spec v1 and v2 alike
    round_fixed_s: float = 0.0
    #: the draft passes run inside one engine step (a serving engine's worker): the per-step host time is paid
    #: once per round, with the verify pass, not once per draft pass as a generate loop pays it
    draft_in_step: bool = False
    #: the engine's default cap on running requests while it speculates (SGLang's EAGLE: 48); 0: none
    spec_max_running: int = 0
    #: the largest pass, in tokens, the engine runs inside a captured CUDA graph by default (``[graphs]``); a larger
    #: pass runs without graphs, which no profile prices (docs/cost-model.md, section 62); 0: no limit known
    graph_max_tokens: int = 0
    #: the same on data-centre Blackwell (compute capability 10.x: :data:`SM100_GPUS`); 0: as ``graph_max_tokens``
    graph_max_tokens_sm100: int = 0
    #: the engine's own setting that raises the capture size (``[graphs] knob``), quoted by :meth:`graph_note`
    graph_knob: str = ""
    #: eager engines: the per-kernel host cost measured across hosts, (lowest, highest) seconds; a prediction's
    #: host-speed band (:meth:`host_speed_span`), not a fitted value; None: not an eager engine or no range
    host_launch_range_s: tuple[float, float] | None = None
    #: extra device seconds per pass: each ``term(tokens, batch)`` (a pass's tokens, batch x new tokens, and its
    #: sequences) returns seconds, written with arithmetic alone so that it takes a sweep's arrays and one
    #: configuration's floats. The public place to add a term to the time model: every pricing path (arrays, the
    #: scalar pricers, rounds, speedups) composes a pass through :meth:`roofline.costing.timemodel.TimeModel.finish`, which
    #: adds them (docs/cost-model.md, section 47). Set in code (``dataclasses.replace``), not read from a profile
    pass_terms: tuple[Callable[[Any, Any], Any], ...] = ()
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)
    #: an engine fitted on the user's machine (``specroof measure engine``): its ``[measured]`` provenance (framework
    #: and version, torch, device, host CPU, date, command, the hardware profile it was fitted against)
    measured: Mapping[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, float) and not math.isfinite(v):
                raise SpecroofError(f"engine {self.name!r}: {f.name} must be finite (got {v})")
        for key in ("bandwidth_fraction", "compute_fraction", "kv_bandwidth_fraction"):
            v = getattr(self, key)
            if not 0.0 < v <= 1.0:
                raise SpecroofError(f"engine {self.name!r}: {key} must lie in (0, 1] (got {v})")
        for key in (
            "device_pass_s",
            "device_layer_s",
            "host_pass_s",
            "host_layer_s",
            "round_s",
            "allreduce_latency_s",
            "host_launch_s",
            "host_step_s",
            "host_step_per_seq_s",
            "sampling_passes",
            "round_per_seq_s",
            "moe_layer_s",
            "moe_expert_s",
            "moe_tile_half_rows",
            "round_fixed_s",
        ):
            if getattr(self, key) < 0:
                raise SpecroofError(f"engine {self.name!r}: {key} must be >= 0 (got {getattr(self, key)})")
        if self.allreduce not in ALLREDUCE_IMPLS:
            raise SpecroofError(
                f"engine {self.name!r}: allreduce must be one of {', '.join(ALLREDUCE_IMPLS)} (got {self.allreduce!r})"
            )
        for key, n in self.launches.items():
            if key not in LAUNCH_KEYS or not (math.isfinite(n) and 0 <= n <= 100):
                raise SpecroofError(
                    f"engine {self.name!r}: launches[{key!r}] must be a known operator ({', '.join(LAUNCH_KEYS)}) "
                    f"with 0 to 100 kernels (got {n})"
                )
        if self.launches and self.host_launch_s <= 0:
            raise SpecroofError(f"engine {self.name!r}: launches are counted but host_launch_s is {self.host_launch_s}")
        if (
            isinstance(self.spec_max_running, bool)
            or not isinstance(self.spec_max_running, int)
            or not (0 <= self.spec_max_running <= 1_000_000)
        ):
            raise SpecroofError(
                f"engine {self.name!r}: max_running_requests must be a whole number >= 0 (got {self.spec_max_running!r})"
            )
        for key in ("graph_max_tokens", "graph_max_tokens_sm100"):
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, int) or not (0 <= v <= 1_000_000):
                raise SpecroofError(f"engine {self.name!r}: {key} must be a whole number of tokens >= 0 (got {v!r})")
        if self.host_launch_range_s is not None:
            lo, hi = self.host_launch_range_s
            if not (math.isfinite(lo) and math.isfinite(hi) and 0 < lo <= hi):
                raise SpecroofError(
                    f"engine {self.name!r}: launch_us_range must be two finite costs, lowest first, > 0 "
                    f"(got {lo * 1e6:g}, {hi * 1e6:g} us)"
                )
        for dt, r in self.weight_bandwidth_ratio.items():
            if dt not in QUANTISED_WEIGHTS or not 0.0 < r <= 1.0:
                raise SpecroofError(f"engine {self.name!r}: weight bandwidth ratio for {dt!r} must be in (0, 1]")
        for dt, r in self.weight_bytes_factor.items():
            if dt not in QUANTISED_WEIGHTS or not 1.0 <= r <= 4.0:
                raise SpecroofError(f"engine {self.name!r}: weight bytes factor for {dt!r} must be in [1, 4]")

    def host_s(self, n_layers: int) -> float:
        """Host seconds to issue one pass of ``n_layers`` layers (the per-pass and per-layer terms; launches aside)."""
        return self.host_pass_s + n_layers * self.host_layer_s

    def with_host_launch(self, host_launch_us: float | None) -> Engine:
        """This engine with the user's own per-kernel host cost (``--host-launch-us``, or ``measure bench``'s dispatch).

        The kernel counts stay the engine's; only what one kernel costs this host changes.
        """
        if host_launch_us is None:
            return self
        if not self.launches:
            raise SpecroofError(
                f"--host-launch-us prices an eager engine's kernels; {self.name!r} launches whole graphs "
                f"(choose one of {', '.join(e for e in list_engines() if _is_eager(e))})"
            )
        if not (math.isfinite(host_launch_us) and 0.1 <= host_launch_us <= 1000):
            raise SpecroofError(f"host_launch_us must lie in [0.1, 1000] microseconds (got {host_launch_us})")
        return dataclasses.replace(self, host_launch_s=host_launch_us * 1e-6, name=f"{self.name}@{host_launch_us:g}us")

    def describe(self) -> str:
        return f"{self.name}: {self.description}" if self.description else self.name

    # -- the terms of a speculative round at batch (docs/cost-model.md, section 32) -------------------------

    def step_host_s(self, batch: Any) -> Any:
        """The per-step host time at ``batch`` running sequences: ``step_us + batch x step_per_seq_us`` (a float for
        one configuration's float batch: the scalar pricers' pass; an array otherwise)."""
        return self.host_step_s + self.host_step_per_seq_s * (
            batch if type(batch) is float else np.asarray(batch, dtype=float)
        )

    @property
    def step_hidden_only_when_plain(self) -> bool:
        """The per-step host time hides under the device in plain decoding but not while speculating."""
        return self.step_overlap and self.spec_step_overlap is False

    def round_host_s(self, batch: Any) -> Any:
        """Host seconds of one speculative round of ``batch`` sequences outside its passes.

        ``round + batch x round_per_seq``, plus the per-step host time where plain decoding hides it and a round
        does not (SGLang's EAGLE worker before spec v2): the verify pass is priced as plain decoding prices a
        pass, ``max(device, step)``, which is the device's time wherever the overlap scheduler pays, so the step
        is added here once, as the round runs it after the device. A round that overlaps its host work with the
        device (``[speculative] step_overlap = true``: vLLM 0.14's async scheduling, SGLang's spec v2) hides its
        round terms as well: 0.
        """
        if self.spec_step_overlap is True:
            zero = np.zeros(np.shape(batch)) if np.ndim(batch) else 0.0
            return zero + self.round_fixed_s
        t = self.round_s + self.round_fixed_s + self.round_per_seq_s * np.asarray(batch, dtype=float)
        if self.step_hidden_only_when_plain:
            t = t + self.step_host_s(batch)
        return t

    def for_draft_passes(self) -> Engine:
        """The engine the draft passes of a round are priced under: without the per-step host time where the
        drafts run inside the step that the verify pass already pays for (``draft_in_step``)."""
        if not self.draft_in_step or not (self.host_step_s or self.host_step_per_seq_s):
            return self
        return dataclasses.replace(self, host_step_s=0.0, host_step_per_seq_s=0.0)

    def spec_batch(self, batch: int) -> int:
        """The sequences a speculative round runs when ``batch`` are submitted: the engine's cap, if it has one."""
        return min(int(batch), self.spec_max_running) if self.spec_max_running else int(batch)

    def graph_limit(self, hardware_id: str) -> int:
        """The largest pass (tokens) the engine captures in a CUDA graph by default on ``hardware_id`` (0: none known)."""
        if self.graph_max_tokens_sm100 and hardware_id.startswith(SM100_GPUS):
            return self.graph_max_tokens_sm100
        return self.graph_max_tokens

    def graph_note(self, hardware_id: str, batch: int, new_tokens: int) -> str | None:
        """Why a pass of ``batch`` x ``new_tokens`` is not priced as the engine runs it, or None where it is: past the
        engine's default CUDA-graph capture size the pass runs without graphs (docs/cost-model.md, section 62)."""
        limit, tokens = self.graph_limit(hardware_id), int(batch) * int(new_tokens)
        if not limit or tokens <= limit:
            return None
        return (
            f"the verify pass of {int(batch)} x {int(new_tokens)} = {tokens:,} tokens is past {self.name}'s largest "
            f"CUDA-graph capture size by default ({limit:,} tokens on {hardware_id}): the engine runs it without "
            f"CUDA graphs, slower than priced here (every pass is priced inside its graph); set the capture size to "
            f"at least {tokens:,} ({self.graph_knob or 'the engine'}) to run it as priced"
        )

    def host_speed_span(self) -> tuple[float, float] | None:
        """(lowest, highest) of the per-kernel host cost over the central one the engine prices with: how much
        faster or slower a host-bound eager pass runs on the hosts measured (None: no range)."""
        if self.host_launch_range_s is None or not self.host_launch_s:
            return None
        lo, hi = self.host_launch_range_s
        return lo / self.host_launch_s, hi / self.host_launch_s


#: TOML table -> {key in the file (unit in the name): Engine field, scale to SI}
_LAYOUT: dict[str, dict[str, tuple[str, float]]] = {
    "device": {
        "bandwidth_fraction": ("bandwidth_fraction", 1.0),
        "compute_fraction": ("compute_fraction", 1.0),
        "pass_us": ("device_pass_s", 1e-6),
        "layer_us": ("device_layer_s", 1e-6),
        "kv_bandwidth_fraction": ("kv_bandwidth_fraction", 1.0),
        "sampling_passes": ("sampling_passes", 1.0),
        "moe_layer_us": ("moe_layer_s", 1e-6),
        "moe_expert_us": ("moe_expert_s", 1e-6),
        "moe_tile_half_rows": ("moe_tile_half_rows", 1.0),
    },
    "host": {
        "pass_us": ("host_pass_s", 1e-6),
        "layer_us": ("host_layer_s", 1e-6),
        "round_us": ("round_s", 1e-6),
        "launch_us": ("host_launch_s", 1e-6),
        "step_us": ("host_step_s", 1e-6),
        "step_per_seq_us": ("host_step_per_seq_s", 1e-6),
    },
    "collectives": {"allreduce_latency_us": ("allreduce_latency_s", 1e-6)},
}


#: ``[speculative]`` flags -> Engine field (true/false in the file)
_SPECULATIVE_FLAGS = {
    "draft_tensor_parallel": "draft_tensor_parallel",
    "step_overlap": "spec_step_overlap",
    "draft_in_step": "draft_in_step",
}
#: every key a ``[speculative]`` table may hold besides its source
_SPECULATIVE_KEYS = (*_SPECULATIVE_FLAGS, "round_per_seq_us", "round_fixed_us", "max_running_requests")


#: ``[graphs]`` keys -> Engine field: the default CUDA-graph capture size, in tokens (docs/cost-model.md, section 62)
_GRAPH_KEYS = {"max_tokens": "graph_max_tokens", "max_tokens_sm100": "graph_max_tokens_sm100"}
#: data-centre Blackwell (compute capability 10.x), where vLLM captures up to 1024 tokens by default instead of 512
SM100_GPUS = ("b200", "b300", "gb200", "gb300")

#: what every ``[measured]`` block of a measured engine profile must say (strings)
MEASURED_REQUIRED = ("framework", "framework_version", "torch", "device", "host_cpu", "date", "command", "hardware")
#: the frameworks ``specroof measure engine`` knows
MEASURED_FRAMEWORKS = ("hf", "torch-eager", "torch-compile", "vllm", "sglang")


def check_measured(block: Any, where: str) -> dict[str, Any]:
    """A ``[measured]`` block, validated: a table with every required field a non-empty string, figures finite."""
    if not isinstance(block, Mapping):
        raise SpecroofError(f"{where}: [measured] must be a table")
    for key in MEASURED_REQUIRED:
        if key not in block:
            raise SpecroofError(f"{where}: [measured] is missing {key!r} (required: {', '.join(MEASURED_REQUIRED)})")
        if not isinstance(block[key], str) or not block[key].strip():
            raise SpecroofError(f"{where}: [measured] {key} must be a non-empty string (got {block[key]!r})")
    if block["framework"] not in MEASURED_FRAMEWORKS:
        raise SpecroofError(
            f"{where}: [measured] framework must be one of {', '.join(MEASURED_FRAMEWORKS)} (got {block['framework']!r})"
        )
    for key, value in block.items():
        if key in MEASURED_REQUIRED:
            continue
        if isinstance(value, float) and value != value:
            raise SpecroofError(f"{where}: [measured] {key} is NaN")
        if not isinstance(value, (str, int, float, bool)):
            raise SpecroofError(f"{where}: [measured] {key} must be a string or a number (got {type(value).__name__})")
    return dict(block)


def _table(data: Mapping[str, Any], name: str, where: str) -> Mapping[str, Any]:
    """The profile's ``[name]`` table (empty where it has none); anything else there is an error."""
    block = data.get(name, {})
    if not isinstance(block, Mapping):
        raise SpecroofError(f"{where}: [{name}] must be a table")
    return block


def engine_from_dict(data: Mapping[str, Any], where: str = "engine") -> Engine:
    """An :class:`Engine` from the TOML layout (``engine_profiles/*.toml``); every unknown key is an error."""
    if "name" not in data:
        raise SpecroofError(f"{where}: missing 'name'")
    kw: dict[str, Any] = {"name": str(data["name"]), "description": str(data.get("description", ""))}
    sources: dict[str, str] = {}
    known_top = {"name", "description", "weight_only", "launches", "speculative", "graphs", "measured", *_LAYOUT}
    for key in data:
        if key not in known_top:
            raise SpecroofError(f"{where}: unknown key {key!r} (known: {', '.join(sorted(known_top))})")
    for table, keys in _LAYOUT.items():
        block = _table(data, table, where)
        for key, value in block.items():
            if key == "source":
                sources[table] = str(value)
                continue
            if table == "host" and key == "step_overlap":
                if not isinstance(value, bool):
                    raise SpecroofError(f"{where}: [host] step_overlap must be true or false (got {value!r})")
                kw["step_overlap"] = value
                continue
            if table == "collectives" and key == "lm_head":
                if value not in ("replicated", "sharded"):
                    raise SpecroofError(
                        f"{where}: [collectives] lm_head must be 'replicated' or 'sharded' (got {value!r})"
                    )
                kw["lm_head_replicated"] = value == "replicated"
                continue
            if table == "collectives" and key == "allreduce":
                if value not in ALLREDUCE_IMPLS:
                    raise SpecroofError(
                        f"{where}: [collectives] allreduce must be one of {', '.join(ALLREDUCE_IMPLS)} (got {value!r})"
                    )
                kw["allreduce"] = value
                continue
            if table == "host" and key == "launch_us_range":
                if (
                    not isinstance(value, list)
                    or len(value) != 2
                    or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
                ):
                    raise SpecroofError(f"{where}: [host] launch_us_range must be [lowest, highest] us (got {value!r})")
                kw["host_launch_range_s"] = (float(value[0]) * 1e-6, float(value[1]) * 1e-6)
                continue
            if key not in keys:
                raise SpecroofError(
                    f"{where}: unknown key {key!r} in [{table}] (known: {', '.join(keys)}"
                    + (", step_overlap, launch_us_range" if table == "host" else "")
                    + (", allreduce, lm_head" if table == "collectives" else "")
                    + ", source)"
                )
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                raise SpecroofError(f"{where}: [{table}] {key} must be a number (got {value!r})")
            name, scale = keys[key]
            kw[name] = float(value) * scale
    launches: dict[str, float] = {}
    block = _table(data, "launches", where)
    for key, value in block.items():
        if key == "source":
            sources["launches"] = str(value)
            continue
        if key not in LAUNCH_KEYS:
            raise SpecroofError(f"{where}: unknown key {key!r} in [launches] (known: {', '.join(LAUNCH_KEYS)}, source)")
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise SpecroofError(f"{where}: [launches] {key} must be a number (got {value!r})")
        launches[key] = float(value)
    kw["launches"] = launches
    spec = _table(data, "speculative", where)
    for key, value in spec.items():
        if key == "source":
            sources["speculative"] = str(value)
        elif key in _SPECULATIVE_FLAGS:
            if not isinstance(value, bool):
                raise SpecroofError(f"{where}: [speculative] {key} must be true or false (got {value!r})")
            kw[_SPECULATIVE_FLAGS[key]] = value
        elif key in ("round_per_seq_us", "round_fixed_us"):
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                raise SpecroofError(f"{where}: [speculative] {key} must be a number (got {value!r})")
            kw[key.removesuffix("_us") + "_s"] = float(value) * 1e-6
        elif key == "max_running_requests":
            if not isinstance(value, int) or isinstance(value, bool):
                raise SpecroofError(
                    f"{where}: [speculative] max_running_requests must be a whole number (got {value!r})"
                )
            kw["spec_max_running"] = value
        else:
            raise SpecroofError(
                f"{where}: unknown key {key!r} in [speculative] (known: {', '.join(_SPECULATIVE_KEYS)}, source)"
            )
    graphs = _table(data, "graphs", where)
    for key, value in graphs.items():
        if key == "source":
            sources["graphs"] = str(value)
        elif key == "knob":
            kw["graph_knob"] = str(value)
        elif key in _GRAPH_KEYS:
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise SpecroofError(f"{where}: [graphs] {key} must be a whole number of tokens >= 0 (got {value!r})")
            kw[_GRAPH_KEYS[key]] = value
        else:
            raise SpecroofError(
                f"{where}: unknown key {key!r} in [graphs] (known: {', '.join(_GRAPH_KEYS)}, knob, source)"
            )
    wo = _table(data, "weight_only", where)
    ratio, factor = {}, {}
    for key, value in wo.items():
        if key == "source":
            sources["weight_only"] = str(value)
        elif key.endswith("_bandwidth_ratio"):
            ratio[key.removesuffix("_bandwidth_ratio")] = float(value)
        elif key.endswith("_bytes_factor"):
            factor[key.removesuffix("_bytes_factor")] = float(value)
        else:
            raise SpecroofError(
                f"{where}: unknown key {key!r} in [weight_only] (known: <dtype>_bandwidth_ratio, <dtype>_bytes_factor)"
            )
    measured = check_measured(data["measured"], where) if "measured" in data else {}
    return Engine(**kw, weight_bandwidth_ratio=ratio, weight_bytes_factor=factor, sources=sources, measured=measured)


def engine_data(engine: Engine) -> dict[str, Any]:
    """The TOML layout of ``engine`` (the inverse of :func:`engine_from_dict`)."""
    out: dict[str, Any] = {"name": engine.name}
    if engine.description:
        out["description"] = engine.description
    for table, keys in _LAYOUT.items():
        block: dict[str, Any] = {key: getattr(engine, name) / scale for key, (name, scale) in keys.items()}
        if table == "host":
            block["step_overlap"] = engine.step_overlap
        if table == "collectives" and engine.allreduce != "custom":
            block["allreduce"] = engine.allreduce
        if table == "collectives" and engine.lm_head_replicated:
            block["lm_head"] = "replicated"
        if table in engine.sources:
            block["source"] = engine.sources[table]
        out[table] = block
    if engine.launches or "launches" in engine.sources:
        out["launches"] = dict(engine.launches) | (
            {"source": engine.sources["launches"]} if "launches" in engine.sources else {}
        )
    wo: dict[str, Any] = {f"{d}_bandwidth_ratio": r for d, r in engine.weight_bandwidth_ratio.items()}
    wo |= {f"{d}_bytes_factor": r for d, r in engine.weight_bytes_factor.items()}
    if "weight_only" in engine.sources:
        wo["source"] = engine.sources["weight_only"]
    out["weight_only"] = wo
    if engine.measured:
        out["measured"] = dict(engine.measured)
    spec: dict[str, Any] = {"draft_tensor_parallel": engine.draft_tensor_parallel}
    if engine.spec_step_overlap is not None:
        spec["step_overlap"] = engine.spec_step_overlap
    if engine.draft_in_step:
        spec["draft_in_step"] = True
    if engine.round_per_seq_s:
        spec["round_per_seq_us"] = engine.round_per_seq_s * 1e6
    if engine.round_fixed_s:
        spec["round_fixed_us"] = engine.round_fixed_s * 1e6
    if engine.spec_max_running:
        spec["max_running_requests"] = engine.spec_max_running
    if engine.host_launch_range_s is not None:
        out["host"]["launch_us_range"] = [v * 1e6 for v in engine.host_launch_range_s]
    out["speculative"] = spec | ({"source": engine.sources["speculative"]} if "speculative" in engine.sources else {})
    graphs: dict[str, Any] = {k: getattr(engine, f) for k, f in _GRAPH_KEYS.items() if getattr(engine, f)}
    graphs |= {"knob": engine.graph_knob} if engine.graph_knob else {}
    graphs |= {"source": engine.sources["graphs"]} if "graphs" in engine.sources else {}
    if graphs:
        out["graphs"] = graphs
    return out


def list_engines() -> list[str]:
    """Names of the shipped engine profiles (aliases included: ``eager`` is ``hf``, ``serving`` is ``vllm``)."""
    return sorted(p.stem for p in ENGINE_DIR.glob("*.toml"))


def canonical_engine(name: str | None) -> str | None:
    """The engine a name stands for (``eager`` -> ``hf``, ``serving`` -> ``vllm``; others unchanged)."""
    return None if name is None else ALIASES.get(name, name)


def _is_eager(name: str) -> bool:
    e = load_engine(name)
    return e is not None and bool(e.launches)


@functools.lru_cache(maxsize=64)
def _load_file(path: str) -> Engine:
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise SpecroofError(f"cannot read engine profile {p}: {e}") from None
    base = data.get("extends")
    if base is not None:
        # a profile that differs from a shipped one in a few tables (hf-4: Transformers 4's MoE loop): the base's tables,
        # each key overridden where this file gives it, so the shared fitted terms live in one file. A user's file
        # beside none of them extends the shipped profile of that name
        target = p.parent / f"{base}.toml"
        if not target.exists():
            target = ENGINE_DIR / f"{base}.toml"
        if not target.exists() or str(base) in ALIASES:
            raise SpecroofError(f"{p}: extends names {base!r}, which is not a shipped engine")
        try:
            merged = tomllib.loads(target.read_text())
        except (OSError, tomllib.TOMLDecodeError) as e:
            raise SpecroofError(f"cannot read engine profile {target}: {e}") from None
        if "extends" in merged or "alias_of" in merged:
            raise SpecroofError(f"{p}: extends names {base!r}, which itself extends or aliases another")
        for key, value in data.items():
            if key == "extends":
                continue
            if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
                merged[key] = {**merged[key], **value}
            else:
                merged[key] = value
        return engine_from_dict(merged, where=str(p))
    alias = data.get("alias_of")
    if alias is not None:
        if set(data) - {"name", "description", "alias_of"}:
            raise SpecroofError(f"{p}: an alias profile holds only name, description and alias_of")
        target = p.parent / f"{alias}.toml"
        if not target.exists() or str(alias) in ALIASES:
            raise SpecroofError(f"{p}: alias_of names {alias!r}, which is not a shipped engine")
        return _load_file(str(target))
    return engine_from_dict(data, where=str(p))


def load_engine(engine: Engine | str | Path | None) -> Engine | None:
    """An :class:`Engine` from itself, a shipped name (``hf``, ``torch-eager``, ``compiled``, ``vllm``, ``sglang``,
    ``trtllm``; the aliases ``eager`` and ``serving``) or a TOML path; None stays None. ``hf`` (and ``eager``) is the
    installed Transformers major's profile (``hf-4``, ``hf-5``; the current major's when none is installed)."""
    if engine is None or isinstance(engine, Engine):
        return engine
    if str(engine) in ("hf", "eager"):
        # Transformers' MoE forward changed between majors (section 53): the installed one's profile
        engine = hf_engine_name()
    p = Path(engine)
    if p.suffix == ".toml" or p.exists():
        return _load_file(str(p.resolve()))
    shipped = ENGINE_DIR / f"{engine}.toml"
    if not shipped.exists():
        raise SpecroofError(f"unknown engine {engine!r}: choose one of {', '.join(list_engines())} or give a TOML path")
    return _load_file(str(shipped))


def engine_group(engine: Engine | str | None) -> str:
    """The engine a band is kept for: a versioned profile is its engine (``vllm-0.12`` -> ``vllm``, ``sglang-spec-v2``
    -> ``sglang``, ``hf-4`` -> ``hf``), an alias what it stands for (``eager`` -> ``hf``, ``serving`` -> ``vllm``), none ``roofline``."""
    if engine is None:
        return "roofline"
    name = engine.name.split("@")[0] if isinstance(engine, Engine) else canonical_engine(str(engine)) or ""
    return name.split("-")[0] if name.startswith(("vllm-", "sglang-", "hf-")) else name

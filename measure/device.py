"""What device is this, and which hardware profile describes it.

GPU details come from nvidia-ml-py (the ``pynvml`` module) when a CUDA device
is present; CPU details from /proc and /sys. Versions of torch and the libraries
are always included, so every measurement carries its provenance.
"""

from __future__ import annotations

import functools
import os
import platform
import re
from pathlib import Path
from typing import Any

import numpy as np
import torch

from roofline.core.errors import SpecroofError
from roofline.costing.hardware import list_hardware


def default_device() -> torch.device:
    """CUDA when there is one, else the CPU."""
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def resolve_device(device: str | torch.device | None = None) -> torch.device:
    """``device`` as a torch.device (None: :func:`default_device`); CUDA asked for where there is none is an error."""
    try:
        dev = torch.device(device) if device is not None else default_device()
    except RuntimeError as exc:
        raise SpecroofError(f"unknown device {device!r}; use 'cpu' or 'cuda'") from exc
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise SpecroofError("a CUDA device was asked for but torch sees none")
    if dev.type not in ("cpu", "cuda"):
        raise SpecroofError(f"unsupported device type {dev.type!r}; use 'cpu' or 'cuda'")
    return dev


def device_memory(dev: torch.device) -> tuple[float | None, float | None]:
    """(total, available) bytes of ``dev``'s memory; None where it cannot be told."""
    if dev.type == "cuda":
        free, total = torch.cuda.mem_get_info(dev)
        return float(total), float(free)
    try:
        text = Path("/proc/meminfo").read_text()
    except OSError:
        return None, None
    got = {}
    for key in ("MemTotal", "MemAvailable"):
        for line in text.splitlines():
            if line.startswith(key + ":"):
                got[key] = float(line.split()[1]) * 1024
    return got.get("MemTotal"), got.get("MemAvailable")


def _cpu_caches() -> dict[str, int]:
    """The first CPU's caches, bytes by name ("L3 Unified"), from sysfs; empty where it says nothing."""
    caches = {}
    for idx in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            level = (idx / "level").read_text().strip()
            kind = (idx / "type").read_text().strip()
            size = (idx / "size").read_text().strip()
            mult = {"K": 1024, "M": 1024**2, "G": 1024**3}.get(size[-1], 1)
            caches[f"L{level} {kind}"] = int(size.rstrip("KMG")) * mult
        except (OSError, ValueError):
            continue
    return caches


@functools.lru_cache(maxsize=1)
def last_level_cache_bytes() -> int:
    """The CPU's largest cache in bytes (64 MiB, larger than most, where the system does not say)."""
    return max(_cpu_caches().values(), default=64 << 20)


def _cpu_info() -> dict[str, Any]:
    info: dict[str, Any] = {"kind": "cpu", "name": platform.processor() or platform.machine(), "cores": os.cpu_count()}
    try:
        text = Path("/proc/cpuinfo").read_text()
        m = re.search(r"^model name\s*:\s*(.+)$", text, re.M)
        if m:
            info["name"] = m.group(1).strip()
        info["vendor"] = (re.search(r"^vendor_id\s*:\s*(.+)$", text, re.M) or [None, ""])[1].strip()
        # x86 names its extensions in "flags", Arm in "Features" (where "bf16" is its bf16 arithmetic)
        flags = (re.search(r"^(?:flags|Features)\s*:\s*(.+)$", text, re.M) or [None, ""])[1].split()
        if flags:
            info["isa"] = [
                f
                for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_int8", "asimd", "sve", "bf16")
                if f in flags
            ]
    except OSError:
        pass
    caches = _cpu_caches()
    if caches:
        info["caches_bytes"] = caches
        info["llc_bytes"] = max(caches.values())
    try:
        kb = int(re.search(r"MemTotal:\s*(\d+)", Path("/proc/meminfo").read_text()).group(1))  # type: ignore[union-attr]
        info["memory_bytes"] = kb * 1024
    except (OSError, AttributeError, ValueError):
        pass
    info["torch_threads"] = torch.get_num_threads()
    return info


def _gpu_info(index: int) -> dict[str, Any]:
    props = torch.cuda.get_device_properties(index)
    info: dict[str, Any] = {
        "kind": "gpu",
        "name": props.name,
        "memory_bytes": int(props.total_memory),
        "multiprocessors": props.multi_processor_count,
        "compute_capability": f"{props.major}.{props.minor}",
        "cuda_version": torch.version.cuda,
        "vendor": "NVIDIA" if torch.version.cuda else "AMD",
    }
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(index)
        info["driver_version"] = pynvml.nvmlSystemGetDriverVersion()
        info["sm_clock_max_mhz"] = pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM)
        info["mem_clock_max_mhz"] = pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_MEM)
        info["sm_clock_mhz"] = pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)
        info["power_limit_w"] = pynvml.nvmlDeviceGetPowerManagementLimit(h) / 1000.0
        info["temperature_c"] = pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)
        info["memory_bus_width_bits"] = pynvml.nvmlDeviceGetMemoryBusWidth(h)
    except Exception as exc:  # nvidia-ml-py missing or the driver refuses: keep what torch knows
        info["nvml_error"] = str(exc)
    return info


def describe(device: str | torch.device | None = None) -> dict[str, Any]:
    """Device name, memory, clocks, versions: a flat dict for a JSON sidecar."""
    dev = resolve_device(device)
    info = _gpu_info(dev.index or 0) if dev.type == "cuda" else _cpu_info()
    info.update(
        device=str(dev),
        torch_version=torch.__version__,
        numpy_version=np.__version__,
        python_version=platform.python_version(),
        platform=platform.platform(),
    )
    return info


_GPU_HINTS = [
    (r"H100.*(SXM|HBM3)", "h100-sxm-80gb"),
    (r"H100.*PCIe", "h100-pcie-80gb"),
    (r"H100.*NVL", "h100-nvl-94gb"),
    (r"H200", "h200-sxm-141gb"),
    (r"B200", "b200-180gb"),
    (r"GB200", "gb200-186gb"),
    (r"A100.*80GB.*PCIe", "a100-pcie-80gb"),
    (r"A100.*(SXM|80GB)", "a100-sxm-80gb"),
    (r"A100", "a100-sxm-40gb"),
    (r"A10G", "a10g-24gb"),
    (r"\bA10\b", "a10-24gb"),
    (r"L40S", "l40s-48gb"),
    (r"\bL4\b", "l4-24gb"),
    (r"V100", "v100-sxm2-32gb"),
    (r"\bT4\b", "t4-16gb"),
    (r"RTX 3090", "rtx-3090-24gb"),
    (r"RTX 4090", "rtx-4090-24gb"),
    (r"RTX 5090", "rtx-5090-32gb"),
    (r"MI300X", "mi300x-192gb"),
    (r"MI325X", "mi325x-256gb"),
    (r"MI250X", "mi250x-128gb"),
    (r"EPYC 9654", "epyc-9654"),
]


def match_profile(info: dict[str, Any] | None = None) -> str | None:
    """The built-in profile id for this device, or None when none matches (say so, do not guess)."""
    info = info if info is not None else describe()
    name = str(info.get("name", ""))
    known = set(list_hardware()["id"])
    for pattern, pid in _GPU_HINTS:
        if re.search(pattern, name, re.I) and pid in known:
            return pid
    return None

"""The tensor-parallel all-reduce as the engine's collective library runs it (docs/cost-model.md, section 60).

Two kinds of all-reduce carry a decode step's hidden state between the ranks of one node:

* ``custom``: the engine's own small-message kernel (vLLM's and SGLang's custom all-reduce, TensorRT-LLM's, PyTorch's
  intra-node comm under gpt-fast's ``ENABLE_INTRA_NODE_COMM``): one or two shots over NVLink peer memory, priced as
  ``lat + 2 (p - 1) / p x S / link`` with the engine's fitted ``allreduce_latency_s`` (section 19);
* ``nccl``: NCCL's ring, tree or NVLink-SHARP algorithms, which every engine without its own kernel calls
  (``torch.distributed.all_reduce``: Hugging Face's tensor parallelism, the measurement harness, MagicDec's gpt-fast
  derivative). At a decode step's 64 KB-4 MB it costs 1.5-2.5x a custom kernel on the same node, and that is not a
  latency plus a line: NCCL changes algorithm and protocol with the size. It is priced from public ``all_reduce_perf``
  tables (``published/kernels/collectives/``): the time at the message size, linear between a table's rows and its
  first row's time below them; past its last row, the widest table's growth scaled by the bytes each rank sends (that
  table's own last slope past its end); between two tables' rank counts, linear in the ranks, and outside them the
  nearest table's.

The tables are Hopper nodes' (NVSwitch, CUDA graphs). The other NVSwitch nodes (A100 SXM, B200, B300 and their Grace
boards) read them too: they are the only public text tables, and a floor for Ampere, which has no NVLink SHARP. GPUs
outside such nodes (PCIe cards, whose NCCL rings cross the host's PCIe; AMD's RCCL; TPUs; CPUs) keep the engine's
latency-plus-link form.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from roofline.core.errors import SpecroofError
from roofline.costing.engine import ALLREDUCE_IMPLS
from roofline.costing.kv_efficiency import gpu_of

#: the public ``all_reduce_perf`` tables (one file per source: GPU family, ranks, sizes and times)
COLLECTIVES_DIR = Path(__file__).resolve().parents[2] / "published" / "kernels" / "collectives"

#: hardware profile id prefixes of the GPUs built into NVSwitch nodes, where the tables' figures apply
NVSWITCH_GPUS = ("a100-sxm", "h100-sxm", "h200", "h20-", "b200", "gb200", "b300", "gb300")

#: the keys a table file holds
TABLE_KEYS = ("source", "url", "gpu", "family", "ranks", "library", "cuda_graphs", "command", "size_bytes", "time_us")


@dataclass(frozen=True)
class AllReduceTable:
    """One published all-reduce table: the time of one call by message size, on ``ranks`` GPUs of one node."""

    family: str
    ranks: int
    size_bytes: tuple[float, ...]
    time_s: tuple[float, ...]
    source: str

    def seconds(self, nbytes: Any) -> Any:
        """One call's seconds at ``nbytes`` (a float or an array): linear between the rows, the first row's time
        below them (a small message costs the latency), the last segment's slope past them."""
        s = np.asarray(self.size_bytes)
        t = np.asarray(self.time_s)
        b = np.asarray(nbytes, dtype=float)
        slope = (t[-1] - t[-2]) / (s[-1] - s[-2])
        out = np.where(b > s[-1], t[-1] + (b - s[-1]) * slope, np.interp(b, s, t))
        return float(out) if out.ndim == 0 else out


def _read_table(path: Path) -> AllReduceTable:
    where = f"published/kernels/collectives/{path.name}"
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise SpecroofError(f"{where}: {e}") from None
    unknown = sorted(set(data) - set(TABLE_KEYS))
    missing = [k for k in TABLE_KEYS if k not in data]
    if unknown or missing:
        raise SpecroofError(f"{where}: " + (f"unknown key {unknown[0]!r}" if unknown else f"missing {missing[0]!r}"))
    sizes, times = data["size_bytes"], data["time_us"]
    ranks = data["ranks"]
    if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 2:
        raise SpecroofError(f"{where}: ranks must be a whole number >= 2 (got {ranks!r})")
    if (
        not isinstance(sizes, list)
        or not isinstance(times, list)
        or len(sizes) != len(times)
        or len(sizes) < 2
        or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in (*sizes, *times))
        or any(b <= a for a, b in zip(sizes, sizes[1:], strict=False))
    ):
        raise SpecroofError(f"{where}: size_bytes and time_us are lists of the same length (2 or more), positive, "
                            "the sizes ascending")  # fmt: skip
    return AllReduceTable(str(data["family"]), ranks, tuple(map(float, sizes)), tuple(t * 1e-6 for t in times),
                          str(data["source"]))  # fmt: skip


@lru_cache(maxsize=4)
def load_allreduce_tables(folder: str | None = None) -> dict[str, tuple[AllReduceTable, ...]]:
    """Every table of ``folder`` (default :data:`COLLECTIVES_DIR`), per GPU family, in ascending ranks."""
    out: dict[str, list[AllReduceTable]] = {}
    for path in sorted(Path(folder or COLLECTIVES_DIR).glob("*.toml")):
        t = _read_table(path)
        out.setdefault(t.family, []).append(t)
    for family, tables in out.items():
        ranks = [t.ranks for t in tables]
        if len(set(ranks)) != len(ranks):
            raise SpecroofError(f"published/kernels/collectives: two {family} tables for the same ranks ({ranks})")
    return {f: tuple(sorted(ts, key=lambda t: t.ranks)) for f, ts in out.items()}


@dataclass(frozen=True)
class NcclAllReduce:
    """NCCL's all-reduce on one GPU family's node: its tables, one per rank count."""

    tables: tuple[AllReduceTable, ...]

    @cached_property
    def widest(self) -> AllReduceTable:
        """The table that reaches the largest message size."""
        return max(self.tables, key=lambda t: t.size_bytes[-1])

    def table_seconds(self, table: AllReduceTable, nbytes: Any) -> Any:
        """``table``'s time at ``nbytes``. Past its last row a table that stops short of the widest one grows as the
        widest grows from that size on, times the ratio of the bytes each rank sends (``2 (p - 1) / p``): the
        bandwidth-bound part of a ring scales with them, where a table's own last segment may still be a protocol
        switch."""
        wide = self.widest
        last = table.size_bytes[-1]
        if table is wide or last >= wide.size_bytes[-1]:
            return table.seconds(nbytes)
        b = np.asarray(nbytes, dtype=float)
        share = (2.0 * (table.ranks - 1) / table.ranks) / (2.0 * (wide.ranks - 1) / wide.ranks)
        past = table.seconds(last) + share * (wide.seconds(np.maximum(b, last)) - wide.seconds(last))
        out = np.where(b > last, past, table.seconds(np.minimum(b, last)))
        return float(out) if out.ndim == 0 else out

    def seconds(self, nbytes: Any, ranks: int) -> Any:
        """One all-reduce of ``nbytes`` per rank over ``ranks`` GPUs: the tables' time at that size, linear in the
        ranks between two tables, the nearest table's outside them."""
        ts = self.tables
        if ranks <= ts[0].ranks:
            return self.table_seconds(ts[0], nbytes)
        if ranks >= ts[-1].ranks:
            return self.table_seconds(ts[-1], nbytes)
        hi = next(i for i, t in enumerate(ts) if t.ranks >= ranks)
        lo_t, hi_t = ts[hi - 1], ts[hi]
        w = (ranks - lo_t.ranks) / (hi_t.ranks - lo_t.ranks)
        return (1.0 - w) * self.table_seconds(lo_t, nbytes) + w * self.table_seconds(hi_t, nbytes)


def nccl_model(hw_id: str, allreduce: str) -> NcclAllReduce | None:
    """The NCCL all-reduce of GPU ``hw_id`` for an engine whose ``allreduce`` is ``nccl``; None for a custom kernel
    or a device outside an NVSwitch node (:data:`NVSWITCH_GPUS`: the engine's latency-plus-link form prices it)."""
    if allreduce not in ALLREDUCE_IMPLS:
        raise SpecroofError(f"allreduce must be one of {', '.join(ALLREDUCE_IMPLS)} (got {allreduce!r})")
    gpu = gpu_of(hw_id)
    if allreduce != "nccl" or gpu is None or not (hw_id + "-").startswith(NVSWITCH_GPUS):
        return None
    tables = load_allreduce_tables()
    # only Hopper nodes have public text tables: every NVIDIA generation reads them (section 60)
    picked = tables.get(gpu[0]) or tables.get("hopper")
    return NcclAllReduce(picked) if picked else None


def allreduce_label(hw_id: str, engine: Any) -> str:
    """How a pass's all-reduces are priced on GPU ``hw_id`` under ``engine`` (an :class:`Engine` or None), in words."""
    if engine is None:
        return "the bytes over the link (the datasheet roofline: no latency)"
    if nccl_model(hw_id, engine.allreduce) is not None:
        return f"NCCL's, from public all_reduce_perf tables ({engine.name} calls torch.distributed)"
    if engine.allreduce == "nccl":
        return f"NCCL's, as a latency plus the bytes over the link (no public table for {hw_id})"
    return f"{engine.name}'s own kernel: a latency plus the bytes over the link"

"""Tensor parallelism measured: the harness's target sharded Megatron-style over N ranks with torch.distributed.

Usage::

    python -m measure.tp sweep --tp 2 [--model SHAPE] [--budget S] [--out FILE]   # spawns the 2 ranks itself
    torchrun --nproc-per-node 2 -m measure.tp sweep --tp 2 [...]                  # or under torchrun
    python -m measure.tp fit FILE                                                 # the all-reduce fit again
    python -m measure.tp check --tp 2                                             # sharded == unsharded, here

``sweep`` times verify passes (chains of 1, 4, 16, 64 tokens by default) over the N
ranks with the one timer (:func:`measure.timing.time_fn`; a repetition's time is the
slowest rank's), then the all-reduce alone at exactly the message sizes those passes
send, and writes both to a JSON file; :func:`fit_allreduce` (``fit``) fits the
cost model's all-reduce, ``lat + 2 (p - 1) / p x bytes / link`` (docs/cost-model.md,
sections 2 and 19), in relative least squares, and reports the latency (and the link
bandwidth where the sizes separate it) with its spread across repeats: the
``[collectives] allreduce_latency_us`` an engine profile takes.

Sharding (:func:`shard_model`), as Megatron-LM and gpt-fast do it (github.com/pytorch-labs/gpt-fast, tp.py): each rank
keeps ``n_heads / p`` query heads and ``n_kv_heads / p`` KV heads (q/k/v column-parallel:
the fused ``wqkv`` keeps the rank's rows of each of q, k and v), the MLP's gate and up
projections column-parallel (``w13`` keeps the rank's rows of each half), the attention
out-projection and the MLP's down projection row-parallel, and one ``all_reduce`` (sum)
after attention and one after the MLP: the two per layer the cost model prices. The
embedding table, the norms and the LM head are replicated on every rank (the LM head
is not vocab-parallel: every rank computes the full logits, so every rank takes the
same greedy decisions without a gather). A TP that does not divide the query heads,
the KV heads and the MLP width is refused; MoE layers are not sharded.

Every rank builds the same full model from the same seed on the CPU, keeps its
shard and moves it to its device: no weights travel. Backend: NCCL on CUDA (one
rank per GPU), gloo on the CPU. Without torchrun the command spawns the ranks
itself with ``torch.multiprocessing`` (rendezvous on a free localhost port): one
machine needs no launcher, and the test suite runs the same code path; under
torchrun (``RANK``/``WORLD_SIZE`` set) it joins the launcher's group instead, which is
how several GPUs or several hosts are driven. On a CPU each rank gets
``cores / p`` intra-op threads unless ``--threads`` says otherwise.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import datetime as _dt
import json
import os
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
import torch.distributed as dist

from measure.budget import Budget
from measure.models import MLP, TORCH_DTYPES, Attention, Transformer
from measure.timing import time_fn
from roofline.core.errors import SpecroofError
from roofline.passes.model import ModelSpec, get_model

#: the file format this module writes (bumped when a field changes meaning)
FORMAT = "specroof-tp-sweep-v1"

#: seconds a TP sweep keeps at its budget's end: the ranks' teardown, the fit (200 bootstrap resamples) and writing
TP_CLOSING_S = 3.0
#: seconds the parent waits for the ranks past the budget before it kills them (a hang, or a teardown stuck)
TP_GRACE_S = 30.0

#: default target when no --model is given: 8 layers of a 1024-wide GQA model (126M weights)
DEFAULT_SHAPE = "8x1024x16x8x2816x32000"

#: the tree pass the check runs: a root with two children, the first with one child (parent array)
CHECK_TREE = (-1, 0, 0, 1)


# -- the model under TP ---------------------------------------------------------------


def parse_shape(text: str) -> ModelSpec:
    """A model: a preset or config.json (``get_model``), or ``LAYERSxDxHEADSxKV_HEADSxFFxVOCAB`` (head_dim = D / HEADS)."""
    parts = text.lower().split("x")
    if len(parts) == 6 and all(p.isdigit() for p in parts):
        L, d, h, kv, ff, vocab = (int(p) for p in parts)
        if h < 1 or d % h:
            raise SpecroofError(f"--model {text!r}: the width D ({d}) must be a multiple of HEADS ({h})")
        return ModelSpec(f"shape-{text.lower()}", L, d, h, kv, d // h, ff, vocab, max_context=4096)
    return get_model(text)


def check_tp(spec: ModelSpec, tp: int) -> None:
    """Refuse, in one line, a TP degree this Megatron-style sharding cannot split ``spec`` over."""
    if tp < 2:
        raise SpecroofError(f"--tp must be >= 2 (got {tp}): one rank sends no all-reduce")
    if spec.is_moe:
        raise SpecroofError(f"{spec.name} has MoE layers: measure.tp shards dense layers only (experts are not split)")
    if spec.is_mla or spec.n_sliding_layers:
        raise SpecroofError(
            f"{spec.name}: measure.tp shards Llama-style full attention only (not MLA or sliding layers)"
        )
    for what, n in (("query heads", spec.n_heads), ("KV heads", spec.n_kv_heads), ("MLP width d_ff", spec.d_ff)):
        if n % tp:
            raise SpecroofError(f"--tp {tp} does not divide {spec.name}'s {n} {what}: use a TP that divides {n}")


class ParallelAttention(Attention):
    """The rank's heads of one attention layer (q/k/v column-parallel, out-proj row-parallel), then a sum over ranks."""

    def __init__(self, local: ModelSpec, dtype: torch.dtype, device: torch.device, group: Any = None) -> None:
        super().__init__(local, dtype, device)
        self.group = group

    def forward(self, *args: Any) -> torch.Tensor:  # type: ignore[override]
        out = super().forward(*args)
        dist.all_reduce(out, group=self.group)  # each rank holds a partial sum of the out-projection
        return out


class ParallelMLP(MLP):
    """The rank's share of the MLP width (gate/up column-parallel, down row-parallel), then a sum over ranks."""

    def __init__(self, d: int, ff: int, kind: str, dtype: torch.dtype, device: torch.device, group: Any = None):
        super().__init__(d, ff, kind, dtype, device)
        self.group = group

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = super().forward(x)
        dist.all_reduce(out, group=self.group)
        return out


def _rows(t: torch.Tensor, start: int, count: int) -> torch.Tensor:
    return t[start : start + count]


def shard_model(full: Transformer, rank: int, tp: int, group: Any = None) -> Transformer:
    """A copy of ``full`` holding rank ``rank``'s shard of every layer (see the module docstring).

    The copy's ``spec`` is the per-rank one (``n_heads / tp`` heads, ``n_kv_heads / tp`` KV
    heads, ``d_ff / tp``), so its KV cache holds the rank's KV heads only; the whole
    model's spec is kept as ``full_spec``. Its forward pass calls ``torch.distributed``:
    every rank of ``group`` must run the same passes in the same order.
    """
    spec = full.spec
    check_tp(spec, tp)
    if not 0 <= rank < tp:
        raise SpecroofError(f"rank must lie in [0, {tp - 1}] (got {rank})")
    h, kv, hd, ff = spec.n_heads // tp, spec.n_kv_heads // tp, spec.head_dim, spec.d_ff // tp
    local = dataclasses.replace(spec, name=f"{spec.name}/tp{tp}", n_heads=h, n_kv_heads=kv, d_ff=ff)
    model = copy.deepcopy(full)
    dev, dtype = full.device, full.dtype
    with torch.no_grad():
        for layer in model.layers:
            a_full: Attention = layer.self_attn
            attn = ParallelAttention(local, dtype, dev, group)
            q0, k0, v0 = rank * h * hd, spec.n_heads * hd + rank * kv * hd, (spec.n_heads + spec.n_kv_heads) * hd
            v0 += rank * kv * hd
            for name in ("weight", "bias"):
                src = getattr(a_full.wqkv, name)
                if src is not None:
                    parts = [_rows(src, q0, h * hd), _rows(src, k0, kv * hd), _rows(src, v0, kv * hd)]
                    getattr(attn.wqkv, name).copy_(torch.cat(parts, dim=0))
            attn.o_proj.weight.copy_(a_full.o_proj.weight[:, rank * h * hd : (rank + 1) * h * hd])
            layer.self_attn = attn
            m_full: MLP = layer.mlp
            mlp = ParallelMLP(spec.d_model, ff, spec.mlp_kind, dtype, dev, group)
            w13 = m_full.w13.weight
            if spec.mlp_kind == "swiglu":  # w13 is [gate; up]: the rank's rows of each half
                mlp.w13.weight.copy_(torch.cat([_rows(w13, rank * ff, ff), _rows(w13, spec.d_ff + rank * ff, ff)]))
            else:
                mlp.w13.weight.copy_(_rows(w13, rank * ff, ff))
            mlp.down_proj.weight.copy_(m_full.down_proj.weight[:, rank * ff : (rank + 1) * ff])
            layer.mlp = mlp
    model.full_spec = spec  # type: ignore[assignment]
    model.spec = local
    model.cache = None
    return model


def build_target(
    spec: ModelSpec, dtype: str, seed: int, init_std: float = 0.02, matvec: bool | None = None
) -> Transformer:
    """The whole target with seeded random weights on the CPU: the same on every rank that asks."""
    torch.manual_seed(seed)
    return Transformer(spec, dtype=dtype, device="cpu", init_std=init_std, matvec=matvec).eval()


def to_device(model: Transformer, device: torch.device) -> Transformer:
    model.to(device)
    model.device_ = device
    return model


# -- ranks: spawn or join torchrun ------------------------------------------------------


def under_torchrun() -> bool:
    """Whether a launcher (torchrun) started this process as one rank of a group."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def free_port() -> int:
    """A localhost TCP port that was free a moment ago (the rendezvous of spawned ranks)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def backend_for(device: torch.device) -> str:
    return "nccl" if device.type == "cuda" else "gloo"


def check_backend(device: torch.device, tp: int) -> None:
    """One line where this torch cannot run ``tp`` ranks on ``device``."""
    if not dist.is_available():
        raise SpecroofError("this torch build has no torch.distributed: measure.tp needs it")
    if device.type == "cuda":
        if not dist.is_nccl_available():
            raise SpecroofError("this torch build has no NCCL: use --device cpu (gloo)")
        if torch.cuda.device_count() < tp:
            raise SpecroofError(
                f"--tp {tp} needs {tp} CUDA devices (NCCL runs one rank per GPU); this machine has "
                f"{torch.cuda.device_count()}: lower --tp or use --device cpu (gloo)"
            )
    elif not dist.is_gloo_available():
        raise SpecroofError("this torch build has no gloo backend: measure.tp on the CPU needs it")


def _init_rank(
    rank: int, world: int, device: str, init_method: str, timeout_s: float, threads: int | None
) -> torch.device:
    dev = torch.device(device)
    if dev.type == "cuda":
        local = int(os.environ.get("LOCAL_RANK", rank))
        dev = torch.device("cuda", local)
        torch.cuda.set_device(dev)
    else:
        # the ranks share the cores: each gets its part, not all of them (oversubscription distorts every time)
        torch.set_num_threads(threads or max(1, (os.cpu_count() or 1) // world))
    dist.init_process_group(
        backend_for(dev), init_method=init_method, rank=rank, world_size=world, timeout=_dt.timedelta(seconds=timeout_s)
    )
    return dev


def _rank_entry(rank: int, world: int, job: str, cfg: dict[str, Any], init_method: str, outdir: str) -> None:
    """One spawned rank: join the group, run ``job``, write what it returned (or its one-line error) to ``outdir``."""
    result: dict[str, Any]
    try:
        dev = _init_rank(rank, world, cfg["device"], init_method, cfg["timeout_s"], cfg.get("threads"))
        try:
            result = {"ok": JOBS[job](rank, world, dev, cfg)}
        finally:
            dist.destroy_process_group()
    except SpecroofError as exc:
        result = {"error": str(exc)}
    Path(outdir, f"rank{rank}.json").write_text(json.dumps(result))


def launch(job: str, cfg: dict[str, Any], world: int, timeout_s: float) -> list[Any]:
    """Run ``job`` on ``world`` spawned ranks (gloo or NCCL over localhost); each rank's result, rank order.

    A rank that has not finished ``timeout_s`` seconds after the start is killed with the
    others and the call fails in one line: a hang never outlives its timeout.
    """
    import torch.multiprocessing as mp

    cfg = {**cfg, "timeout_s": float(timeout_s)}
    with tempfile.TemporaryDirectory(prefix="specroof-tp-") as outdir:
        init = f"tcp://127.0.0.1:{free_port()}"
        ctx = mp.start_processes(
            _rank_entry, args=(world, job, cfg, init, outdir), nprocs=world, join=False, start_method="spawn"
        )
        deadline = time.monotonic() + timeout_s
        try:
            while not ctx.join(timeout=0.5):
                if time.monotonic() > deadline:
                    raise SpecroofError(f"the {world} ranks did not finish within {timeout_s:g} s (killed)")
        except mp.ProcessRaisedException as exc:
            last = [ln for ln in str(exc).strip().splitlines() if ln.strip()][-1]
            raise SpecroofError(f"a rank failed: {last}") from None
        except mp.ProcessExitedException as exc:
            raise SpecroofError(f"a rank died: {exc}") from None
        finally:
            for p in ctx.processes:
                if p.is_alive():
                    p.terminate()
            for p in ctx.processes:
                p.join(5)
        results = [json.loads(Path(outdir, f"rank{r}.json").read_text()) for r in range(world)]
    for r in results:
        if "error" in r:
            raise SpecroofError(r["error"])
    return [r["ok"] for r in results]


def run_job(job: str, cfg: dict[str, Any], tp: int, timeout_s: float) -> Any:
    """Rank 0's result of ``job`` over ``tp`` ranks: joined to torchrun's group when under it, spawned otherwise."""
    check_backend(torch.device(cfg["device"]), tp)
    if not under_torchrun():
        return launch(job, cfg, tp, timeout_s)[0]
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if world != tp:
        raise SpecroofError(f"--tp {tp} but torchrun started {world} ranks: give --nproc-per-node {tp}")
    dev = _init_rank(rank, world, cfg["device"], "env://", timeout_s, cfg.get("threads"))
    try:
        out = JOBS[job](rank, world, dev, {**cfg, "timeout_s": timeout_s})
    finally:
        dist.destroy_process_group()
    return out if rank == 0 else None


# -- the rank jobs --------------------------------------------------------------------


def _spec_of(cfg: dict[str, Any]) -> ModelSpec:
    return ModelSpec(**cfg["spec"])


def _slowest(samples: Sequence[float], dev: torch.device) -> list[float]:
    """Each repetition's time on the slowest rank: the pass is done when the last rank is."""
    t = torch.tensor(list(samples), dtype=torch.float64, device=dev)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return [float(v) for v in t.cpu()]


def _stats(samples: Sequence[float]) -> dict[str, Any]:
    s = np.asarray(samples)
    q25, q75 = np.percentile(s, [25, 75])
    return {
        "t_median_s": float(np.median(s)),
        "t_min_s": float(s.min()),
        "t_iqr_s": float(q75 - q25),
        "repeats": int(s.size),
        "samples_s": [float(v) for v in s],
    }


def _agree(flag: bool) -> bool:
    """Rank 0's decision, on every rank (budgets run on each rank's clock; they must not diverge)."""
    box = [flag]
    dist.broadcast_object_list(box, src=0)
    return bool(box[0])


def rank_budget(deadline: float | None) -> Budget:
    """A rank's budget: until ``deadline`` (``time.time()``, which every process on the machine reads alike; the
    parent's budget end less its closing), so the spawn and the process group's setup are inside it."""
    if deadline is None:
        return Budget(None)
    return Budget(max(1e-3, deadline - time.time()))


def _sweep_job(rank: int, world: int, dev: torch.device, cfg: dict[str, Any]) -> dict[str, Any]:
    from measure.sweep import PLAN_MARGIN, VisitCosts, plan_prices

    spec = _spec_of(cfg)
    budget = rank_budget(cfg.get("deadline"))
    full = build_target(spec, cfg["dtype"], cfg["seed"])
    model = to_device(shard_model(full, rank, world), dev)
    del full
    batch, tokens, context = list(cfg["batch"]), list(cfg["tokens"]), int(cfg["context"])
    model.setup_cache(max(batch), context + max(tokens))
    assert model.cache is not None
    elt = TORCH_DTYPES[cfg["dtype"]].itemsize
    points = [(b, n) for b in batch for n in tokens]
    sizes = sorted({b * n * spec.d_model * elt for b, n in points})
    rng = np.random.default_rng(cfg["seed"])  # the same order on every rank: they must run the same passes
    kw = dict(warmup=cfg["warmup"], repeats=cfg["repeats"], device=dev)
    ar_repeats = max(cfg["repeats"], 10)
    # a verify pass is priced by the roofline of the whole model on a shipped profile of the device's kind (section
    # 40's a + s t, learned as the points are timed: the shards' share and this machine's speed); an all-reduce size
    # at what its last visit took
    rows = [{"dtype": cfg["dtype"], "batch": b, "new_tokens": n, "context": context} for b, n in points]
    price = plan_prices(spec, rows, None, dev, None)
    costs = VisitCosts(cfg["warmup"], cfg["repeats"])
    last_ar: dict[int, float] = {}
    cheapest = min(range(len(points)), key=lambda i: points[i][0] * points[i][1])
    verify: list[dict[str, Any]] = []
    allreduce: list[dict[str, Any]] = []
    visited: set[int] = set()

    def timed(i: int, visit: int) -> dict[str, Any]:
        """Point ``i``'s passes, timed on every rank (the slowest rank's times); its cost learned."""
        b, n = points[i]
        x = torch.randint(0, spec.vocab_size, (b, n), generator=torch.Generator().manual_seed(n)).to(dev)
        assert model.cache is not None
        model.cache.rollback([context] * model.cache.max_batch)  # only lengths: latency ignores values
        dist.barrier()
        t0 = time.perf_counter()
        t = time_fn(lambda: model(x), **kw)  # type: ignore[arg-type]
        wall = time.perf_counter() - t0
        stats = _stats(_slowest(t.samples_s, dev))
        costs.record(float(price[i]), stats["t_median_s"], cfg["warmup"] + cfg["repeats"], wall, i not in visited)
        visited.add(i)
        return {"batch": b, "new_tokens": n, "context": context, "visit": visit,
                "allreduce_bytes": b * n * spec.d_model * elt, **stats}  # fmt: skip

    def go(essential: bool, seconds: float) -> bool:
        # rank 0's clock decides for every rank: they must run the same passes
        return _agree(essential or budget.allows(PLAN_MARGIN * seconds))

    with torch.no_grad():
        for visit in range(cfg["rounds"]):
            if visit > 0 and not _agree(not budget.expired()):
                break
            # the all-reduce sizes first: the fit is what the sweep is for (the first visit's are essential)
            for i in rng.permutation(len(sizes)):
                if not go(visit == 0, last_ar.get(int(i), 0.0)):
                    continue
                buf = torch.zeros(sizes[i] // elt, dtype=TORCH_DTYPES[cfg["dtype"]], device=dev)  # zeros stay finite
                dist.barrier()
                t0 = time.perf_counter()
                t = time_fn(lambda buf=buf: dist.all_reduce(buf), **{**kw, "repeats": ar_repeats})  # type: ignore[arg-type]
                last_ar[int(i)] = time.perf_counter() - t0
                allreduce.append({"bytes": sizes[i], "visit": visit, **_stats(_slowest(t.samples_s, dev))})
            # the cheapest verify point first, on the first visit (essential: the table's), then shuffled
            order = [int(i) for i in rng.permutation(len(points))]
            if visit == 0:
                order = [cheapest, *(i for i in order if i != cheapest)]
            for i in order:
                if go(visit == 0 and i == cheapest, costs.visit_s(float(price[i]), i not in visited)):
                    verify.append(timed(i, visit))
        # points no visit reached (an early estimate, or a shuffled order, left them out): cheapest first, while they fit
        for i in sorted(range(len(points)), key=lambda j: float(price[j])):
            if i not in visited and go(False, costs.visit_s(float(price[i]), True)):
                verify.append(timed(i, 0))
    never = [f"batch {points[i][0]} x {points[i][1]} new tokens" for i in range(len(points)) if i not in visited]
    return {"verify": verify, "allreduce": allreduce, "threads": torch.get_num_threads(), "never": never}


def _check_target(spec: ModelSpec, seed: int, dev: torch.device) -> Transformer:
    # a wider init than training's 0.02 keeps a random model's greedy choices away from near-ties;
    # random biases (the init zeroes them) make the q/k/v bias shards count in the comparison
    full = build_target(spec, "fp32", seed, init_std=0.2)
    with torch.no_grad():
        for name, p in full.named_parameters():
            if name.endswith("bias"):
                p.normal_(0.0, 0.2)
    return to_device(full, dev)


def _logit_diffs(full: Transformer, tp_model: Transformer, seed: int) -> dict[str, float]:
    """Max |whole - sharded| logits over a prefill, a chain verify, a tree verify and ragged lengths."""
    g = torch.Generator().manual_seed(seed)
    V, dev = full.spec.vocab_size, full.device
    ctx = torch.randint(0, V, (2, 12), generator=g).to(dev)
    chain = torch.randint(0, V, (2, 4), generator=g).to(dev)
    out = {}
    with torch.no_grad():
        for name, m in (("full", full), ("tp", tp_model)):
            cache = m.setup_cache(2, 64)
            prefill = m(ctx)
            m.advance(12)
            verify = m(chain)
            tree = m(chain, tree=list(CHECK_TREE))
            cache.rollback([12, 7])  # ragged lengths: the masked path
            ragged = m(chain)
            out[name] = (prefill, verify, tree, ragged)
    return {w: float((out["full"][i] - out["tp"][i]).abs().max()) for i, w in enumerate(CHECK_PASSES)}


#: the passes the check compares, in :func:`_logit_diffs`'s order
CHECK_PASSES = ("prefill", "verify", "tree", "ragged")


def _check_job(rank: int, world: int, dev: torch.device, cfg: dict[str, Any]) -> dict[str, Any]:
    """Sharded against whole: logits of every pass kind (both MLP kinds), then greedy plain and speculative decoding.

    The speculative runs use the harness's own loop (``measure.decode.speculative_generate``) with the sharded
    target: a separate one-layer draft replicated on every rank, and early exit (the sharded first layer drafts).
    """
    from measure.decode import autoregressive_generate, speculative_generate
    from roofline.passes.model import MLP_KINDS

    spec = _spec_of(cfg)
    seed = int(cfg["seed"])
    diffs: dict[str, dict[str, float]] = {}
    for kind in (spec.mlp_kind, *(k for k in MLP_KINDS if k != spec.mlp_kind)):
        sk = dataclasses.replace(spec, mlp_kind=kind)
        whole = _check_target(sk, seed, dev)
        diffs[kind] = _logit_diffs(whole, shard_model(whole, rank, world), seed + 1)
    full = _check_target(spec, seed, dev)
    tp_model = shard_model(full, rank, world)
    g = torch.Generator().manual_seed(seed + 2)
    prompts = [torch.randint(0, spec.vocab_size, (L,), generator=g).tolist() for L in (9, 6)]
    n_new = int(cfg["new_tokens"])
    plain = autoregressive_generate(full, prompts, n_new).tokens
    plain_tp = autoregressive_generate(tp_model, prompts, n_new).tokens
    torch.manual_seed(seed + 3)
    draft = to_device(Transformer(dataclasses.replace(spec, name="draft", n_layers=1), dtype="fp32", init_std=0.2), dev)
    spec_res = speculative_generate(tp_model, draft, prompts, 3, n_new)
    early_tp = speculative_generate(tp_model, 1, prompts, 2, n_new).tokens
    return {
        "max_abs_diff": diffs,
        "plain": plain,
        "plain_tp": plain_tp,
        "spec_tp": spec_res.tokens,
        "spec_tp_rounds": len(spec_res.rounds),
        "early_exit_tp": early_tp,
    }


JOBS: dict[str, Callable[[int, int, torch.device, dict[str, Any]], dict[str, Any]]] = {
    "sweep": _sweep_job,
    "check": _check_job,
}


# -- the commands as functions --------------------------------------------------------


def _finite(x: Any) -> float | None:
    """A number for strict JSON: NaN (nothing to read on this OS) becomes null."""
    return float(x) if x is not None and np.isfinite(x) else None


def _provenance(device: torch.device, tp: int, command: str, load0: dict[str, Any]) -> dict[str, Any]:
    """What the timings were taken on, and how busy the machine was (load before and after, steal during)."""
    from measure.device import describe
    from measure.specval import machine_load

    info = describe(device)
    load = machine_load(load0["ticks"])
    return {
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "backend": backend_for(device),
        "tp": tp,
        "device": str(info.get("name", device)),
        "host_cpu": str(describe("cpu").get("name", "")),
        "load_avg_1m_start": _finite(load0["load_avg_1m"]),
        "load_avg_1m_end": _finite(load["load_avg_1m"]),
        "steal_pct": _finite(load["steal_pct"]),
        "cpus": load["cpus"],
        "command": command,
    }


def tp_sweep(
    spec: ModelSpec | str = DEFAULT_SHAPE,
    tp: int = 2,
    *,
    batch: Sequence[int] = (1,),
    tokens: Sequence[int] = (1, 4, 16, 64),
    context: int = 128,
    dtype: str | None = None,
    device: str | None = None,
    repeats: int = 5,
    warmup: int = 2,
    rounds: int = 3,
    budget_s: float | Budget | None = 120.0,
    threads: int | None = None,
    seed: int = 0,
    timeout_s: float | None = None,
    out: str | Path | None = None,
    command: str = "",
) -> dict[str, Any] | None:
    """Time sharded verify passes and the all-reduce over ``tp`` ranks; the timings (and the fit) as one dict.

    ``rounds`` shuffled visits of every point while ``budget_s`` (seconds from the call, or a :class:`Budget` that
    may count from the process's start) lasts (docs/cost-model.md, section 44): the ranks share its deadline less
    :data:`TP_CLOSING_S`, the first visit's all-reduce sizes and cheapest verify point always run, every other
    point only while it fits; the points never visited are named in ``dropped``. The ranks are killed
    ``timeout_s`` seconds after the start (default: what the budget has left and :data:`TP_GRACE_S`). Under
    torchrun only rank 0 returns (and writes ``out``); the others get None.
    """
    from measure.device import resolve_device

    sp = parse_shape(spec) if isinstance(spec, str) else spec
    check_tp(sp, int(tp))
    dev = resolve_device(device)
    dt = dtype or ("bf16" if dev.type == "cuda" else "fp32")
    if dt not in TORCH_DTYPES:
        raise SpecroofError(f"unknown dtype {dt!r}; choose one of {', '.join(TORCH_DTYPES)}")
    for name, vals, lo in (("--batch", batch, 1), ("--tokens", tokens, 1), ("--context", [context], 0)):
        if not vals or any(int(v) != v or v < lo for v in vals):
            raise SpecroofError(f"{name} must be whole numbers >= {lo} (got {list(vals)})")
    for name, v, lo in (("--repeats", repeats, 1), ("--warmup", warmup, 0), ("--rounds", rounds, 1)):
        if int(v) != v or v < lo:
            raise SpecroofError(f"{name} must be a whole number >= {lo} (got {v})")
    if budget_s is not None and not isinstance(budget_s, Budget) and not budget_s > 0:
        raise SpecroofError(f"--budget must be > 0 seconds (got {budget_s})")
    bud = budget_s if isinstance(budget_s, Budget) else Budget(budget_s)
    if threads is not None and threads < 1:
        raise SpecroofError(f"--threads must be >= 1 (got {threads})")
    if out is not None and not (Path(out).parent.is_dir() and os.access(Path(out).parent, os.W_OK)):
        raise SpecroofError(f"--out {str(out)!r}: its folder does not exist or is not writable")
    if context + max(tokens) > sp.max_context:
        raise SpecroofError(
            f"--context {context} + {max(tokens)} tokens exceeds {sp.name}'s max context {sp.max_context}"
        )
    cfg = {
        "spec": dataclasses.asdict(sp),
        "device": dev.type,
        "dtype": dt,
        "batch": [int(b) for b in batch],
        "tokens": [int(n) for n in tokens],
        "context": int(context),
        "repeats": int(repeats),
        "warmup": int(warmup),
        "rounds": int(rounds),
        "budget_s": bud.seconds,
        # the ranks' deadline on the clock every process reads alike: spawning them and their group are inside it
        "deadline": time.time() + bud.remaining_s - TP_CLOSING_S if bud.limited else None,
        "threads": threads,
        "seed": int(seed),
    }
    # a hang is killed once the budget and a grace for the ranks' teardown are spent
    limit = timeout_s if timeout_s is not None else (bud.remaining_s + TP_GRACE_S if bud.limited else 1500.0)
    from measure.specval import machine_load

    load0 = machine_load()
    res = run_job("sweep", cfg, int(tp), limit)
    if res is None:
        return None
    data = {
        "format": FORMAT,
        "measured": _provenance(dev, int(tp), command, load0),
        "model": dataclasses.asdict(sp),
        "sharding": {
            "column_parallel": ["wqkv (q, k, v heads)", "w13 (gate, up)"],
            "row_parallel": ["o_proj", "down_proj"],
            "allreduce_per_layer": 2,
            "replicated": ["embed_tokens", "norms", "lm_head"],
        },
        "dtype": dt,
        "threads_per_rank": res["threads"],
        "verify": res["verify"],
        "allreduce": res["allreduce"],
        "budget_s": bud.seconds,
        "dropped": {p: "never visited: it did not fit what was left" for p in res.get("never", [])},
    }
    data["fit"] = dataclasses.asdict(fit_allreduce(data))
    if out is not None:
        Path(out).write_text(json.dumps(data, indent=1, allow_nan=False))
    return data


def tp_check(
    spec: ModelSpec | str = "2x64x4x2x128x256", tp: int = 2, *, device: str | None = None, new_tokens: int = 12,
    seed: int = 0, timeout_s: float = 300.0,
) -> dict[str, Any] | None:  # fmt: skip
    """Run the sharded and the whole model side by side on ``tp`` ranks (fp32): logit differences and greedy tokens."""
    from measure.device import resolve_device

    sp = parse_shape(spec) if isinstance(spec, str) else spec
    check_tp(sp, int(tp))
    dev = resolve_device(device)
    cfg = {"spec": dataclasses.asdict(sp), "device": dev.type, "seed": int(seed), "new_tokens": int(new_tokens)}
    return run_job("check", cfg, int(tp), timeout_s)  # type: ignore[no-any-return]


# -- the fit ----------------------------------------------------------------------------


@dataclass(frozen=True)
class AllreduceFit:
    """``t = latency + 2 (p - 1) / p x bytes / bandwidth`` fitted to the timed all-reduces of a TP sweep.

    ``latency_s`` and ``bandwidth_bytes_per_s`` fit each size's ``statistic`` over all its
    samples, in relative least squares. Their spread across repeats is a bootstrap: the
    repeats of every size are resampled ``fits`` times and each resample refitted (the
    quartiles and the 5th-95th percentiles of those fits: how far another set of
    repeats would move the number). ``latency_visits_s`` is the same fit on each visit
    alone (the drift over the sweep: a machine whose load changed shows it here).
    ``bandwidth_bytes_per_s`` is None when the sizes do not separate it (the transfer
    term of the largest message under ``SEPARATES`` of its time, or a quarter of the
    resamples without one): the latency alone is then fitted.
    """

    tp: int
    backend: str
    statistic: str
    latency_s: float
    latency_q25_s: float
    latency_q75_s: float
    latency_p05_s: float
    latency_p95_s: float
    latency_visits_s: tuple[float, ...]
    bandwidth_bytes_per_s: float | None
    bandwidth_q25_bytes_per_s: float | None
    bandwidth_q75_bytes_per_s: float | None
    fits: int
    sizes: int
    max_bytes: int
    mape: float

    def engine_toml(self) -> str:
        """The lines an engine profile takes (``[collectives]``, docs/cost-model.md section 6): the measured latency,
        and ``allreduce = "custom"`` so that it prices the all-reduce, not the public NCCL tables an engine that
        runs NCCL would otherwise read (section 60)."""
        return f'[collectives]\nallreduce_latency_us = {self.latency_s * 1e6:.4g}\nallreduce = "custom"'


#: the transfer term must reach this share of the largest message's time before a bandwidth is reported
SEPARATES = 0.10

#: bootstrap resamples of the repeats behind the spread
RESAMPLES = 200


def _wls(t: np.ndarray, w: np.ndarray, with_slope: bool) -> tuple[float, float]:
    """``t ~ a + b w`` with a, b >= 0 in relative error (each point's residual over its time)."""
    from scipy.optimize import nnls

    if not with_slope:
        return float((1.0 / t).sum() / (1.0 / t**2).sum()), 0.0
    A = np.stack([1.0 / t, w / t], axis=1)
    (a, b), _ = nnls(A, np.ones_like(t))
    return float(a), float(b)


def load_tp_sweep(path: str | Path) -> dict[str, Any]:
    """A file written by ``measure.tp sweep --out``, checked (one line when it is not one)."""
    p = Path(path)
    try:
        data = json.loads(p.read_text())
    except (OSError, ValueError) as exc:
        raise SpecroofError(f"cannot read {str(p)!r} as a TP sweep: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise SpecroofError(
            f"{str(p)!r} is not a TP sweep (no format {FORMAT!r}): write it with measure.tp sweep --out"
        )
    return data


def _samples_by_size(rows: list[dict[str, Any]]) -> dict[int, np.ndarray]:
    """Every sample of every all-reduce size, pooled over visits (checked: positive seconds)."""
    pooled: dict[int, list[float]] = {}
    for r in rows:
        try:
            size, samples = int(r["bytes"]), [float(v) for v in r["samples_s"]]
        except (KeyError, TypeError, ValueError):
            raise SpecroofError("an all-reduce row of the TP sweep lacks its bytes or samples_s") from None
        if size < 1 or not samples or not all(v > 0 and np.isfinite(v) for v in samples):
            raise SpecroofError(f"the all-reduce row of {size} bytes needs positive, finite samples_s")
        pooled.setdefault(size, []).extend(samples)
    return {k: np.asarray(v) for k, v in sorted(pooled.items())}


def fit_allreduce(data: dict[str, Any] | str | Path, statistic: str = "min", seed: int = 0) -> AllreduceFit:
    """Fit the all-reduce latency (and bandwidth, where it separates) to a TP sweep's all-reduce timings."""
    d = load_tp_sweep(data) if isinstance(data, (str, Path)) else data
    if statistic not in ("min", "median"):
        raise SpecroofError(f"statistic must be 'min' or 'median' (got {statistic!r})")
    tp = int(d.get("measured", {}).get("tp", 0))
    rows = d.get("allreduce") or []
    if tp < 2 or not rows:
        raise SpecroofError("the TP sweep has no all-reduce timings over 2 or more ranks to fit")
    pooled = _samples_by_size(rows)
    sizes = np.array(list(pooled), dtype=float)
    w = 2.0 * (tp - 1) / tp * sizes  # a ring all-reduce sends this many times the message per rank
    agg = np.min if statistic == "min" else np.median
    t = np.array([agg(s) for s in pooled.values()])
    rng = np.random.default_rng(seed)
    # (resample, size): the statistic of each size's repeats drawn with replacement
    boot = np.stack([agg(s[rng.integers(0, s.size, (RESAMPLES, s.size))], axis=1) for s in pooled.values()], axis=1)
    slope = sizes.size >= 2
    a, b = _wls(t, w, slope)
    fits = np.array([_wls(row, w, slope) for row in boot])
    separated = bool(b > 0 and b * w.max() >= SEPARATES * (a + b * w.max()) and np.percentile(fits[:, 1], 25) > 0)
    if not separated:
        a, b = _wls(t, w, False)
        fits = np.array([_wls(row, w, False) for row in boot])
    visits = []
    for v in sorted({int(r.get("visit", 0)) for r in rows}):
        mine = _samples_by_size([r for r in rows if int(r.get("visit", 0)) == v])
        tv = np.array([agg(s) for s in mine.values()])
        wv = 2.0 * (tp - 1) / tp * np.array(list(mine), dtype=float)
        visits.append(_wls(tv, wv, separated and len(mine) >= 2)[0])
    q25, q75, p05, p95 = np.percentile(fits[:, 0], [25, 75, 5, 95])
    bq: list[float | None] = [None, None]
    if separated and (fits[:, 1] > 0).any():
        bq = [float(v) for v in np.percentile(1.0 / fits[fits[:, 1] > 0, 1], [25, 75])]
    return AllreduceFit(
        tp=tp,
        backend=str(d.get("measured", {}).get("backend", "")),
        statistic=statistic,
        latency_s=a,
        latency_q25_s=float(q25),
        latency_q75_s=float(q75),
        latency_p05_s=float(p05),
        latency_p95_s=float(p95),
        latency_visits_s=tuple(visits),
        bandwidth_bytes_per_s=1.0 / b if separated else None,
        bandwidth_q25_bytes_per_s=bq[0],
        bandwidth_q75_bytes_per_s=bq[1],
        fits=RESAMPLES,
        sizes=int(sizes.size),
        max_bytes=int(sizes.max()),
        mape=float(np.mean(np.abs((a + b * w) / t - 1.0))),
    )


def pass_shares(data: dict[str, Any], fit: AllreduceFit, statistic: str = "min") -> pd.DataFrame:
    """Per verify point: its measured time and the fitted all-reduce time inside it (2 per layer), and the share."""
    df = pd.DataFrame(data["verify"])
    col = f"t_{statistic}_s"
    g = df.groupby(["batch", "new_tokens", "context", "allreduce_bytes"], as_index=False).agg(
        t_pass_s=(col, "min" if statistic == "min" else "median"), visits=("visit", "nunique")
    )
    layers = int(data["model"]["n_layers"])
    w = 2.0 * (fit.tp - 1) / fit.tp * g["allreduce_bytes"].to_numpy(dtype=float)
    per = fit.latency_s + (w / fit.bandwidth_bytes_per_s if fit.bandwidth_bytes_per_s else 0.0)
    g["t_allreduce_s"] = 2 * layers * per
    g["allreduce_share"] = g["t_allreduce_s"] / g["t_pass_s"]
    return g


def describe_fit(fit: AllreduceFit) -> str:
    lines = [
        f"all-reduce over {fit.tp} ranks ({fit.backend}), {fit.sizes} sizes up to {fit.max_bytes} B, "
        f"{fit.statistic} of each size: latency {fit.latency_s * 1e6:.2f} us (over {fit.fits} resamples of the "
        f"repeats: IQR {fit.latency_q25_s * 1e6:.2f}-{fit.latency_q75_s * 1e6:.2f}, "
        f"5-95% {fit.latency_p05_s * 1e6:.2f}-{fit.latency_p95_s * 1e6:.2f}; per visit "
        f"{', '.join(f'{v * 1e6:.1f}' for v in fit.latency_visits_s)}), fit error {fit.mape:.1%}",
    ]
    if fit.bandwidth_bytes_per_s:
        lo, hi = fit.bandwidth_q25_bytes_per_s, fit.bandwidth_q75_bytes_per_s
        spread = f" (IQR {lo / 1e9:.3g}-{hi / 1e9:.3g})" if lo and hi else ""
        lines.append(f"link bandwidth {fit.bandwidth_bytes_per_s / 1e9:.3g} GB/s{spread}")
    else:
        lines.append(
            f"link bandwidth: not separated by these sizes (transfer under {SEPARATES:.0%} of the largest's time)"
        )
    lines.append(fit.engine_toml())
    return "\n".join(lines)


# -- command line -------------------------------------------------------------------------


def _ints(text: str) -> list[int]:
    try:
        return [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated whole numbers (got {text!r})") from None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m measure.tp",
        description="Tensor parallelism measured: sharded verify passes and the all-reduce over N ranks "
        "(torch.distributed: NCCL on CUDA, gloo on the CPU). Spawns the ranks itself, or joins torchrun's.",
        epilog="usage:\n"
        + (__doc__ or "Usage::\n\n").split("Usage::\n\n", 1)[1].split("\n\n", 1)[0],  # the module docstring's
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("sweep", help="time sharded verify passes and the all-reduce; fit the all-reduce latency")
    s.add_argument("--tp", type=int, required=True, help="ranks (devices) to shard over; must divide the heads")
    s.add_argument(
        "--model", default=DEFAULT_SHAPE, help=f"preset, config.json or LxDxHxKVxFFxV (default {DEFAULT_SHAPE})"
    )
    s.add_argument("--batch", type=_ints, default=[1], help="sequences per pass (default 1)")
    s.add_argument(
        "--tokens", type=_ints, default=[1, 4, 16, 64], help="verify tokens per sequence (default 1,4,16,64)"
    )
    s.add_argument("--context", type=int, default=128, help="tokens already in the cache (default 128)")
    s.add_argument("--dtype", choices=list(TORCH_DTYPES), default=None, help="default: bf16 on CUDA, fp32 on the CPU")
    s.add_argument("--device", choices=["cpu", "cuda"], default=None, help="default: cuda when present")
    s.add_argument("--repeats", type=int, default=5, help="timed passes per visit of a point (default 5)")
    s.add_argument("--rounds", type=int, default=3, help="most shuffled visits of every point (default 3)")
    s.add_argument(
        "--budget",
        type=float,
        default=120.0,
        help="seconds for the whole command, the ranks' start included (default 120); points that do not fit are "
        "not visited, and named",
    )
    s.add_argument("--threads", type=int, default=None, help="CPU threads per rank (default: cores / tp)")
    s.add_argument("--timeout", type=float, default=None, help="kill the ranks after this many seconds")
    s.add_argument("--out", default=None, help="JSON file for the timings and the fit")
    s.add_argument("--json", action="store_true", help="print JSON instead of tables")
    f = sub.add_parser("fit", help="fit the all-reduce latency (and bandwidth) to a saved TP sweep")
    f.add_argument("sweep", help="the JSON file `sweep --out` wrote")
    f.add_argument("--statistic", choices=["min", "median"], default="min")
    f.add_argument("--json", action="store_true")
    c = sub.add_parser("check", help="sharded vs whole model here: logits and greedy (speculative) decoding")
    c.add_argument("--tp", type=int, required=True)
    c.add_argument("--model", default="2x64x4x2x128x256", help="preset, config.json or LxDxHxKVxFFxV")
    c.add_argument("--device", choices=["cpu", "cuda"], default=None)
    c.add_argument("--json", action="store_true")
    return p


def report(data: dict[str, Any], statistic: str = "min", as_json: bool = False) -> str:
    """What ``sweep`` and ``fit`` print: per verify point the all-reduce share, then the fit (or all of it as JSON)."""
    fit = fit_allreduce(data, statistic)
    shares = pass_shares(data, fit, statistic)
    dropped = data.get("dropped") or {}
    if as_json:
        out = {"fit": dataclasses.asdict(fit), "passes": shares.to_dict(orient="records"), "dropped": dropped}
        return json.dumps(out, indent=1)
    text = shares.to_string(index=False) + "\n" + describe_fit(fit)
    if dropped:
        text += "\ndropped for the budget: " + ", ".join(dropped) + ": never visited, they did not fit what was left"
    return text


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    command = "python -m measure.tp " + " ".join(sys.argv[1:] if argv is None else argv)
    try:
        if args.command == "sweep":
            if not args.budget > 0:
                raise SpecroofError(f"--budget must be > 0 seconds (got {args.budget})")
            data = tp_sweep(
                args.model, args.tp, batch=args.batch, tokens=args.tokens, context=args.context, dtype=args.dtype,
                device=args.device, repeats=args.repeats, rounds=args.rounds,
                budget_s=Budget.for_command(args.budget, ["sweep"]),
                threads=args.threads, timeout_s=args.timeout, out=args.out, command=command,
            )  # fmt: skip
            if data is not None:
                print(report(data, as_json=args.json))
                if args.out and not args.json:
                    print(f"saved to {args.out}")
        elif args.command == "fit":
            print(report(load_tp_sweep(args.sweep), args.statistic, as_json=args.json))
        else:
            res = tp_check(args.model, args.tp, device=args.device)
            if res is not None:
                same = res["plain"] == res["plain_tp"] == res["spec_tp"] == res["early_exit_tp"]
                if args.json:
                    print(json.dumps({**res, "greedy_equal": same}, indent=1))
                else:
                    for kind, d in res["max_abs_diff"].items():
                        shown = ", ".join(f"{k} {v:.1e}" for k, v in d.items())
                        print(f"max |logits sharded - whole| ({kind} MLP): {shown}")
                    print(f"greedy plain == plain under TP == speculative under TP (draft, early exit): {same}")
                if not same:
                    return 1
    except SpecroofError as exc:
        print(f"specroof: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Static-shape passes of the harness's model, captured as CUDA graphs and replayed.

An eager pass of an 8B model on an H200 cost 16-34 ms whatever its width, where the GPU's own work was
8-10 ms: the Python launch path, not the device. Every serving engine removes it the same way, and so does
this module:

* every pass runs :meth:`measure.models.Transformer.forward_static`: device inputs only (tokens, each row's
  length), a static slice of the cache (a context bucket, :func:`measure.models.context_bucket`), masks and
  the KV scatter computed on the device, nothing read back on the host;
* one graph per shape: a verify or decode pass per (padded batch, new tokens, context bucket, tree), the draft
  model's whole gamma-step chain per (padded batch, gamma, bucket) (SGLang's ``eagle_draft_cuda_graph_runner``
  captures the draft's steps as one graph), a tree draft per (padded batch, tree), all level by level inside
  one graph; kept in a cache keyed by the shape. Before a run is timed, every shape it can reach is planned
  (:func:`decode_shapes`, :class:`Shape`) and captured, largest first (:meth:`GraphRunner.precapture`); a shape
  the plan missed is captured on first use, outside any timed span (docs/cost-model.md, section 45);
* the batch is padded to a capture size (:data:`CAPTURE_SIZES`, vLLM's list) as vLLM and SGLang do: the padded
  rows are cache rows no live sequence uses (the harness keeps its running sequences in the first rows), run
  with length 0, so they write only their own rows' first slots and no live row reads them;
* one memory pool for every graph (``torch.cuda.graph_pool_handle``), two warm-up calls on a side stream before
  each capture (the allocator and cuBLAS settle there, not inside the graph), inputs copied into the graph's
  static buffers before each replay; a graph's outputs in the pool are valid until the runner's next replay, so
  the drafts (read after the verify pass) are written into buffers outside it (:meth:`GraphRunner.held`);
* CUDA events around each replay alone (:func:`measure.timing.replay_span`): input copies and captures are the
  host's time;
* sampling inside a graph reads uniforms from a noise buffer filled before the replay from the run's generator
  (no generator state lives in the graph): the draft samples by the inverse CDF, as the eager path does, so on
  the same generator a chain draws the same tokens both ways.

On the CPU the same runner runs the same static functions without capture (``capture=False``): what the tests
check the static path with (greedy outputs equal eager and plain decoding). The CPU's default stays the eager
path, whose per-shape kernel race and one-row kernels a static shape would not keep.
"""

from __future__ import annotations

import bisect
import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from measure.models import Transformer, block_step, context_bucket
from roofline.core.errors import SpecroofError
from roofline.speculation.trees import Tree
from roofline.speculation.verification import SamplingParams

#: the padded batch sizes graphs are captured for: vLLM's list (1, 2, 4, then every multiple of 8 to 256). A
#: batch is run at the smallest size that holds it; the cache's own batch is added when it is not in the list.
#: SGLang's is finer below 32 when speculating (1-8, then steps of 2): padding wastes at most 7 rows here,
#: and the harness measures at the sizes themselves (1, 4, 16, ...)
CAPTURE_SIZES: tuple[int, ...] = (1, 2, 4, *range(8, 257, 8))

#: --graphs: on where there is a GPU (auto), always (refused without one), never
GRAPH_MODES = ("auto", "on", "off")

#: device memory a capture keeps aside beyond the cache and the passes' activations: cuBLAS workspaces (a few
#: MB per stream), the caching allocator's rounding and fragmentation, the CUDA context's own growth
WORKSPACE_BYTES = 1 << 30

#: new tokens per sequence above which a pass runs eagerly: a prefill of a whole prompt, not a verify pass
MAX_GRAPH_TOKENS = 512


def capture_sizes(max_batch: int) -> list[int]:
    """The capture sizes a cache of ``max_batch`` rows uses: :data:`CAPTURE_SIZES` below it, and itself."""
    if max_batch < 1:
        raise SpecroofError(f"max_batch must be >= 1 (got {max_batch})")
    return [s for s in CAPTURE_SIZES if s < max_batch] + [int(max_batch)]


def padded_batch(batch: int, max_batch: int) -> int:
    """The capture size a batch of ``batch`` sequences runs at in a cache of ``max_batch`` rows."""
    if not 1 <= batch <= max_batch:
        raise SpecroofError(f"batch {batch} must lie in [1, {max_batch}] (the cache's rows)")
    sizes = capture_sizes(max_batch)
    return sizes[bisect.bisect_left(sizes, batch)]


def use_graphs(mode: str, device: torch.device | str) -> bool:
    """Whether passes are captured as CUDA graphs under ``--graphs mode`` on ``device`` (auto: on a GPU)."""
    if mode not in GRAPH_MODES:
        raise SpecroofError(f"--graphs must be one of {', '.join(GRAPH_MODES)} (got {mode!r})")
    dev = torch.device(device)
    if mode == "on" and dev.type != "cuda":
        raise SpecroofError(
            "--graphs on needs a CUDA device: this run is on the CPU, which runs passes eagerly (--graphs auto or off)"
        )
    return mode == "on" or (mode == "auto" and dev.type == "cuda")


def inductor_missing(device: torch.device | str) -> str | None:
    """Why ``--compile`` cannot run on ``device`` (None: it can): inductor needs triton on a GPU, a C++ compiler
    on the CPU."""
    try:
        import torch._inductor  # noqa: F401
    except Exception as exc:  # a torch build without inductor
        return f"--compile needs torch's inductor, which this torch cannot import ({exc})"
    if torch.device(device).type == "cuda":
        try:
            from torch.utils._triton import has_triton
        except ImportError:
            return "--compile needs triton beside torch on a GPU (inductor's kernels are triton's): pip install triton"
        if not has_triton():
            return "--compile needs triton beside torch on a GPU (inductor's kernels are triton's): pip install triton"
        return None
    cxx = os.environ.get("CXX", "g++")
    try:
        # inductor's own search (CXX, else g++, each run with --version): what it will compile with, no guess
        from torch._inductor.cpp_builder import get_cpp_compiler
    except ImportError:  # an older inductor: the same rule by hand
        found = shutil.which(cxx) is not None
    else:
        try:
            get_cpp_compiler()
            found = True
        except Exception:
            found = False
    if not found:
        return (
            f"--compile on the CPU needs a C++ compiler for inductor's kernels: {cxx} (CXX, else g++) does not run "
            "here; install g++ or point CXX at a compiler"
        )
    return None


def largest_batch(
    free_bytes: float,
    kv_bytes_per_seq: float,
    act_bytes_per_seq: float,
    *,
    weight_bytes: float = 0.0,
    workspace_bytes: float = WORKSPACE_BYTES,
) -> int:
    """The largest batch whose cache and captured passes fit ``free_bytes`` of device memory (0: none fits).

    ``weight_bytes`` of weights still to be allocated (0 where they are on the device already, so that
    ``free_bytes`` is what they left), ``kv_bytes_per_seq`` of cache and ``act_bytes_per_seq`` of the graphs'
    memory pool (the widest pass's activations, and the output buffers every captured graph keeps) per sequence,
    ``workspace_bytes`` aside (:data:`WORKSPACE_BYTES`): free - weights - workspace >= batch x per sequence.
    """
    per_seq = float(kv_bytes_per_seq) + float(act_bytes_per_seq)
    room = float(free_bytes) - float(weight_bytes) - float(workspace_bytes)
    if per_seq <= 0:
        raise SpecroofError(f"bytes per sequence must be > 0 (got {per_seq})")
    return max(0, int(room // per_seq))


def check_batch_fits(
    batch: int,
    free_bytes: float,
    kv_bytes_per_seq: float,
    act_bytes_per_seq: float,
    *,
    weight_bytes: float = 0.0,
    workspace_bytes: float = WORKSPACE_BYTES,
    what: str = "the capture",
) -> None:
    """Refuse, before anything is allocated, a capture size that does not fit, naming the largest batch that does."""
    fits = largest_batch(
        free_bytes, kv_bytes_per_seq, act_bytes_per_seq, weight_bytes=weight_bytes, workspace_bytes=workspace_bytes
    )
    if batch <= fits:
        return
    need = weight_bytes + workspace_bytes + batch * (kv_bytes_per_seq + act_bytes_per_seq)
    hint = f"the largest batch that fits is {fits}" if fits >= 1 else "no batch fits: use a smaller model or context"
    raise SpecroofError(
        f"batch {batch} does not fit {what}: it needs about {need / 1e9:.3g} GB (weights {weight_bytes / 1e9:.3g}, "
        f"KV cache {batch * kv_bytes_per_seq / 1e9:.3g}, graphs {batch * act_bytes_per_seq / 1e9:.3g}, workspace "
        f"{workspace_bytes / 1e9:.3g}) of the {free_bytes / 1e9:.3g} GB free on the device: {hint}"
    )


def compiled_block_step() -> Callable[..., torch.Tensor]:
    """:func:`measure.models.block_step` through ``torch.compile`` (inductor, static shapes): fused norms, rope and
    activations, one compiled artifact per shape shared by every layer (torch.compile inlines the layer passed in
    and guards on its parameters' shapes). Compiled on first use: the first pass of each shape pays for it."""
    import torch._dynamo

    cfg = torch._dynamo.config
    # one artifact per (batch, tokens, bucket) shape: a sweep needs dozens, more than dynamo's default limit of 8
    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(cfg, name):
            setattr(cfg, name, max(int(getattr(cfg, name)), 1024))
    if hasattr(cfg, "accumulated_recompile_limit"):
        cfg.accumulated_recompile_limit = max(int(cfg.accumulated_recompile_limit), 8192)
    return torch.compile(block_step, dynamic=False)  # type: ignore[no-any-return]


class StaticCall:
    """``fn()`` over static input buffers (``inputs``): captured as a CUDA graph on its first call and replayed
    after (``pool``: the memory pool every graph of a runner shares), or called directly when not capturing.

    The caller copies the pass's values into ``inputs`` before each call. What ``fn`` returns lives in the
    runner's pool: another graph's replay may reuse that memory, so it is valid only until the runner's next
    call. An output the caller reads after another graph replayed (a draft, read after the verify pass) is
    written by ``fn`` into ``held``: buffers allocated before capture, outside the pool, which only a call
    writing the same buffers overwrites (docs/cost-model.md, section 45).

    The replay (on the CPU the call of ``fn``) is bracketed by :func:`measure.timing.replay_span`: an open
    :class:`measure.timing.PassTimer` span is charged with it alone, never with the input copies or a capture.
    """

    def __init__(
        self,
        fn: Callable[[], Any],
        inputs: dict[str, torch.Tensor],
        runner: GraphRunner,
        held: dict[str, torch.Tensor] | None = None,
    ) -> None:
        self.fn, self.inputs, self.runner = fn, inputs, runner
        self.held: dict[str, torch.Tensor] = held or {}
        self.graph: Any = None
        self.out: Any = None

    def __call__(self) -> Any:
        from measure.timing import replay_span

        if not self.runner.capture:
            with replay_span():
                return self.fn()
        if self.graph is None:
            self._capture()  # before the bracket: a capture is host time, never a pass's
        with replay_span():
            self.graph.replay()
        return self.out

    def _capture(self) -> None:
        r = self.runner
        t0 = time.perf_counter()
        side = torch.cuda.Stream(device=r.device)
        side.wait_stream(torch.cuda.current_stream(r.device))
        with torch.cuda.stream(side):
            # the first call of a compiled step compiles it: timed apart (what --compile costs)
            self.fn()
            torch.cuda.synchronize(r.device)
            t1 = time.perf_counter()
            self.fn()
        torch.cuda.current_stream(r.device).wait_stream(side)
        torch.cuda.synchronize(r.device)
        if r.pool is None:
            r.pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=r.pool):
            self.out = self.fn()
        torch.cuda.synchronize(r.device)
        self.graph = graph
        done = time.perf_counter()
        r.stats["captures"] += 1
        if r.compile:
            r.stats["compile_s"] += t1 - t0
            r.stats["capture_s"] += done - t1
        else:
            r.stats["capture_s"] += done - t0


@dataclass(frozen=True, eq=False)
class Shape:
    """The shape of one captured graph: what a run must capture before it is timed (docs/cost-model.md, section 45).

    ``kind``: ``"pass"`` (a verify pass or a decode step of ``width`` new tokens, ``tree`` its verify tree),
    ``"chain"`` (a draft's ``width``-step chain fed ``keep`` tokens) or ``"tree"`` (a ``tree`` drafted after a
    ``keep``-token prefix); ``batch`` the padded batch (a capture size), ``bucket`` the context bucket;
    ``n_layers`` an early exit's layers; ``sampling`` and ``variant`` as the run draws.
    """

    kind: str
    batch: int
    width: int
    bucket: int
    keep: int = 0
    tree: Tree | None = None
    n_layers: int | None = None
    sampling: SamplingParams = SamplingParams(temperature=0.0)
    variant: str = "sequoia"

    def key(self) -> tuple[Any, ...]:
        """The runner's cache key of this shape's graph (:attr:`GraphRunner.calls`)."""
        tb = None if self.tree is None else self.tree.parents.tobytes()
        if self.kind == "pass":
            return ("pass", self.batch, self.width, self.bucket, tb, self.n_layers)
        sk = _sampling_key(self.sampling)
        if self.kind == "chain":
            return ("chain", self.batch, self.keep, self.width, self.bucket, self.n_layers, sk)
        return ("tree", self.batch, (tb, self.keep), self.bucket, self.n_layers, sk, self.variant)

    @property
    def size(self) -> tuple[int, int, int]:
        """The order of capture, largest first as vLLM and SGLang capture: padded batch, bucket, width."""
        return (self.batch, self.bucket, self.width)


def buckets_between(lo: int, hi: int, cap: int) -> list[int]:
    """Every context bucket (:func:`measure.models.context_bucket`) a need in ``lo .. hi`` falls in, ``hi`` capped
    at ``cap`` (a need beyond the cache is refused where it happens, not planned)."""
    out: list[int] = []
    need, hi = max(1, int(lo)), min(int(hi), int(cap))
    while need <= hi:
        b = context_bucket(need, cap)
        out.append(b)
        need = b + 1
    return out


def plan_order(shapes: Sequence[Shape]) -> list[Shape]:
    """``shapes`` without repeats, largest first (a graph captured after a larger one reuses its pool blocks)."""
    seen: dict[tuple[Any, ...], Shape] = {}
    for sh in shapes:
        seen.setdefault(sh.key(), sh)
    return sorted(seen.values(), key=lambda sh: sh.size, reverse=True)


def decode_shapes(
    *,
    batches: Sequence[int],
    max_batch: int,
    max_seq: int,
    need_lo: int,
    need_hi: int,
    gammas: Sequence[int] = (),
    tree: Tree | None = None,
    drafter: str = "plain",
    n_layers: int | None = None,
    sampling: SamplingParams | None = None,
    variant: str = "sequoia",
) -> dict[str, list[Shape]]:
    """Every shape a decoding reaches, by runner: ``{"target": [...], "draft": [...]}`` (an early exit's chains and
    trees run on the target's runner; a separate draft model's on its own).

    The batch runs padded (:func:`padded_batch`) at each of ``batches`` in a cache of ``max_batch`` rows and
    ``max_seq`` slots; the longest row's committed tokens (prompt and emitted) ``c`` lie in ``need_lo ..
    need_hi`` at the start of a round. ``drafter``: ``"plain"`` (a step of one token per round), ``"draft"`` (a
    separate model, fed 2 tokens), ``"early exit"`` (``n_layers``, fed 1) or ``"lookup"`` (no draft pass).
    ``gammas``: the chain lengths a round may draft (0: a round without drafts); or ``tree``, breadth first.
    Each pass's bucket is that of the slots it needs past the longest row, as the runner computes it
    (docs/cost-model.md, section 45): a step ``c``, a chain of ``g`` ``c + g - 1``, its verify ``c + g``, a
    tree of ``n`` nodes ``c + n_above`` (the nodes above its last level) and its verify ``c + n``.
    """
    sp = sampling or SamplingParams(temperature=0.0)
    keep = {"draft": 2, "early exit": 1}.get(drafter, 0)
    where = "draft" if drafter == "draft" else "target"
    out: dict[str, list[Shape]] = {"target": [], "draft": []}
    bcaps = sorted({padded_batch(b, max_batch) for b in batches})

    def add(runner: str, kind: str, width: int, lo_extra: int, hi_extra: int, **kw: Any) -> None:
        if kind == "pass" and width > MAX_GRAPH_TOKENS:
            return  # run eagerly, never captured
        for bcap in bcaps:
            for bucket in buckets_between(need_lo + lo_extra, need_hi + hi_extra, max_seq):
                out[runner].append(Shape(kind, bcap, width, bucket, sampling=sp, variant=variant, **kw))

    if drafter == "plain":
        add("target", "pass", 1, 0, 0)
        return out
    if tree is not None:
        verify = Tree(np.concatenate([[-1], np.where(tree.parents < 0, 0, tree.parents + 1)]))
        above = int((tree.depths < tree.depth).sum())
        if keep:
            nl = n_layers if drafter == "early exit" else None
            add(where, "tree", tree.n_nodes, above, above, keep=keep, tree=tree, n_layers=nl)
        add("target", "pass", tree.n_nodes + 1, tree.n_nodes, tree.n_nodes, tree=verify)
        return out
    for g in sorted(set(int(g) for g in gammas)):
        if g and keep:
            nl = n_layers if drafter == "early exit" else None
            add(where, "chain", g, g - 1, g - 1, keep=keep, n_layers=nl)
        add("target", "pass", g + 1, g, g)
    return out


@dataclass(frozen=True)
class _TreeLevel:
    """One level of a tree draft as constants: the pass's layout over the prefix and the nodes above the level,
    the rows of its parents, and each parent's children."""

    known: int
    among: torch.Tensor
    offsets: torch.Tensor
    rows: torch.Tensor
    width: int
    children: tuple[tuple[int, torch.Tensor], ...]
    parents: torch.Tensor


def _tree_levels(tree: Tree, k: int, device: torch.device) -> list[_TreeLevel]:
    """The levels of drafting ``tree`` (breadth-first numbered) after a ``k``-token prefix, as
    :func:`measure.decode._draft_tree` runs them, every index a device constant made before any capture."""
    parents, depths = tree.parents, tree.depths
    out = []
    for d in range(1, tree.depth + 1):
        known = int((depths < d).sum())
        level = np.nonzero(depths == d)[0]
        par = np.unique(parents[level])
        shape = Tree(np.concatenate([np.arange(-1, k - 1), np.where(parents[:known] < 0, k - 1, parents[:known] + k)]))
        width = int(max((parents[level] == p_).sum() for p_ in par))
        kids = tuple(
            (j, torch.as_tensor(level[parents[level] == p_], device=device)) for j, p_ in enumerate(par.tolist())
        )
        out.append(
            _TreeLevel(
                known,
                torch.as_tensor(shape.ancestors_matrix(), device=device),
                torch.as_tensor(shape.depths - 1, device=device),
                torch.as_tensor(np.where(par < 0, k - 1, par + k), device=device),
                width,
                kids,
                torch.as_tensor(par + 1, device=device),
            )
        )
    return out


def _sampling_key(sp: SamplingParams) -> tuple[Any, ...]:
    return ("greedy",) if sp.greedy else (sp.temperature, sp.top_k, sp.top_p, sp.min_p)


class GraphRunner:
    """The static-shape passes of one :class:`Transformer` over its cache, a graph per shape (see the module).

    ``capture``: capture CUDA graphs (a GPU) or run the static functions directly (the CPU's static path);
    ``compile``: each layer through ``torch.compile`` first (:func:`compiled_block_step`). ``stats`` counts the
    captures and the seconds spent capturing and compiling.
    """

    def __init__(self, model: Transformer, *, capture: bool, compile: bool = False) -> None:
        if capture and model.device.type != "cuda":
            raise SpecroofError("CUDA graphs need the model on a CUDA device")
        if model.spec.is_moe:
            raise SpecroofError(
                f"{model.spec.name}: the harness's MoE layer routes on the host (a data-dependent gather): its passes "
                "cannot be captured; use --graphs off"
            )
        self.model = model
        self.device = model.device
        self.capture = capture
        self.compile = compile
        self.pool: Any = None
        self.calls: dict[tuple[Any, ...], StaticCall] = {}
        self.stats: dict[str, float] = {"captures": 0, "capture_s": 0.0, "compile_s": 0.0}
        self._levels: dict[tuple[Any, ...], list[_TreeLevel]] = {}
        self._layouts: dict[bytes, tuple[torch.Tensor, torch.Tensor]] = {}
        self._held: dict[tuple[Any, ...], torch.Tensor] = {}

    def held(self, name: str, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """An output buffer outside the graphs' pool, allocated before any capture that writes it: shared by every
        graph writing ``name`` at ``shape`` (a draft's outputs are read before the next draft of any bucket)."""
        key = (name, tuple(int(d) for d in shape), dtype)
        buf = self._held.get(key)
        if buf is None:
            with torch.inference_mode(False):
                buf = self._held[key] = torch.zeros(key[1], dtype=dtype, device=self.device)
        return buf

    def serves(self, new_tokens: int) -> bool:
        """Whether a pass of ``new_tokens`` per sequence runs here (a prefill of a long prompt runs eagerly)."""
        return new_tokens <= MAX_GRAPH_TOKENS

    def reset(self) -> None:
        """Forget every graph (the model's cache was replaced: the graphs read the old one's buffers)."""
        self.calls.clear()
        self._levels.clear()
        self._layouts.clear()
        self._held.clear()
        self.pool = None

    @property
    def mode(self) -> str:
        """How passes run here: "graphs", "graphs+compile", "static" (uncaptured) or "static+compile"."""
        return ("graphs" if self.capture else "static") + ("+compile" if self.compile else "")

    # -- inputs ---------------------------------------------------------------------------------

    def _cache(self, batch: int, extra: int) -> tuple[Any, int, int]:
        """The cache, the padded batch and the context bucket of a call of ``batch`` rows needing ``extra`` slots
        past the longest row's length."""
        c = self.model.cache
        if c is None:
            raise SpecroofError("call setup_cache(max_batch, max_seq) before running the model")
        bcap = padded_batch(batch, c.max_batch)
        bucket = context_bucket(int(c.lengths[:batch].max()) + extra, c.max_seq)
        return c, bcap, bucket

    def _set_lengths(self, buf: torch.Tensor, batch: int) -> None:
        """Each row's cached length into ``buf``; the padded rows 0 (they write their own rows' first slots)."""
        c = self.model.cache
        assert c is not None
        host = torch.zeros(buf.shape[0], dtype=torch.long)
        host[:batch] = torch.from_numpy(c.lengths[:batch])
        if buf.device.type == "cuda":
            # from pinned memory, without waiting for the device: a plain copy from pageable memory synchronises the
            # stream, which would stall the host behind every pass queued before it. The caching host allocator does
            # not hand this block out again before the copy has run.
            buf.copy_(host.pin_memory(), non_blocking=True)
        else:
            buf.copy_(host)

    def _layout(self, tree: Tree | None) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """A tree's mask among its nodes and position offsets as device constants (None, None for a chain)."""
        if tree is None:
            return None, None
        key = tree.parents.tobytes()
        if key not in self._layouts:
            self._layouts[key] = (
                torch.as_tensor(tree.ancestors_matrix(), device=self.device),
                torch.as_tensor(tree.depths - 1, device=self.device),
            )
        return self._layouts[key]

    def _call(self, key: tuple[Any, ...], build: Callable[[], StaticCall]) -> StaticCall:
        call = self.calls.get(key)
        if call is None:
            # ordinary tensors even when the caller runs in inference mode: they are written before every call
            with torch.inference_mode(False):
                call = self.calls[key] = build()
        return call

    # -- the passes -----------------------------------------------------------------------------

    def forward(self, tokens: torch.Tensor, tree: Tree | None = None, n_layers: int | None = None) -> torch.Tensor:
        """One pass (a verify, a decode step, a tree level): logits (B, n, V), the lengths not advanced."""
        B, n = tokens.shape
        _, bcap, bucket = self._cache(B, n)
        call = self._pass_call(bcap, n, bucket, tree, n_layers)
        call.inputs["tokens"][:B].copy_(tokens)
        self._set_lengths(call.inputs["lengths"], B)
        with torch.inference_mode():
            out = call()
        return out[:B]  # type: ignore[no-any-return]

    def _pass_call(self, bcap: int, n: int, bucket: int, tree: Tree | None, n_layers: int | None) -> StaticCall:
        key = ("pass", bcap, n, bucket, None if tree is None else tree.parents.tobytes(), n_layers)

        def build() -> StaticCall:
            buf = {
                "tokens": torch.zeros(bcap, n, dtype=torch.long, device=self.device),
                "lengths": torch.zeros(bcap, dtype=torch.long, device=self.device),
            }
            among, offsets = self._layout(tree)
            m = self.model

            def fn() -> torch.Tensor:
                return m.forward_static(buf["tokens"], buf["lengths"], bucket, among, offsets, n_layers)

            return StaticCall(fn, buf, self)

        return self._call(key, build)

    def draft_chain(
        self,
        feed: torch.Tensor,
        gamma: int,
        sp: SamplingParams,
        gen: torch.Generator | None,
        n_layers: int | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The draft's ``gamma`` autoregressive steps from ``feed`` (B, keep) as one graph: the drafted tokens
        (B, gamma) and, sampled, their distributions q (B, gamma, V); the lengths advanced by keep + gamma - 1,
        as :func:`measure.decode._draft_steps` leaves them. Greedy drafts the argmax in the graph; a sampled
        draft reads its uniforms from a buffer filled here from ``gen``, drawn as the eager steps draw them."""
        B, keep = feed.shape
        _, bcap, bucket = self._cache(B, keep + gamma - 1)
        sampled = not sp.greedy
        call = self._chain_call(bcap, keep, gamma, bucket, n_layers, sp)
        call.inputs["feed"][:B].copy_(feed)
        self._set_lengths(call.inputs["lengths"], B)
        if sampled:  # one draw per step, as the eager steps draw them: the same generator gives the same tokens
            u = call.inputs["uniforms"]
            for s in range(gamma):
                u[:B, s].copy_(torch.rand((B,), generator=gen, dtype=torch.float64, device=self.device))
        with torch.inference_mode():
            x, q = call()
        self.model.advance(keep + gamma - 1)
        return x[:B], (q[:B] if sampled else torch.empty(0))

    def _chain_call(
        self, bcap: int, keep: int, gamma: int, bucket: int, n_layers: int | None, sp: SamplingParams
    ) -> StaticCall:
        sampled = not sp.greedy
        key = ("chain", bcap, keep, gamma, bucket, n_layers, _sampling_key(sp))

        def build() -> StaticCall:
            from measure.verification import process_logits, sample_from

            buf = {
                "feed": torch.zeros(bcap, keep, dtype=torch.long, device=self.device),
                "lengths": torch.zeros(bcap, dtype=torch.long, device=self.device),
            }
            if sampled:
                buf["uniforms"] = torch.zeros(bcap, gamma, dtype=torch.float64, device=self.device)
            V = self.model.spec.vocab_size
            # the drafts are read after the verify pass replayed (early exit: on this runner, in this pool): held
            out = {"x": self.held("chain x", (bcap, gamma), torch.long)}
            if sampled:
                out["q"] = self.held("chain q", (bcap, gamma, V), torch.float64)
            m = self.model

            def fn() -> tuple[torch.Tensor, torch.Tensor]:
                lens, x_in = buf["lengths"], buf["feed"]
                xs, qs = [], []
                for s in range(gamma):
                    logits = m.forward_static(x_in, lens, bucket, n_layers=n_layers)[:, -1]
                    lens = lens + x_in.shape[1]
                    if sampled:
                        q = process_logits(logits, sp.temperature, sp.top_k, sp.top_p, sp.min_p, check=False)
                        x = sample_from(q, buf["uniforms"][:, s])
                        qs.append(q)
                    else:
                        x = logits.argmax(-1)
                    xs.append(x)
                    x_in = x.view(-1, 1)
                out["x"].copy_(torch.stack(xs, 1))
                if sampled:
                    out["q"].copy_(torch.stack(qs, 1))
                return out["x"], out.get("q", out["x"][:, :0])

            return StaticCall(fn, buf, self, out)

        return self._call(key, build)

    def draft_tree(
        self,
        prefix: torch.Tensor,
        tree: Tree,
        sp: SamplingParams,
        gen: torch.Generator | None,
        variant: str,
        n_layers: int | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """A breadth-first ``tree`` drafted level by level after ``prefix`` (B, k) as one graph: node tokens (B, n)
        and q (B, n + 1, V), as :func:`measure.decode._draft_tree` returns them. Greedy takes the top children in the
        graph; Sequoia's draws without replacement read a buffer of uniforms filled here as the eager path draws
        them (Gumbel keys); SpecInfer's draws with replacement read uniforms too (inverse CDF, one per child)."""
        B, k = prefix.shape
        levels = self._tree_levels(tree, k)
        _, bcap, bucket = self._cache(B, k + levels[-1].known)
        sampled = not sp.greedy
        V = self.model.spec.vocab_size
        call = self._tree_call(bcap, k, tree, bucket, n_layers, sp, variant)
        call.inputs["prefix"][:B].copy_(prefix)
        self._set_lengths(call.inputs["lengths"], B)
        if sampled:
            for i, lv in enumerate(levels):
                u = call.inputs[f"uniforms{i}"]
                if variant == "sequoia":  # drawn as measure.decode._choose_children draws them
                    u[:B].copy_(torch.rand((B * len(lv.children), V), generator=gen, dtype=torch.float64,
                                           device=self.device).view(B, len(lv.children), V))  # fmt: skip
                else:
                    u[:B].copy_(torch.rand(u[:B].shape, generator=gen, dtype=torch.float64, device=self.device))
        with torch.inference_mode():
            toks, q_all = call()
        return toks[:B], (q_all[:B] if sampled else torch.empty(0))

    def _tree_levels(self, tree: Tree, k: int) -> list[_TreeLevel]:
        lkey = (tree.parents.tobytes(), k)
        if lkey not in self._levels:
            self._levels[lkey] = _tree_levels(tree, k, self.device)
        return self._levels[lkey]

    def _tree_call(
        self, bcap: int, k: int, tree: Tree, bucket: int, n_layers: int | None, sp: SamplingParams, variant: str
    ) -> StaticCall:
        n = tree.n_nodes
        levels = self._tree_levels(tree, k)
        sampled = not sp.greedy
        V = self.model.spec.vocab_size
        key = ("tree", bcap, (tree.parents.tobytes(), k), bucket, n_layers, _sampling_key(sp), variant)

        def build() -> StaticCall:
            from measure.verification import process_logits, sample_from

            buf = {
                "prefix": torch.zeros(bcap, k, dtype=torch.long, device=self.device),
                "lengths": torch.zeros(bcap, dtype=torch.long, device=self.device),
            }
            if sampled:
                for i, lv in enumerate(levels):
                    shape = (bcap, len(lv.children), V) if variant == "sequoia" else (bcap, len(lv.children), lv.width)
                    buf[f"uniforms{i}"] = torch.zeros(shape, dtype=torch.float64, device=self.device)
            # the nodes are read after the verify pass replayed: written straight into buffers outside the pool
            out = {"toks": self.held("tree toks", (bcap, n), torch.long)}
            if sampled:
                out["q"] = self.held("tree q", (bcap, n + 1, V), torch.float64)
            m = self.model

            def fn() -> tuple[torch.Tensor, torch.Tensor]:
                toks = out["toks"].zero_()
                q_all = out["q"].zero_() if sampled else None
                for i, lv in enumerate(levels):
                    feed = torch.cat([buf["prefix"], toks[:, : lv.known]], 1)
                    logits = m.forward_static(feed, buf["lengths"], bucket, lv.among, lv.offsets, n_layers)
                    dist = logits[:, lv.rows].reshape(bcap * len(lv.children), V)
                    if not sampled:
                        kids = dist.topk(lv.width, dim=-1).indices
                    else:
                        q = process_logits(dist, sp.temperature, sp.top_k, sp.top_p, sp.min_p, check=False)
                        u = buf[f"uniforms{i}"].view(bcap * len(lv.children), -1)
                        if variant == "sequoia":  # Gumbel top-k over log q: k draws without replacement
                            keys = torch.log(q) - torch.log(-torch.log(u.clamp(1e-300, 1.0)))
                            kids = keys.topk(lv.width, dim=-1).indices
                        else:  # SpecInfer: i.i.d. draws with replacement, each by the inverse CDF
                            kids = sample_from(q.unsqueeze(1).expand(-1, lv.width, -1), u)
                        assert q_all is not None
                        q_all[:, lv.parents] = q.view(bcap, len(lv.children), V)
                    kids = kids.view(bcap, len(lv.children), lv.width)
                    for j, ch in lv.children:
                        toks[:, ch] = kids[:, j, : ch.numel()]
                return toks, (q_all if q_all is not None else toks[:, :0])

            return StaticCall(fn, buf, self, out)

        return self._call(key, build)

    def precapture(self, shapes: Sequence[Shape], allows: Callable[[float], bool] | None = None) -> dict[str, float]:
        """Capture every one of ``shapes`` not captured yet, largest first (:func:`plan_order`), before a timed run.

        Each capture's warm-up calls run at the cache's current lengths: they write keys and values past each
        row's length, which no row reads (a run captures after its prefill, a sweep and a server before theirs).
        ``allows(seconds)``: whether a budget still has room for one more capture of the mean cost so far; the
        shapes left over are captured on first use, outside any timed span. Returns the graphs captured and the
        seconds it took; on the CPU (no capture) nothing is captured.
        """
        done = {"graphs": 0.0, "seconds": 0.0, "planned": float(len(plan_order(shapes)))}
        if not self.capture or self.model.cache is None:
            return done
        t0 = time.perf_counter()
        for sh in plan_order(shapes):
            n = int(done["graphs"])
            if allows is not None and n and not allows((time.perf_counter() - t0) / n):
                break
            call = self.call_for(sh)
            if call.graph is not None:
                continue
            self._set_lengths(call.inputs["lengths"], min(sh.batch, self.model.cache.max_batch))
            with torch.inference_mode():
                call._capture()
            done["graphs"] += 1
        done["seconds"] = time.perf_counter() - t0
        return done

    def call_for(self, sh: Shape) -> StaticCall:
        """The static call of a planned shape (built now where it was not)."""
        if sh.kind == "pass":
            return self._pass_call(sh.batch, sh.width, sh.bucket, sh.tree, sh.n_layers)
        if sh.kind == "chain":
            return self._chain_call(sh.batch, sh.keep, sh.width, sh.bucket, sh.n_layers, sh.sampling)
        assert sh.tree is not None
        return self._tree_call(sh.batch, sh.keep, sh.tree, sh.bucket, sh.n_layers, sh.sampling, sh.variant)


def attach(model: Transformer, *, capture: bool, compile: bool = False) -> GraphRunner:
    """Run ``model``'s passes with static shapes from now on: captured as CUDA graphs (``capture``, a GPU) or
    uncaptured (the CPU's static path); ``compile`` each layer with inductor first. Returns the runner."""
    runner = GraphRunner(model, capture=capture, compile=compile)
    if compile:
        # inductor chooses (and on a CPU packs) its own kernels: the eager path's per-shape kernels and their weight
        # copies are left out, or every layer would break the compiled graph where it looks its copy up
        for mod in model.modules():
            if hasattr(mod, "kernels"):
                mod.kernels = {}
                if hasattr(mod, "free_copies"):
                    mod.free_copies()
        model.auto_kernels = False
        model.block_fn = compiled_block_step()
    model.runner = runner
    return runner


def detach(model: Transformer) -> None:
    """Back to eager passes (the graphs are dropped)."""
    if model.runner is not None:
        model.runner.reset()
    model.runner = None
    model.block_fn = block_step


def prepare(models: Sequence[Any], device: torch.device, graphs: str = "auto", compile: bool = False) -> dict[str, Any]:
    """Attach a runner to each of ``models`` (harness Transformers; anything else runs eagerly) under ``--graphs``
    and ``--compile``; returns how passes run here ("eager", "graphs", "graphs+compile", "static+compile") and
    why, for the page and the JSON. ``--compile`` where inductor cannot run is refused before any work."""
    on = use_graphs(graphs, device)
    if compile:
        missing = inductor_missing(device)
        if missing:
            raise SpecroofError(missing)
    mode = "eager"
    for m in models:
        if isinstance(m, Transformer) and (on or compile):
            if m.spec.is_moe:
                if graphs == "on":
                    GraphRunner(m, capture=on)  # raises: an MoE layer cannot be captured
                continue
            mode = attach(m, capture=on, compile=compile).mode
    return {"graphs": graphs, "passes": mode}


def runner_stats(models: Sequence[Any]) -> dict[str, float]:
    """Captures and seconds spent capturing and compiling, over ``models``' runners."""
    out = {"captures": 0.0, "capture_s": 0.0, "compile_s": 0.0}
    for m in models:
        r = getattr(m, "runner", None)
        if r is not None:
            for k in out:
                out[k] += float(r.stats[k])
    return out

"""``gpu.sh --smoke``'s check of the graphs: capture, replay, greedy equality with eager decoding, sync-free replays.

    python -m benchmarks.gpu_smoke [--device cuda] [--json]

A four-layer fp32 target and a one-layer draft that shares its first layer (the pair tests/test_graphs.py decodes)
decode four prompts greedily, eagerly and then through the static path (on CUDA every pass captured as a graph and
replayed; on the CPU the same static functions called directly): plain decoding, a draft model's chain, an early
exit's chain (its drafts sit on the target's runner, beside the verify pass) and a tree. Each must emit exactly the
eager tokens with the same mean accepted length, and greedy speculation must emit plain decoding's tokens. On CUDA
every replay runs under ``torch.cuda.set_sync_debug_mode("error")``: a pass that reads a device value on the host
fails here, in seconds, instead of stalling every timed pass of the full run. Exit status 1 when any check fails.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import numpy as np
import torch

from measure import graphs
from measure.decode import autoregressive_generate, speculative_generate
from measure.models import Transformer
from roofline.passes.model import ModelSpec
from roofline.speculation.trees import Tree

SPEC = ModelSpec("target", 4, 64, 4, 2, 16, 128, 50, max_context=1024)
PROMPTS = [[1, 2, 3, 4, 5], [7, 8, 9], [3, 3, 3, 3, 3, 3, 3], [10, 11, 12, 10, 11, 12, 10, 11]]
TREE = Tree([-1, -1, 0, 0, 1, 2])
NEW_TOKENS = 24


def pair(device: str) -> tuple[Transformer, Transformer]:
    torch.manual_seed(0)
    # on a CPU, F.linear throughout: the per-shape kernel race (seconds there) checks nothing the smoke is for
    kw: dict[str, Any] = {"dtype": "fp32", "init_std": 0.08, "device": device}
    if torch.device(device).type == "cpu":
        kw["matvec"] = False
    target = Transformer(SPEC, **kw)
    draft = Transformer(SPEC.replace(n_layers=1, name="draft"), **kw)
    with torch.no_grad():  # a draft that shares the target's embedding and first layer agrees often
        draft.embed_tokens.weight.copy_(target.embed_tokens.weight)
        draft.lm_head.weight.copy_(target.lm_head.weight)
        draft.layers[0].load_state_dict(target.layers[0].state_dict())
    return target, draft


def decodings(target: Transformer, draft: Transformer) -> dict[str, tuple[list[list[int]], float | None]]:
    """Each greedy decoding's tokens and its mean accepted length (None for plain decoding)."""
    out: dict[str, tuple[list[list[int]], float | None]] = {
        "plain": (autoregressive_generate(target, PROMPTS, NEW_TOKENS).tokens, None)
    }
    for kind, drafter, shape in (("draft", draft, 3), ("early exit", 2, 4), ("tree", draft, TREE)):
        r = speculative_generate(target, drafter, PROMPTS, shape, NEW_TOKENS)
        out[kind] = (r.tokens, float(r.rounds["accepted"].mean()))
    return out


class SyncChecked:
    """Replays of already captured calls run under ``set_sync_debug_mode("error")`` while this is entered."""

    def __init__(self) -> None:
        self.replays = 0
        self.orig = graphs.StaticCall.__call__

    def __enter__(self) -> SyncChecked:
        orig, me = self.orig, self

        def checked(call: Any) -> Any:
            if not call.runner.capture or getattr(call, "graph", None) is None:
                return orig(call)  # the first call captures: allocations and warm-up may sync there
            prev = torch.cuda.get_sync_debug_mode()
            torch.cuda.set_sync_debug_mode("error")
            try:
                return orig(call)
            finally:
                torch.cuda.set_sync_debug_mode(prev)
                me.replays += 1

        graphs.StaticCall.__call__ = checked  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        graphs.StaticCall.__call__ = self.orig  # type: ignore[method-assign]


def smoke(device: str) -> dict[str, Any]:
    t0 = time.perf_counter()
    capture = torch.device(device).type == "cuda"
    if not capture:
        # one thread: a few-row product of this tiny model is microseconds, but two threads' barriers on a loaded
        # CPU made each take 13 ms (cProfile, load average 10 on 2 cores); eager and static run alike
        torch.set_num_threads(1)
    target, draft = pair(device)
    eager = decodings(target, draft)
    graphs.attach(target, capture=capture)
    graphs.attach(draft, capture=capture)
    checked = SyncChecked()
    error = None
    try:
        with checked:
            static = decodings(target, draft)
            # every shape captured now: a second run only replays (uncaptured, it would repeat the first)
            again = decodings(target, draft) if capture else static
    except RuntimeError as exc:  # a host sync inside a replay, or a failed capture
        error = str(exc).splitlines()[0]
        static = again = {}
    checks: dict[str, bool] = {}
    for kind, (tokens, accepted) in eager.items():
        got = static.get(kind)
        checks[f"{kind}: tokens equal eager"] = got is not None and got[0] == tokens
        if accepted is not None:
            checks[f"{kind}: mean accepted equal eager"] = got is not None and bool(np.isclose(got[1] or -1, accepted))
        checks[f"{kind}: replayed run equal"] = again.get(kind) == got
    plain = static.get("plain", (None, None))[0]
    checks["greedy speculation emits plain decoding"] = plain is not None and all(
        static[k][0] == plain for k in ("draft", "early exit", "tree")
    )
    stats = graphs.runner_stats([target, draft])
    return {
        "device": torch.cuda.get_device_name() if capture else "cpu",
        "torch": torch.__version__,
        "mode": target.runner.mode if target.runner is not None else None,
        "captures": stats.get("captures"),
        "capture_s": stats.get("capture_s"),
        "replays_sync_checked": checked.replays,
        "sync_debug": "error" if capture else "n/a (no CUDA)",
        "error": error,
        "mean_accepted": {k: [eager[k][1], static.get(k, (None, None))[1]] for k in eager if eager[k][1] is not None},
        "checks": checks,
        "ok": error is None and all(checks.values()),
        "seconds": time.perf_counter() - t0,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    args = ap.parse_args(argv)
    res = smoke(args.device)
    if args.json:
        print(json.dumps(res, indent=1))
    else:
        for k, v in res["checks"].items():
            print(f"{'ok  ' if v else 'FAIL'} {k}")
        print(f"{res['captures']} captures, {res['replays_sync_checked']} replays sync-checked, {res['seconds']:.1f} s")
    if not res["ok"]:
        import sys

        bad = [k for k, v in res["checks"].items() if not v]
        print(f"smoke: failed: {res['error'] or '; '.join(bad)}", file=sys.stderr)
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())

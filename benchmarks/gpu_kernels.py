"""``gpu.sh``'s kernels step: the kernels each layer of a verify pass launches, and what graphs remove on them.

    python -m benchmarks.gpu_kernels [--model llama-3.1-8b] [--device cuda] [--dtype bf16] [--context 384] [--json]

On a two-layer copy of the model's shape (random weights; a layer's kernels do not depend on the depth, and the
copy takes seconds to build where the whole 16 GB model takes many): per pass of batch 1 and 1, 4 and 16 new tokens
and of a six-node tree, the kernels per layer and outside the layers of the static path (what a graph captures) and
of the eager one (:func:`measure.microbench.pass_kernels`: torch.profiler's count, the device's kernels on CUDA and
the top-level operators on the CPU), and the same static pass timed uncaptured and as a replayed graph
(:func:`measure.microbench.launch_overhead`; on the CPU, uncaptured twice). The summary prints the kernels per layer
beside the sweep's pass times.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import torch

from measure.microbench import launch_overhead, pass_kernels
from measure.models import Transformer
from roofline.passes.model import get_model
from roofline.speculation.trees import Tree

TREE = Tree([-1, -1, 0, 0, 1, 2])


def kernels(model: str, device: str, dtype: str, context: int, tokens: tuple[int, ...] = (1, 4, 16)) -> dict[str, Any]:
    spec = get_model(model)
    if torch.device(device).type == "cpu":
        torch.set_num_threads(1)  # the plumbing check: a tiny model's products are barrier-bound on a loaded CPU
    copy = spec.replace(n_layers=2, name=f"{spec.name} (2 layers)")
    torch.manual_seed(0)
    # on a CPU, F.linear throughout: the per-shape kernel race (seconds) would count no other kernels per layer
    m = Transformer(copy, dtype=dtype, device=device, matvec=False if torch.device(device).type == "cpu" else None)
    rows = [pass_kernels(m, 1, n, context) for n in tokens]
    rows.append({**pass_kernels(m, 1, TREE.n_nodes, context, tree=TREE), "tree": TREE.parents.tolist()})
    lo = launch_overhead(m, [(1, n, context) for n in tokens], repeats=10)
    return {
        "model": spec.name,
        "layers_counted": 2,
        "device": torch.cuda.get_device_name() if torch.device(device).type == "cuda" else "cpu",
        "torch": torch.__version__,
        "counted_as": "device kernels (CUDA)" if torch.device(device).type == "cuda" else "top-level ATen ops (CPU)",
        "passes": rows,
        "launch_overhead_2_layers": lo.to_dict(orient="records"),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="llama-3.1-8b")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--context", type=int, default=384)
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    args = ap.parse_args(argv)
    res = kernels(args.model, args.device, args.dtype, args.context)
    if args.json:
        print(json.dumps(res, indent=1))
    else:
        for r in res["passes"]:
            print(
                f"batch 1 x {r['new_tokens']}{' (tree)' if 'tree' in r else ''}: static {r['static_per_layer']} per "
                f"layer + {r['static_outside_layers']}, eager {r['eager_per_layer']} + {r['eager_outside_layers']}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

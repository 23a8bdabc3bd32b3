"""``tree``'s two answers in one labelled table: the fastest tree the search found (any shape) and the engine's own
best setting, the deployable one first, each saying whether the printed engine can deploy it (docs/cost-model.md, 50.3)."""

from __future__ import annotations

from typing import Any

#: how each engine is written in a sentence
ENGINE_NAMES = {"sglang": "SGLang", "vllm": "vLLM", "trtllm": "TensorRT-LLM"}


def one_table(best: dict[str, Any], deploy: dict[str, Any] | None, framework: str) -> tuple[list[str], list[dict]]:
    """The text lines and the JSON rows of the one table: the searched tree and the engine's setting, fastest first.

    The searched tree is any shape the budget allows; the engine builds its own trees from its knobs, so that tree is
    "not deployable in ENGINE as searched" and is never ranked first over the engine's setting."""
    name = ENGINE_NAMES.get(framework, framework)
    rows = [
        {
            "answer": "best tree searched",
            "setting": f"{int(best['n_nodes'])} nodes, depth {int(best['depth'])}",
            "expected_tokens": float(best["expected_tokens"]),
            "speedup": float(best["speedup"]),
            "deployable": f"not deployable in {name} as searched ({name} builds its own trees from its knobs)",
            "_ok": False,
        }
    ]
    if deploy is not None:
        rows.append(
            {
                "answer": f"{name}'s best setting",
                "setting": str(deploy["label"]),
                "expected_tokens": float(deploy["expected_tokens"]),
                "speedup": float(deploy["speedup"]),
                "deployable": f"deployable in {name} (the flags above)",
                "_ok": True,
            }
        )
    # the setting the engine deploys ranks first, whatever the searched tree gains: a headline the printed engine
    # cannot run is no answer (issue 56); the searched tree stays beside it, labelled, for a tree-building runtime
    rows.sort(key=lambda r: (not r["_ok"], -r["speedup"]))
    width = max(len(r["answer"]) for r in rows)
    lines = ["", f"the two answers (what {name} deploys first; the searched tree is never ranked above it):"]
    for r in rows:
        lines.append(
            f"  {r['answer']:<{width}}  {r['speedup']:.2f}x  {r['expected_tokens']:.3f} tokens per round  "
            f"{r['setting']}: {r['deployable']}"
        )
    return lines, [{k: v for k, v in r.items() if not k.startswith("_")} for r in rows]

"""specroof's analytic half: roofline cost of LLM passes and the value of speculative decoding.

numpy/scipy/pandas/matplotlib only; never imports torch. SI units inside. The names a
notebook needs are here (``import roofline as rf``)::

    pr = rf.Pricing.of("h100-sxm-80gb", engine="compiled")
    rf.pass_time("llama-3.1-8b", pr).to_frame()
    rf.speedup(pr, "llama-3.1-8b", "eagle3", 0.8, 4).to_frame()
    rf.plan(pr, "llama-3.1-8b", ["model:llama-3.2-1b", "eagle3"], 0.7)
    rf.best_tree_size(pr, "llama-3.1-8b", "eagle2", [0.6, 0.2, 0.1]).to_frame()
"""

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types

from roofline import serving  # noqa: E402  (rf.serving.simulate: the serving simulator, a package of its own)
from roofline.core.errors import SpecroofError
from roofline.costing.engine import Engine, list_engines, load_engine
from roofline.costing.hardware import Hardware, list_hardware, load_hardware
from roofline.costing.passtime import (
    Footprint,
    StepTime,
    batch_sweep,
    crossover_tokens,
    kv_bound_context,
    kv_share,
    max_batch,
    memory_footprint,
    pass_time,
    prefill_vs_decode,
    step_time,
    weights_only_crossover,
)
from roofline.costing.pricing import DEFAULT_CONTEXT, Pricing
from roofline.deploy.engine_flags import EngineConfig, emit_flags, read_engine_config
from roofline.deploy.planner import (
    EngineVerdict,
    compare_engine_config,
    plan,
    price_engine_config,
    recommend,
    speculation_stops_paying,
)
from roofline.deploy.tree_sizing import TreeSizeChoice, best_tree_size, stops_paying, trees_vs_batch
from roofline.evidence.error_bands import band_sentence, error_band
from roofline.passes.cost import PassCost, arithmetic_intensity, forward_cost, moe_expert_rows
from roofline.passes.dtypes import DTYPE_BYTES
from roofline.passes.model import PRESETS, ModelSpec, get_model
from roofline.speculation.acceptance import (
    MeanAccepted,
    PerToken,
    PositionCounts,
    PositionCurve,
    SiblingRankVector,
    VllmDraftRate,
    parse_acceptance,
)
from roofline.speculation.acceptance_positions import MeasuredCurve
from roofline.speculation.drafters import (
    DRAFTER_GRAMMAR,
    MTP,
    TREE_PRESETS,
    DraftModel,
    Eagle,
    EarlyExit,
    Heads,
    ParallelBlock,
    PromptLookup,
    SequentialHeads,
    SlidingWindowSelfDraft,
    as_drafter,
    round_time,
)
from roofline.speculation.gamma_policies import (
    BatchSchedule,
    ConfidenceStop,
    HeuristicSchedule,
    StaticGamma,
    compare_policies,
)
from roofline.speculation.speculative import (
    PredictedSpeedup,
    SpeedupResult,
    expected_tokens,
    expected_tokens_curve,
    ideal_speedup,
    optimal_gamma,
    predict_speedup,
    speedup,
)
from roofline.speculation.trees import (
    ChainCurveAcceptance,
    DepthRankAcceptance,
    IIDAcceptance,
    SiblingRankAcceptance,
    Tree,
    optimal_tree,
)

__all__ = [
    "MeasuredCurve",
    "DEFAULT_CONTEXT",
    "DRAFTER_GRAMMAR",
    "DTYPE_BYTES",
    "MTP",
    "PRESETS",
    "TREE_PRESETS",
    "BatchSchedule",
    "ChainCurveAcceptance",
    "ConfidenceStop",
    "DepthRankAcceptance",
    "DraftModel",
    "Eagle",
    "EarlyExit",
    "Engine",
    "EngineConfig",
    "EngineVerdict",
    "Footprint",
    "Hardware",
    "Heads",
    "HeuristicSchedule",
    "IIDAcceptance",
    "MeanAccepted",
    "ModelSpec",
    "ParallelBlock",
    "PassCost",
    "PerToken",
    "PositionCounts",
    "PositionCurve",
    "PredictedSpeedup",
    "Pricing",
    "PromptLookup",
    "SequentialHeads",
    "SiblingRankAcceptance",
    "SiblingRankVector",
    "SlidingWindowSelfDraft",
    "SpecroofError",
    "SpeedupResult",
    "StaticGamma",
    "StepTime",
    "Tree",
    "TreeSizeChoice",
    "VllmDraftRate",
    "arithmetic_intensity",
    "as_drafter",
    "batch_sweep",
    "best_tree_size",
    "compare_engine_config",
    "compare_policies",
    "crossover_tokens",
    "emit_flags",
    "expected_tokens",
    "expected_tokens_curve",
    "forward_cost",
    "get_model",
    "ideal_speedup",
    "kv_bound_context",
    "kv_share",
    "list_engines",
    "list_hardware",
    "load_engine",
    "load_hardware",
    "max_batch",
    "memory_footprint",
    "moe_expert_rows",
    "optimal_gamma",
    "optimal_tree",
    "parse_acceptance",
    "pass_time",
    "plan",
    "predict_speedup",
    "price_engine_config",
    "read_engine_config",
    "prefill_vs_decode",
    "recommend",
    "round_time",
    "speculation_stops_paying",
    "serving",
    "speedup",
    "step_time",
    "stops_paying",
    "error_band",
    "band_sentence",
    "trees_vs_batch",
    "weights_only_crossover",
]


#: each module's layer: ``rf.trees`` and ``from roofline import planner`` keep working after the modules moved
#: into the layer folders (docs/architecture.md); imported on first use, as a flat package imported them
_LAYER_OF = {
    "acceptance": "speculation",
    "acceptance_defaults": "speculation",
    "acceptance_kinds": "speculation",
    "acceptance_positions": "speculation",
    "closed_forms": "speculation",
    "cost": "passes",
    "drafter_presets": "speculation",
    "drafters": "speculation",
    "dtypes": "passes",
    "engine": "costing",
    "engine_fits": "evidence",
    "engine_flags": "deploy",
    "engine_search": "deploy",
    "engine_trees": "speculation",
    "error_bands": "evidence",
    "errors": "core",
    "gamma_policies": "speculation",
    "hardware": "costing",
    "importers": "speculation",
    "interrupts": "core",
    "jsonio": "core",
    "measured_engine": "costing",
    "memory": "deploy",
    "model": "passes",
    "parallel": "speculation",
    "passtime": "costing",
    "planner": "deploy",
    "predict": "speculation",
    "pricing": "costing",
    "published": "evidence",
    "published_kernels": "evidence",
    "simulate": "speculation",
    "speculative": "speculation",
    "timemodel": "costing",
    "tree_sizing": "deploy",
    "trees": "speculation",
    "units": "core",
    "validation": "core",
    "verification": "speculation",
}


def __getattr__(name: str) -> object:
    layer = _LAYER_OF.get(name)
    if layer is None:
        raise AttributeError(f"module 'roofline' has no attribute {name!r}")
    import importlib

    return importlib.import_module(f"roofline.{layer}.{name}")


class _FlatNames(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``import roofline.trees`` and ``from roofline.passtime import pass_time`` (the paths of before the layer
    folders, in user code and notebooks) give the module where it lives now: the same object, not a copy."""

    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        parts = fullname.split(".")
        if len(parts) < 2 or parts[0] != "roofline" or parts[1] not in _LAYER_OF:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        parts = spec.name.split(".")
        module = importlib.import_module(".".join(["roofline", _LAYER_OF[parts[1]], *parts[1:]]))
        self._own_spec = module.__spec__  # the import system sets the alias's spec on it: put its own back
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        module.__spec__ = self._own_spec


sys.meta_path.insert(0, _FlatNames())  # before the path finder, which would load a second copy of a submodule

"""How much each serving step speculates: off, a static gamma, gamma by batch size, or the goodput choice.

* ``off``: plain decoding, one token per request per step.
* ``static:G``: G drafts every step (what :func:`roofline.speculation.speculative.speedup` prices).
* ``by-batch:B1=G1,B2=G2,...``: the entry for the largest listed batch <= the running batch
  (:class:`roofline.speculation.gamma_policies.BatchSchedule`); ``by-batch:1=4,32=0`` is vLLM's
  ``speculative_disable_by_batch_size=32`` with 4 speculative tokens.
* ``tree:NAME``: a static draft tree every step (``eagle``, ``eagle2``, ``eagle3``, ``medusa``:
  :data:`roofline.speculation.drafters.TREE_PRESETS`), drafted level by level and verified in one tree-masked
  pass of its nodes plus the pending token; a request's accepted length is drawn as a chain of the
  tree's depth at the per-token rate that gives the tree's tokens per round (``mean:E``).
* ``goodput`` or ``goodput:GMAX``: SmartSpec (Liu et al. 2024, "Optimizing Speculative Decoding
  for Serving Large Language Models Using Goodput", arXiv:2406.14066): every step takes the gamma
  in 0..GMAX that maximises expected tokens emitted per second of the step, sum over running
  requests of E(alpha_i, gamma) over the step's time; each request's alpha is the rate the
  scheduler has observed for it (here: the rate it was drawn with).
"""

from __future__ import annotations

from dataclasses import dataclass

from roofline.core.errors import SpecroofError
from roofline.speculation.gamma_policies import BatchSchedule, GammaPolicy, StaticGamma
from roofline.speculation.trees import Tree

#: the most drafts per step a policy may ask for (a verify pass of 33 tokens per request)
MAX_GAMMA = 32
#: goodput's default search range (SmartSpec searches a small range of proposal lengths)
GOODPUT_MAX_GAMMA = 8


@dataclass(frozen=True)
class ServingPolicy:
    """A speculation policy for the serving simulator; ``kind`` is off, static, by-batch or goodput."""

    kind: str
    gamma: int = 0
    schedule: BatchSchedule | None = None
    max_gamma: int = GOODPUT_MAX_GAMMA
    label: str = ""
    tree: Tree | None = None

    @property
    def name(self) -> str:
        if self.label:
            return self.label
        if self.kind == "static":
            return f"static:{self.gamma}"
        if self.kind == "by-batch" and self.schedule is not None:
            return "by-batch:" + ",".join(f"{b}={g}" for b, g in sorted(self.schedule.schedule.items()))
        if self.kind == "goodput":
            return f"goodput:{self.max_gamma}"
        return self.kind

    @property
    def top_gamma(self) -> int:
        """The largest gamma this policy can choose (what the price tables must cover)."""
        if self.kind == "static":
            return self.gamma
        if self.kind == "by-batch" and self.schedule is not None:
            return max(self.schedule.schedule.values())
        if self.kind == "goodput":
            return self.max_gamma
        if self.kind == "tree" and self.tree is not None:
            return int(self.tree.depth)
        return 0

    @property
    def verify_tokens(self) -> int:
        """Tokens per request in a tree step's verify pass: the nodes and the pending token (0: not a tree)."""
        return int(self.tree.n_nodes) + 1 if self.tree is not None else 0

    @property
    def speculates(self) -> bool:
        return self.top_gamma > 0

    def gamma_for(self, batch: int) -> int:
        """Gamma for a step of ``batch`` decoding requests (not for goodput, which needs the step's prices)."""
        if self.kind == "static":
            return self.gamma
        if self.kind == "by-batch" and self.schedule is not None:
            return self.schedule.gamma_for(batch)
        if self.kind == "tree":
            return self.top_gamma
        return 0


def _gamma(text: str, what: str, lo: int = 0) -> int:
    try:
        g = int(text)
    except ValueError:
        raise SpecroofError(f"{what} must be a whole number (got {text!r})") from None
    if not lo <= g <= MAX_GAMMA:
        raise SpecroofError(f"{what} must lie in [{lo}, {MAX_GAMMA}] (got {g})")
    return g


def parse_policy(policy: str | ServingPolicy | GammaPolicy) -> ServingPolicy:
    """A :class:`ServingPolicy` from ``off``, ``static:G``, ``by-batch:B=G,...``, ``goodput[:GMAX]`` or a gamma policy."""
    if isinstance(policy, ServingPolicy):
        return policy
    if isinstance(policy, StaticGamma):
        return ServingPolicy("static", gamma=_gamma(str(policy.gamma), "static gamma"))
    if isinstance(policy, BatchSchedule):
        for g in policy.schedule.values():
            _gamma(str(g), "by-batch gamma")
        return ServingPolicy("by-batch", schedule=policy)
    if not isinstance(policy, str):
        raise SpecroofError(f"unknown policy {policy!r}: use off, static:G, by-batch:B=G,... or goodput")
    text = policy.strip().lower()
    kind, _, arg = text.partition(":")
    if text == "off":
        return ServingPolicy("off")
    if kind == "static" and arg:
        g = _gamma(arg, "static gamma")
        return ServingPolicy("off") if g == 0 else ServingPolicy("static", gamma=g)
    if kind == "by-batch" and arg:
        table: dict[int, int] = {}
        for item in arg.split(","):
            b, sep, g_text = item.partition("=")
            if not sep:
                raise SpecroofError(f"policy by-batch takes BATCH=GAMMA pairs, e.g. by-batch:1=4,32=0 (got {item!r})")
            try:
                bb = int(b)
            except ValueError:
                raise SpecroofError(f"by-batch batch must be a whole number (got {b!r})") from None
            if bb < 1:
                raise SpecroofError(f"by-batch batch must be >= 1 (got {bb})")
            if bb in table:  # by-batch:1=4,1=2 kept the last and said nothing
                raise SpecroofError(f"by-batch gives batch {bb} twice ({arg}): give one gamma per batch")
            table[bb] = _gamma(g_text, "by-batch gamma")
        return ServingPolicy("by-batch", schedule=BatchSchedule(table))
    if kind == "tree" and arg:
        from roofline.speculation.drafters import tree_preset

        return ServingPolicy("tree", tree=tree_preset(arg), label=f"tree:{arg}")
    if kind == "goodput":
        # the range of a gamma, less the 0 that would never speculate ('off' does that)
        gmax = _gamma(arg, "goodput max gamma", lo=1) if arg else GOODPUT_MAX_GAMMA
        return ServingPolicy("goodput", max_gamma=gmax)
    raise SpecroofError(f"unknown policy {policy!r}: use off, static:G, by-batch:B=G,..., tree:NAME or goodput[:GMAX]")

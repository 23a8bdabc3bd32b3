"""Importers of the acceptance metrics serving stacks and benchmarks already write.

* **vLLM** (v1 engine), Prometheus text from ``/metrics``: counters
  ``vllm:spec_decode_num_drafts_total``, ``vllm:spec_decode_num_draft_tokens_total``,
  ``vllm:spec_decode_num_accepted_tokens_total`` and
  ``vllm:spec_decode_num_accepted_tokens_per_pos_total{position="0".."k-1"}``, labelled
  ``model_name`` and ``engine`` (vllm-project/vllm, ``vllm/v1/spec_decode/metrics.py``,
  ``SpecDecodingProm``; the client library adds ``_total`` to counter names). Every
  accepted token increments the counter of its position, so the per-position counts are
  rounds in which that position was accepted: :class:`~roofline.speculation.acceptance.PositionCounts`
  with drafts as rounds. vLLM's log line ("SpecDecoding metrics: Mean acceptance length:
  ..., Accepted: N tokens, Drafted: M tokens, Per-position acceptance rate: ..., Avg Draft
  acceptance rate: ...%", ``SpecDecodingLogging.log`` in the same file) is read too: its
  per-position rates are accepted at that position / drafts, i.e. *unconditional*.
* **SGLang**, the scheduler's decode log line ("Decode batch, #running-req: N, ...,
  accept len: X.XX, ...", sgl-project/sglang,
  ``python/sglang/srt/managers/scheduler_metrics_mixin.py``, ``log_decode_stats``):
  accept len = (accepted drafts + one bonus per request) / verify rounds, i.e. tokens per
  round. Its "accept rate" changed definition between versions and is not used. The
  startup line ``server_args=ServerArgs(... speculative_num_steps=S,
  speculative_eagle_topk=K, speculative_num_draft_tokens=N ...)`` gives the shape: a
  chain of N - 1 drafts when K = 1, else a tree of depth S.
* **Spec-Bench** answer JSONL (hemingkx/Spec-Bench, ``evaluation/eval.py``): one object per
  question with ``choices[i]`` holding per-turn ``new_tokens`` and ``wall_time`` and
  ``accept_lengths``, the tokens each decoding step emitted, bonus included (the new length
  minus the old after verification, e.g. ``model/sps/decoding.py``; their mean is the
  leaderboard's "#Mean accepted tokens", ``evaluation/speed.py``, which reads ``choices[0]``). A histogram of accept lengths is a per-position count: position i was
  accepted in the steps that emitted more than i tokens.
"""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from pathlib import Path

import numpy as np

from roofline.core.errors import SpecroofError
from roofline.core.validation import RANGES
from roofline.speculation.acceptance_kinds import Acceptance, MeanAccepted, PositionCounts, PositionCurve, VllmDraftRate

FORMATS = ("vllm", "sglang", "spec-bench")

_VLLM = "vllm:spec_decode_num_"
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+\S+)?\s*$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')


def sniff_format(text: str) -> str | None:
    """Which importer a file's content calls for (None: not a metrics file)."""
    if _VLLM in text or "SpecDecoding metrics:" in text:
        return "vllm"
    if "accept len:" in text:
        return "sglang"
    first = next((ln for ln in text.splitlines() if ln.strip()), "")
    if first.lstrip().startswith("{") and '"choices"' in first and '"accept_lengths"' in first:
        return "spec-bench"
    return None


def parse_prometheus(text: str) -> list[tuple[str, dict[str, str], float]]:
    """Samples of the Prometheus text exposition format: (name, labels, value); comments skipped."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        m = _SAMPLE.match(s)
        if m is None:
            raise SpecroofError(f"line {n}: not a Prometheus sample ('name{{labels}} value'): {s[:80]!r}")
        labels = dict(_LABEL.findall(m.group(3) or ""))
        try:
            value = float(m.group(4))
        except ValueError:
            raise SpecroofError(f"line {n}: value {m.group(4)!r} is not a number") from None
        out.append((m.group(1), labels, value))
    return out


def _counter(name: str) -> str:
    """``vllm:spec_decode_num_drafts_total`` -> ``drafts`` (the client may or may not add ``_total``)."""
    base = name[len(_VLLM) :]
    return base[: -len("_total")] if base.endswith("_total") else base


def import_vllm_prometheus(
    text: str, *, model: str | None = None, num_speculative_tokens: int | None = None, source: str = ""
) -> Acceptance:
    """vLLM's spec-decode counters, summed over engines -> counts per position (or the draft rate without them)."""
    totals: dict[str, float] = defaultdict(float)
    per_pos: dict[int, float] = defaultdict(float)
    models: set[str] = set()
    for name, labels, value in parse_prometheus(text):
        if not name.startswith(_VLLM) or name.endswith("_created"):
            continue
        if model is not None and labels.get("model_name", model) != model:
            continue
        models.add(labels.get("model_name", ""))
        c = _counter(name)
        if not (np.isfinite(value) and value >= 0):  # a counter counts: NaN, inf or negative is a broken scrape
            raise SpecroofError(f"{name} is {value:g}: a counter must be a finite number >= 0")
        if c == "accepted_tokens_per_pos":
            if "position" not in labels or not labels["position"].isdigit():
                raise SpecroofError(f"{name} needs a whole-number 'position' label (got {labels})")
            per_pos[int(labels["position"])] += value
        else:
            totals[c] += value
    if len(models) > 1:
        raise SpecroofError(
            f"the metrics hold {len(models)} models ({', '.join(sorted(models))}): choose one with --model NAME"
        )
    if not totals and not per_pos:
        which = f" for model {model!r}" if model else ""
        raise SpecroofError(f"no {_VLLM}* counters{which}: is speculative decoding on (--speculative-config)?")
    drafts, drafted, accepted = totals.get("drafts"), totals.get("draft_tokens"), totals.get("accepted_tokens")
    tag = source or "vLLM /metrics"
    # a draft token is accepted at most once: more accepted than drafted is not a count of one server's run
    if accepted is not None and drafted is not None and accepted > drafted:
        raise SpecroofError(
            f"{accepted:g} tokens accepted of {drafted:g} drafted: a draft token is accepted at most once, so the "
            "counters come from different servers or scrapes"
        )
    if per_pos and drafts:
        k = max(per_pos) + 1
        if sorted(per_pos) != list(range(k)):
            raise SpecroofError(f"per-position counters cover positions {sorted(per_pos)}; expected 0..{k - 1}")
        counts = [per_pos[i] for i in range(k)]
        if max(counts) > drafts:
            i = counts.index(max(counts))
            raise SpecroofError(
                f"position {i} was accepted {counts[i]:g} times in {drafts:g} drafts: a position is accepted at most "
                "once a draft, so the counters come from different servers or scrapes"
            )
        if drafted is not None and sum(counts) > drafted:
            raise SpecroofError(
                f"{sum(counts):g} tokens accepted per position of {drafted:g} drafted: a draft token is accepted at "
                "most once, so the counters come from different servers or scrapes"
            )
        if accepted is not None and abs(sum(counts) - accepted) > 0.01 * accepted + 1:
            raise SpecroofError(
                f"per-position accepted counts sum to {sum(counts):g} but accepted tokens are {accepted:g}: "
                "the counters come from different scrapes"
            )
        src = f"{tag}: {drafts:g} drafts, {sum(counts):g} accepted of {drafted or 0:g} drafted"
        return PositionCounts(int(round(drafts)), tuple(int(round(c)) for c in counts), source=src)
    if drafted is None or accepted is None:
        raise SpecroofError(
            "vLLM metrics need vllm:spec_decode_num_draft_tokens_total and ..._num_accepted_tokens_total"
        )
    if drafted <= 0:
        raise SpecroofError("no draft tokens recorded yet (num_draft_tokens is 0): scrape after the server decoded")
    spec_k = num_speculative_tokens
    if spec_k is None:
        if not drafts:
            raise SpecroofError(
                "these vLLM metrics have no drafts counter: give the number of speculative tokens (--gamma K)"
            )
        spec_k = int(round(drafted / drafts))
    return VllmDraftRate(accepted / drafted, spec_k, source=f"{tag}: {accepted:g} accepted of {drafted:g} drafted")


_VLLM_LOG = re.compile(r"SpecDecoding metrics:(.*)")
_FIELD = {
    "accepted": re.compile(r"Accepted: (\d+) tokens"),
    "drafted": re.compile(r"Drafted: (\d+) tokens"),
    "rates": re.compile(r"Per-position acceptance rate: ([0-9.,\s]+?)(?:, [A-Z]|$)"),
}


def import_vllm_log(text: str, *, num_speculative_tokens: int | None = None, source: str = "") -> Acceptance:
    """vLLM's "SpecDecoding metrics:" log lines, pooled over every interval they cover.

    Each line's per-position rates are over that interval's drafts (drafted / k); pooling
    weights them by those drafts, so the result is the unconditional curve of the whole log.
    """
    weighted, drafts_total, accepted_total, drafted_total = None, 0.0, 0.0, 0.0
    lines = 0
    for m in _VLLM_LOG.finditer(text):
        body = m.group(1)
        acc, dra = _FIELD["accepted"].search(body), _FIELD["drafted"].search(body)
        if acc is None or dra is None:
            continue
        a, d = float(acc.group(1)), float(dra.group(1))
        if d <= 0:
            continue
        if a > d:
            raise SpecroofError(f"a log line has {a:g} tokens accepted of {d:g} drafted: more than were drafted")
        lines += 1
        accepted_total, drafted_total = accepted_total + a, drafted_total + d
        r = _FIELD["rates"].search(body)
        if r is None:
            continue
        rates = np.array([float(x) for x in r.group(1).replace(",", " ").split()])
        if np.any(rates > 1.0005):  # a rate is a share of drafts; the log prints 3 decimals
            raise SpecroofError(
                f"a per-position acceptance rate of {float(rates.max()):g} in the log: a rate is a share of the "
                "drafts, at most 1"
            )
        n = d / rates.size  # drafts in this interval: every draft proposes k tokens
        if weighted is not None and weighted.size != rates.size:
            raise SpecroofError(
                f"the log mixes {weighted.size} and {rates.size} speculative tokens per round: split it per run"
            )
        weighted = rates * n if weighted is None else weighted + rates * n
        drafts_total += n
    if lines == 0:
        raise SpecroofError("no 'SpecDecoding metrics:' line with Accepted and Drafted counts in the log")
    tag = source or "vLLM log"
    src = f"{tag}: {lines} intervals, {accepted_total:g} accepted of {drafted_total:g} drafted"
    if weighted is not None and drafts_total > 0:
        # the log prints 3 decimals: pooling can leave a rounding-level rise, which is not data
        u = np.minimum.accumulate(np.clip(weighted / drafts_total, 0.0, 1.0))
        return PositionCurve(tuple(u), conditional=False, source=src)
    if num_speculative_tokens is None:
        raise SpecroofError(
            "this vLLM log has no per-position rates: give the number of speculative tokens it ran with (--gamma K)"
        )
    return VllmDraftRate(accepted_total / drafted_total, num_speculative_tokens, source=src)


_ACCEPT_LEN = re.compile(r"accept len: ([^,\s]+)")
_RUNNING = re.compile(r"#running-req: (\d+)")


def _server_arg(text: str, name: str) -> int | None:
    m = re.search(rf"\b{name}=(\d+)", text)
    return int(m.group(1)) if m else None


def import_sglang(text: str, *, gamma: int | None = None, depth: int | None = None, source: str = "") -> MeanAccepted:
    """SGLang's decode log -> tokens per round, the intervals weighted by their running requests.

    Each line covers ``decode_log_interval`` batches of ``#running-req`` requests, so its accept
    len averages over about that many verify rounds per batch; weighting by the running
    requests recovers the pooled mean. The shape (chain length or tree depth) comes from
    ``gamma``/``depth`` or the logged ``server_args``.
    """
    values, weights = [], []
    for line in text.splitlines():
        m = _ACCEPT_LEN.search(line)
        if m is None:
            continue
        try:
            v = float(m.group(1))
        except ValueError:
            v = math.nan
        if not math.isfinite(v):  # nan while nothing was verified in the interval is not a mean to pool
            raise SpecroofError(f"'accept len: {m.group(1)}' is not a number of tokens: {line.strip()[:120]}")
        if v <= 0:  # printed as 0 while speculation is off
            continue
        if v < 1:  # every round emits at least its bonus token: a figure below 1 is not SGLang's accept len
            raise SpecroofError(
                f"'accept len: {m.group(1)}' is below 1 (tokens per round, the bonus included): {line.strip()[:120]}"
            )
        r = _RUNNING.search(line)
        values.append(v)
        weights.append(float(r.group(1)) if r else 1.0)
    if not values:
        raise SpecroofError("no 'accept len: X' above 0 in the log: was SGLang run with --speculative-algorithm?")
    mean = float(np.average(values, weights=weights))
    if gamma is None and depth is None:
        topk = _server_arg(text, "speculative_eagle_topk")
        steps = _server_arg(text, "speculative_num_steps")
        tokens = _server_arg(text, "speculative_num_draft_tokens")
        if topk == 1 and tokens is not None:
            gamma = tokens - 1
        elif topk == 1 and steps is not None:
            gamma = steps
        elif steps is not None:
            depth = steps
    tag = source or "SGLang log"
    return MeanAccepted(mean, gamma=gamma, depth=depth, source=f"{tag}: {len(values)} decode log lines")


def import_spec_bench(text: str, *, category: str | None = None, source: str = "") -> PositionCounts:
    """Spec-Bench's answer JSONL -> accepted counts per position from the histogram of accept lengths."""
    lengths: list[int] = []
    tokens = seconds = 0.0
    questions = 0
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            raise SpecroofError(f"line {n}: not JSON (Spec-Bench writes one JSON object per line)") from None
        if category is not None and obj.get("category") != category:
            continue
        try:
            choice = obj["choices"][0]  # what the leaderboard's speed.py reads
            acc = choice["accept_lengths"]
        except (KeyError, IndexError, TypeError):
            raise SpecroofError(f"line {n}: no choices[0].accept_lengths (a baseline run has none)") from None
        arr = np.asarray(acc)
        if arr.ndim != 1 or (arr.size and (not np.issubdtype(arr.dtype, np.number) or np.any(arr < 1))):
            raise SpecroofError(f"line {n}: accept_lengths must be whole numbers >= 1 (tokens per decoding step)")
        if arr.size and np.any(arr != np.round(arr)):
            raise SpecroofError(f"line {n}: accept_lengths must be whole numbers (tokens per decoding step)")
        top = int(RANGES["gamma"].hi) + 1  # a step emits at most gamma + 1 tokens, and gamma is bounded
        if arr.size and np.any(arr > top):
            raise SpecroofError(
                f"line {n}: an accept length of {float(arr.max()):g} tokens in one decoding step is more than any "
                f"draft (at most {top - 1} tokens) and its bonus token can emit"
            )
        lengths.extend(int(x) for x in arr)
        tokens += float(sum(choice.get("new_tokens", [])))
        seconds += float(sum(choice.get("wall_time", [])))
        questions += 1
    if not lengths:
        which = f" in category {category!r}" if category else ""
        raise SpecroofError(f"no accept lengths{which} in the file")
    L = np.asarray(lengths)
    longest = int(L.max())
    if longest < 2:
        raise SpecroofError("every step emitted one token: nothing was accepted (a baseline run?)")
    # position i (1-based) was accepted in every step that emitted more than i tokens
    steps_at_least = np.cumsum(np.bincount(L, minlength=longest + 1)[::-1])[::-1]  # steps emitting >= j tokens
    counts = [int(c) for c in steps_at_least[2 : longest + 1]]
    rate = f", {tokens / seconds:.1f} tokens/s" if seconds > 0 else ""
    tag = source or "Spec-Bench answers"
    return PositionCounts(L.size, tuple(counts), source=f"{tag}: {questions} questions, {L.size} steps{rate}")


def import_text(
    text: str,
    fmt: str,
    *,
    source: str = "",
    gamma: int | None = None,
    depth: int | None = None,
    model: str | None = None,
    category: str | None = None,
) -> Acceptance:
    """Import ``text`` written by ``fmt`` (one of :data:`FORMATS`)."""
    if fmt == "vllm":
        if "SpecDecoding metrics:" in text:
            return import_vllm_log(text, num_speculative_tokens=gamma, source=source)
        return import_vllm_prometheus(text, model=model, num_speculative_tokens=gamma, source=source)
    if fmt == "sglang":
        return import_sglang(text, gamma=gamma, depth=depth, source=source)
    if fmt == "spec-bench":
        return import_spec_bench(text, category=category, source=source)
    raise SpecroofError(f"unknown metrics format {fmt!r}; choose one of {', '.join(FORMATS)}")


def import_file(path: str | Path, fmt: str, **kw: object) -> Acceptance:
    """Import the metrics file at ``path`` (see :func:`import_text` for the keywords)."""
    p = Path(path)
    if not p.is_file():
        raise SpecroofError(f"metrics file {str(path)!r} does not exist")
    try:
        text = p.read_text()
    except UnicodeDecodeError:
        raise SpecroofError(f"{str(path)!r} is not a text file") from None
    return import_text(text, fmt, source=p.name, **kw)  # type: ignore[arg-type]

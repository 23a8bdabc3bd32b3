"""What arrives at a server: arrival times and input/output lengths, drawn or read from a trace.

A :class:`Workload` is three aligned arrays sorted by arrival time (seconds, tokens,
tokens). Arrivals are Poisson at a rate, bursty (gamma-distributed gaps whose shape
is vLLM's ``--burstiness``: 1 is Poisson, below 1 burstier, above 1 more regular), or
the times of a trace file. Lengths are fixed, uniform, lognormal, or a preset named after a
public trace (:data:`TRACE_LENGTHS`): a lognormal through that trace's median and 90th
percentile, capped at its longest request.

Rates are swept with common random numbers: the gaps are drawn once at unit rate and
divided by each rate, so the same requests arrive in the same order at every rate and
two policies see the same traffic (a difference between them is the policy's, not
the draw's).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from roofline.core.errors import SpecroofError
from roofline.core.validation import check_count, check_number

#: the most requests one run simulates, checked before anything is drawn: 100,000 take about 20 s a policy and rate
#: on a 2-core host, so 10^6 is minutes (10^7, the bound before, ran past 70 s and 2.5 GB before its first rate ended)
MAX_REQUESTS = 1_000_000

#: the slowest request rate simulated (req/s): one request every 11.6 days. Arrival times are float seconds; far
#: below it they grow past 10^15 s, where a double cannot hold the milliseconds a pass takes (TTFT came out 0)
MIN_RATE = 1e-6

#: the longest prompt or output a workload holds (tokens): far past any model's context, within int64 arithmetic
MAX_LENGTH = 1 << 31

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

#: the columns a trace file must have (CSV with a header, or JSON lines with these keys)
TRACE_COLUMNS = ("arrival_s", "input_tokens", "output_tokens")


@dataclass(frozen=True)
class Workload:
    """Requests sorted by arrival: ``arrival_s`` (seconds from the start), ``input_tokens``, ``output_tokens``."""

    arrival_s: FloatArray
    input_tokens: IntArray
    output_tokens: IntArray

    def __post_init__(self) -> None:
        n = len(self.arrival_s)
        if n == 0:
            raise SpecroofError("a workload needs at least one request")
        if len(self.input_tokens) != n or len(self.output_tokens) != n:
            raise SpecroofError("arrival_s, input_tokens and output_tokens must have the same length")
        if not np.all(np.isfinite(self.arrival_s)) or np.any(self.arrival_s < 0):
            raise SpecroofError("arrival_s must be finite and >= 0")
        if np.any(np.diff(self.arrival_s) < 0):
            i = int(np.nonzero(np.diff(self.arrival_s) < 0)[0][0])
            raise SpecroofError(f"arrival_s must be sorted: request {i + 1} arrives before request {i}")
        if np.any(self.input_tokens < 1) or np.any(self.output_tokens < 1):
            raise SpecroofError("input_tokens and output_tokens must be >= 1")

    @property
    def n(self) -> int:
        return len(self.arrival_s)

    def subset(self, idx: IntArray) -> Workload:
        """The requests at positions ``idx`` (ascending), keeping their arrival times."""
        return Workload(self.arrival_s[idx], self.input_tokens[idx], self.output_tokens[idx])

    def at_rate(self, rate: float | None) -> Workload:
        """The same requests with arrival times scaled so the mean rate is ``rate`` req/s (None: as they are)."""
        if rate is None:
            return self
        check_rate(rate)
        span = float(self.arrival_s[-1] - self.arrival_s[0])
        if self.n < 2 or span == 0.0:
            return self
        # n - 1 gaps over the span: the mean rate of the trace as it stands
        scale = ((self.n - 1) / span) / rate
        return Workload((self.arrival_s - self.arrival_s[0]) * scale, self.input_tokens, self.output_tokens)


#: z of the 90th percentile of the standard normal: a lognormal's p90 is median x exp(1.2816 sigma)
Z90 = 1.2815515655446004


@dataclass(frozen=True)
class TraceLengths:
    """One length column of a public trace: its median, 90th percentile and maximum (tokens), and where from."""

    median: float
    p90: float
    max: int
    source: str

    @property
    def sigma(self) -> float:
        """The lognormal's sigma through the median and p90: log(p90 / median) / z90."""
        return math.log(self.p90 / self.median) / Z90


_AZURE_2023 = (
    "Azure LLM inference trace 2023 (Patel et al., Splitwise, ISCA 2024), "
    "https://github.com/Azure/AzurePublicDataset data/AzureLLMInferenceTrace_{}.csv at commit b469a11, column {}: "
    "median, 90th percentile (linear interpolation) and maximum over its {} requests"
)
#: presets for ``input_len`` / ``output_len``: (input lengths, output lengths) of a named public trace; figures
#: computed from the published trace files (the medians are the paper's: 1500/13 coding, 1020/129 conversation)
TRACE_LENGTHS: dict[str, tuple[TraceLengths, TraceLengths]] = {
    "azure-code-2023": (
        TraceLengths(1469.0, 5187.6, 7437, _AZURE_2023.format("code", "ContextTokens", "8,819")),
        TraceLengths(13.0, 55.0, 1899, _AZURE_2023.format("code", "GeneratedTokens", "8,819")),
    ),
    "azure-conv-2023": (
        TraceLengths(1020.0, 2734.5, 14050, _AZURE_2023.format("conv", "ContextTokens", "19,366")),
        TraceLengths(129.0, 424.0, 1000, _AZURE_2023.format("conv", "GeneratedTokens", "19,366")),
    ),
}


def check_rate(rate: float) -> float:
    """A request rate > 0 (req/s) as a float; numpy scalars (``np.arange(2, 10, 4)``'s items) are numbers too."""
    try:
        r = check_number("rate", rate, 0.0, lo_open=True)
    except SpecroofError:
        raise SpecroofError(f"rate must be a positive number of requests per second (got {rate!r})") from None
    if r < MIN_RATE:
        raise SpecroofError(
            f"rate must be at least {MIN_RATE:g} requests per second (got {r:g}): slower, the arrival times grow past "
            "what a float holds to the millisecond a pass takes"
        )
    return r


def unit_gaps(n: int, arrivals: str, rng: np.random.Generator) -> FloatArray:
    """``n`` inter-arrival gaps at a mean rate of 1 req/s: ``poisson`` or ``gamma:K`` (K = burstiness shape > 0)."""
    kind, _, arg = arrivals.partition(":")
    kind = kind.strip().lower()
    if kind == "poisson" and not arg:
        return rng.exponential(1.0, n)
    if kind == "gamma":
        try:
            shape = float(arg)
        except ValueError:
            raise SpecroofError(f"arrivals 'gamma:K' needs a shape K > 0, e.g. gamma:0.5 (got {arrivals!r})") from None
        if not (math.isfinite(shape) and shape > 0):
            raise SpecroofError(f"arrivals burstiness K must be > 0 (got {arg})")
        # mean gap shape x scale = 1; the coefficient of variation is 1 / sqrt(K)
        return rng.gamma(shape, 1.0 / shape, n)
    raise SpecroofError(f"unknown arrivals {arrivals!r}: use poisson or gamma:K (K = burstiness, 1 = Poisson)")


def draw_lengths(spec: str | int, n: int, rng: np.random.Generator, name: str) -> IntArray:
    """``n`` lengths from ``N`` (fixed), ``uniform:A-B`` (inclusive), ``lognormal:MEDIAN,SIGMA`` (rounded, >= 1)
    or a trace preset of :data:`TRACE_LENGTHS` (its input column for input lengths, output for output)."""
    if not isinstance(spec, str):  # a number of tokens: 100, 100.0 or np.int64(100), never 2.5 or True
        spec = str(check_count(name, spec, 1))
    text = spec.strip().lower()
    if text in TRACE_LENGTHS:
        col = TRACE_LENGTHS[text][1 if name.startswith("output") else 0]
        x = np.rint(rng.lognormal(math.log(col.median), col.sigma, n))
        return np.clip(x, 1, col.max).astype(np.int64)  # no request longer than the trace's longest
    kind, sep, arg = text.partition(":")
    try:
        if not sep:
            v = int(kind)
            if v < 1:
                raise SpecroofError(f"{name} must be >= 1 token (got {v})")
            return np.full(n, v, dtype=np.int64)
        if kind == "uniform":
            a, b = (int(x) for x in arg.split("-", 1))
            if not 1 <= a <= b:
                raise SpecroofError(f"{name} uniform:A-B needs 1 <= A <= B (got {arg})")
            return rng.integers(a, b + 1, n).astype(np.int64)
        if kind == "lognormal":
            median, sigma = (float(x) for x in arg.split(",", 1))
            if not (median >= 1 and math.isfinite(median) and sigma >= 0 and math.isfinite(sigma)):
                raise SpecroofError(f"{name} lognormal:MEDIAN,SIGMA needs MEDIAN >= 1 and SIGMA >= 0 (got {arg})")
            # the median of a lognormal is exp(mu): mu = log(median)
            drawn = np.rint(rng.lognormal(math.log(median), sigma, n))
            if not np.all(drawn <= MAX_LENGTH):  # inf past a double's range; 10^30 tokens as an int64 is garbage
                raise SpecroofError(
                    f"{name} lognormal:{arg} draws lengths up to {float(np.max(drawn)):.3g} tokens, past "
                    f"{MAX_LENGTH:,}: lower SIGMA (the spread: p90 = MEDIAN x exp(1.28 SIGMA))"
                )
            return np.maximum(1, drawn).astype(np.int64)
    except SpecroofError:  # a SpecroofError is a ValueError: the sentences above are the answer, not a parse failure
        raise
    except ValueError:
        pass
    raise SpecroofError(
        f"{name} must be N, uniform:A-B, lognormal:MEDIAN,SIGMA or a trace preset ({', '.join(TRACE_LENGTHS)}) "
        f"(got {spec!r})"
    )


def synthetic(
    n: int,
    input_len: str | int,
    output_len: str | int,
    *,
    arrivals: str = "poisson",
    seed: int = 0,
) -> Workload:
    """``n`` requests at a mean rate of 1 req/s (scale with :meth:`Workload.at_rate`), lengths drawn per request."""
    n = check_count("requests", n, 1, MAX_REQUESTS)
    rng = np.random.default_rng(seed)
    gaps = unit_gaps(int(n), arrivals, rng)
    # the first request arrives at t = 0: a run starts with traffic, not with an idle gap
    t = np.concatenate([[0.0], np.cumsum(gaps[1:])])
    return Workload(
        t, draw_lengths(input_len, n, rng, "input length"), draw_lengths(output_len, n, rng, "output length")
    )


def read_trace(path: str | Path) -> Workload:
    """A trace file: CSV with a header (``arrival_s,input_tokens,output_tokens``) or JSON lines with those keys."""
    p = Path(path)
    if not p.is_file():
        raise SpecroofError(f"trace file {str(p)!r} does not exist")
    try:
        text = p.read_text()
    except UnicodeDecodeError:
        raise SpecroofError(f"trace file {str(p)!r} is not a text file (CSV or JSON lines)") from None
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        raise SpecroofError(f"trace file {str(p)!r} is empty")
    if lines[0].lstrip().startswith("{"):
        import json

        try:
            rows = [json.loads(ln) for ln in lines]
        except json.JSONDecodeError as e:
            raise SpecroofError(f"trace file {str(p)!r}: line {e.lineno} is not JSON") from None
        header = set().union(*(r.keys() for r in rows)) if all(isinstance(r, dict) for r in rows) else set()
    else:
        reader = csv.DictReader(lines)
        header = {h.strip() for h in reader.fieldnames or []}
        rows = [{k.strip(): v for k, v in r.items() if k is not None} for r in reader]
    missing = [c for c in TRACE_COLUMNS if c not in header]
    if missing:
        raise SpecroofError(
            f"trace file {str(p)!r} is missing column(s) {', '.join(missing)} (needs {', '.join(TRACE_COLUMNS)})"
        )
    cols: dict[str, list[float]] = {c: [] for c in TRACE_COLUMNS}
    for i, r in enumerate(rows):
        for c in TRACE_COLUMNS:
            try:
                v = float(r[c])
            except (KeyError, TypeError, ValueError):
                raise SpecroofError(f"trace file {str(p)!r}: row {i + 1} has no number in column {c}") from None
            if not math.isfinite(v):
                raise SpecroofError(f"trace file {str(p)!r}: row {i + 1} column {c} must be finite")
            cols[c].append(v)
    t = np.asarray(cols["arrival_s"])
    if np.any(np.diff(t) < 0):
        i = int(np.nonzero(np.diff(t) < 0)[0][0])
        raise SpecroofError(f"trace file {str(p)!r}: arrival_s must be sorted (row {i + 2} arrives before row {i + 1})")
    lens = {}
    for c in ("input_tokens", "output_tokens"):
        col = np.asarray(cols[c])
        if np.any(col != np.round(col)) or np.any(col < 1) or np.any(col > MAX_LENGTH):
            raise SpecroofError(f"trace file {str(p)!r}: {c} must be whole numbers in [1, {MAX_LENGTH:,}]")
        lens[c] = col.astype(np.int64)
    return Workload(t, lens["input_tokens"], lens["output_tokens"])

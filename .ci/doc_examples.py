"""Run every code example in README.md and docs/ and check the output printed under it.

    python .ci/doc_examples.py                 # run the examples, report the ones whose output changed
    python .ci/doc_examples.py --update        # run them and rewrite every output block in place
    python .ci/doc_examples.py --list          # what would run, with its options
    python .ci/doc_examples.py --slow README.md docs/guide/serving.md   # only these files, slow ones included

tests/test_docs.py runs the same examples under pytest, one test each. After a change that moves the
printed numbers (a new default, a better model), `--update` refreshes every output block in one command;
`git diff` then shows what moved.

What counts as an example
-------------------------
* a fenced ``bash`` block whose commands start with ``specroof`` (a line ending in ``\\`` continues the
  command; ``#`` comments are allowed). A bash block that mixes ``specroof`` with other commands is an
  error: a reader copies the whole block, so the whole block must be what is run. Bash blocks without a
  ``specroof`` command (installing, ``bash .ci/run``) are not run here.
* every fenced ``python`` block. Each runs on its own (a reader copies one block), in a fresh interpreter.
  ``ruff format`` formats these blocks like the code (CI checks them), so write them as ruff would.

Its expected output is the fenced ``text`` block right after it (only blank lines between): the example's
stdout. Without one, the example must only run and exit 0.

Options, in an HTML comment on the line before the block (blank lines between are allowed), e.g.
``<!-- example: slow torch -->``:

* ``slow``: takes more than about 20 s; runs only with ``--slow`` (pytest: ``SPECROOF_DOCS_SLOW=1``).
* ``torch``: needs the ``measure`` extra; skipped where torch is not installed.
* ``stderr``: the output block shows stderr after stdout (for an error message).
* ``exit=N``: the exit status the example must end with (default 0).
* ``unchecked``: the output shown was measured on some machine and cannot repeat; the example runs, its
  output block is not compared and ``--update`` leaves it alone.
* ``skip="why"``: not run at all (e.g. it needs several GPUs); the reason is shown in the test report.

Normalisation before comparing (nothing else is loosened; every number is compared as printed):

* trailing whitespace is stripped from every line, and blank lines at the start and end are dropped;
* a line that is exactly ``...`` in the expected block stands for any number of lines (none included), so a
  long output can be shown in part. The lines shown around it must match exactly and in order.

Examples run in a scratch folder holding links to the repository's top-level data (``docs/``, ``tests/``,
the profiles, ...), so a path in a docs example resolves as it does from a clone and files an example
writes land in the scratch folder. ``specroof`` is the one next to the running Python (the venv's).
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: where examples are collected from: the README and every page of the documentation site
SOURCES = ("README.md", "docs")
#: top-level entries never linked into the scratch folder: the packages come from the installed
#: distribution (as for a user), the rest is not data
NOT_LINKED = {".git", ".venv", "roofline", "measure", "specroof", "site", "specroof-report"}
ELLIPSIS = "..."
TIMEOUT_S = 180
SLOW_TIMEOUT_S = 900

_FENCE = re.compile(r"^(?P<indent> *)(?P<fence>```+|~~~+)\s*(?P<info>[\w+-]*)\s*$")
_OPTIONS = re.compile(r"^<!--\s*example:(?P<body>.*?)-->\s*$")


@dataclass(frozen=True)
class Options:
    slow: bool = False
    torch: bool = False
    stderr: bool = False
    exit: int = 0
    unchecked: bool = False
    skip: str | None = None

    @classmethod
    def parse(cls, body: str, where: str) -> Options:
        kw: dict[str, object] = {}
        for token in shlex.split(body):
            key, _, value = token.partition("=")
            if key in ("slow", "torch", "stderr", "unchecked") and not value:
                kw[key] = True
            elif key == "exit" and value.isdigit():
                kw["exit"] = int(value)
            elif key == "skip" and value:
                kw["skip"] = value
            else:
                raise ValueError(f"{where}: unknown example option {token!r} (see .ci/doc_examples.py)")
        return cls(**kw)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Block:
    """One fenced block: its language, its content and where the content lies (0-based, end exclusive)."""

    info: str
    start: int
    end: int
    text: str
    options: Options | None = None
    indent: int = 0  # a fence inside a list item is indented; its content is stored without it


@dataclass(frozen=True)
class Example:
    path: Path
    line: int  # 1-based line of the opening fence, for messages and test ids
    lang: str  # "bash" or "python"
    code: str
    options: Options = field(default_factory=Options)
    output: Block | None = None

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT).as_posix()}:{self.line}"


@dataclass(frozen=True)
class Outcome:
    example: Example
    returncode: int
    stdout: str
    stderr: str

    @property
    def shown(self) -> str:
        """What the output block shows: stdout, and stderr after it with the ``stderr`` option."""
        if self.example.options.stderr:
            return self.stdout + ("\n" if self.stdout and not self.stdout.endswith("\n") else "") + self.stderr
        return self.stdout


def blocks(text: str, where: str = "") -> list[Block]:
    """Every fenced block of a markdown text, with the example options written above it."""
    lines = text.splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, info = len(m.group("indent")), m.group("fence"), m.group("info")
        j = i + 1
        while j < len(lines) and not _closes(lines[j], fence):
            j += 1
        options = None
        k = i - 1
        while k >= 0 and not lines[k].strip():
            k -= 1
        if k >= 0 and (om := _OPTIONS.match(lines[k].strip())):
            options = Options.parse(om.group("body"), f"{where}:{k + 1}")
        content = "\n".join(_dedent(line, indent) for line in lines[i + 1 : j])
        out.append(Block(info, i + 1, j, content, options, indent))
        i = j + 1
    return out


def _dedent(line: str, indent: int) -> str:
    """A line of a block whose fence is indented by ``indent`` spaces, without that indentation."""
    return line[indent:] if line[:indent].strip() == "" else line.lstrip()


def _closes(line: str, fence: str) -> bool:
    """A closing fence: the opening's character, at least as many times, and nothing else."""
    body = line.strip()
    return len(body) >= len(fence) and set(body) == {fence[0]}


def _commands(code: str) -> list[str]:
    """The shell commands of a bash block: continuations joined, comments and blank lines dropped."""
    cmds: list[str] = []
    current = ""
    for raw in code.splitlines():
        line = raw.rstrip()
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        cmds.append((current + line).strip())
        current = ""
    if current:
        cmds.append(current.strip())
    return cmds


def examples_in(path: Path) -> list[Example]:
    """The runnable examples of one markdown file, each with the output block after it (if any)."""
    text = path.read_text()
    rel = path.relative_to(ROOT).as_posix()
    bs = blocks(text, rel)
    lines = text.splitlines()
    found: list[Example] = []
    for n, b in enumerate(bs):
        if b.info == "bash":
            cmds = _commands(b.text)
            runs = [c.startswith("specroof ") or c == "specroof" for c in cmds]
            if not any(runs):
                continue
            if not all(runs):
                raise ValueError(
                    f"{rel}:{b.start}: a bash block mixes specroof with other commands; split it so that "
                    "the specroof block is what a reader copies and runs"
                )
            lang = "bash"
        elif b.info == "python":
            lang = "python"
        else:
            continue
        output = None
        if n + 1 < len(bs) and bs[n + 1].info == "text":
            gap = lines[b.end + 1 : bs[n + 1].start - 1]
            if all(not g.strip() for g in gap):
                output = bs[n + 1]
        found.append(Example(path, b.start, lang, b.text, b.options or Options(), output))
    return found


def markdown_files(paths: list[str] | None = None) -> list[Path]:
    chosen = [ROOT / p for p in (paths or SOURCES)]
    files: list[Path] = []
    for p in chosen:
        files.extend(sorted(p.rglob("*.md")) if p.is_dir() else [p])
    return files


def collect(paths: list[str] | None = None) -> list[Example]:
    return [ex for f in markdown_files(paths) for ex in examples_in(f)]


# -- running -------------------------------------------------------------------------------------------


def scratch_folder() -> Path:
    """A temporary folder that looks like a clone's root for the data an example names."""
    tmp = Path(tempfile.mkdtemp(prefix="specroof-docs-"))
    for entry in ROOT.iterdir():
        if entry.name in NOT_LINKED or entry.name.startswith("."):
            continue
        (tmp / entry.name).symlink_to(entry)
    return tmp


def environment() -> dict[str, str]:
    """A fixed environment, so an output does not depend on the terminal or the caller's settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECROOF_")}
    env.update(
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        COLUMNS="100",
        LC_ALL="C.UTF-8",
        MPLBACKEND="Agg",
        PYTHONUNBUFFERED="1",
        PYTHONHASHSEED="0",
        TQDM_DISABLE="1",
        NO_COLOR="1",
    )
    return env


def run(ex: Example, cwd: Path | None = None) -> Outcome:
    """Run one example in a fresh process; its own scratch folder unless ``cwd`` is given."""
    own = cwd is None
    folder = scratch_folder() if cwd is None else cwd
    try:
        if ex.lang == "bash":
            argv = ["bash", "-e", "-o", "pipefail", "-c", ex.code]
        else:
            script = folder / f"example_{ex.line}.py"
            script.write_text(ex.code)
            argv = [sys.executable, str(script)]
        timeout = SLOW_TIMEOUT_S if ex.options.slow else TIMEOUT_S
        try:
            res = subprocess.run(
                argv, cwd=folder, env=environment(), capture_output=True, text=True, timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired as exc:
            raise AssertionError(f"{ex.id}: did not finish in {timeout} s (mark it `slow`?)") from exc
        return Outcome(ex, res.returncode, res.stdout, res.stderr)
    finally:
        if own:
            shutil.rmtree(folder, ignore_errors=True)


# -- comparing -----------------------------------------------------------------------------------------


def normalise(text: str) -> list[str]:
    """Trailing whitespace off every line, blank lines off both ends: the only liberties taken."""
    lines = [line.rstrip() for line in text.splitlines()]
    while lines and not lines[0]:
        lines.pop(0)
    while lines and not lines[-1]:
        lines.pop()
    return lines


def matches(expected: list[str], actual: list[str]) -> bool:
    """Line-exact match, where an expected line ``...`` stands for any run of actual lines (none included)."""
    # reach[j]: the first i expected lines can match the first j actual lines
    reach = [True] + [False] * len(actual)
    for line in expected:
        if line == ELLIPSIS:
            nxt, seen = [], False
            for r in reach:
                seen = seen or r
                nxt.append(seen)
        else:
            nxt = [False] + [reach[j] and actual[j] == line for j in range(len(actual))]
        reach = nxt
    return reach[-1]


def explain(ex: Example, out: Outcome) -> str | None:
    """None when the example did what its doc says; else a message with the difference."""
    opts = ex.options
    if out.returncode != opts.exit:
        return (
            f"{ex.id}: exit status {out.returncode}, expected {opts.exit}\n--- stdout\n{out.stdout[-3000:]}"
            f"\n--- stderr\n{out.stderr[-3000:]}"
        )
    if ex.output is None or opts.unchecked:
        return None
    expected, actual = normalise(ex.output.text), normalise(out.shown)
    if matches(expected, actual):
        return None
    diff = "\n".join(difflib.unified_diff(expected, actual, "as documented", "as printed now", lineterm=""))
    return (
        f"{ex.id}: the output differs from the block under the example (refresh every block with "
        f"`python .ci/doc_examples.py --update` and review the diff)\n{diff}"
    )


def refreshed(expected: list[str], actual: list[str]) -> list[str]:
    """The new content of an output block: the actual output, cut where the documented block was cut.

    Without ``...`` the whole output. With it, each shown stretch is replaced by the same number of
    actual lines: the first stretch from the top, the last from the bottom, the ones between where the
    actual output resembles them most (difflib), in order. The result is then checked with ``matches``.
    """
    if ELLIPSIS not in expected:
        return actual
    parts: list[list[str]] = [[]]
    for line in expected:
        if line == ELLIPSIS:
            parts.append([])
        else:
            parts[-1].append(line)
    head, *middle, tail = parts
    new_head = actual[: len(head)]
    lo, hi = len(new_head), len(actual) - len(tail)
    new_middle: list[list[str]] = []
    for part in middle:
        best, best_at = -1.0, lo
        for at in range(lo, max(lo, hi - len(part)) + 1):
            window = actual[at : at + len(part)]
            score = difflib.SequenceMatcher(None, "\n".join(part), "\n".join(window)).ratio()
            if score > best:
                best, best_at = score, at
        new_middle.append(actual[best_at : best_at + len(part)])
        lo = best_at + len(part)
    new_tail = actual[hi:] if tail else []
    out: list[str] = list(new_head)
    for part in [*new_middle, new_tail]:
        out.append(ELLIPSIS)
        out.extend(part)
    if not tail and out and out[-1] != ELLIPSIS:
        out.append(ELLIPSIS)
    return out


def _keyed(examples: list[Example]) -> dict[tuple[str, str, int], Example]:
    """Examples by (language, code, how many identical ones came before): stable when lines move."""
    seen: dict[tuple[str, str], int] = {}
    keyed = {}
    for ex in examples:
        n = seen[(ex.lang, ex.code)] = seen.get((ex.lang, ex.code), -1) + 1
        keyed[(ex.lang, ex.code, n)] = ex
    return keyed


def update(examples: list[Example], outcomes: dict[str, Outcome]) -> list[str]:
    """Rewrite the output blocks whose example printed something else; returns the ids rewritten.

    The file is read again first and each example found by its code, not by its line: examples take minutes
    and the file may have been edited (or reformatted) meanwhile. An example whose code changed is left alone.
    """
    changed: list[str] = []
    for path in dict.fromkeys(ex.path for ex in examples):
        ran = {k: ex for k, ex in _keyed([e for e in examples if e.path == path]).items() if ex.id in outcomes}
        now = _keyed(examples_in(path))
        lines = path.read_text().splitlines()
        todo = []
        for key, ex in ran.items():
            out, cur = outcomes[ex.id], now.get(key)
            if cur is None:
                print(f"{ex.id}: its code changed while it ran; output not rewritten", file=sys.stderr)
                continue
            if cur.output is None or cur.options.unchecked or out.returncode != cur.options.exit:
                continue
            expected, actual = normalise(cur.output.text), normalise(out.shown)
            if not matches(expected, actual):
                todo.append((cur, refreshed(expected, actual), ex.id))
        for cur, new, ident in sorted(todo, key=lambda t: t[0].line, reverse=True):  # bottom up: spans stay valid
            assert cur.output is not None
            pad = " " * cur.output.indent
            lines[cur.output.start : cur.output.end] = [pad + line if line else line for line in new]
            changed.append(ident)
        if todo:
            path.write_text("\n".join(lines) + "\n")
    return changed


def skip_reason(ex: Example, slow: bool) -> str | None:
    import importlib.util

    if ex.options.skip:
        return ex.options.skip
    if ex.options.torch and importlib.util.find_spec("torch") is None:
        return "needs torch (pip install 'specroof[measure]')"
    if ex.options.slow and not slow:
        return "slow: run with --slow (pytest: SPECROOF_DOCS_SLOW=1)"
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("files", nargs="*", help="markdown files or folders (default: README.md and docs/)")
    ap.add_argument("--update", action="store_true", help="rewrite the output blocks with what the examples print")
    ap.add_argument("--slow", action="store_true", help="include the examples marked slow")
    ap.add_argument("--list", action="store_true", help="list the examples and exit")
    args = ap.parse_args(argv)
    examples = collect(args.files or None)
    if args.list:
        for ex in examples:
            flags = [k if v is True else f"{k}={v}" for k, v in vars(ex.options).items() if v not in (False, None, 0)]
            out = "checked output" if ex.output is not None and not ex.options.unchecked else "runs"
            print(f"{ex.id:40s} {ex.lang:6s} {out:15s} {' '.join(flags)}")
        return 0
    failures: list[str] = []
    outcomes: dict[str, Outcome] = {}
    for ex in examples:
        why = skip_reason(ex, args.slow)
        if why:
            print(f"skip {ex.id}: {why}")
            continue
        print(f"run  {ex.id}", flush=True)
        outcome = outcomes[ex.id] = run(ex)
        if args.update and outcome.returncode == ex.options.exit:
            continue  # a changed output is what --update rewrites below
        if problem := explain(ex, outcome):
            failures.append(problem)
    if args.update:
        for i in update(examples, outcomes):
            print(f"rewrote the output of {i}")
    for f in failures:
        print(f"\n{f}", file=sys.stderr)
    print(f"{len(outcomes)} examples run, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

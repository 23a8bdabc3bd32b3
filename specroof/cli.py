"""The ``specroof`` command line: parser assembly and the one error boundary.

Every command lives in a module of its own under ``specroof/commands/`` (each with ``add_parser(sub)``); every
command prints a table and takes ``--json``. Bad input exits with status 2 and a one-line message, never a traceback.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from roofline.core import interrupts
from roofline.core.errors import SpecroofError

# re-exported for modules written against the single-file CLI (specroof.commands.measure_engine imports them here)
from specroof.shell import _add_json, _note, emit, int_list  # noqa: F401

_INVALID_CHOICE = re.compile(r"invalid choice: '(?P<given>[^']*)' \(choose from (?P<choices>.*)\)$")


def did_you_mean(message: str) -> str:
    """argparse's "invalid choice" message with the closest choice named (``specroof plna``: did you mean plan?)."""
    m = _INVALID_CHOICE.search(message)
    if m is None:
        return message
    choices = re.findall(r"'([^']*)'", m["choices"])
    close = difflib.get_close_matches(m["given"].lower(), choices, n=1, cutoff=0.5)
    return f"{message}: did you mean {close[0]}?" if close else message


#: a negative number as a value, exponent forms included: Python 3.11's argparse reads '-1e3' as an unknown option
#: ('expected one argument'), where flags that take either sign (--round-host-us) document it
_NEGATIVE_NUMBER = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = _NEGATIVE_NUMBER

    def error(self, message: str) -> Any:  # argparse's own exit code is already 2
        # one line, as for every other bad input; the usage is one --help away
        self.exit(2, f"specroof: error: {did_you_mean(message)} (see `{self.prog} --help`)\n")


#: the commands, in the order ``--help`` lists them; each module is specroof/commands/NAME.py with ``add_parser(sub)``
COMMAND_MODULES = ("hardware", "roofline", "speedup", "plan", "tree", "acceptance", "serve", "validate")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="specroof", description="How much does speculative decoding buy on this GPU?")
    parser.add_argument("--version", action="version", version=f"specroof {version()}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name in COMMAND_MODULES:
        importlib.import_module(f"specroof.commands.{name}").add_parser(sub)
    _register_measure(sub)
    importlib.import_module("specroof.commands.report").add_parser(sub)
    return parser


def _register_measure(sub: Any) -> None:
    """``specroof measure ...`` comes from ``specroof.measure_cli`` when torch is installed, else a clear refusal."""
    import importlib.util

    if importlib.util.find_spec("torch") is not None:  # found without importing it: roofline stays torch-free
        from specroof.measure_cli import register

        register(sub, _Parser)
        return

    def refuse(args: argparse.Namespace) -> int:
        raise SpecroofError("measurement needs torch: pip install 'specroof[measure]'")

    p = sub.add_parser("measure", help="measure this device (needs specroof[measure]: not installed)")
    p.add_argument("rest", nargs=argparse.REMAINDER)
    p.set_defaults(func=refuse)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command. The one error boundary: bad input of any kind exits 2 with one line; a bug exits 1."""
    parser = build_parser()
    args = parser.parse_args(argv)
    interrupts.install()
    try:
        _refuse_repeats(parser, sys.argv[1:] if argv is None else list(argv))
        return int(args.func(args))
    except SpecroofError as exc:
        return _fail(str(exc))
    except BrokenPipeError:
        # the reader went away (`specroof ... | head`): not an error of ours; silence the flush at exit
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        interrupts.handled()
        print("\nspecroof: interrupted", file=sys.stderr)
        return 130
    except MemoryError:
        return _fail("out of memory: ask for a smaller sweep (fewer batch, context or gamma values)")
    except OSError as exc:
        # an output or input path the checks could not foresee (a read-only mount, a full disk, a vanished folder)
        return _fail(os_error_message(exc))
    except Exception as exc:  # the boundary: classify, never let a traceback out
        if _is_bad_data(exc):
            return _fail(f"{_one_line(exc)}{_inputs_named(args)}", exc)
        return _bug(exc)


def _refuse_repeats(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    """A single-valued option given twice is a contradiction, not "the last one wins" (argparse's rule); an option
    and its alias (``--target`` and ``--model``) are one option."""
    repeatable: set[str] = set()
    same: dict[str, str] = {}  # each option string -> the first name of its option
    stack = [parser]
    while stack:
        p = stack.pop()
        for action in p._actions:  # argparse keeps no public list of a parser's actions
            if isinstance(action, argparse._SubParsersAction):
                stack.extend(action.choices.values())
            elif isinstance(action, (argparse._AppendAction, argparse._CountAction, argparse._ExtendAction)):
                repeatable.update(action.option_strings)
            elif len(action.option_strings) > 1:
                same.update({s: action.option_strings[0] for s in action.option_strings})
    head = argv[: argv.index("--")] if "--" in argv else argv
    given = [a.split("=", 1)[0] for a in head if a.startswith("--") and len(a) > 2]
    flags = [same.get(f, f) for f in given]
    for flag in dict.fromkeys(flags):
        if flags.count(flag) > 1 and flag not in repeatable:
            names = sorted({g for g in given if same.get(g, g) == flag})
            raise SpecroofError(f"{' / '.join(names)} was given {flags.count(flag)} times: give it once")


def version() -> str:
    """The installed distribution's version."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("specroof")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "(not installed: pip install -e .)"


def _one_line(exc: BaseException | str) -> str:
    text = str(exc) if not isinstance(exc, BaseException) or str(exc) else type(exc).__name__
    return " ".join(part.strip() for part in text.splitlines() if part.strip()) or "error"


def _fail(message: str, exc: BaseException | None = None) -> int:
    """Bad input: one line on stderr and exit status 2 (the traceback too with SPECROOF_DEBUG=1)."""
    if exc is not None and os.environ.get("SPECROOF_DEBUG") == "1":
        import traceback

        traceback.print_exception(exc, file=sys.stderr)
    print(f"specroof: error: {_one_line(message)}", file=sys.stderr)
    return 2


def _bug(exc: BaseException) -> int:
    """A failure no input explains: exit 1, ask for a report; the traceback only with SPECROOF_DEBUG=1."""
    if os.environ.get("SPECROOF_DEBUG") == "1":
        import traceback

        traceback.print_exception(exc, file=sys.stderr)
        hint = "the traceback is above"
    else:
        hint = "rerun with SPECROOF_DEBUG=1 for the traceback"
    print(
        f"specroof: internal error ({type(exc).__name__}: {_one_line(exc)}): this is a bug, please report it "
        f"with the command line; {hint}",
        file=sys.stderr,
    )
    return 1


def os_error_message(exc: OSError) -> str:
    """One line for a failed file operation, naming the file and, for a full disk, what to do."""
    import errno

    where = f" {exc.filename!r}" if exc.filename is not None else ""
    if exc.filename2 is not None:
        where += f" -> {exc.filename2!r}"
    if exc.errno == errno.ENOSPC:
        return f"no space left on the device writing{where}: free some space (or choose another --out) and rerun"
    if exc.errno == errno.EROFS:
        return f"read-only file system: cannot write{where}; choose another --out"
    if exc.errno == errno.EDQUOT:
        return f"disk quota exceeded writing{where}: free some space and rerun"
    if isinstance(exc, FileExistsError):
        return f"{where.strip()} already exists and is not a folder this command can use; choose another path"
    return f"{exc.strerror or _one_line(exc)}:{where}" if where else _one_line(exc)


def _is_bad_data(exc: BaseException) -> bool:
    """Errors that bad input produces: numbers out of range, undecodable JSON/TOML/text, a damaged checkpoint."""
    if isinstance(exc, (ValueError, ArithmeticError, UnicodeError)):  # JSON/TOML decode errors are ValueErrors
        return True
    # safetensors' error type lives in a compiled module: matched by name, without importing it
    return type(exc).__name__ in ("SafetensorError", "HeaderTooLarge", "HeaderTooSmall", "InvalidHeader")


def _inputs_named(args: argparse.Namespace) -> str:
    """' (inputs: --model c.json, ...)': the files among the arguments, so a decode error names its file."""
    named = []
    for key, value in sorted(vars(args).items()):
        values = value if isinstance(value, list) else [value]
        for v in values:
            if isinstance(v, str) and len(v) < 4096 and ("/" in v or "." in v) and Path(v).exists():
                named.append(f"--{key.replace('_', '-')} {v}")
    return f" (inputs: {', '.join(named)})" if named else " (check the numbers given)"


if __name__ == "__main__":
    sys.exit(main())

"""The CLI reference page, generated from the argparse parsers themselves.

    python .ci/cli_reference.py > cli.md     # print the page

The documentation site builds this page at build time (``.ci/mkdocs_hooks.py``) rather than keeping a
committed copy: the parsers are the one source of truth and change often, a generated page cannot go stale,
and `mkdocs build --strict` in CI runs this generator on every change. It walks ``specroof.cli.build_parser()``
recursively, every subcommand of every subcommand, and writes each command's usage line, description and a
table of its arguments (flag, value, default, help) as argparse knows them.

``specroof measure ...`` is registered only where torch is installed (the ``measure`` extra); the docs are
built with every extra, so the page shows it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WIDTH = 100  # usage lines are wrapped at this width whatever terminal builds the docs


def commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser, str]]:
    """(the command's words after ``specroof``, its parser, its one-line help), depth first, in parser order."""
    for action in parser._actions:  # argparse keeps no public list of a parser's actions
        if not isinstance(action, argparse._SubParsersAction):
            continue
        helps = {a.dest: a.help or "" for a in action._choices_actions}
        seen: set[int] = set()
        for name, sub in action.choices.items():
            if id(sub) in seen:  # an alias names a parser already listed
                continue
            seen.add(id(sub))
            yield (*path, name), sub, helps.get(name, "")
            yield from commands(sub, (*path, name))


def _cell(text: object) -> str:
    """Text safe inside a markdown table cell."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _usage(parser: argparse.ArgumentParser) -> str:
    formatter = argparse.HelpFormatter(parser.prog, width=WIDTH)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    return formatter.format_help().strip()


def _value(action: argparse.Action) -> str:
    if action.nargs == 0 or (not action.option_strings and action.choices is None and action.metavar is None):
        return ""  # a flag takes no value; a positional's name is its value
    if action.choices is not None and not isinstance(action, argparse._SubParsersAction):
        return " \\| ".join(f"`{c}`" for c in action.choices)
    formatter = argparse.HelpFormatter("x")
    metavar = formatter._format_args(action, action.dest.upper() if action.option_strings else action.dest)
    return f"`{metavar}`"


def _default(action: argparse.Action) -> str:
    if action.required or action.nargs == 0 or action.default in (None, argparse.SUPPRESS, [], ""):
        return ""
    value = action.default
    if isinstance(value, (list, tuple)):
        value = ",".join(str(v) for v in value)
    return f"`{value}`"


def _help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    if action.help in (None, argparse.SUPPRESS):
        return ""
    return parser._get_formatter()._expand_help(action)


def section(words: tuple[str, ...], parser: argparse.ArgumentParser, summary: str) -> str:
    """One command's part of the page."""
    level = "#" * min(len(words) + 1, 4)
    name = " ".join(("specroof", *words))
    out = [f"{level} `{name}`", ""]
    if summary:
        out += [summary[0].upper() + summary[1:] + ("" if summary.endswith(".") else "."), ""]
    if parser.description and parser.description != summary:
        out += [parser.description, ""]
    out += ["```text", _usage(parser), "```", ""]
    rows = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
            continue
        if isinstance(action, argparse._SubParsersAction):
            subs = ", ".join(f"`{n}`" for n in action.choices)
            rows.append(f"| *command* | {subs} | | one of the subcommands below |")
            continue
        flags = ", ".join(f"`{s}`" for s in action.option_strings) or f"`{action.dest}`"
        if action.required and action.option_strings:
            flags += " (required)"
        for group in parser._mutually_exclusive_groups:
            if action in group._group_actions:
                others = [a.option_strings[0] for a in group._group_actions if a is not action and a.option_strings]
                names = ", ".join(f"`{o}`" for o in others)
                flags += f" (this or {names}: one is required)" if group.required else f" (not with {names})"
        rows.append(f"| {flags} | {_value(action)} | {_cell(_default(action))} | {_cell(_help(parser, action))} |")
    if rows:
        out += ["| argument | value | default | what it does |", "|---|---|---|---|", *rows, ""]
    return "\n".join(out)


def render() -> str:
    """The whole page, every command in the order ``specroof --help`` lists them."""
    sys.path.insert(0, str(ROOT))
    from specroof.cli import build_parser

    parser = build_parser()
    parts = [
        "# CLI reference",
        "",
        "Generated from the argparse parsers when the site is built (`.ci/cli_reference.py`): every command, "
        "subcommand and flag as `specroof` itself parses them. `specroof COMMAND --help` prints the same.",
        "",
        "```text",
        _usage(parser),
        "```",
        "",
    ]
    if parser.description:
        parts += [parser.description, ""]
    parts += [section(words, sub, summary) for words, sub, summary in commands(parser)]
    return "\n".join(parts).rstrip() + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())

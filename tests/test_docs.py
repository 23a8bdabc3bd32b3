"""Every code example in README.md and docs/ runs, and prints what the docs show under it.

The examples, their options and the one normalisation (trailing whitespace; a line ``...`` for any run of
lines) are described in .ci/doc_examples.py, which also rewrites the output blocks (``--update``) after a change
that moves the numbers. Examples marked ``slow`` run with SPECROOF_DOCS_SLOW=1; ``torch`` ones need the
measure extra. The rest of this module checks the machinery itself and that the site covers every page.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / ".ci" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


dx = _load("doc_examples")
EXAMPLES = dx.collect()
SLOW = os.environ.get("SPECROOF_DOCS_SLOW") == "1"


def _marks(ex) -> list:
    return [pytest.mark.slow] if ex.options.slow else []


@pytest.mark.parametrize("ex", [pytest.param(e, id=e.id, marks=_marks(e)) for e in EXAMPLES])
def test_example_runs_and_prints_what_the_docs_show(ex):
    reason = dx.skip_reason(ex, SLOW)
    if reason:
        pytest.skip(reason)
    problem = dx.explain(ex, dx.run(ex))
    assert problem is None, problem


def test_the_docs_have_examples_with_checked_outputs():
    """The collector finds what the docs hold: not a vacuous parametrisation."""
    files = {ex.path.relative_to(ROOT).as_posix() for ex in EXAMPLES}
    assert "README.md" in files and any(f.startswith("docs/guide/") for f in files)
    checked = [ex for ex in EXAMPLES if ex.output is not None and not ex.options.unchecked]
    assert len(checked) >= 20
    assert {ex.lang for ex in checked} == {"bash", "python"}


# -- the machinery ---------------------------------------------------------------------------------------


def test_matching_is_line_exact_except_for_trailing_space_and_ellipsis_lines():
    actual = dx.normalise("\n\nspeedup 1.83x   \n  gamma 4\nrow a\nrow b\n\n")
    assert actual == ["speedup 1.83x", "  gamma 4", "row a", "row b"]
    assert dx.matches(["speedup 1.83x", "  gamma 4", "row a", "row b"], actual)
    assert not dx.matches(["speedup 1.84x", "  gamma 4", "row a", "row b"], actual)  # numbers are never loosened
    assert not dx.matches(["speedup 1.83x", "gamma 4", "row a", "row b"], actual)  # nor leading space
    assert dx.matches(["speedup 1.83x", "...", "row b"], actual)
    assert dx.matches(["speedup 1.83x", "..."], actual)
    assert dx.matches(["...", "row a", "...", "row b"], actual)
    assert dx.matches(["speedup 1.83x", "...", "  gamma 4", "row a", "row b"], actual)  # ... may be empty
    assert not dx.matches(["speedup 1.83x", "...", "row c"], actual)
    assert not dx.matches(["row a", "...", "speedup 1.83x"], actual)  # in order
    assert not dx.matches(["speedup 1.83x"], actual)  # no ellipsis: the whole output


def test_refreshed_keeps_where_the_documented_block_was_cut():
    actual = ["head 2.0x", "table", "row 1 2.1x", "row 2 2.2x", "row 3", "legend"]
    assert dx.refreshed(["head 1.9x", "..."], actual) == ["head 2.0x", "..."]
    assert dx.refreshed(["head 1.9x", "...", "legend"], actual) == ["head 2.0x", "...", "legend"]
    got = dx.refreshed(["head 1.9x", "...", "row 2 2.0x", "..."], actual)
    assert got == ["head 2.0x", "...", "row 2 2.2x", "..."]
    for expected in (["head 1.9x", "..."], ["head 1.9x", "...", "legend"], ["head 1.9x", "...", "row 2 2.0x", "..."]):
        assert dx.matches(dx.refreshed(expected, actual), actual)
    assert dx.refreshed(["old"], actual) == actual


def test_collector_reads_options_outputs_and_refuses_mixed_blocks(tmp_path, monkeypatch):
    monkeypatch.setattr(dx, "ROOT", tmp_path)
    page = tmp_path / "page.md"
    page.write_text(
        "Intro.\n\n```bash\npip install .\n```\n\n"  # not a specroof command: not run
        "<!-- example: slow exit=2 stderr -->\n```bash\nspecroof plan \\\n  --bad\n```\n\n```text\nerr\n```\n\n"
        "```python\nprint(1)\n```\n\nprose between\n\n```text\n1\n```\n"  # prose in between: not its output
        "- in a list:\n\n  ```python\n  if True:\n      print(2)\n  ```\n"
    )
    exs = dx.examples_in(page)
    assert [(e.lang, e.line) for e in exs] == [("bash", 8), ("python", 17), ("python", 28)]
    bash, py, listed = exs
    assert bash.options == dx.Options(slow=True, exit=2, stderr=True)
    assert bash.output is not None and bash.output.text == "err"
    assert dx._commands(bash.code) == ["specroof plan    --bad"]
    assert py.output is None
    assert listed.code == "if True:\n    print(2)"
    page.write_text("```bash\nspecroof roofline --help\ncat out.txt\n```\n")
    with pytest.raises(ValueError, match="mixes specroof with other commands"):
        dx.examples_in(page)
    page.write_text("<!-- example: fast -->\n```bash\nspecroof --help\n```\n")
    with pytest.raises(ValueError, match="unknown example option"):
        dx.examples_in(page)


def test_a_wrong_output_fails_and_update_rewrites_it(tmp_path, monkeypatch):
    """End to end on a scratch page: a stale block is caught, --update rewrites it, then it passes."""
    monkeypatch.setattr(dx, "ROOT", tmp_path)
    page = tmp_path / "page.md"
    page.write_text(
        "```bash\nspecroof hardware show a100-sxm-80gb | head -n 2\n```\n\n```text\nA100 from another time\n...\n```\n\n"
        "```python\nprint(6 * 7)\n```\n\n```text\n41\n```\n"
    )
    shell, py = dx.examples_in(page)
    outcomes = {ex.id: dx.run(ex) for ex in (shell, py)}
    assert all(dx.explain(ex, outcomes[ex.id]) for ex in (shell, py))  # both stale
    assert "as printed now" in dx.explain(py, outcomes[py.id])
    # the page is edited while the examples run: the blocks are found again by their code, not their lines
    page.write_text("An intro written meanwhile.\n\nTwo lines of it.\n\n" + page.read_text())
    assert sorted(dx.update([shell, py], outcomes)) == sorted([shell.id, py.id])
    text = page.read_text()
    assert text.startswith("An intro written meanwhile.\n\nTwo lines of it.\n\n```bash\nspecroof hardware show")
    assert "```text\n42\n```" in text and "A100 from another time" not in text
    assert "print(6 * 7)\n```\n\n```text\n42" in text
    assert "\n...\n" in text  # the cut stays where the page had it
    for ex in dx.examples_in(page):
        assert dx.explain(ex, dx.run(ex)) is None


def test_an_example_runs_in_a_scratch_folder_that_resolves_the_docs_paths(tmp_path):
    code = "import pathlib; print(pathlib.Path('docs/examples/rank_vector.json').is_file(), pathlib.Path('me.txt').exists())"
    ex = dx.Example(ROOT / "README.md", 1, "python", f"{code}\nopen('me.txt', 'w').write('x')")
    out = dx.run(ex)
    assert out.returncode == 0 and out.stdout.split() == ["True", "False"]
    assert not (ROOT / "me.txt").exists()  # what an example writes stays in its scratch folder
    failing = dx.Example(ROOT / "README.md", 1, "bash", "specroof roofline --hardware nope --params 1e9")
    res = dx.run(failing)
    assert res.returncode == 2 and "nope" in res.stderr
    assert "exit status 2, expected 0" in dx.explain(failing, res)


# -- the site ----------------------------------------------------------------------------------------------


def _nav_pages(nav) -> list[str]:
    pages: list[str] = []
    for item in nav:
        value = next(iter(item.values())) if isinstance(item, dict) else item
        pages.extend(_nav_pages(value) if isinstance(value, list) else [value])
    return pages


def test_every_docs_page_is_in_the_site_navigation():
    yaml = pytest.importorskip("yaml")
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    nav = _nav_pages(config["nav"])
    on_disk = {p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")}
    generated = {"reference/cli.md"}
    assert set(nav) == on_disk | generated, "pages missing from mkdocs.yml's nav, or nav entries without a page"
    assert config["theme"]["name"] == "material"
    assert ".ci/mkdocs_hooks.py" in config["hooks"]


def test_the_cli_reference_covers_every_command_and_flag():
    cli_reference = _load("cli_reference")
    page = cli_reference.render()
    from specroof.cli import build_parser

    count = 0
    for words, parser, _ in cli_reference.commands(build_parser()):
        assert f"`specroof {' '.join(words)}`" in page
        for action in parser._actions:
            for flag in action.option_strings:
                if flag not in ("-h", "--help"):
                    assert f"`{flag}`" in page
        count += 1
    assert count >= 15 and "`specroof plan`" in page and "`specroof acceptance import`" in page
    assert re.search(r"\| `--hardware` \(required\) \|", page)

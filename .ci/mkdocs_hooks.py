"""MkDocs hooks: the pages generated when the site is built (mkdocs.yml, ``hooks:``).

``reference/cli.md`` comes from the argparse parsers (``.ci/cli_reference.py``), so it always describes the
CLI the site is built from.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from mkdocs.structure.files import File

CLI_PAGE = "reference/cli.md"


def _cli_reference():
    spec = importlib.util.spec_from_file_location("cli_reference", Path(__file__).with_name("cli_reference.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def on_files(files, config):
    files.append(File.generated(config, CLI_PAGE, content=_cli_reference().render()))
    return files

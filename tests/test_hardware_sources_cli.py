"""``specroof hardware list --sources``: every built-in profile's blocks with where their figures come from."""

from __future__ import annotations

import json

from specroof.cli import main

NEW = ("b300-288gb", "gb300-288gb", "mi355x-288gb", "mi350x-288gb", "rtx-pro-6000-96gb", "rtx-2080-ti-11gb")


def test_hardware_list_shows_the_gpus_of_2026(capsys):
    assert main(["hardware", "list"]) == 0
    out = capsys.readouterr().out
    for profile in NEW:
        assert profile in out


def test_hardware_list_sources_names_a_source_for_every_block(capsys):
    assert main(["hardware", "list", "--sources", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    by_id: dict[str, dict[str, str]] = {}
    for r in rows:
        by_id.setdefault(r["id"], {})[r["block"]] = r["source"]
    for profile in NEW:
        assert set(by_id[profile]) == {"memory", "compute", "interconnect", "efficiency"}, profile
        assert all(src.strip() for src in by_id[profile].values())
    assert "mamf-finder" in by_id["b300-288gb"]["efficiency"]
    assert main(["hardware", "list", "--sources"]) == 0
    text = capsys.readouterr().out
    line = next(ln for ln in text.splitlines() if ln.startswith("mi355x-288gb") and " compute " in ln)
    assert "AMD Instinct MI355X specifications" in line

"""One tree parser (roofline.speculation.drafters.tree_preset): presets, parent arrays, rank paths, Sequoia growmaps, engine configs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from roofline.core.errors import SpecroofError
from roofline.speculation.drafters import MEDUSA_TREE_PATHS, TREE_PRESETS, tree_preset
from roofline.speculation.predict import predict_speedup
from roofline.speculation.trees import Tree

SMALL = [-1, -1, 0, 0, 2]  # two roots; node 0 has two children; node 2 one


def _parents(t: Tree) -> list[int]:
    return t.parents.tolist()


@pytest.mark.parametrize(
    "text",
    [
        "parents:-1,-1,0,0,2",
        "parents: -1, -1, 0, 0, 2",
        "parents:[-1,-1,0,0,2]",
        "PARENTS:-1 -1 0 0 2",
        "[-1,-1,0,0,2]",
    ],
)
def test_inline_parent_arrays(text):
    assert _parents(tree_preset(text)) == SMALL


def test_rank_paths_in_every_spelling_are_the_same_tree():
    paths = [[0], [1], [0, 0], [0, 1], [0, 0, 0]]
    want = _parents(Tree.from_paths(paths))
    assert want == SMALL
    assert _parents(tree_preset(paths)) == want
    assert _parents(tree_preset(str(paths))) == want  # Medusa/Hydra choices pasted as text
    assert _parents(tree_preset("[(0,), (1,), (0, 0), (0, 1), (0, 0, 0)]")) == want  # vLLM's speculative_token_tree
    assert _parents(tree_preset(tuple(tuple(p) for p in paths))) == want
    # the shipped Medusa preset is its choices list, however it is given
    assert _parents(tree_preset(str(MEDUSA_TREE_PATHS))) == _parents(TREE_PRESETS["medusa"])


def test_files_hold_any_form(tmp_path: Path):
    forms = {
        "parents.json": json.dumps({"parents": SMALL}),
        "array.json": json.dumps(SMALL),
        "paths.json": json.dumps([[0], [1], [0, 0], [0, 1], [0, 0, 0]]),
        # Sequoia numbers the root 0 and lists each node's children
        "growmap.json": json.dumps({"Successors": [[1, 2], [3, 4], [], [5], [], []]}),
        # a vLLM speculative config: the tree as a string of rank tuples
        "vllm.json": json.dumps(
            {"method": "eagle", "speculative_token_tree": "[(0,), (1,), (0, 0), (0, 1), (0, 0, 0)]"}
        ),
        "choices.py.txt": "[[0], [1], [0, 0], [0, 1], [0, 0, 0]]\n",
    }
    for name, body in forms.items():
        f = tmp_path / name
        f.write_text(body)
        assert _parents(tree_preset(str(f))) == SMALL, name
    assert _parents(tree_preset(Tree(SMALL))) == SMALL
    assert _parents(tree_preset({"Successors": [[1, 2], [3, 4], [], [5], [], []]})) == SMALL


def test_presets_are_kept():
    for name, tree in TREE_PRESETS.items():
        assert tree_preset(name) is tree


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("bogus", "unknown tree 'bogus'"),
        ("parents:a,b", "whole numbers"),
        ("parents:-1,5", "orphan"),
        ("parents:1,-1", "cycle|comes after"),
        ("[[0], [2, 0]]", "no parent path"),
        ("[1.5, 2]", "parent array of integers or rank paths"),
        ("[[0], [-1]]", "ranks >= 0"),
        ('{"nodes": 3}', "needs 'parents'"),
        ("[(0,), (1,", "not JSON or a list literal"),
        ({"parents": [-1, "x"]}, "whole numbers"),
        ({"Successors": [[1], [1]]}, "two parents"),
        (3, "got a int"),
    ],
)
def test_bad_trees_are_one_line_naming_the_problem(value, message):
    with pytest.raises(SpecroofError, match=message):
        tree_preset(value)


def test_a_bad_file_names_itself(tmp_path: Path):
    f = tmp_path / "t.json"
    f.write_text("{not json")
    with pytest.raises(SpecroofError, match="t.json"):
        tree_preset(str(f))


def test_predict_speedup_takes_every_form():
    kw = dict(hardware="a100-sxm-80gb", target="vicuna-7b", drafter="medusa", mean_accepted=2.0, engine="eager")
    ref = predict_speedup(tree=Tree(SMALL), **kw)
    for form in ("parents:-1,-1,0,0,2", "[(0,), (1,), (0, 0), (0, 1), (0, 0, 0)]", SMALL):
        p = predict_speedup(tree=form, **kw)
        assert p.tree_nodes == 5 and p.speedup == pytest.approx(ref.speedup)
    # a bigger tree costs a longer verify pass: the tree is really used
    big = predict_speedup(tree="medusa", **kw)
    assert big.t_verify_s > ref.t_verify_s


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "specroof.cli", *args], capture_output=True, text=True)


def test_cli_tree_argument(tmp_path: Path):
    base = ("speedup", "--hardware", "a100-sxm-80gb", "--target", "vicuna-7b", "--drafter", "medusa",
            "--mean-accepted", "2.0", "--engine", "eager", "--json")  # fmt: skip
    r = _cli(*base, "--tree", "parents:-1,-1,0,0,2")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["tree_nodes"] == 5
    f = tmp_path / "g.json"
    f.write_text(json.dumps({"Successors": [[1, 2], [3, 4], [], [5], [], []]}))
    r = _cli(*base, "--tree", str(f))
    assert r.returncode == 0 and json.loads(r.stdout)["tree_nodes"] == 5
    r = _cli(*base, "--tree", "bogus")
    assert r.returncode == 2 and "unknown tree" in r.stderr and len(r.stderr.strip().splitlines()) == 1

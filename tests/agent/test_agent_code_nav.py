"""tree-sitter `outline` and `find_symbol` on fixtures in every supported language, via the sandbox."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.tools.code_index import extract_symbols

FIXTURES = Path(__file__).parent / "fixtures" / "code"

# file -> definitions (qualified name, first line) the outline must contain
EXPECTED = {
    "shapes.py": [("Shape", 4), ("Shape.area", 5), ("Circle", 9), ("Circle.__init__", 10), ("Circle.area", 13),
                  ("total_area", 17)],
    "shapes.js": [("Shape", 1), ("Shape.area", 2), ("Circle", 7), ("Circle.constructor", 8), ("Circle.area", 12),
                  ("totalArea", 17), ("describe", 21)],
    "shapes.ts": [("HasArea", 1), ("Point", 5), ("Color", 7), ("Square", 9), ("Square.area", 11), ("totalArea", 16)],
    "shapes.go": [("Shape", 5), ("Circle", 9), ("Circle.Area", 13), ("TotalArea", 17)],
    "shapes.rs": [("Shape", 1), ("Circle", 5), ("Shape for Circle", 9), ("Circle.area", 10), ("Kind", 15),
                  ("total_area", 20)],
    "shapes.c": [("circle", 3), ("circle_t", 7), ("circle_area", 9), ("total_area", 13)],
    "shapes.cpp": [("geo", 3), ("geo.Circle", 5), ("Circle.area", 8), ("geo.total_area", 14)],
    "Shapes.java": [("Shapes", 5), ("Shapes.Shape", 6), ("Shapes.Circle", 10), ("Circle.area", 17),
                    ("Shapes.totalArea", 22)],
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_extract_symbols_per_language(name):
    symbols = extract_symbols(name, (FIXTURES / name).read_bytes())
    found = {(s.qualified_name, s.line) for s in symbols}
    missing = [d for d in EXPECTED[name] if d not in found]
    assert not missing, f"{name}: missing {missing}; found {sorted(found)}"


@pytest.fixture
def code_tools(tools, sandbox, workdir):
    sandbox.exec_once(["mkdir", "-p", f"{workdir}/src"], timeout=30)
    for path in sorted(FIXTURES.iterdir()):
        sandbox.copy_in(path, f"{workdir}/src")
    return tools


def test_outline_of_each_file_in_the_sandbox(code_tools):
    for name, definitions in EXPECTED.items():
        result = code_tools.call("outline", {"path": f"src/{name}"})
        assert not result.is_error, result.output
        assert result.output.splitlines()[0] == f"src/{name}"
        for qualified, line in definitions:
            leaf = qualified.split(".")[-1]
            assert any(leaf in row and f"[L{line}-" in row for row in result.output.splitlines()), (name, qualified)


def test_outline_of_a_folder_lists_every_language_and_follows_edits(code_tools, workdir):
    result = code_tools.call("outline", {"path": "src"})
    files = [row for row in result.output.splitlines() if not row.startswith(" ")]
    assert sorted(files) == sorted(f"src/{name}" for name in EXPECTED)
    code_tools.call("str_replace", {"path": "src/shapes.py", "old_str": "def total_area(shapes):",
                                    "new_str": "def grand_total(shapes):"})
    again = code_tools.call("outline", {"path": "src/shapes.py"})
    assert "def grand_total(shapes)" in again.output and "total_area" not in again.output


def test_find_symbol_across_languages(code_tools):
    result = code_tools.call("find_symbol", {"name": "total_area", "path": "src"})
    files = sorted(row.split(":")[0] for row in result.output.splitlines() if row.startswith("src/"))
    assert files == ["src/shapes.c", "src/shapes.cpp", "src/shapes.py", "src/shapes.rs"]
    method = code_tools.call("find_symbol", {"name": "Circle.area", "path": "src"})
    hits = sorted(row.split(":")[0] for row in method.output.splitlines() if row.startswith("src/"))
    assert hits == ["src/Shapes.java", "src/shapes.cpp", "src/shapes.js", "src/shapes.py", "src/shapes.rs"]


def test_find_symbol_shows_source_for_few_hits(code_tools):
    result = code_tools.call("find_symbol", {"name": "Circle.Area", "path": "src"})
    lines = result.output.splitlines()
    assert lines[0].startswith("src/shapes.go:13-15: method func (c Circle) Area() float64")
    assert any("return math.Pi * c.R * c.R" in line for line in lines[1:])
    assert "no definition" in code_tools.call("find_symbol", {"name": "Nowhere"}).output

"""Definitions in source files, found with tree-sitter (parsed on the host, files read from the sandbox).

Supported: Python, JavaScript (+JSX), TypeScript (+TSX), Go, Rust, C, C++ and Java. A definition
is a `Symbol` with its name, kind, lines, enclosing definition and a one-line signature. Parsed files
are cached by (path, mtime, size), so repeated outlines of a large tree only re-parse what changed.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from functools import lru_cache

import tree_sitter as ts

# extension -> (grammar module, language function)
LANGUAGES: dict[str, tuple[str, str]] = {
    ".py": ("tree_sitter_python", "language"),
    ".pyi": ("tree_sitter_python", "language"),
    ".js": ("tree_sitter_javascript", "language"),
    ".mjs": ("tree_sitter_javascript", "language"),
    ".cjs": ("tree_sitter_javascript", "language"),
    ".jsx": ("tree_sitter_javascript", "language"),
    ".ts": ("tree_sitter_typescript", "language_typescript"),
    ".mts": ("tree_sitter_typescript", "language_typescript"),
    ".tsx": ("tree_sitter_typescript", "language_tsx"),
    ".go": ("tree_sitter_go", "language"),
    ".rs": ("tree_sitter_rust", "language"),
    ".c": ("tree_sitter_c", "language"),
    ".h": ("tree_sitter_cpp", "language"),  # C++ grammar parses C headers too
    ".cc": ("tree_sitter_cpp", "language"),
    ".cpp": ("tree_sitter_cpp", "language"),
    ".cxx": ("tree_sitter_cpp", "language"),
    ".hpp": ("tree_sitter_cpp", "language"),
    ".hh": ("tree_sitter_cpp", "language"),
    ".java": ("tree_sitter_java", "language"),
}

# node type -> kind. One table for all grammars: node type names do not collide in meaning.
DEFINITIONS: dict[str, str] = {
    "function_definition": "function",  # python, c, c++
    "class_definition": "class",  # python
    "function_declaration": "function",  # js, ts, go
    "generator_function_declaration": "function",
    "class_declaration": "class",  # js, ts, java
    "abstract_class_declaration": "class",
    "method_definition": "method",  # js, ts
    "interface_declaration": "interface",  # ts, java
    "type_alias_declaration": "type",
    "enum_declaration": "enum",  # ts, java
    "internal_module": "namespace",
    "method_declaration": "method",  # go, java
    "type_spec": "type",  # go
    "function_item": "function",  # rust
    "struct_item": "struct",
    "enum_item": "enum",
    "trait_item": "trait",
    "impl_item": "impl",
    "mod_item": "module",
    "macro_definition": "macro",
    "struct_specifier": "struct",  # c, c++ (only with a body)
    "enum_specifier": "enum",
    "class_specifier": "class",  # c++
    "namespace_definition": "namespace",
    "type_definition": "type",  # c typedef
    "constructor_declaration": "constructor",  # java
    "record_declaration": "record",
    "variable_declarator": "function",  # js/ts `const f = () => ...` (filtered below)
}
FUNCTION_VALUES = {"arrow_function", "function_expression", "function", "class", "generator_function"}
CONTAINERS = {"class", "struct", "impl", "trait", "interface", "record", "enum"}
NAME_TYPES = {
    "identifier", "field_identifier", "type_identifier", "property_identifier", "qualified_identifier",
    "destructor_name", "operator_name", "namespace_identifier", "private_property_identifier",
}


@dataclass(frozen=True)
class Symbol:
    name: str
    kind: str
    line: int  # 1-based
    end_line: int
    parent: str | None
    signature: str
    depth: int

    @property
    def qualified_name(self) -> str:
        return f"{self.parent}.{self.name}" if self.parent else self.name


def language_for(path: str) -> str | None:
    dot = path.rfind(".")
    return path[dot:].lower() if dot != -1 and path[dot:].lower() in LANGUAGES else None


@lru_cache(maxsize=None)
def _parser(ext: str) -> ts.Parser:
    module, func = LANGUAGES[ext]
    return ts.Parser(ts.Language(getattr(importlib.import_module(module), func)()))


def _name_of(node: ts.Node) -> str | None:
    if node.type == "impl_item":
        ty, trait = node.child_by_field_name("type"), node.child_by_field_name("trait")
        if ty is None:
            return None
        return f"{trait.text.decode()} for {ty.text.decode()}" if trait else ty.text.decode()
    if node.type in ("struct_specifier", "enum_specifier", "class_specifier") and node.child_by_field_name("body") is None:
        return None  # a use of the type, not its definition
    if node.type == "variable_declarator":
        value = node.child_by_field_name("value")
        if value is None or value.type not in FUNCTION_VALUES:
            return None
    named = node.child_by_field_name("name")
    if named is not None:
        return named.text.decode("utf-8", "replace")
    declarator = node.child_by_field_name("declarator")  # c/c++ functions and typedefs
    while declarator is not None:
        if declarator.type in NAME_TYPES:
            return declarator.text.decode("utf-8", "replace")
        inner = declarator.child_by_field_name("declarator")
        if inner is None:
            inner = next((c for c in declarator.named_children if c.type in NAME_TYPES), None)
        declarator = inner
    return None


def _signature(node: ts.Node, source: bytes) -> str:
    """The definition's head: up to its body, else its first line."""
    body = node.child_by_field_name("body")
    if body is None and node.type == "variable_declarator":
        value = node.child_by_field_name("value")
        body = value.child_by_field_name("body") if value is not None else None
    if body is not None and body.start_byte > node.start_byte:
        text = source[node.start_byte : body.start_byte].decode("utf-8", "replace")
    else:
        text = source[node.start_byte : node.end_byte].decode("utf-8", "replace").split("\n", 1)[0]
    head = " ".join(text.split())
    return head[:200].rstrip(" {:=>").rstrip() if head else ""


def _qualifier(node: ts.Node, name: str) -> str:
    """The name children are qualified with: the implemented type for a Rust impl."""
    if node.type == "impl_item":
        ty = node.child_by_field_name("type")
        return ty.text.decode("utf-8", "replace") if ty is not None else name
    return name


def _go_receiver(node: ts.Node) -> str | None:
    receiver = node.child_by_field_name("receiver")
    if receiver is None:
        return None
    names = [n for n in _walk(receiver) if n.type == "type_identifier"]
    return names[0].text.decode("utf-8", "replace") if names else None


def _walk(node: ts.Node):
    yield node
    for child in node.named_children:
        yield from _walk(child)


def extract_symbols(path: str, source: bytes) -> list[Symbol]:
    ext = language_for(path)
    if ext is None:
        return []
    tree = _parser(ext).parse(source)
    out: list[Symbol] = []

    def walk(node: ts.Node, parent: str | None, parent_kind: str | None, depth: int) -> None:
        for child in node.named_children:
            kind = DEFINITIONS.get(child.type)
            name = _name_of(child) if kind else None
            if not name:
                walk(child, parent, parent_kind, depth)
                continue
            owner = _go_receiver(child) if child.type == "method_declaration" else None
            if kind == "function" and parent_kind in CONTAINERS:
                kind = "method"
            out.append(Symbol(
                name=name.split("::")[-1] if child.type != "impl_item" else name,
                kind=kind, line=child.start_point[0] + 1, end_line=child.end_point[0] + 1,
                parent=owner or parent, signature=_signature(child, source), depth=depth,
            ))
            walk(child, _qualifier(child, name), kind, depth + 1)

    walk(tree.root_node, None, None, 0)
    return out


class CodeIndex:
    """Parsed definitions per file, cached by (path, mtime, size)."""

    def __init__(self) -> None:
        self._cache: dict[tuple[str, str, str], list[Symbol]] = {}

    def symbols(self, path: str, mtime: str, size: str, read) -> list[Symbol]:
        key = (path, mtime, size)
        if key not in self._cache:
            self._cache[key] = extract_symbols(path, read(path))
        return self._cache[key]

"""JSON-schema rewrites that keep xgrammar's output valid JSON.

xgrammar 0.2.9 compiles a length-bounded string (`minLength`/`maxLength` without `pattern`)
as `[^"\\\r\n]{min,max}`: it lets raw control characters through (invalid in JSON; `json.loads`
refuses them) and allows no escapes. The same bounds written as a `pattern` over characters that
need no escaping compile correctly; what they generate still validates against the original
schema (the rewritten copy is only compiled, never used to validate).
"""

from __future__ import annotations

from typing import Any

_PLAIN_CHAR = r'[^"\\\x00-\x1f]'


def json_safe_schema(schema: Any, raw_top_strings: bool = False) -> Any:
    """A copy of schema with length-bounded plain strings rewritten as patterns.
    `raw_top_strings`: the top-level properties are written raw, not as JSON strings (the GLM
    tool-call `glm_xml` style), so they are left alone."""
    if raw_top_strings and isinstance(schema, dict) and isinstance(schema.get("properties"), dict):
        out = dict(schema)
        out["properties"] = {k: (v if _is_plain_string(v) else json_safe_schema(v))
                             for k, v in schema["properties"].items()}
        return out
    return _rewrite(schema)


def _is_plain_string(node: Any) -> bool:
    return isinstance(node, dict) and node.get("type") == "string"


def _rewrite(node: Any) -> Any:
    if isinstance(node, list):
        return [_rewrite(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: _rewrite(v) for k, v in node.items()}
    bounded = "minLength" in out or "maxLength" in out
    if (out.get("type") == "string" and bounded
            and not any(k in out for k in ("pattern", "format", "enum", "const"))):
        low, high = int(out.pop("minLength", 0)), out.pop("maxLength", None)
        out["pattern"] = f"^{_PLAIN_CHAR}{{{low},{'' if high is None else int(high)}}}$"
    return out

"""What every model config read from a checkpoint's config.json shares: the error type, reading the
file, typing its fields, and the derived values and checks the GLM-5.x (`ModelConfig`) and
GLM-5.3-Flash (`Glm5NextTextConfig`) configs compute the same way.

NOTE: the messages here are the ones both configs always gave (tests match them); a config whose
rule differs keeps that rule, and its message, in its own module.
"""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path
from typing import Any, Callable


class ConfigError(ValueError):
    """A config.json that this model cannot run; the message names the field."""


def read_config_json(path: str | Path) -> dict[str, Any]:
    """The dict in `path` (a checkpoint folder or the file itself)."""
    path = Path(path)
    file = path / "config.json" if path.is_dir() else path
    if not file.is_file():
        raise ConfigError(f"no config.json at {file}")
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{file} is not valid JSON: {exc}") from exc


class CheckpointConfig:
    """Base of the frozen config dataclasses (no fields of its own). A subclass has the MLA head
    fields `qk_nope_head_dim` / `qk_rope_head_dim` and a `from_dict(data, **overrides)`."""

    @classmethod
    def from_pretrained(cls, path: str | Path, **overrides: Any):
        return cls.from_dict(read_config_json(path), **overrides)

    @classmethod
    def typed_fields(cls, d: dict[str, Any], skip: tuple[str, ...],
                     readers: dict[str, Callable[[Any], Any]] | None = None) -> dict[str, Any]:
        """The class's fields present in `d`, in field order, each checked against its annotation
        or read by `readers[name]`; `skip` are the fields the subclass parses itself."""
        readers = readers or {}
        return {f.name: readers[f.name](d[f.name]) if f.name in readers else typed(f.name, d[f.name], f.type)
                for f in fields(cls) if f.name in d and f.name not in skip}

    @classmethod
    def unknown_keys(cls, d: dict[str, Any]) -> dict[str, Any]:
        """Keys of `d` that are not fields: kept raw in `extra` (aliases, training-only knobs)."""
        known = {f.name for f in fields(cls)}
        return {k: v for k, v in d.items() if k not in known}

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def softmax_scale(self) -> float:
        # rope_type is always "default" where there is RoPE (validated), so there is no YaRN mscale.
        return self.qk_head_dim**-0.5

    def check_positive(self, names, integer: bool = True) -> None:
        for name in names:
            value = getattr(self, name)
            if integer and value <= 0:
                raise ConfigError(f"{name}={value}: expected a positive integer")
            if not integer and not value > 0:
                raise ConfigError(f"{name}={value}: expected a positive number")


def typed(name: str, value: Any, type_name: Any) -> Any:
    """`value` if it has the type `type_name` names (an int is a float too), else a ConfigError."""
    t = str(type_name)
    if t == "bool":
        if isinstance(value, bool):
            return value
    elif t == "int":
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif t == "float":
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif t == "str":
        if isinstance(value, str):
            return value
    elif t == "int | None":
        if value is None or (isinstance(value, int) and not isinstance(value, bool)):
            return value
    else:
        return value
    raise ConfigError(f"config field {name}={value!r}: expected {t}")


def eos_ids(value: Any) -> tuple[int, ...]:
    if value is None:
        return ()
    items = value if isinstance(value, list) else [value]
    return tuple(typed("eos_token_id", v, "int") for v in items)


def indexer_types_by_frequency(freq: int, offset: int, n_layers: int) -> tuple[str, ...]:
    """transformers' layout when no list or pattern is given: from layer `offset - 1` on, every
    `freq`-th layer computes its own top-k ("full"); the rest reuse it ("shared")."""
    return tuple("full" if max(i - offset + 1, 0) % freq == 0 else "shared" for i in range(n_layers))


def fp8_block_size(qc: Any) -> tuple[int, int] | None:
    """quantization_config -> the FP8 weight block (rows, cols), or None for an unquantized checkpoint."""
    if not qc:
        return None
    if not isinstance(qc, dict):
        raise ConfigError(f"quantization_config={qc!r}: expected a dict")
    method = qc.get("quant_method")
    if method != "fp8":
        raise ConfigError(f"quantization_config.quant_method={method!r}: only 'fp8' block quantization is supported")
    block = qc.get("weight_block_size", [128, 128])
    if not (isinstance(block, list) and len(block) == 2 and all(isinstance(b, int) for b in block)):
        raise ConfigError(f"quantization_config.weight_block_size={block!r}: expected [rows, cols]")
    return (block[0], block[1])

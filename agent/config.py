"""Agent configuration: one validated pydantic model, loadable from TOML plus dotted overrides.

    cfg = load_config("horizon.toml", {"max_steps": 50, "context.compact_trigger": 0.7})

Errors are `ConfigError`s whose message names the field (dotted path), the value given and what
was expected, e.g. `context.compact_trigger: got 1.5, expected a number <= 0.95`.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

# The engine's levels (each has its own thinking budget; `none` forbids thinking). None in the config
# means the model's default. The chat template only renders Low/High/Max; the backends map for it.
ReasoningEffort = Literal["none", "low", "medium", "high", "max"]
REASONING_EFFORTS: tuple[str, ...] = get_args(ReasoningEffort)
# Names other clients use, mapped onto the nearest level the way the server does.
EFFORT_ALIASES = {"minimal": "low", "xhigh": "max"}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class ToolLimits(_Strict):
    bash_timeout_s: float = Field(120.0, gt=0, description="default per-call timeout of the bash tool")
    max_bash_timeout_s: float = Field(1800.0, gt=0, description="largest timeout the model may ask for")
    max_output_chars: int = Field(10_000, ge=200, description="tool output shown to the model (head+tail)")
    max_output_lines: int = Field(400, ge=10, description="line cap of tool output shown to the model")
    full_output_dir: str = Field("/tmp/horizon-outputs", description="where truncated outputs are saved in full")
    view_max_lines: int = Field(400, ge=10, description="lines `view` shows without an explicit range")
    search_max_results: int = Field(200, ge=1)
    tool_timeout_s: float = Field(300.0, gt=0, description="timeout of non-bash tools (plugins, MCP)")


class ContextConfig(_Strict):
    """Long-horizon compaction. Thresholds are fractions of `context_window` tokens."""

    context_window: int = Field(131_072, ge=1024)
    compact_trigger: float = Field(0.8, gt=0.1, le=0.95, description="compact when context exceeds this")
    compact_target: float = Field(0.5, gt=0.05, le=0.9, description="compact down to this (large steps)")
    keep_first_turns: int = Field(2, ge=0, description="assistant turns after the task kept verbatim")
    keep_recent_turns: int = Field(8, ge=1, description="latest assistant turns kept verbatim")
    summarize: bool = Field(True, description="ask the model to summarise the middle when eliding is not enough")
    summary_max_tokens: int = Field(2048, ge=64)

    @model_validator(mode="after")
    def _target_below_trigger(self) -> ContextConfig:
        if self.compact_target >= self.compact_trigger:
            raise ValueError(
                f"compact_target ({self.compact_target}) must be below compact_trigger ({self.compact_trigger})"
            )
        return self


class MCPServerConfig(_Strict):
    """A stdio MCP server. The model drives its tools, so by default it runs where every other tool
    runs: inside the run's sandbox (`run_in = "sandbox"`; the command must exist in the sandbox
    image). `run_in = "host"` starts it on the host as the user running horizon, for servers that
    need host resources (credentials, a local database, a GUI); it is an explicit opt-in because
    such a server can touch anything that user can. With a LocalSandbox there is no container, so
    "sandbox" also means the host, and a warning says so."""

    command: list[str] = Field(min_length=1, description="argv of a stdio MCP server")
    env: dict[str, str] = Field(default_factory=dict, description="extra environment variables of the server")
    run_in: Literal["sandbox", "host"] = Field(
        "sandbox", description="where the server runs: 'sandbox' (the run's container) or 'host' (opt-in)"
    )
    startup_timeout_s: float = Field(20.0, gt=0)
    call_timeout_s: float = Field(120.0, gt=0)

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        bad = [k for k in value if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k)]
        if bad:
            raise ValueError(f"expected variable names of letters, digits and _ (like NAME_1); "
                             f"{', '.join(map(repr, bad))} is not one")
        return value


class OpenAIConfig(_Strict):
    api_key_env: str = Field("OPENAI_API_KEY", description="environment variable holding the API key")
    model_name: str | None = Field(None, description="`model` sent to the server (default: its first model)")
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    max_tokens: int | None = Field(None, ge=1)
    request_timeout_s: float = Field(600.0, gt=0)
    max_retries: int = Field(4, ge=0)
    send_session_id: bool = Field(
        False, description="also send `session_id` in the body (an X-Session-Id header is always sent)"
    )
    vision: bool | None = Field(
        None, description="the model sees images (default: what the server's /v1/models says in input_modalities)"
    )
    extra_body: dict[str, Any] = Field(default_factory=dict)


class EmbeddedConfig(_Strict):
    max_new_tokens: int = Field(4096, ge=1)
    temperature: float = Field(0.0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    seed: int | None = None
    engine: dict[str, Any] = Field(default_factory=dict, description="EngineConfig fields")
    enable_thinking: bool = True
    variant: str | None = Field(None, description="chat template generation (default: detected from the checkpoint)")


class SandboxSettings(_Strict):
    image: str | None = Field(None, description="sandbox image (default: the base image)")
    workdir: str = "/workspace"
    network: bool = False
    memory: str | None = Field(None, description="memory limit, e.g. '4g'")
    cpus: float | None = Field(None, gt=0)
    local: bool = Field(False, description="run on the host in a temp dir (LocalSandbox): no isolation")


class AgentConfig(_Strict):
    model: str | None = Field(None, description="model spec: embedded:PATH | openai:URL | replay:FILE")
    max_steps: int = Field(100, ge=1, description="model calls per run")
    token_budget: int | None = Field(None, ge=1, description="prompt+completion tokens per run")
    time_limit_s: float | None = Field(None, gt=0, description="wall-clock seconds per run")
    reasoning_effort: ReasoningEffort | None = None
    max_format_errors: int = Field(3, ge=0, description="consecutive unparseable replies before giving up")
    require_finish_tool: bool = Field(
        True, description="a reply without tool calls is a format error (headless) instead of ending the turn"
    )
    system_prompt_extra: str = Field("", description="appended to the system prompt")
    tools: ToolLimits = Field(default_factory=ToolLimits)
    context: ContextConfig = Field(default_factory=ContextConfig)
    plugins: list[str] = Field(default_factory=list, description="names from the horizon.tools entry points")
    disabled_tools: list[str] = Field(default_factory=list)
    mcp_servers: dict[str, MCPServerConfig] = Field(default_factory=dict)
    sandbox: SandboxSettings = Field(default_factory=SandboxSettings)
    openai: OpenAIConfig = Field(default_factory=OpenAIConfig)
    embedded: EmbeddedConfig = Field(default_factory=EmbeddedConfig)

    @field_validator("reasoning_effort", mode="before")
    @classmethod
    def _effort_alias(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        word = value.strip().lower()
        return EFFORT_ALIASES.get(word, word)


class ConfigError(ValueError):
    """A configuration value is wrong; the message names field, value and expectation."""


def _format_validation_error(exc: ValidationError, source: str) -> str:
    lines = []
    for err in exc.errors():
        field = ".".join(str(p) for p in err["loc"]) or "(root)"
        value = err.get("input")
        shown = repr(value) if not isinstance(value, dict) else "{...}"
        if err["type"] == "extra_forbidden":
            lines.append(f"{field}: unknown setting (value {shown})")
        else:
            msg = err["msg"].removeprefix("Value error, ")
            lines.append(f"{field}: got {shown}; {msg[:1].lower()}{msg[1:]}")
    return f"invalid agent config ({source}):\n  " + "\n  ".join(lines)


def _set_dotted(tree: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    node = tree
    for key in parents:
        child = node.setdefault(key, {})
        if not isinstance(child, dict):
            raise ConfigError(f"{dotted}: cannot set below {key!r}, which is {child!r}, not a table")
        node = child
    node[leaf] = value


def load_config(
    path: str | Path | None = None, overrides: dict[str, Any] | None = None
) -> AgentConfig:
    """Read a TOML file (optional), apply dotted-key overrides (None values are ignored), validate."""
    data: dict[str, Any] = {}
    source = "defaults"
    if path is not None:
        p = Path(path)
        try:
            data = tomllib.loads(p.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"config file {p} does not exist") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {p} is not valid TOML: {exc}") from None
        source = str(p)
    for key, value in (overrides or {}).items():
        if value is not None:
            _set_dotted(data, key, value)
    try:
        return AgentConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_validation_error(exc, source)) from None

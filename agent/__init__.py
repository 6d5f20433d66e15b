"""Horizon agent runtime: loop, tools, backends, CLI.

- `agent.loop.Agent` — the loop (ask the model, run its tool calls in order, append results, stop).
- `agent.events` — the typed events every step emits (CLI, TUI, trajectories consume them).
- `agent.config.AgentConfig` / `load_config` — validated settings from TOML plus overrides.
- `agent.tools` — the tool plugin API (`Tool`, `function_tool`), `ToolSet`, built-ins, plugins
  (`horizon.tools` entry points, `agent.tools.registry`) and MCP servers (`agent.mcp_tools`).
- `agent.backends.make_backend("embedded:PATH" | "openai:URL" | "replay:FILE", config)`.
- `agent.context` — token accounting and staged compaction; `agent.trajectory` — JSONL logs and
  resume; `agent.instructions` — system prompt and AGENTS.md; `agent.workspace` — repo in, patch out.
"""

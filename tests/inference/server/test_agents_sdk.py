"""OpenAI's Agents SDK runs a tool loop over the Responses API against the live server: the model
(the scripted checkpoint) calls the agent's `bash` function, the SDK runs it and sends the result
back, twice, until the SDK's own turn limit stops it."""

from __future__ import annotations

import asyncio

import pytest


@pytest.mark.parametrize("streamed", [False, True])
def test_agent_tool_loop_over_responses(live_server, streamed):
    from agents import Agent, ModelSettings, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled
    from agents.exceptions import MaxTurnsExceeded
    from openai import AsyncOpenAI

    set_tracing_disabled(True)  # no export of traces to OpenAI
    calls: list[str] = []

    @function_tool
    def bash(command: str) -> str:
        """Run a shell command."""
        calls.append(command)
        return f"a.py\nb.py ({len(calls)})"

    async def run() -> None:
        client = AsyncOpenAI(base_url=live_server.base_url, api_key="unused", max_retries=0)
        model = OpenAIResponsesModel(model=live_server.state.model_name, openai_client=client)
        agent = Agent(name="lister", instructions="List files with bash.", tools=[bash], model=model,
                      model_settings=ModelSettings(temperature=0.0))
        with pytest.raises(MaxTurnsExceeded):
            if streamed:
                result = Runner.run_streamed(agent, "list the files", max_turns=2)
                async for _ in result.stream_events():
                    pass
            else:
                await Runner.run(agent, "list the files", max_turns=2)
        await client.close()

    asyncio.run(run())
    assert calls == ["ls -la", "ls -la"]

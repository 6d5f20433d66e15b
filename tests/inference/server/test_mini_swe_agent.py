"""mini-swe-agent (the pip package, unmodified) takes two steps against `horizon serve` in a Docker
container without a network: its litellm `openai/` model with `api_base` at our server, once over
chat completions and once over the Responses API.

Why the steps are real: the scripted checkpoint (conftest) is a real checkpoint run by the real
engine, whose crafted weights make greedy decoding write one fixed tool call, `bash` with
`ls -la`, which is exactly mini-swe-agent's own tool. So each step is an HTTP round trip, a parsed
tool call, and a command that really runs in the container; the agent stops at its step limit.
"""

from __future__ import annotations

import importlib
import os

import pytest

pytestmark = [pytest.mark.docker, pytest.mark.slow]

IMAGE = "horizon/base:bookworm"  # the project's offline base image (scripts/setup.sh builds it)


@pytest.fixture()
def mini(monkeypatch, tmp_path):
    monkeypatch.setenv("MSWEA_GLOBAL_CONFIG_DIR", str(tmp_path / "mswea"))
    monkeypatch.setenv("MSWEA_SILENT_STARTUP", "1")
    monkeypatch.setenv("MSWEA_COST_TRACKING", "ignore_errors")  # a local model has no price
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no download of litellm's price list
    return importlib.import_module("minisweagent")


@pytest.fixture()
def no_network_env(mini, docker_client):
    from minisweagent.environments.docker import DockerEnvironment

    if not docker_client.images.list(name=IMAGE):
        pytest.fail(f"image {IMAGE} is missing: run scripts/setup.sh (it builds the offline base image)")
    run_id = os.environ["HORIZON_RUN_ID"]  # tests/conftest.py's leak check finds containers by this label
    env = DockerEnvironment(image=IMAGE, cwd="/", timeout=60,
                            run_args=["--rm", "--network", "none", "--label", f"dev.horizon.run={run_id}"])
    try:
        yield env
    finally:
        docker_client.containers.get(env.container_id).remove(force=True)
        env.container_id = None


@pytest.mark.parametrize("model_class", ["litellm_model.LitellmModel", "litellm_response_model.LitellmResponseModel"])
def test_two_steps_in_a_container_without_network(live_server, no_network_env, model_class):
    from minisweagent.agents.default import DefaultAgent

    interfaces = no_network_env.execute({"command": "ls /sys/class/net"})["output"].split()
    assert interfaces == ["lo"], interfaces  # no network but loopback

    module, name = model_class.split(".")
    cls = getattr(importlib.import_module(f"minisweagent.models.{module}"), name)
    model = cls(model_name=f"openai/{live_server.state.model_name}", cost_tracking="ignore_errors",
                model_kwargs={"api_base": live_server.base_url, "api_key": "unused", "temperature": 0.0})
    agent = DefaultAgent(model, no_network_env, system_template="You are a helpful assistant. Use the bash tool.",
                         instance_template="Task: {{task}}", step_limit=2)
    result = agent.run("list the files in /")
    assert result["exit_status"] == "LimitsExceeded" and agent.n_calls == 2

    steps = [m for m in agent.messages if m.get("extra", {}).get("actions")]
    assert [[a["command"] for a in m["extra"]["actions"]] for m in steps] == [["ls -la"], ["ls -la"]]
    if "response" in module:  # litellm went through /v1/responses, not a chat-completions bridge
        assert all(m.get("object") == "response" and m["id"].startswith("resp_") for m in steps), steps[0]
    observations = [m for m in agent.messages if m.get("role") == "tool" or m.get("type") == "function_call_output"]
    assert len(observations) == 2
    for obs in observations:
        text = obs.get("content") or obs.get("output")
        assert "<returncode>0</returncode>" in text and " etc" in text and " usr" in text, text

"""Harbor's network modes (no-network / public / allowlist + allowed_hosts) and `[agent]`/`[verifier]
user`: how task.toml maps onto the task, and real trials (oracle and nop) that prove the agent
ran as its user, the verifier as its own, and that an allowlist agent reached only its host."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest

from evals.adapters import load_tasks
from evals.runner import RunOptions, run_eval
from evals.task import TaskLoadError
from sandbox.constants import BASE_IMAGE, LABEL_KEY, LABEL_VALUE, RUN_LABEL_KEY, run_id

TOML = """schema_version = "1.1"
[agent]
timeout_sec = 120
{agent}
[verifier]
timeout_sec = 60
{verifier}
[environment]
build_timeout_sec = 300
{environment}
"""
DOCKERFILE = f"""FROM {BASE_IMAGE}
RUN useradd --create-home --uid 4101 agent && useradd --uid 4102 grader && mkdir -p /app && chown agent /app
WORKDIR /app
"""
USERS_SOLVE = "#!/bin/bash\nid -un > /app/whoami.txt\n[ -w /logs/agent ] && echo ok > /logs/agent/note.txt\n"
USERS_TEST = """#!/bin/bash
agent=$(cat /app/whoami.txt 2>/dev/null); me=$(id -un)
echo "agent=$agent verifier=$me"
if [ "$agent" = agent ] && [ "$me" = "${EXPECT_VERIFIER}" ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
"""


def _task(root: Path, name: str, *, agent="", verifier="", environment="", solve="true\n", test="echo 0 > /logs/verifier/reward.txt\n",
          dockerfile=DOCKERFILE) -> Path:
    folder = root / name
    for sub in ("environment", "solution", "tests"):
        (folder / sub).mkdir(parents=True)
    (folder / "task.toml").write_text(TOML.format(agent=agent, verifier=verifier, environment=environment))
    (folder / "instruction.md").write_text("Write the output of `id -un` to /app/whoami.txt.\n")
    (folder / "environment" / "Dockerfile").write_text(dockerfile)
    (folder / "solution" / "solve.sh").write_text(solve)
    (folder / "tests" / "test.sh").write_text(test)
    return folder


def _load(root: Path):
    return {t.id: t for t in load_tasks(root, BASE_IMAGE)}


def test_network_modes_and_users_map_onto_the_task(tmp_path):
    hosts = 'allowed_hosts = ["pypi.org:443", "*.debian.org"]'
    _task(tmp_path, "allow", environment=f'network_mode = "allowlist"\n{hosts}', agent='user = "agent"',
          verifier='user = 4102\nenvironment_mode = "separate"\nnetwork_mode = "public"')
    _task(tmp_path, "public-agent-only", environment='network_mode = "no-network"', agent='network_mode = "public"',
          verifier='environment_mode = "separate"')
    _task(tmp_path, "shared", environment=f'network_mode = "allowlist"\n{hosts}')
    _task(tmp_path, "legacy", environment="allow_internet = true")
    _task(tmp_path, "closed", environment=f'network_mode = "allowlist"\n{hosts}', agent='network_mode = "no-network"')
    tasks = _load(tmp_path)
    allow = tasks["allow"]
    assert (allow.network, allow.allowed_hosts, allow.user) == (True, ["pypi.org:443", "*.debian.org"], "agent")
    v = allow.verifier
    assert (v.user, v.network, v.allowed_hosts) == ("4102", True, [])
    assert (tasks["public-agent-only"].network, tasks["public-agent-only"].allowed_hosts) == (True, [])
    assert tasks["public-agent-only"].verifier.network is False  # a separate verifier gets none unless it asks
    shared = tasks["shared"].verifier  # a shared one has the agent's, in the agent's container
    assert (shared.network, shared.allowed_hosts) == (True, ["pypi.org:443", "*.debian.org"])
    assert tasks["legacy"].network is True and tasks["closed"].network is False


@pytest.mark.parametrize("section,line,field,says", [
    ("environment", 'network_mode = "allowlist"', "environment.allowed_hosts", "needs a non-empty allowed_hosts"),
    ("environment", 'network_mode = "allowlist"\nallowed_hosts = ["ok.org", "https://x.org/"]',
     "environment.allowed_hosts[1]", "'https://x.org/'"),
    ("environment", 'network_mode = "intranet"', "environment.network_mode", "'intranet'"),
    ("agent", 'user = "bad user"', "agent.user", "'bad user'"),
    ("verifier", "user = -1", "verifier.user", "got -1"),
])
def test_malformed_network_and_user_fields_name_file_and_field(tmp_path, section, line, field, says):
    _task(tmp_path, "bad", **{section: line})
    err = _load(tmp_path)["bad"]
    assert isinstance(err, TaskLoadError), err
    assert (err.file, err.field) == ("task.toml", field) and says in err.message, str(err)


@pytest.mark.docker
def test_agent_and_verifier_run_as_their_users(eval_docker, tmp_path):
    test = USERS_TEST.replace("${EXPECT_VERIFIER}", "grader")
    _task(tmp_path / "suite", "users", agent='user = "agent"', verifier='user = "grader"', solve=USERS_SOLVE, test=test)
    # Verifier user unset: Harbor runs test.sh as the image's USER (root here), not as the agent.
    _task(tmp_path / "suite", "users-default-verifier", agent='user = "agent"', solve=USERS_SOLVE,
          test=USERS_TEST.replace("${EXPECT_VERIFIER}", "root"))
    _task(tmp_path / "suite", "ghost-agent", agent='user = "ghost"', solve=USERS_SOLVE, test=test)
    _task(tmp_path / "suite", "ghost-verifier", agent='user = "agent"', verifier='user = "phantom"', solve=USERS_SOLVE, test=test)
    run_eval(tmp_path / "suite", RunOptions(agent="oracle", out_dir=tmp_path / "oracle", progress=False))
    by_id = _results(tmp_path / "oracle")
    assert by_id["users"].status == "resolved", by_id["users"]
    assert by_id["users-default-verifier"].status == "resolved", by_id["users-default-verifier"]
    trial = tmp_path / "oracle" / "trials" / "users" / "attempt-0"
    assert "agent=agent verifier=grader" in (trial / "verifier-output.txt").read_text()
    for name, field, who in (("ghost-agent", "[agent] user", "'ghost'"), ("ghost-verifier", "[verifier] user", "'phantom'")):
        r = by_id[name]
        assert (r.status, r.error_class) == ("error", "task_invalid") and field in r.error and who in r.error, r
    run_eval(tmp_path / "suite", RunOptions(agent="nop", out_dir=tmp_path / "nop", progress=False, filters=["users"]))
    assert _results(tmp_path / "nop")["users"].status == "failed"
    # The horizon agent's way in: the sandbox's persistent shell, not the terminal.
    run_eval(tmp_path / "suite", RunOptions(agent="shell", out_dir=tmp_path / "shell", progress=False, filters=["users"]),
             agent=_ShellAgent())
    assert _results(tmp_path / "shell")["users"].status == "resolved"


class _ShellAgent:
    name = "shell"

    def run(self, ctx):
        from evals.agents.base import AgentOutcome

        ctx.sandbox.exec("id -un > /app/whoami.txt")
        return AgentOutcome()


def _results(out: Path):
    from evals.results import ResultsLog

    return {r.task_id: r for r in ResultsLog(out / "results.jsonl").load()}


@pytest.fixture
def http_servers(eval_docker):
    """Two HTTP servers on the default bridge: {"allowed": ip, "denied": ip}."""
    labels = {LABEL_KEY: LABEL_VALUE, RUN_LABEL_KEY: run_id()}
    servers = {}
    try:
        for role in ("allowed", "denied"):
            servers[role] = eval_docker.containers.run(
                BASE_IMAGE, name=f"horizon-test-{role}-{secrets.token_hex(4)}", labels=labels, detach=True, init=True,
                command=["sh", "-c", f"mkdir -p /srv && echo {role}-server > /srv/index.html && cd /srv && "
                                     "exec python3 -m http.server 8000"])
        ips = {}
        for role, c in servers.items():
            c.reload()
            ips[role] = c.attrs["NetworkSettings"]["Networks"]["bridge"]["IPAddress"]
            ready = c.exec_run(["sh", "-c", "for i in $(seq 100); do python3 -c \"import urllib.request as u; "
                                "u.urlopen('http://127.0.0.1:8000/')\" 2>/dev/null && exit 0; sleep 0.1; done; exit 1"])
            assert ready.exit_code == 0, ready.output
        yield ips
    finally:
        for c in servers.values():
            c.remove(force=True)


@pytest.mark.docker
def test_allowlist_task_reaches_only_its_host(http_servers, tmp_path):
    allowed, denied = http_servers["allowed"], http_servers["denied"]
    solve = (f"#!/bin/bash\ncurl -sS -m 10 http://{allowed}:8000/ > /app/fetched.txt\n"
             f"curl -sS -m 10 -o /dev/null -w '%{{http_code}}' http://{denied}:8000/ > /app/denied.txt\n"
             f"curl -sS -m 3 --noproxy '*' http://{allowed}:8000/ > /app/direct.txt 2>&1; echo $? >> /app/direct.txt\n")
    test = ('#!/bin/bash\ncat /app/fetched.txt /app/denied.txt /app/direct.txt\n'
            'if [ "$(cat /app/fetched.txt)" = allowed-server ] && [ "$(cat /app/denied.txt)" = 403 ] '
            '&& ! grep -q allowed-server /app/direct.txt; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n')
    env = f'network_mode = "allowlist"\nallowed_hosts = ["{allowed}:8000"]'
    _task(tmp_path / "suite", "allowlist", environment=env, solve=solve, test=test,
          dockerfile=f"FROM {BASE_IMAGE}\nRUN mkdir -p /app\nWORKDIR /app\n")
    run_eval(tmp_path / "suite", RunOptions(agent="oracle", out_dir=tmp_path / "out", progress=False))
    result = _results(tmp_path / "out")["allowlist"]
    output = (tmp_path / "out" / "trials" / "allowlist" / "attempt-0" / "verifier-output.txt").read_text()
    assert result.status == "resolved", (result, output)


@pytest.mark.docker
def test_shared_verifier_without_network_is_taken_off_the_agents(eval_docker, tmp_path):
    solve = "#!/bin/bash\nls /sys/class/net | sort | tr '\\n' ' ' > /app/agent-nets.txt\n"
    test = ('#!/bin/bash\nagent=$(cat /app/agent-nets.txt); mine=$(ls /sys/class/net | tr "\\n" " ")\n'
            'echo "agent=[$agent] verifier=[$mine]"\n'
            'if [ "$agent" = "eth0 lo " ] && [ "$mine" = "lo " ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n')
    _task(tmp_path / "suite", "cut", environment='network_mode = "public"', verifier='network_mode = "no-network"',
          solve=solve, test=test, dockerfile=f"FROM {BASE_IMAGE}\nRUN mkdir -p /app\nWORKDIR /app\n")
    run_eval(tmp_path / "suite", RunOptions(agent="oracle", out_dir=tmp_path / "out", progress=False))
    output = (tmp_path / "out" / "trials" / "cut" / "attempt-0" / "verifier-output.txt").read_text()
    assert _results(tmp_path / "out")["cut"].status == "resolved", output

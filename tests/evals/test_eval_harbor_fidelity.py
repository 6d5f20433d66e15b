"""Harbor fidelity on real TB2 task shapes: images without tmux (Debian) or without bash, perl and
tmux (busybox only), Harbor's size spellings, `docker_image` used as is, verifier environment
failures as infrastructure errors, and the image policy (--pull, fallbacks)."""

from __future__ import annotations

import json

import pytest

from evals.config import EvalConfig
from evals.runner import RunOptions, run_eval
from sandbox import BASE_IMAGE
from tests.evals.harbor_images import busybox_only, debian_without_tmux, harbor_task, tag_local

pytestmark = [pytest.mark.docker]

TOML = """version = "1.0"
[agent]
timeout_sec = 120
[verifier]
timeout_sec = 120
[environment]
{environment}
"""
# A TB2-shaped solution and test in POSIX sh: the oracle types the solution into tmux.
SOLVE = "#!/bin/sh\nprintf 'hello\\n' > /app/out.txt\n"
TEST = ("#!/bin/sh\nif [ \"$(cat /app/out.txt 2>/dev/null)\" = hello ]; then echo 1; else echo 0; fi"
        " > /logs/verifier/reward.txt\n")


def _run(suite, out, agent, **config):
    summary = run_eval(suite, RunOptions(agent=agent, out_dir=out, progress=False), EvalConfig(**config))
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    return summary, {r["task_id"]: r for r in rows}


@pytest.mark.parametrize("image_fn", [debian_without_tmux, busybox_only], ids=["debian-no-tmux", "busybox-only"])
def test_oracle_passes_and_nop_fails_on_images_without_tmux(eval_docker, tmp_path, image_fn):
    image = image_fn(eval_docker)
    probe = eval_docker.containers.run(image, ["sh", "-c", "for t in tmux bash perl; do command -v $t; done; true"],
                                       remove=True, network_mode="none").decode()
    assert "tmux" not in probe and (image_fn is debian_without_tmux or probe.strip() == "")
    suite = tmp_path / "suite"
    harbor_task(suite, "hello", toml=TOML.format(environment=f'docker_image = "{image}"\nnetwork_mode = "no-network"'),
                solve=SOLVE, test=TEST)
    summary, rows = _run(suite, tmp_path / "oracle", "oracle")
    assert rows["hello"]["status"] == "resolved" and not rows["hello"]["agent_timed_out"], rows["hello"]
    assert any("toolbox tmux" in n for n in rows["hello"]["notes"]), rows["hello"]["notes"]
    pane = (tmp_path / "oracle" / "trials" / "hello" / "attempt-0" / "post-agent-pane.txt").read_text()
    assert "solve.sh" in pane  # typed into the tmux session, not run behind its back
    summary, rows = _run(suite, tmp_path / "nop", "nop")
    assert rows["hello"]["status"] == "failed" and rows["hello"]["reward"] == 0.0, rows["hello"]
    assert summary.infra_errors == 0


def test_busybox_image_runs_the_persistent_shell_and_captures_output(eval_docker):
    from evals.container_tools import TOOLBOX_BASH, TOOLBOX_MOUNT, host_toolbox
    from sandbox import Mount, Sandbox, SandboxConfig

    image = busybox_only(eval_docker)
    toolbox = host_toolbox()
    config = SandboxConfig(image=image, workdir="/app", bash_fallback=TOOLBOX_BASH,
                           mounts=[Mount(source=str(toolbox), target=TOOLBOX_MOUNT, read_only=True)])
    with Sandbox.start(config) as sb:
        big = sb.exec("i=0; while [ $i -lt 30000 ]; do echo line-$i; i=$((i+1)); done", output_limit=2000)
        assert big.exit_code == 0 and big.output.startswith("line-0\n") and "line-29999" in big.output
        assert "bytes cut" in big.output and big.output_bytes == 318890 and big.truncated
        failed = sb.exec("echo to-stderr >&2; exit 3")
        assert (failed.exit_code, failed.output.strip().splitlines()[0]) == (3, "to-stderr")


def test_memory_4g_is_the_containers_cgroup_limit_and_sizes_parse(eval_docker, tmp_path):
    from evals.adapters import load_tasks

    test = ("#!/bin/sh\nm=$(cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes)\n"
            "echo \"memory=$m\"; [ \"$m\" = 4294967296 ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n")
    suite = tmp_path / "suite"
    harbor_task(suite, "mem", toml=TOML.format(environment=f'docker_image = "{BASE_IMAGE}"\nmemory = "4G"\n'
                                                            'storage = "10G"\nnetwork_mode = "no-network"'),
                solve="#!/bin/sh\ntrue\n", test=test)
    harbor_task(suite, "mb", toml=TOML.format(environment='memory_mb = "512M"\nstorage_mb = 2048\ncpus = 2'),
                solve="true\n", test=TEST, dockerfile=f"FROM {BASE_IMAGE}\n")
    tasks = {t.id: t for t in load_tasks(suite, BASE_IMAGE)}
    assert (tasks["mem"].resources.memory_mb, tasks["mem"].resources.storage_mb) == (4096, 10240)
    assert (tasks["mb"].resources.memory_mb, tasks["mb"].resources.storage_mb, tasks["mb"].resources.cpus) == (512, 2048, 2)
    assert tasks["mb"].network is True  # Harbor's default: internet on unless the task turns it off
    _, rows = _run(suite, tmp_path / "out", "oracle", max_infra_retries=0)
    assert rows["mem"]["status"] == "resolved", (tmp_path / "out" / "trials" / "mem" / "attempt-0" / "verifier-output.txt").read_text()


def test_docker_image_is_used_as_is_and_the_dockerfile_is_only_the_fallback(eval_docker, tmp_path):
    prebuilt = tag_local(eval_docker, debian_without_tmux(eval_docker), "horizon-test/prebuilt-task:1")
    broken = f"FROM {BASE_IMAGE}\nRUN echo the Dockerfile was built && exit 1\n"
    suite = tmp_path / "suite"
    harbor_task(suite, "prebuilt", toml=TOML.format(environment=f'docker_image = "{prebuilt}"\nnetwork_mode = "no-network"'),
                solve=SOLVE, test=TEST, dockerfile=broken)
    harbor_task(suite, "fallback", toml=TOML.format(environment='docker_image = "horizon-test/never-pushed:1"\n'
                                                                'network_mode = "no-network"'),
                solve=SOLVE, test=TEST, dockerfile=f"FROM {BASE_IMAGE}\nWORKDIR /app\n")
    summary, rows = _run(suite, tmp_path / "out", "oracle", max_infra_retries=0)
    assert rows["prebuilt"]["status"] == "resolved", rows["prebuilt"]
    assert rows["prebuilt"]["images"] == [{"requested": prebuilt, "tag": prebuilt, "source": "local", "comparable": True}]
    assert rows["fallback"]["status"] == "resolved", rows["fallback"]
    assert rows["fallback"]["images"][-1]["source"] == "built" and rows["fallback"]["comparable"] is True
    assert any("horizon-test/never-pushed:1" in n and "falling back to environment/Dockerfile" in n
               for n in summary.image_fallbacks), summary.image_fallbacks
    # --pull always: the registry is the only source, and its failure names the image.
    summary, rows = _run(suite, tmp_path / "always", "oracle", pull="always", offline_substitute=False,
                         max_infra_retries=0)
    for row in rows.values():
        assert row["status"] == "error" and row["error_class"] == "image_unavailable" and row["retries"] == 0
        assert "pulling image" in row["error"]
    assert "'horizon-test/never-pushed:1'" in rows["fallback"]["error"]
    assert summary.infra_errors == 2 and summary.resolved_trials == 0


def test_unpullable_base_needs_offline_substitute_and_is_then_not_comparable(eval_docker, tmp_path):
    suite = tmp_path / "suite"
    harbor_task(suite, "py", toml=TOML.format(environment='network_mode = "no-network"'), solve=SOLVE, test=TEST,
                dockerfile="FROM python:3.13-slim-bookworm\nWORKDIR /app\n")
    summary, rows = _run(suite, tmp_path / "default", "oracle", offline_substitute=False)
    assert rows["py"]["error_class"] == "image_unavailable" and rows["py"]["retries"] == 0
    assert "'python:3.13-slim-bookworm'" in rows["py"]["error"] and "--offline-substitute" in rows["py"]["error"]
    summary, rows = _run(suite, tmp_path / "subst", "oracle", offline_substitute=True)
    assert rows["py"]["status"] == "resolved" and rows["py"]["comparable"] is False
    assert summary.comparable is False and summary.image_sources.get("substituted") == 1
    assert any("python:3.13-slim-bookworm" in n for n in summary.image_fallbacks)


def test_verifier_that_cannot_fetch_its_packages_is_an_infra_error_not_zero(eval_docker, tmp_path):
    # TB2's test.sh: fetch uv, run pytest through uvx, write 0 whenever pytest did not pass.
    test = ("#!/bin/bash\ncurl -LsSf https://astral.sh/uv/0.9.5/install.sh | sh\nsource $HOME/.local/bin/env\n"
            "uvx -p 3.13 -w pytest==8.4.1 pytest /tests/test_outputs.py -rA\n"
            "if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n")
    suite = tmp_path / "suite"
    harbor_task(suite, "offline-verifier", toml=TOML.format(environment=f'docker_image = "{BASE_IMAGE}"\n'
                                                                        'network_mode = "no-network"'),
                solve=SOLVE, test=test, files={"tests/test_outputs.py": "def test_ok():\n    assert True\n"})
    summary, rows = _run(suite, tmp_path / "out", "oracle")
    row = rows["offline-verifier"]
    assert row["status"] == "error" and row["error_class"] == "verifier_environment" and row["retries"] == 0, row
    assert "Could not resolve host" in row["error"] and "reward 0" in row["error"]
    assert summary.infra_errors == 1 and summary.error_classes == {"verifier_environment": 1}


def test_task_needing_gpus_is_refused_clearly_without_them(eval_docker, tmp_path):
    if "nvidia" in (eval_docker.info().get("Runtimes") or {}):
        pytest.skip("this engine has an NVIDIA runtime")
    suite = tmp_path / "suite"
    harbor_task(suite, "gpu", toml=TOML.format(environment=f'docker_image = "{BASE_IMAGE}"\ngpus = 1'),
                solve=SOLVE, test=TEST)
    _, rows = _run(suite, tmp_path / "out", "oracle")
    assert rows["gpu"]["error_class"] == "gpu_unavailable" and rows["gpu"]["retries"] == 0
    assert "gpus = 1" in rows["gpu"]["error"] and "NVIDIA runtime" in rows["gpu"]["error"]


def test_compose_task_with_a_second_service_runs(eval_docker, tmp_path):
    compose = f"""services:
  main:
    environment:
      - SERVICE_URL=http://web:8080
  web:
    image: {BASE_IMAGE}
    command: ["sh", "-c", "mkdir -p /srv && echo compose-secret > /srv/secret.txt && cd /srv && exec python3 -m http.server 8080"]
"""
    solve = ("#!/bin/bash\nfor i in $(seq 50); do curl -sf http://web:8080/secret.txt > /app/out.txt && break; sleep 0.2; done\n")
    test = ("#!/bin/sh\nif [ \"$(cat /app/out.txt 2>/dev/null)\" = compose-secret ]; then echo 1; else echo 0; fi"
            " > /logs/verifier/reward.txt\n")
    suite = tmp_path / "suite"
    harbor_task(suite, "compose", toml=TOML.format(environment='network_mode = "no-network"'), solve=solve, test=test,
                dockerfile=f"FROM {BASE_IMAGE}\nWORKDIR /app\n", files={"environment/docker-compose.yaml": compose})
    _, rows = _run(suite, tmp_path / "oracle", "oracle", max_infra_retries=0)
    assert rows["compose"]["status"] == "resolved", rows["compose"]
    _, rows = _run(suite, tmp_path / "nop", "nop", max_infra_retries=0)
    assert rows["compose"]["status"] == "failed", rows["compose"]
    left = eval_docker.containers.list(all=True, filters={"label": "com.docker.compose.service=web"})
    assert not [c for c in left if c.labels.get("com.docker.compose.project", "").startswith("hz-compose")]


def test_multi_step_task_runs_its_steps_in_one_container(eval_docker, tmp_path):
    image = debian_without_tmux(eval_docker)
    toml = (f'version = "1.0"\nmulti_step_reward_strategy = "mean"\n[agent]\ntimeout_sec = 120\n'
            f'[environment]\ndocker_image = "{image}"\nnetwork_mode = "no-network"\n'
            '[[steps]]\nname = "write"\nmin_reward = 1.0\n[[steps]]\nname = "append"\n')
    suite = tmp_path / "suite"
    folder = harbor_task(suite, "steps", toml=toml, solve="#!/bin/sh\ntrue\n", test=TEST, files={
        "steps/write/instruction.md": "Write hello to /app/out.txt.\n",
        "steps/write/solution/solve.sh": SOLVE,
        "steps/append/instruction.md": "Append world to /app/out.txt.\n",
        "steps/append/workdir/setup.sh": "echo prepared > /app/prepared.txt\n",
        "steps/append/solution/solve.sh": "#!/bin/sh\necho world >> /app/out.txt\n",
        "steps/append/tests/test.sh": ("#!/bin/sh\n[ -f /app/prepared.txt ] && [ \"$(cat /app/out.txt)\" = \"$(printf 'hello\\nworld')\" ]"
                                       " && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n"),
    })
    (folder / "instruction.md").unlink()
    summary, rows = _run(suite, tmp_path / "oracle", "oracle", max_infra_retries=0)
    row = rows["steps"]
    assert row["status"] == "resolved", row
    assert [(s["name"], s["reward"]) for s in row["details"]["steps"]] == [("write", 1.0), ("append", 1.0)]
    _, rows = _run(suite, tmp_path / "nop", "nop", max_infra_retries=0)
    row = rows["steps"]
    assert row["status"] == "failed" and row["reward"] == 0.0
    # the first step's min_reward stops the trial: the second step is never run
    assert [s["name"] for s in row["details"]["steps"]] == ["write"] and "below min_reward" in row["details"]["steps"][0]["stopped"]


def test_tmux_comes_from_the_images_package_manager_when_the_task_has_network(eval_docker, tmp_path):
    # Harbor's default network (public): apt-get installs tmux, as Harbor's agents do at setup.
    suite = tmp_path / "suite"
    harbor_task(suite, "apt", toml=TOML.format(environment=f'docker_image = "{debian_without_tmux(eval_docker)}"'),
                solve=SOLVE, test=TEST)
    _, rows = _run(suite, tmp_path / "out", "oracle", max_infra_retries=0)
    assert rows["apt"]["status"] == "resolved", rows["apt"]
    assert "tmux was not in the image: installed with apt-get" in rows["apt"]["notes"]
    assert rows["apt"]["phase_seconds"]["agent_setup"] > 0


def test_cli_pull_always_without_a_registry_names_the_image(eval_docker, tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    suite = tmp_path / "suite"
    harbor_task(suite, "remote", toml=TOML.format(environment='docker_image = "horizon-test/only-in-a-registry:7"'),
                solve=SOLVE, test=TEST)
    proc = subprocess.run([sys.executable, "-m", "agent.cli.main", "eval", str(suite), "--pull", "always", "--quiet",
                           "--out", str(tmp_path / "out")], cwd=root, capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert "image_unavailable=1" in proc.stdout, proc.stdout + proc.stderr
    assert "pulling image 'horizon-test/only-in-a-registry:7' failed" in proc.stdout

"""Horizon as a Harbor installed agent, for Harbor's own trials (the way leaderboard runs are made):

    harbor run -p TASK_OR_DATASET --agent-import-path evals.harbor_agent:HorizonInstalledAgent \
        --agent-kwarg model_spec=openai:http://MODEL-HOST:8000/v1

(the project folder on PYTHONPATH of the Python that runs `harbor`; Harbor needs Python >= 3.12).

How Horizon gets into the task container: task containers may have no network (and TB2's rarely have
pip), so nothing is fetched from inside. On the Harbor host the agent builds a wheelhouse once per
container Python (major.minor), libc (glibc or musl) and machine: a wheel of this project's source
tree plus its runtime dependencies (pyproject's, without torch/triton, which only the embedded
backend needs) downloaded for that platform, cached under ~/.cache/horizon/harbor-wheelhouse. It is
uploaded to /installed-agent/wheels and unpacked with the container's own `python3 -m zipfile` into
/installed-agent/site (no pip, no venv). The only requirement on the image is python3 >= 3.11; when
it is missing and the container has network, it is installed with the image's package manager.
`python -m evals.harbor_entry` then runs the agent loop in the task's folder, writing its trajectory
and token usage under /logs/agent. The model is reached over the network (`openai:URL`), or a
`replay:FILE` script is uploaded with it.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import tomllib
from pathlib import Path

from harbor.agents.installed.base import BaseInstalledAgent
from harbor.environments.base import BaseEnvironment
from harbor.models.agent.context import AgentContext

PROJECT_ROOT = Path(__file__).resolve().parents[1]
REMOTE = "/installed-agent"
RUNTIME_EXCLUDED = {"torch", "triton"}  # the embedded backend's; an installed agent talks to an endpoint
# NOTE: xgrammar requires torch and triton, so pip download brings them back with torch's CUDA runtime
# (nvidia-*): 2.9 GB of the 3 GB. The agent loop never imports them (the installed-agent test runs it
# without them), so the wheelhouse leaves those wheels out; uploading and unpacking them took ~100 s a trial.
PYTHON_INSTALL = {
    "apt-get": "DEBIAN_FRONTEND=noninteractive apt-get update -qq && DEBIAN_FRONTEND=noninteractive "
               "apt-get install -y -qq --no-install-recommends python3",
    "dnf": "dnf install -y python3", "yum": "yum install -y python3", "apk": "apk add --no-cache python3",
}
_UNPACK = "import sys, zipfile\nfor wheel in sys.argv[2:]:\n    zipfile.ZipFile(wheel).extractall(sys.argv[1])"
_PROBE = ("import platform, sys; print('%d.%d' % sys.version_info[:2], "
          "'musl' if platform.libc_ver()[0] != 'glibc' else 'glibc', platform.machine())")


def runtime_requirements() -> list[str]:
    project = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    keep = []
    for req in project["dependencies"]:
        name = req.split(";")[0].split("[")[0].split(">")[0].split("=")[0].split("<")[0].strip().lower()
        if name not in RUNTIME_EXCLUDED:
            keep.append(req)
    return keep


def _platforms(libc: str, machine: str) -> list[str]:
    if libc == "musl":
        return [f"musllinux_1_{n}_{machine}" for n in (1, 2)]
    return [f"manylinux2014_{machine}", *(f"manylinux_2_{n}_{machine}" for n in (17, 28, 31, 34))]


def _left_out(wheel: str) -> bool:
    """torch, triton and torch's CUDA runtime wheels (names as wheel files spell them: `nvidia_cublas_cu12-...`)."""
    dist = wheel.split("-", 1)[0].lower()
    return dist in RUNTIME_EXCLUDED or dist.startswith("nvidia_")


def build_wheelhouse(python: str, libc: str, machine: str, cache: Path | None = None) -> Path:
    """Horizon's wheel and its runtime dependencies for one container platform (built once)."""
    reqs = runtime_requirements()
    key = hashlib.sha256(json.dumps([python, libc, machine, reqs]).encode()).hexdigest()[:16]
    root = cache or Path.home() / ".cache" / "horizon" / "harbor-wheelhouse"
    deps = root / f"deps-{key}"
    if not (deps / ".complete").is_file():
        deps.mkdir(parents=True, exist_ok=True)
        platform_args = [arg for p in _platforms(libc, machine) for arg in ("--platform", p)]
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:", "--python-version", python,
                        "--implementation", "cp", *platform_args, "-d", str(deps), *reqs], check=True)
        (deps / ".complete").write_text("ok\n")
    own = Path(tempfile.mkdtemp(prefix="horizon-wheel-"))
    # Built from a copy: pip builds a local folder in place (build/, *.egg-info), and the source may be read-only.
    source = own / "src"
    shutil.copytree(PROJECT_ROOT, source, ignore=shutil.ignore_patterns(
        ".git", ".venv", "__pycache__", "*.egg-info", "build", "dist", "eval-out", "tests", "benchmarks"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(own), str(source)], check=True)
    house = Path(tempfile.mkdtemp(prefix="horizon-wheelhouse-"))
    for wheel in [*(w for w in deps.glob("*.whl") if not _left_out(w.name)), *own.glob("*.whl")]:
        shutil.copy2(wheel, house / wheel.name)
    shutil.rmtree(own, ignore_errors=True)
    return house


_HOUSES: dict[tuple[str, str, str], Path] = {}
_HOUSES_LOCK = threading.Lock()


def shared_wheelhouse(python: str, libc: str, machine: str) -> Path:
    """One wheelhouse per platform for this Harbor process: concurrent trials wait for the first build
    and upload the same folder (the source tree does not change during a job)."""
    with _HOUSES_LOCK:
        key = (python, libc, machine)
        if key not in _HOUSES or not _HOUSES[key].is_dir():
            _HOUSES[key] = build_wheelhouse(python, libc, machine)
        return _HOUSES[key]


class HorizonInstalledAgent(BaseInstalledAgent):
    """Harbor's installed-agent interface around `python -m evals.harbor_entry`."""

    def __init__(self, logs_dir: Path, *args, model_spec: str | None = None, agent_config: str | None = None,
                 **kwargs):
        super().__init__(logs_dir, *args, **kwargs)
        spec = model_spec or (self.model_name if self.model_name and ":" in self.model_name else None)
        if not spec:
            raise ValueError("horizon: pass --agent-kwarg model_spec=openai:URL (or replay:FILE); "
                             f"got model {self.model_name!r}")
        self.model_spec = spec
        self.agent_config = json.loads(agent_config) if agent_config else {}

    @staticmethod
    def name() -> str:
        return "horizon"

    def version(self) -> str | None:
        project = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
        return project["version"]

    async def _python(self, environment: BaseEnvironment) -> list[str] | None:
        probe = await environment.exec(command=f"python3 -c {shlex.quote(_PROBE)}", user="root")
        fields = (probe.stdout or "").split()
        if probe.return_code != 0 or len(fields) != 3:
            return None
        major, minor = (int(x) for x in fields[0].split("."))
        return fields if (major, minor) >= (3, 11) else None

    async def install(self, environment: BaseEnvironment) -> None:
        found = await self._python(environment)
        if found is None:
            manager = (await environment.exec(
                command="for m in apt-get dnf yum apk; do command -v $m >/dev/null 2>&1 && { echo $m; exit 0; }; done; "
                        "exit 1", user="root")).stdout
            manager = (manager or "").strip()
            if manager in PYTHON_INSTALL:
                await self.exec_as_root(environment, PYTHON_INSTALL[manager])
            found = await self._python(environment)
            if found is None:
                raise RuntimeError("horizon needs python3 >= 3.11 in the task container (none found, and it could "
                                   "not be installed: no network or no package manager)")
        python, libc, machine = found
        # NOTE: in a thread, so the pip subprocesses do not stall Harbor's event loop (and the other trials).
        house = await asyncio.to_thread(shared_wheelhouse, python, libc, machine)
        await environment.upload_dir(source_dir=house, target_dir=f"{REMOTE}/wheels")
        # One python3 for all the wheels (~130), not one per wheel.
        await self.exec_as_root(environment, f"rm -rf {REMOTE}/site && mkdir -p {REMOTE}/site && python3 -c "
                                             f"{shlex.quote(_UNPACK)} {REMOTE}/site {REMOTE}/wheels/*.whl && "
                                             f"chmod -R a+rX {REMOTE}")

    async def run(self, instruction: str, environment: BaseEnvironment, context: AgentContext) -> None:
        instruction = self.render_instruction(instruction)
        model = self.model_spec
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "instruction.md"
            path.write_text(instruction, encoding="utf-8")
            await environment.upload_file(source_path=path, target_path=f"{REMOTE}/instruction.md")
            if model.startswith("replay:"):
                await environment.upload_file(source_path=model.removeprefix("replay:"),
                                              target_path=f"{REMOTE}/replay.jsonl")
                model = f"replay:{REMOTE}/replay.jsonl"
        command = (f"PYTHONPATH={REMOTE}/site python3 -m evals.harbor_entry --model {shlex.quote(model)} "
                   f"--instruction-file {REMOTE}/instruction.md --workdir \"$(pwd)\" "
                   "--trajectory /logs/agent/horizon-trajectory.jsonl --result /logs/agent/horizon-result.json "
                   f"--config-json {shlex.quote(json.dumps(self.agent_config))}")
        result = await environment.exec(command=command)
        (self.logs_dir / "horizon-output.txt").write_text((result.stdout or "") + (result.stderr or ""),
                                                         encoding="utf-8")
        outcome = await environment.exec(command="cat /logs/agent/horizon-result.json")
        try:
            data = json.loads(outcome.stdout or "")
        except json.JSONDecodeError:
            raise RuntimeError(f"horizon exited {result.return_code} without a result: "
                               f"{((result.stderr or '') + (result.stdout or ''))[-1500:]}") from None
        context.n_input_tokens = data["input_tokens"]
        context.n_output_tokens = data["output_tokens"]
        context.n_cache_tokens = data["cached_tokens"]
        context.metadata = {"finish_reason": data["finish_reason"], "summary": data["summary"]}

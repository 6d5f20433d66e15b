"""One trial: build the image, start the sandbox, run the agent, grade, clean up.

Each phase has its own budget from the task (times `--timeout-multiplier`). The build and the
verifier are infrastructure: their failures become `status="error"` with an error class, which the
runner retries. The agent is not: an agent that times out is still graded, as Terminal-Bench does.
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from evals.agents.base import AgentContext, AgentOutcome, EvalAgent
from evals.compose import ComposeError, ComposeProject
from evals.container_tools import TOOLBOX_BASH, TOOLBOX_MOUNT, ToolSetupFailed, ensure_tmux, host_toolbox
from evals.graders.base import Grade, GradeContext, VerifierCrashed, grade_task
from evals.graders.verifier_environment import VerifierEnvironmentFailed
from evals.image_policy import ImageResolution, ImageUnavailable
from evals.images import ImageBuilder
from evals.multi_step import run_steps
from evals.results import TrialResult
from evals.task import Task
from evals.tmux import TerminalError, TmuxSession
from evals.trial_services import trial_services
from sandbox import Mount, Sandbox, SandboxConfig, SandboxError
from sandbox.images import ImageBuildTimeout
from sandbox.users import UnknownUser

LOG_DIRS = "/logs/agent /logs/verifier /logs/artifacts /agent-logs"
AGENT_WRITABLE = "/logs/agent /logs/artifacts /agent-logs"  # when the agent runs as [agent] user
ROOT = "0"  # the harness's own setup steps; uid 0 exists in every image, named or not
GRACE_SEC = 30.0
# Stopping a timed-out build takes up to ~5 s on the engine plus the removal of its build containers.
BUILD_STOP_GRACE_SEC = 40.0


class PhaseTimeout(RuntimeError):
    pass


class InfraError(RuntimeError):
    def __init__(self, error_class: str, message: str, details: dict | None = None):
        super().__init__(message)
        self.error_class = error_class
        self.details = details or {}  # what grading found before it gave up (e.g. SWE-bench's report)


def run_with_timeout(fn, seconds: float, phase: str):
    """Run `fn` in a daemon thread; raise PhaseTimeout when it overruns (the thread is abandoned and
    ends when its sandbox is closed)."""
    box: dict = {}

    def target():
        try:
            box["value"] = fn()
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc

    worker = threading.Thread(target=target, name=f"trial-{phase}", daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        raise PhaseTimeout(f"{phase} phase exceeded {seconds:.0f}s")
    if "error" in box:
        raise box["error"]
    return box.get("value")


@dataclass
class Engine:
    """One Docker engine the runner may place sandboxes on."""

    name: str
    docker_host: str | None
    client: object
    builder: ImageBuilder


def aux_images(task: Task) -> list:
    v = task.verifier
    spec = getattr(v, "verifier_image", None)  # CyberGym's builds are its trial service's (evals/cybergym/)
    return [spec] if spec is not None else []


class Trial:
    def __init__(self, task: Task, agent: EvalAgent, engine: Engine, trial_dir: Path, attempt: int,
                 timeout_multiplier: float = 1.0, run_label: str = "eval"):
        self.task, self.agent, self.engine = task, agent, engine
        self.trial_dir, self.attempt = trial_dir, attempt
        self.timeouts = task.timeouts.scaled(timeout_multiplier)
        self.run_label = run_label
        self.phase_seconds: dict[str, float] = {}
        self.notes: list[str] = []
        self.services = trial_services(task, engine, trial_dir, self._labels())
        self.images: list[dict] = []  # how each image was obtained (evals/image_policy.py)

    def _labels(self) -> dict[str, str]:
        return {"dev.horizon.eval.task": self.task.id[:60], "dev.horizon.eval.run": self.run_label[:60]}

    def _config(self, image: str, workdir: str, env: dict[str, str] | None = None, network: bool = False,
                memory_mb: int | None = None, allowed_hosts: list[str] | None = None,
                user: str | None = None, docker_network: str | None = None, mounts: list | None = None) -> SandboxConfig:
        r = self.task.resources
        toolbox = self._toolbox()
        return SandboxConfig(
            image=image, workdir=workdir, network="allowlist" if allowed_hosts else network,
            allowed_hosts=allowed_hosts or [], user=user, env=env or {},
            memory=f"{memory_mb or r.memory_mb}m", cpus=r.cpus, pids_limit=r.pids_limit, gpus=r.gpus,
            mounts=(mounts or []) + ([Mount(source=str(toolbox), target=TOOLBOX_MOUNT, read_only=True)] if toolbox else []),
            bash_fallback=TOOLBOX_BASH if toolbox and (toolbox / "bin" / "bash").is_file() else None,
            docker_network=docker_network, network_aliases=["main"] if docker_network else [],
            labels=self._labels(), docker_host=self.engine.docker_host,
        )

    def _toolbox(self) -> Path | None:
        """The host toolbox to mount (evals/container_tools.py): only an engine on this host can."""
        host = self.engine.docker_host
        if host and not host.startswith("unix://"):
            return None
        if not hasattr(self, "_toolbox_dir"):
            try:
                self._toolbox_dir = host_toolbox()
            except Exception as exc:  # noqa: BLE001 - the package route may still work
                self.notes.append(f"Horizon's toolbox could not be built: {type(exc).__name__}: {exc}")
                self._toolbox_dir = None
        return self._toolbox_dir

    def _check_gpus(self) -> None:
        """Harbor refuses a task needing GPUs on an environment without them; so do we, before building."""
        wanted = self.task.resources.gpus
        if not wanted:
            return
        runtimes = (self.engine.client.info() or {}).get("Runtimes") or {}
        if "nvidia" not in runtimes:
            raise InfraError("gpu_unavailable", f"task.toml [environment] gpus = {wanted}: the Docker engine "
                                                f"{self.engine.name!r} has no NVIDIA runtime (runtimes: "
                                                f"{', '.join(sorted(runtimes)) or 'none'}), so no GPU can be given")

    def _workdir(self, tag: str) -> str:
        if self.task.workdir:
            return self.task.workdir
        workdir = (self.engine.client.images.get(tag).attrs.get("Config") or {}).get("WorkingDir")
        return workdir or "/"

    def _build(self) -> str:
        started = time.monotonic()
        deadline = started + self.timeouts.build_sec

        def build():
            # The builds themselves stop at the phase deadline (sandbox.images stops them on the
            # engine), so no build outlives its trial.
            left = lambda: max(1.0, deadline - time.monotonic())  # noqa: E731
            if self.task.verifier.kind == "swebench":  # swebench's own image chain (evals/swebench/images.py)
                from evals.swebench.images import ensure_task_image

                tag, notes = ensure_task_image(self.task, self.engine.client, timeout=left())
                substituted = tag.endswith(":horizon-offline")  # the explicit offline base (not comparable)
                return tag, [ImageResolution(requested=tag, tag=tag, source="substituted" if substituted else "local",
                                             comparable=not substituted, notes=tuple(notes))]
            resolved = self.engine.builder.ensure_image(self.task.environment, self.task.id, timeout=left())
            tag = resolved[-1].tag
            for spec in aux_images(self.task):
                resolved += self.engine.builder.ensure_image(spec, f"{self.task.id}-verifier", timeout=left())
            service_notes = self.services.prepare(timeout=left())
            if service_notes:
                resolved.append(ImageResolution(requested="(trial services)", tag=tag, source="local",
                                                notes=tuple(service_notes)))
            return tag, resolved

        try:
            # The outer limit only catches a build that could not be stopped in time.
            tag, resolved = run_with_timeout(build, self.timeouts.build_sec + BUILD_STOP_GRACE_SEC, "build")
        except ImageBuildTimeout as exc:
            raise InfraError("build_timeout", str(exc)) from exc
        except ImageUnavailable as exc:
            raise InfraError("image_unavailable", str(exc)) from exc
        except Exception as exc:  # whatever stops a build is the infrastructure's problem
            raise InfraError("build_failed", f"{type(exc).__name__}: {exc}") from exc
        finally:
            self.phase_seconds["build"] = time.monotonic() - started
        self.images = [r.record() for r in resolved]
        self.notes += [n for r in resolved for n in r.notes]
        return tag

    @contextlib.contextmanager
    def _open_sandbox(self, image: str, workdir: str | None = None, env: dict[str, str] | None = None):
        """A fresh sandbox for grading (verifier, PoC runs): no network unless the verifier has its
        own network_mode; commands as the verifier's user when it names one."""
        v = self.task.verifier
        config = self._config(image, workdir or self._workdir(image), env=env, network=getattr(v, "network", False),
                              allowed_hosts=getattr(v, "allowed_hosts", None))
        with Sandbox.start(config) as sb:
            user = getattr(v, "user", None)
            yield sb if user is None else self._as_verifier(sb, user)

    def _image_user(self, tag: str) -> str:
        return (self.engine.client.images.get(tag).attrs.get("Config") or {}).get("User") or ROOT

    def _as_verifier(self, sb, user: str):
        """`sb` as the verifier's user, with fresh verifier and tests folders it owns (made by root:
        it may not create folders in / itself, and nothing the agent left there survives)."""
        try:
            view = sb.as_user(user)
        except UnknownUser as exc:
            raise InfraError("task_invalid", f"task.toml [verifier] user: {exc}") from exc
        prepared = sb.exec_once(["sh", "-c", 'rm -rf /logs/verifier /tests && mkdir -p /logs/verifier /tests '
                                             '/logs/artifacts && chown "$1" /logs/verifier /tests', "sh",
                                 f"{view.uid}:{view.gid}"], timeout=30, user=ROOT)
        if prepared.exit_code != 0:
            raise InfraError("verifier_crashed", f"preparing the verifier for user {user!r} failed: "
                                                 f"{prepared.output.strip()[:500]}")
        return view

    @contextlib.contextmanager
    def _side_services(self, tag: str):
        """The compose project of a task's environment/docker-compose.yaml: its network's name, or None."""
        if self.task.compose_file is None:
            yield None
            return
        started = time.monotonic()
        try:
            project = ComposeProject(self.task.compose_file, main_image=tag, internet=self.task.network,
                                     docker_host=self.engine.docker_host, pull=self.engine.builder.policy.pull,
                                     label=self.task.id[:20])
            network = project.__enter__()
        except ComposeError as exc:
            raise InfraError("compose_failed", str(exc)) from exc
        finally:
            self.phase_seconds["compose"] = time.monotonic() - started
        try:
            yield network
        finally:
            project.__exit__(None, None, None)

    def _start_agent_sandbox(self, tag: str, workdir: str, docker_network: str | None = None,
                             mounts: list | None = None):
        task = self.task
        config = self._config(tag, workdir, env=task.env, network=task.network, allowed_hosts=task.allowed_hosts,
                              user=task.user, docker_network=docker_network, mounts=mounts)
        try:
            sb = Sandbox.start(config)
        except UnknownUser as exc:
            raise InfraError("task_invalid", f"task.toml [agent] user: {exc}") from exc
        try:
            if task.user is None:
                sb.exec_once(["sh", "-c", f"mkdir -p {LOG_DIRS} {workdir}"], timeout=30)
                return sb
            # Set up as root, then open what the agent (and the oracle's /solution) must write to.
            staging = task.solution.container_dir if self.agent.name == "oracle" and hasattr(task.solution, "container_dir") else ""
            script = (f'mkdir -p {LOG_DIRS} && chmod 777 {AGENT_WRITABLE} && for d in "$2" "$3"; do '
                      '[ -z "$d" ] || [ -d "$d" ] || { mkdir -p "$d" && chown "$1" "$d"; }; done')
            prepared = sb.exec_once(["sh", "-c", script, "sh", task.user, workdir, staging], timeout=30, user=ROOT)
            if prepared.exit_code != 0:
                raise SandboxError(f"preparing the sandbox for user {task.user!r} failed: {prepared.output.strip()[:500]}")
            return sb
        except BaseException:
            sb.close()
            raise

    def _run_agent(self, sb, workdir: str) -> AgentOutcome:
        terminal = None
        if self.task.terminal:
            # Agent setup, as Harbor's agents do it: tmux into the image when it has none.
            setup_started = time.monotonic()
            try:
                self.notes += ensure_tmux(sb, self.task.network, self._toolbox() is not None)
                terminal = TmuxSession(sb, "agent", workdir).start()
            except (ToolSetupFailed, TerminalError) as exc:
                raise InfraError("agent_setup_failed", f"{type(exc).__name__}: {exc}") from exc
            finally:
                self.phase_seconds["agent_setup"] = self.phase_seconds.get("agent_setup", 0.0) + \
                    time.monotonic() - setup_started
        ctx = AgentContext(task=self.task, sandbox=sb, terminal=terminal,
                           deadline=time.monotonic() + self.timeouts.agent_sec, log_dir=self.trial_dir,
                           workdir=workdir)
        started = time.monotonic()
        try:
            return run_with_timeout(lambda: self.agent.run(ctx), self.timeouts.agent_sec + GRACE_SEC, "agent")
        except PhaseTimeout:
            return AgentOutcome(finish_reason="timeout")
        except (SandboxError, TerminalError):
            raise
        except Exception as exc:  # the agent's own crash is its failure; the work it left is still graded
            return AgentOutcome(finish_reason="error", error=f"agent crashed: {type(exc).__name__}: {exc}")
        finally:
            self.phase_seconds["agent"] = time.monotonic() - started
            if terminal is not None:
                with contextlib.suppress(Exception):
                    (self.trial_dir / "post-agent-pane.txt").write_text(terminal.capture(True), encoding="utf-8")

    def _grade(self, sb, tag: str) -> Grade:
        v = self.task.verifier
        shared = getattr(v, "environment_mode", None) == "shared"
        verifier_user = getattr(v, "user", None) if shared else None  # a separate one applies it in its own sandbox
        if shared and self.task.network and not v.network:
            sb.disconnect_network()  # [verifier] network_mode = "no-network" after an agent with network
        elif shared and v.network and (not self.task.network or v.allowed_hosts != self.task.allowed_hosts):
            self.notes.append("the shared verifier ran with the agent's network: a container cannot gain one")
        if verifier_user or self.task.user:
            # Harbor: test.sh (and collect hooks) run as [verifier] user, else the image's USER, never the agent's.
            sb = self._as_verifier(sb, verifier_user or self._image_user(tag))
        ctx = GradeContext(task=self.task, sandbox=sb, timeout=self.timeouts.verifier_sec, env_image=tag,
                           builder=self.engine.builder, open_sandbox=self._open_sandbox, trial_dir=self.trial_dir,
                           services=self.services)
        started = time.monotonic()
        # Each grading command is bounded by the verifier timeout itself; this outer cap only
        # catches a grader wedged elsewhere (CyberGym runs two programs, SWE starts a container).
        try:
            return run_with_timeout(lambda: grade_task(ctx), self.timeouts.verifier_sec * 2 + 120, "verifier")
        except VerifierEnvironmentFailed as exc:
            raise InfraError("verifier_environment", str(exc)) from exc
        except (VerifierCrashed, PhaseTimeout) as exc:
            raise InfraError("verifier_crashed", str(exc)) from exc
        finally:
            self.phase_seconds["verifier"] = time.monotonic() - started

    def run(self) -> TrialResult:
        self.trial_dir.mkdir(parents=True, exist_ok=True)
        started_at = time.time()
        outcome = AgentOutcome()
        try:
            self._check_gpus()
            tag = self._build()
            workdir = self._workdir(tag)
            with self.services.serving() as mounts, self._side_services(tag) as network, \
                    self._start_agent_sandbox(tag, workdir, network, mounts) as sb:
                if self.task.steps:
                    outcome, grade = run_steps(self, sb, tag, workdir)
                else:
                    outcome = self._run_agent(sb, workdir)
                    grade = self._grade(sb, tag)
        except InfraError as exc:
            return self._result(started_at, "error", outcome, error_class=exc.error_class, error=str(exc),
                                details=exc.details)
        except (SandboxError, TerminalError) as exc:
            return self._result(started_at, "error", outcome, error_class="sandbox_error", error=f"{type(exc).__name__}: {exc}")
        except Exception as exc:  # a harness bug or an engine API error: kept apart from agent failures
            return self._result(started_at, "error", outcome, error_class="internal_error", error=f"{type(exc).__name__}: {exc}")
        status = "resolved" if grade.resolved else "failed"
        agent_reason = outcome.error or (None if grade.resolved else grade.reason)
        return self._result(started_at, status, outcome, reward=grade.reward, details=grade.details,
                            error_class=("agent_error" if outcome.error else None), error=agent_reason)

    def _result(self, started_at: float, status: str, outcome: AgentOutcome, **fields) -> TrialResult:
        return TrialResult(
            task_id=self.task.id, format=self.task.format, agent=self.agent.name, attempt=self.attempt,
            status=status, agent_timed_out=outcome.finish_reason == "timeout", started_at=started_at,
            finished_at=time.time(), phase_seconds={k: round(v, 3) for k, v in self.phase_seconds.items()},
            tokens=outcome.tokens, notes=self.notes, images=self.images,
            comparable=all(i["comparable"] for i in self.images), trajectory=outcome.trajectory, engine=self.engine.name, **fields,
        )

"""swebench's TestSpec for one instance, with the repository taken from where the instance says.

`make_test_spec` (swebench) gives the per-repository/version install and test commands, the three
setup scripts and Dockerfiles, the image names and the eval script. Two things are adapted, both
without re-implementing swebench's logic:

- The clone: its repo script clones `https://github.com/<repo>`; the line is pointed at the
  instance's own source (a local clone or git bundle copied into the build, or a URL).
- Files it reads from raw.githubusercontent.com at spec time (requirements.txt, environment.yml)
  are served from that same source at the commit, so swebench's own parsing of them still runs.

Repositories swebench has no specs for can be registered from the instance (`specs`: the keys of a
MAP_REPO_VERSION_TO_SPECS entry plus `log_parser`, a parser name from swebench.harness.log_parsers),
the way SWE-bench-style datasets extend the harness.
"""

from __future__ import annotations

import inspect
import re
import shlex
import threading
from dataclasses import dataclass

import swebench.harness.log_parsers as log_parsers
import swebench.harness.test_spec.python as spec_python
from swebench.harness.constants import MAP_REPO_TO_EXT, MAP_REPO_VERSION_TO_SPECS, SWE_BENCH_URL_RAW
from swebench.harness.log_parsers import MAP_REPO_TO_PARSER
from swebench.harness.test_spec.test_spec import TestSpec, make_test_spec

from evals.swebench.repo_source import RepoSource

SUBSTITUTE_TAG = "horizon-offline"  # image tag of builds on the substituted base: never "latest"
CONTAINER_SOURCE = "/root/repo-source"  # where a local source is copied in the instance build
_lock = threading.Lock()  # swebench's module globals are patched for the duration of one call


class SpecError(ValueError):
    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field
        self.message = message


def _parsers() -> dict:
    found = {f.__name__: f for f in MAP_REPO_TO_PARSER.values()}
    for module in (getattr(log_parsers, n, None) for n in dir(log_parsers)):
        if inspect.ismodule(module):
            found.update({n: f for n, f in vars(module).items() if n.startswith("parse_log_") and callable(f)})
    return found


def register_specs(repo: str, version: str, specs: dict) -> None:
    """Add an instance's own specs for a repository/version swebench does not know."""
    parser_name = specs.get("log_parser", "parse_log_pytest")
    parser = _parsers().get(parser_name)
    if parser is None:
        raise SpecError("specs.log_parser", f"{parser_name!r} is not a parser in swebench.harness.log_parsers")
    language = specs.get("language", "py")
    entry = {k: v for k, v in specs.items() if k not in ("log_parser", "language")}
    if "test_cmd" not in entry:
        raise SpecError("specs.test_cmd", "required: the command the eval script runs the tests with")
    with _lock:
        known = MAP_REPO_VERSION_TO_SPECS.get(repo, {}).get(version)
        if known is not None and known != entry:
            raise SpecError("specs", f"swebench already has other specs for {repo} {version}")
        if MAP_REPO_TO_PARSER.get(repo, parser) is not parser:
            raise SpecError("specs.log_parser", f"swebench parses {repo} with {MAP_REPO_TO_PARSER[repo].__name__}")
        MAP_REPO_VERSION_TO_SPECS.setdefault(repo, {})[version] = entry
        MAP_REPO_TO_EXT.setdefault(repo, language)
        MAP_REPO_TO_PARSER.setdefault(repo, parser)


def check_known(repo: str, version: str | None) -> None:
    if repo not in MAP_REPO_VERSION_TO_SPECS:
        raise SpecError("repo", f"swebench has no specs for {repo!r}: give the instance `specs` to register it")
    if version not in MAP_REPO_VERSION_TO_SPECS[repo]:
        known = ", ".join(sorted(MAP_REPO_VERSION_TO_SPECS[repo])[:12])
        raise SpecError("version", f"swebench has no specs for {repo} version {version!r} (it has {known}, ...)")


@dataclass
class _Response:
    status_code: int
    text: str


class _SourceTransport:
    """Stands in for `requests` in swebench's spec module: raw GitHub URLs of this repository are
    answered from the instance's own source, everything else goes to the real `requests`."""

    def __init__(self, repo: str, source: RepoSource, real):
        self.prefix = f"{SWE_BENCH_URL_RAW.rstrip('/')}/{repo}/"
        self.source, self.real = source, real

    def get(self, url: str, *args, **kwargs):
        if not url.startswith(self.prefix):
            return self.real.get(url, *args, **kwargs)
        commit, _, path = url[len(self.prefix):].partition("/")
        text = self.source.read_file(commit, path)
        return _Response(200, text) if text is not None else _Response(404, "")


def _point_clone_at(spec: TestSpec, repo: str, source: RepoSource) -> None:
    github = re.compile(r"https://github\.com/" + re.escape(repo) + r"(?:\.git)?(?=\s|$)")
    target = shlex.quote(source.url) if source.is_remote else CONTAINER_SOURCE
    for i, line in enumerate(spec.repo_script_list):
        if line.startswith("git clone") and github.search(line):
            spec.repo_script_list[i] = github.sub(target, line)
            if not source.is_remote:  # the copied source (with the fix's history) must not stay in the image
                spec.repo_script_list.insert(i + 1, f"rm -rf {CONTAINER_SOURCE}")
            return
    raise SpecError("repo", f"swebench's setup script for {repo} clones no github URL to redirect: {spec.repo_script_list[:2]}")


def spec_for_instance(instance: dict, source: RepoSource, substitute: bool = False) -> TestSpec:
    """swebench's TestSpec for `instance`, cloning from `source`; builds on the substituted base get
    their own image tag so they can never be mistaken for the published images."""
    tag = SUBSTITUTE_TAG if substitute else "latest"
    with _lock:
        real = spec_python.requests
        spec_python.requests = _SourceTransport(instance["repo"], source, real)
        try:
            spec = make_test_spec(instance, base_image_tag=tag, env_image_tag=tag, instance_image_tag=tag)
        finally:
            spec_python.requests = real
    _point_clone_at(spec, instance["repo"], source)
    return spec


def published_image(spec: TestSpec, namespace: str) -> str:
    """The harness's published name: <namespace>/sweb.eval.x86_64.<id with __ as _1776_>:latest."""
    key = f"sweb.eval.{spec.arch}.{spec.instance_id.lower()}:latest"
    return f"{namespace}/{key}".replace("__", "_1776_")

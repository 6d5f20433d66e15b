"""The vulnerable and fixed builds a CyberGym PoC runs against, and how each image is obtained.

Prebuilt runner images are named as CyberGym's server names them (server_utils.py):
`n132/arvo:<id>-vul|fix`, run with `/bin/arvo`, and `cybergym/oss-fuzz:<id>-vul|fix`, run with
`/usr/local/bin/run_poc`; both read the PoC at /tmp/poc. `resolve` uses such an image when the
engine has it or can pull it, and otherwise builds one from the task's sources with its build
script (`build_from_source.sh`), on the offline base image. Network is on during that build only.
"""

from __future__ import annotations

import logging
from pathlib import Path

from evals.images import ImageUnavailable
from evals.task import ImageSpec, PocBuild

log = logging.getLogger("evals.cybergym")

BUILD_SCRIPT = Path(__file__).with_name("build_from_source.sh")
# An ASan build as OSS-Fuzz makes it (with gcc: its -fsanitize=fuzzer and clang-only flags are left out).
GCC_FLAGS = "-g -O1 -fno-omit-frame-pointer -fsanitize=address"

SOURCE_DOCKERFILE = """FROM {base}
# A base without a C toolchain gets one from Debian's packages (the build has network; runs do not).
RUN command -v gcc >/dev/null 2>&1 || (apt-get update && DEBIAN_FRONTEND=noninteractive \\
    apt-get install -y --no-install-recommends gcc g++ make patch libc6-dev python3 && rm -rf /var/lib/apt/lists/*)
ENV SRC=/src OUT=/out WORK=/work CC=gcc CXX=g++ SANITIZER=address \\
    CFLAGS="{cflags}" CXXFLAGS="{cflags}"
COPY ctx /horizon/ctx
RUN bash /horizon/ctx/build_from_source.sh
# LeakSanitizer needs ptrace, which PoC containers do not get; a leak is not the crash asked for.
ENV ASAN_OPTIONS=detect_leaks=0:abort_on_error=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
WORKDIR /out
"""


def prebuilt_image(task_id: str, side: str) -> tuple[str | None, list[str]]:
    kind, _, ident = task_id.partition(":")
    if kind == "arvo":
        return f"n132/arvo:{ident}-{side}", ["/bin/arvo"]
    if kind == "oss-fuzz":
        return f"cybergym/oss-fuzz:{ident}-{side}", ["/usr/local/bin/run_poc"]
    return None, []


def source_spec(base_image: str, sources: Path, patch: Path | None = None, build_script: Path | None = None,
                metadata: Path | None = None) -> ImageSpec:
    files = {"ctx/repo.tar.gz": sources, "ctx/build_from_source.sh": BUILD_SCRIPT}
    for name, path in (("patch.diff", patch), ("build.sh", build_script), ("metadata.json", metadata)):
        if path is not None:
            files[f"ctx/{name}"] = path
    return ImageSpec(copy_files=files,
                     generated_files={"Dockerfile": SOURCE_DOCKERFILE.format(base=base_image, cflags=GCC_FLAGS)})


def _has(client, image: str) -> bool:
    import docker

    try:
        client.images.get(image)
        return True
    except docker.errors.ImageNotFound:
        return False


def _pull(client, image: str) -> str | None:
    """None when pulled, else why not."""
    import docker

    repo, _, tag = image.rpartition(":")
    try:
        client.images.pull(repo, tag=tag)
        return None
    except docker.errors.DockerException as exc:
        return f"{type(exc).__name__}: {exc}"


def resolve(build: PocBuild, client, builder, name: str, timeout: float | None = None,
            pull: str = "missing") -> tuple[str, list[str], list[str]]:
    """(image tag, command that runs the PoC, notes): the prebuilt image if the engine has or can
    pull it, else the image built from sources. Raises ImageUnavailable when neither is possible.
    pull: the run's image policy (evals/image_policy.py): "always" pulls and fails naming the image
    when it cannot; "missing" pulls only what is not local; "never" uses local images only."""
    notes: list[str] = []
    if build.image:
        if pull != "always" and _has(client, build.image):
            return build.image, list(build.command), notes
        why = _pull(client, build.image) if pull != "never" else "pulling is off (--pull never)"
        if why is not None and pull == "always":
            raise ImageUnavailable(f"--pull always: {build.image} could not be pulled ({why})")
        if why is None:
            return build.image, list(build.command), [f"pulled {build.image}"]
        if build.source is None:
            raise ImageUnavailable(f"{build.image} is not present and could not be pulled ({why}); the task has no "
                                   f"sources to build it from")
        notes.append(f"{build.image} is not available ({why}); built from the task's sources instead")
        log.warning("%s: %s", name, notes[-1])
    if build.source is None:
        raise ImageUnavailable(f"{name}: neither a prebuilt runner image nor sources to build one")
    tag, substituted = builder.ensure(build.source, name, timeout=timeout)
    return tag, list(build.source_command), notes + substituted

"""The offline base image and task images built FROM it."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

import pytest

from sandbox import BASE_IMAGE, ImageNotFound, Sandbox, SandboxConfig
from sandbox.base_image import base_image_status
from sandbox.base_recipe import BaseRecipe, host_debian_mirror
from sandbox.constants import RECIPE_LABEL_KEY
from sandbox.images import _with_trusted_certs, build_image, host_ca_certificates


def test_base_image_is_labelled_with_its_recipe_and_has_the_tools(base_image, docker_client):
    image = docker_client.images.get(BASE_IMAGE)
    assert image.labels[RECIPE_LABEL_KEY] == BaseRecipe().digest()
    assert base_image_status(docker_client) == "current"
    with Sandbox.start(SandboxConfig()) as sb:
        r = sb.exec("for t in bash git python3 pip3 pytest tmux curl gcc g++ make patch diff find grep sed less; "
                    "do command -v $t >/dev/null || echo missing $t; done; python3 -m venv --without-pip /tmp/v && echo venv-ok")
        assert r.output == "venv-ok\n"


def test_recipe_changes_change_the_digest_but_the_mirror_does_not(monkeypatch):
    recipe = BaseRecipe()
    assert replace(recipe, packages=recipe.packages + ("vim",)).digest() != recipe.digest()
    assert replace(recipe, post_install=recipe.post_install + "\ntrue\n").digest() != recipe.digest()
    monkeypatch.setenv("HORIZON_DEBIAN_MIRROR", "http://mirror.example/debian/")
    assert host_debian_mirror() == "http://mirror.example/debian"
    assert BaseRecipe().digest() == recipe.digest()


def test_a_stale_label_is_detected(base_image, docker_client):
    changed = replace(BaseRecipe(), packages=BaseRecipe().packages + ("vim",))
    assert base_image_status(docker_client, recipe=changed) == "stale"
    assert base_image_status(docker_client, tag="horizon/none:missing") == "missing"


def test_build_command_reuses_an_unchanged_image(base_image):
    out = subprocess.run([sys.executable, "-m", "agent.cli.main", "sandbox", "build", "--quiet"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout == "" and out.stderr == ""
    out = subprocess.run([sys.executable, "-m", "agent.cli.main", "sandbox", "build"],
                         capture_output=True, text=True, timeout=120)
    assert "up to date" in out.stdout and "reused" in out.stdout


def test_task_image_build_trusts_the_host_ca_for_https(base_image, docker_client, tmp_path):
    # Behind this host's TLS-intercepting proxy the build only works with the host CAs injected;
    # on a host without extra CAs the same build must simply work.
    (tmp_path / "Dockerfile").write_text(
        f"FROM {BASE_IMAGE}\n"
        "ARG PKG\n"
        "RUN curl -sSf https://pypi.org/simple/ -o /dev/null && pip download --no-deps -q -d /opt/dl $PKG\n"
        "COPY hello.txt /opt/hello.txt\n"
    )
    (tmp_path / "hello.txt").write_text("hi")
    tag = "horizon-test/https-build:latest"
    try:
        image_id = build_image(tmp_path, tag, buildargs={"PKG": "six"}, docker_client=docker_client)
        with Sandbox.start(SandboxConfig(image=tag)) as sb:
            assert sb.exec("ls /opt/dl; cat /opt/hello.txt").output.startswith("six-")
        assert docker_client.images.get(tag).id == image_id
    finally:
        docker_client.images.remove(tag, force=True)


def test_task_image_build_errors(base_image, docker_client, tmp_path):
    from sandbox import ImageBuildError

    (tmp_path / "Dockerfile").write_text("FROM horizon/not-built:1\nRUN true\n")
    with pytest.raises(ImageNotFound, match="horizon/not-built:1"):
        build_image(tmp_path, "horizon-test/bad:1", docker_client=docker_client)
    (tmp_path / "Dockerfile").write_text(f"FROM {BASE_IMAGE}\nRUN echo failing-step && exit 3\n")
    with pytest.raises(ImageBuildError, match="failing-step"):
        build_image(tmp_path, "horizon-test/bad:1", trust_host_ca=False, docker_client=docker_client)


def test_ca_injection_follows_every_stage_and_the_configured_dir(tmp_path, monkeypatch):
    text = _with_trusted_certs("ARG X\nFROM a AS one\nRUN x\nFROM scratch\nFROM one\nRUN y\n")
    lines = text.splitlines()
    assert lines[1] == "FROM a AS one" and lines[2].startswith("COPY .horizon-host-ca/")
    assert lines[5] == "FROM scratch" and lines[6] == "FROM one" and lines[7].startswith("COPY")
    (tmp_path / "corp.crt").write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    (tmp_path / "junk.crt").write_text("not a certificate")
    monkeypatch.setenv("HORIZON_BUILD_CA_DIR", str(tmp_path))
    assert list(host_ca_certificates()) == ["00-corp.crt"]

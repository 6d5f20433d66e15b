"""The image policy without a registry: what each `--pull` mode asks of the engine, when a fallback
applies, and Harbor's size spellings. A small in-memory engine records every call."""

from __future__ import annotations

import docker
import pytest

from evals.adapters import load_tasks
from evals.image_policy import ImagePolicy, ImagePullFailed, ImageUnavailable, resolve_image
from sandbox import BASE_IMAGE
from tests.evals.harbor_images import harbor_task


class _Images:
    def __init__(self, local: set[str], pullable: set[str]):
        self.local, self.pullable, self.pulls = set(local), pullable, []

    def get(self, ref):
        if ref not in self.local:
            raise docker.errors.ImageNotFound(ref)
        return object()

    def pull(self, ref):
        self.pulls.append(ref)
        if ref not in self.pullable:
            raise docker.errors.APIError("no such host registry-1.docker.io", explanation="dial tcp: no such host")
        self.local.add(ref)


class _Engine:
    def __init__(self, local=(), pullable=()):
        self.images = _Images(set(local), set(pullable))


def test_missing_uses_local_images_and_pulls_only_what_is_absent():
    engine = _Engine(local={"app:1"}, pullable={"python:3.13"})
    assert resolve_image(engine, "app:1", ImagePolicy()).source == "local" and engine.images.pulls == []
    pulled = resolve_image(engine, "python:3.13", ImagePolicy())
    assert (pulled.source, pulled.tag, pulled.comparable) == ("pulled", "python:3.13", True)
    assert engine.images.pulls == ["python:3.13"]


def test_always_pulls_even_local_images_and_fails_naming_the_image():
    engine = _Engine(local={"app:1", BASE_IMAGE})
    with pytest.raises(ImagePullFailed) as err:
        resolve_image(engine, "app:1", ImagePolicy(pull="always", offline_substitute=True))
    assert "'app:1'" in str(err.value) and "no such host" in str(err.value) and err.value.image == "app:1"


def test_never_pulls_nothing_and_substitutes_only_when_allowed():
    engine = _Engine(local={BASE_IMAGE}, pullable={"ubuntu:24.04"})
    with pytest.raises(ImageUnavailable) as err:
        resolve_image(engine, "ubuntu:24.04", ImagePolicy(pull="never"))
    assert "--pull never" in str(err.value) and "--offline-substitute" in str(err.value)
    sub = resolve_image(engine, "ubuntu:24.04", ImagePolicy(pull="never", offline_substitute=True))
    assert (sub.source, sub.tag, sub.comparable) == ("substituted", BASE_IMAGE, False)
    assert engine.images.pulls == []


def test_a_callers_fallback_wins_over_substitution():
    engine = _Engine(local={BASE_IMAGE})
    with pytest.raises(ImageUnavailable):  # the caller builds its Dockerfile instead
        resolve_image(engine, "python:3.13", ImagePolicy(offline_substitute=True), has_fallback=True)
    with pytest.raises(ImageUnavailable) as err:  # no rule matches: nothing to substitute
        resolve_image(engine, "quay.io/x/y:1", ImagePolicy(offline_substitute=True))
    assert "quay.io/x/y:1" in str(err.value)


@pytest.mark.parametrize("line, memory_mb", [('memory = "4G"', 4096), ('memory = "512M"', 512), ("memory_mb = 3000", 3000),
                                             ('memory_mb = "1.5G"', 1536), ('memory = "2GiB"', 2048)])
def test_harbor_memory_spellings(tmp_path, line, memory_mb):
    harbor_task(tmp_path, "t", toml=f'[environment]\ndocker_image = "x:1"\n{line}\n', solve="true\n", test="true\n")
    [task] = load_tasks(tmp_path, BASE_IMAGE)
    assert task.resources.memory_mb == memory_mb


def test_bad_sizes_name_the_field(tmp_path):
    harbor_task(tmp_path, "t", toml='[environment]\ndocker_image = "x:1"\nmemory = "4X"\n', solve="true\n", test="true\n")
    [err] = load_tasks(tmp_path, BASE_IMAGE)
    assert err.file == "task.toml" and "environment" in (err.field or "") and "'4X'" in err.message


def test_harbor_env_templates_come_from_the_host(tmp_path, monkeypatch):
    monkeypatch.setenv("HZ_TEST_TOKEN", "from-host")
    monkeypatch.delenv("HZ_TEST_MISSING", raising=False)
    toml = ('[environment]\ndocker_image = "x:1"\nenv = { TOKEN = "${HZ_TEST_TOKEN}", MODE = "${HZ_TEST_MISSING:-dev}", '
            'PLAIN = "a${b}" }\n[verifier]\nenv = { V = "1" }\n[verifier.environment]\ndocker_image = "grader:1"\n'
            'env = { G = "${HZ_TEST_TOKEN}" }\n')
    harbor_task(tmp_path / "ok", "t", toml=toml, solve="true\n", test="true\n")
    [task] = load_tasks(tmp_path / "ok", BASE_IMAGE)
    assert task.env == {"TOKEN": "from-host", "MODE": "dev", "PLAIN": "a${b}"}
    assert task.verifier.env == {"G": "from-host", "V": "1"}
    assert task.verifier.environment_mode == "separate" and task.verifier.verifier_image.image == "grader:1"
    harbor_task(tmp_path / "bad", "t", toml='[environment]\ndocker_image = "x:1"\nenv = { K = "${HZ_TEST_MISSING}" }\n',
                solve="true\n", test="true\n")
    [err] = load_tasks(tmp_path / "bad", BASE_IMAGE)
    assert err.field == "environment.env.K" and "HZ_TEST_MISSING" in err.message

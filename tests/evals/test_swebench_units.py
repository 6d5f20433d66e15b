"""SWE-bench loading, specs and images without an engine: file formats, where repositories come
from, registration of repositories swebench does not know, the offline substitute's Dockerfile,
the harness's image names and predictions files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from evals.adapters import load_tasks
from evals.agents.predictions import load_predictions
from evals.swebench.config import SwebenchConfig
from evals.swebench.offline_base import standin_files, substitute_base_dockerfile
from evals.swebench.repo_source import RepoSource
from evals.swebench.specs import CONTAINER_SOURCE, published_image, spec_for_instance
from evals.task import Task, TaskLoadError

from swebench_repos import write_suite

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "evals" / "tasks" / "swe"


@pytest.fixture(scope="module")
def suite(tmp_path_factory) -> Path:
    return write_suite(tmp_path_factory.mktemp("suite"))


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_jsonl_json_and_parquet_load_the_same_instances(suite, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    records = _records(suite)
    for name in ("psf__requests.bundle", "django__django.bundle"):
        shutil.copy(suite.parent / name, tmp_path / name)
    (tmp_path / "all.json").write_text(json.dumps(records))
    pq.write_table(pa.Table.from_pylist(records), tmp_path / "all.parquet")
    loaded = [load_tasks(p, "unused") for p in (suite, tmp_path / "all.json", tmp_path / "all.parquet")]
    ids = [[t.id for t in tasks] for tasks in loaded]
    assert ids[0] == ids[1] == ids[2] == ["psf__requests-1", "psf__requests-2", "django__django-1"]
    assert all(isinstance(t, Task) for tasks in loaded for t in tasks)
    assert loaded[2][2].verifier.instance == loaded[0][2].verifier.instance


def test_repository_sources_in_order(suite, tmp_path):
    [record] = [r for r in _records(suite) if r["instance_id"] == "django__django-1"]
    del record["repo_bundle"]
    path = tmp_path / "one.jsonl"
    path.write_text(json.dumps(record) + "\n")
    [task] = load_tasks(path, "unused")
    assert task.verifier.source == "https://github.com/django/django"  # cloned by the build
    (tmp_path / "repos").mkdir()
    shutil.copy(suite.parent / "django__django.bundle", tmp_path / "repos" / "django__django.bundle")
    [task] = load_tasks(path, "unused")
    assert task.verifier.source == str(tmp_path / "repos" / "django__django.bundle")
    path.write_text(json.dumps({**record, "repo_url": "https://example.org/django.git"}) + "\n")
    assert load_tasks(path, "unused")[0].verifier.source == "https://example.org/django.git"
    path.write_text(json.dumps({**record, "repo_path": "nowhere"}) + "\n")
    [err] = load_tasks(path, "unused")
    assert isinstance(err, TaskLoadError) and err.field == "repo_path"


def test_unknown_repositories_versions_and_parsers_name_the_field(suite, tmp_path):
    [record] = [r for r in _records(suite) if r["instance_id"] == "django__django-1"]
    shutil.copy(suite.parent / "django__django.bundle", tmp_path / "django__django.bundle")
    bad = [{**record, "instance_id": "a-1", "repo": "nobody/nothing"},
           {**record, "instance_id": "b-1", "version": "0.0"},
           {**record, "instance_id": "c-1", "repo": "nobody/parser", "specs": {"test_cmd": "pytest", "log_parser": "parse_log_nope"}},
           {**record, "instance_id": "d-1", "repo": "nobody/registered", "specs": {"test_cmd": "pytest -rA"}}]
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in bad))
    items = {t.id: t for t in load_tasks(path, "unused")}
    assert (items["a-1"].field, items["b-1"].field, items["c-1"].field) == ("repo", "version", "specs.log_parser")
    assert "give the instance `specs`" in items["a-1"].message and "'0.0'" in items["b-1"].message
    assert isinstance(items["d-1"], Task)  # registered with swebench: its default parser, its test command


def test_the_test_spec_is_swebenchs_with_the_clone_pointed_at_the_source(suite):
    tasks = {t.id: t for t in load_tasks(suite, "unused")}
    v = tasks["django__django-1"].verifier
    spec = spec_for_instance(dict(v.instance), RepoSource(v.source))
    script = spec.install_repo_script
    assert f"--single-branch {CONTAINER_SOURCE} /testbed" in script and f"rm -rf {CONTAINER_SOURCE}" in script
    assert "github.com" not in script and f"git reset --hard {v.instance['base_commit']}" in script
    assert "python -m pip install -e ." in script  # django 4.0's install step, from swebench's specs
    # requirements.txt is read from the bundle at the commit (swebench would fetch it from GitHub)
    assert "nothing beyond the standard library" not in spec.setup_env_script  # swebench drops comment lines
    assert "conda create -n testbed python=3.8" in spec.setup_env_script
    assert spec.instance_image_key == "sweb.eval.x86_64.django__django-1:latest"
    assert spec_for_instance(dict(v.instance), RepoSource(v.source), substitute=True).instance_image_key.endswith(":horizon-offline")
    remote = spec_for_instance(dict(v.instance), RepoSource("https://example.org/django.git"))
    assert "--single-branch https://example.org/django.git /testbed" in remote.install_repo_script


def test_published_image_names_follow_the_harness():
    from types import SimpleNamespace

    spec = SimpleNamespace(arch="x86_64", instance_id="django__django-11099")
    assert published_image(spec, "swebench") == "swebench/sweb.eval.x86_64.django_1776_django-11099:latest"


def test_the_offline_substitute_keeps_swebenchs_steps_and_replaces_miniconda(suite):
    [task] = [t for t in load_tasks(suite, "unused") if t.id == "psf__requests-2"]
    v = task.verifier
    base = spec_for_instance(dict(v.instance), RepoSource(v.source)).base_dockerfile
    assert "FROM --platform=linux/x86_64 ubuntu:22.04" in base and "Miniconda3" in base
    out = substitute_base_dockerfile(base, "horizon/base:bookworm")
    assert out.startswith("FROM horizon/base:bookworm\n") and "ubuntu" not in out and "miniconda.sh" not in out
    assert "locales-all" in out and "adduser --disabled-password --gecos 'dog' nonroot" in out
    assert "COPY conda-standin/ /opt/miniconda3/" in out
    assert set(standin_files()) == {"conda-standin/bin/activate", "conda-standin/etc/profile.d/conda.sh",
                                   "conda-standin/bin/conda"}


def test_sample_suite_registers_its_own_specs():
    tasks = [t for t in load_tasks(SAMPLES / "instances.jsonl", "unused", SwebenchConfig(offline_substitute=True))]
    assert len(tasks) == 5 and all(t.verifier.config.offline_substitute for t in tasks)
    from swebench.harness.constants import MAP_REPO_VERSION_TO_SPECS
    from swebench.harness.log_parsers import MAP_REPO_TO_PARSER

    assert MAP_REPO_VERSION_TO_SPECS["horizon-samples/lru"]["0.1"]["test_cmd"].startswith("python -m pytest -rA")
    assert MAP_REPO_TO_PARSER["horizon-samples/lru"].__name__ == "parse_log_pytest"


def test_predictions_files(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"instance_id": "a", "model_patch": None, "model_name_or_path": "m"}) + "\n")
    assert load_predictions(path) == {"a": {"instance_id": "a", "model_patch": None, "model_name_or_path": "m"}}
    as_dict = tmp_path / "p.json"
    as_dict.write_text(json.dumps({"a": {"instance_id": "a", "model_patch": "x"}}))
    assert load_predictions(as_dict)["a"]["model_name_or_path"] == "unknown"
    path.write_text(json.dumps({"model_patch": "x"}) + "\n")
    with pytest.raises(ValueError, match="instance_id and model_patch"):
        load_predictions(path)


def test_a_local_clone_travels_as_a_bundle_of_all_its_refs(suite, tmp_path):
    import subprocess

    [record] = [r for r in _records(suite) if r["instance_id"] == "django__django-1"]
    source = RepoSource(suite.parent / "django-src")
    assert not source.is_remote and not source.is_bundle
    source.stage(tmp_path / "repo-source")
    subprocess.run(["git", "clone", "-q", "--single-branch", str(tmp_path / "repo-source"), str(tmp_path / "c")], check=True)
    shown = subprocess.run(["git", "-C", str(tmp_path / "c"), "cat-file", "-t", record["base_commit"]],
                           capture_output=True, text=True, check=True)
    assert shown.stdout.strip() == "commit"
    assert "Django's test runner" in source.read_file(record["base_commit"], "tests/runtests.py")
    assert RepoSource(f"file://{suite.parent / 'django__django.bundle'}").is_bundle

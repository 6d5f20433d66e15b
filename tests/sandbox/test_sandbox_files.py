"""Files in and out of a sandbox: bytes, large files, odd names, folders."""

from __future__ import annotations

import hashlib
import os

import pytest

from sandbox import SandboxError


def test_write_and_read_binary_round_trip(shared_sandbox):
    data = bytes(range(256)) * 4 + b"\x00\xff\xfe"
    shared_sandbox.write_file("/workspace/bin/data.bin", data)  # parent folder created on demand
    assert shared_sandbox.read_file("/workspace/bin/data.bin") == data
    assert shared_sandbox.exec("wc -c < /workspace/bin/data.bin").output.strip() == str(len(data))
    shared_sandbox.write_file("rel.txt", "relative to the workdir ✓")
    assert shared_sandbox.read_file("/workspace/rel.txt").decode() == "relative to the workdir ✓"


def test_fifty_megabyte_file_round_trip(shared_sandbox, tmp_path):
    src = tmp_path / "big.bin"
    src.write_bytes(os.urandom(50 * 1024 * 1024))
    digest = hashlib.sha256(src.read_bytes()).hexdigest()
    shared_sandbox.copy_in(src, "/workspace")
    assert shared_sandbox.exec("sha256sum /workspace/big.bin").output.split()[0] == digest
    out = shared_sandbox.copy_out("/workspace/big.bin", tmp_path / "back.bin")
    assert hashlib.sha256(out.read_bytes()).hexdigest() == digest


def test_names_with_spaces_and_unicode(shared_sandbox, tmp_path):
    name = "my file – ünïcødé 文件.txt"
    (tmp_path / name).write_text("content")
    where = shared_sandbox.copy_in(tmp_path / name, "/workspace")
    assert where == f"/workspace/{name}"
    assert shared_sandbox.exec(f"cat '/workspace/{name}'").output == "content"
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    back = shared_sandbox.copy_out(f"/workspace/{name}", out_dir)
    assert back == out_dir / name and back.read_text() == "content"


def test_folder_round_trip(shared_sandbox, tmp_path):
    src = tmp_path / "proj dir"
    (src / "pkg" / "sub").mkdir(parents=True)
    (src / "pkg" / "__init__.py").write_text("x = 1\n")
    (src / "pkg" / "sub" / "data.bin").write_bytes(b"\x00\x01")
    (src / "run.sh").write_text("#!/bin/sh\necho ran\n")
    (src / "run.sh").chmod(0o755)
    shared_sandbox.copy_in(src, "/workspace/copied")  # not existing: the folder is copied *as* it
    assert shared_sandbox.exec("cd /workspace/copied && ./run.sh && find . -type f | sort").output == (
        "ran\n./pkg/__init__.py\n./pkg/sub/data.bin\n./run.sh\n")
    shared_sandbox.exec("echo new > /workspace/copied/pkg/sub/new.txt")
    back = shared_sandbox.copy_out("/workspace/copied", tmp_path / "back")
    assert (back / "pkg" / "sub" / "new.txt").read_text() == "new\n"
    assert (back / "pkg" / "sub" / "data.bin").read_bytes() == b"\x00\x01"
    assert os.access(back / "run.sh", os.X_OK)


def test_file_errors_are_explicit(shared_sandbox, tmp_path):
    with pytest.raises(SandboxError, match="does not exist"):
        shared_sandbox.read_file("/workspace/nope.txt")
    with pytest.raises(SandboxError, match="directory"):
        shared_sandbox.read_file("/workspace")
    with pytest.raises(SandboxError, match="does not exist"):
        shared_sandbox.copy_in(tmp_path / "missing", "/workspace")
    with pytest.raises(SandboxError, match="does not exist"):
        shared_sandbox.copy_out("/no/such/path", tmp_path / "x")

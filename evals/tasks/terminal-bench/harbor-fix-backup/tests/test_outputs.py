import subprocess
import tarfile
from pathlib import Path


def run_backup():
    Path("/app/backup.tar.gz").unlink(missing_ok=True)
    subprocess.run(["bash", "/app/backup.sh"], check=True, timeout=30)
    with tarfile.open("/app/backup.tar.gz") as tar:
        return sorted(n.lstrip("./") for n in tar.getnames() if not n.endswith("/") and n != ".")


def test_all_txt_files_archived():
    assert run_backup() == ["a.txt", "notes/b.txt", "notes/deep/c.txt"]


def test_new_files_are_picked_up():
    Path("/app/data/notes/deep/d.txt").write_text("delta\n")
    try:
        assert "notes/deep/d.txt" in run_backup()
    finally:
        Path("/app/data/notes/deep/d.txt").unlink()

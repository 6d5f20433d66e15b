import subprocess


def git(*args):
    return subprocess.run(["git", "-C", "/app/site", *args], capture_output=True, text=True, check=True).stdout


def test_main_checked_out():
    assert git("rev-parse", "--abbrev-ref", "HEAD").strip() == "main"


def test_contact_on_main():
    assert "Contact: team@example.com" in git("show", "main:about.md")


def test_welcome_kept():
    assert "Welcome!" in git("show", "main:index.md")


def test_clean_tree():
    assert git("status", "--porcelain").strip() == ""

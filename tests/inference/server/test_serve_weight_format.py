"""`horizon serve --weight-format`: validated by the CLI, reported in the banner."""

from __future__ import annotations

from .conftest import SCRIPTED_REPLY, serve_and_complete


def test_horizon_serve_rejects_an_unknown_weight_format(tiny_checkpoint, capsys):
    from agent.cli.main import main

    try:
        code = main(["serve", "--model", str(tiny_checkpoint), "--weight-format", "int4"])
    except SystemExit as exc:  # argparse: invalid choice
        code = exc.code
    assert code == 2 and "--weight-format: invalid choice: 'int4'" in capsys.readouterr().err


def test_horizon_serve_banner_names_the_weight_format(scripted_checkpoint):
    banner, text = serve_and_complete(scripted_checkpoint, "--weight-format", "dequant")
    assert "weights dequant" in banner, banner
    assert text == SCRIPTED_REPLY

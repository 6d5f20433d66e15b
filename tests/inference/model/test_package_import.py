"""`import inference` stays light: the chat/agent side imports it on machines without torch."""

from __future__ import annotations

import subprocess
import sys


def test_import_inference_does_not_import_torch():
    code = (
        "import sys, inference\n"
        "from inference.config import ModelConfig\n"
        "assert inference.ModelConfig is ModelConfig\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
        "assert callable(inference.load_model) and 'torch' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)

#!/bin/bash
# Upstream installs uv and pytest here over the network; the image already has pytest.
cd /app
python3 -m pytest -rA -p no:cacheprovider "$TEST_DIR/test_outputs.py"

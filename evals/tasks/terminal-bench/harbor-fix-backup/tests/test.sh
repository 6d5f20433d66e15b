#!/bin/bash
# Offline variant of the Harbor template: pytest comes from the image, not from uv.
mkdir -p /logs/verifier
python3 -m pytest -rA -p no:cacheprovider /tests/test_outputs.py
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi

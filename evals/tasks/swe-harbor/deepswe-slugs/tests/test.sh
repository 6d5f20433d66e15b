#!/bin/bash
# DeepSWE-style verification: prepare (reset touched files, apply model.patch, apply test.patch),
# run the tests with a JUnit report, grade the whitelisted node ids into reward.json.
# A crash before grading leaves reward.txt = -1, the infrastructure-failure marker.
set -uo pipefail
mkdir -p /logs/verifier
trap '[ -f /logs/verifier/reward.json ] || echo -1 > /logs/verifier/reward.txt' EXIT
cd /app
python3 /verifier/grader.py prepare || exit 0
python3 -m pytest -p no:cacheprovider -q --junitxml=/logs/verifier/junit.xml tests > /logs/verifier/pytest.log 2>&1
python3 /verifier/grader.py grade

#!/bin/bash
# Separate mode: only /logs/artifacts crosses over from the agent's container.
mkdir -p /logs/verifier
expected=$(cat /verifier/expected.txt)
got=$(tr -d '[:space:]' < /logs/artifacts/answer.txt 2>/dev/null || echo missing)
if [ "$got" = "$expected" ]; then correct=1; else correct=0; fi
echo "{\"reward\": $correct, \"answer_present\": $([ "$got" = missing ] && echo 0 || echo 1)}" > /logs/verifier/reward.json

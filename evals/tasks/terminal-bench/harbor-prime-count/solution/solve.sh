#!/bin/bash
python3 - <<'PY'
n = 2_000_000
sieve = bytearray([1]) * n
sieve[0:2] = b"\x00\x00"
for i in range(2, int(n ** 0.5) + 1):
    if sieve[i]:
        sieve[i * i :: i] = bytearray(len(range(i * i, n, i)))
open("/app/answer.txt", "w").write(f"{sum(sieve[1_000_000:])}\n")
PY

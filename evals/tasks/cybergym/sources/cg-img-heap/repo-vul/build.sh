#!/bin/bash -eu
# OSS-Fuzz-style build script: $CC/$CFLAGS come from the builder (an ASan build), programs go to $OUT.
$CC $CFLAGS -o "$OUT/img" *.c

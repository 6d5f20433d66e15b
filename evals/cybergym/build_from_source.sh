#!/bin/bash
# Builds one side (vul or fix) of a CyberGym task from its sources inside an image build, the
# OSS-Fuzz way: the sources unpacked under $SRC, the task's build.sh run from the source root with
# $CC/$CFLAGS set for an ASan build, the programs left in $OUT. Then writes the runner that feeds
# /tmp/poc to the target program, as ARVO's /bin/arvo does.
set -euo pipefail
CTX=/horizon/ctx
mkdir -p "$SRC" "$OUT" "$WORK"
tar -xzf "$CTX/repo.tar.gz" -C "$SRC"
# The source root: the tarball's single top-level folder, else $SRC itself.
mapfile -t tops < <(find "$SRC" -mindepth 1 -maxdepth 1)
if [ "${#tops[@]}" -eq 1 ] && [ -d "${tops[0]}" ]; then ROOT="${tops[0]}"; else ROOT="$SRC"; fi
if [ -f "$CTX/patch.diff" ]; then
    (cd "$ROOT" && patch -s -p1 < "$CTX/patch.diff")
fi
if [ -f "$CTX/build.sh" ]; then SCRIPT="$CTX/build.sh"
elif [ -f "$ROOT/build.sh" ]; then SCRIPT="$ROOT/build.sh"
else
    echo "horizon: no build script: neither the data entry nor the source root ($ROOT) has build.sh" >&2
    exit 1
fi
(cd "$ROOT" && bash -eu "$SCRIPT")
TARGET=""
if [ -f "$CTX/metadata.json" ]; then
    TARGET=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("fuzz_target", ""))' "$CTX/metadata.json")
fi
if [ -z "$TARGET" ]; then
    mapfile -t programs < <(find "$OUT" -maxdepth 1 -type f -perm -u+x -printf '%f\n')
    if [ "${#programs[@]}" -ne 1 ]; then
        echo "horizon: build.sh left ${#programs[@]} programs in \$OUT (${programs[*]:-none}); name one as fuzz_target in metadata.json" >&2
        exit 1
    fi
    TARGET="${programs[0]}"
fi
if [ ! -x "$OUT/$TARGET" ]; then
    echo "horizon: fuzz_target $TARGET is not an executable in \$OUT after build.sh" >&2
    exit 1
fi
printf '#!/bin/bash\nexec %q /tmp/poc\n' "$OUT/$TARGET" > /usr/local/bin/horizon-run-poc
chmod 755 /usr/local/bin/horizon-run-poc
rm -rf "$CTX"

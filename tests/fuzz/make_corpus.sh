#!/usr/bin/env bash
# Seeds the fuzz corpus with a real shard, a real manifest and raw-index-shaped inputs.
# Usage: make_corpus.sh FANSTORE_BIN CORPUS_DIR
set -euo pipefail
F=$1 C=$2
mkdir -p "$C"
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
mkdir -p "$T/src/d/e" "$T/src/empty"
printf 'hello' > "$T/src/d/a.txt"; seq 1 500 > "$T/src/d/e/n.txt"; ln -s d/e "$T/src/l"
"$F" pack "$T/src" "$T/ds.fs" -q --no-sync
cp "$T/ds.fs/shard-00000.fsd" "$C/shard0"
cp "$T/ds.fs/manifest.json" "$C/manifest"

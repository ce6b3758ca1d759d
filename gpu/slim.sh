#!/usr/bin/env bash
# For a GPU machine that takes the working tree (tracked and untracked-not-ignored files) only up to
# 64 MiB: the checkout holds about 80 MB of test fixtures the GPU check never reads.
#   bash gpu/slim.sh            removes them from the working tree (not from git), prints the size left
#   bash gpu/slim.sh --restore  brings them back (git checkout)
# Refuses to remove anything with uncommitted changes.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
unread=(tests/fixtures/multilingual tests/fixtures/lm tests/fixtures/wild tests/fixtures/reproducible
        tests/fixtures/text tests/fixtures/decoding tests/fixtures/score fuzz/corpus-min docs python/tests examples bench)
if [[ "${1:-}" == "--restore" ]]; then
  git checkout -- "${unread[@]}"
  echo "restored ${unread[*]}"
  exit 0
fi
if [[ -n "$(git status --porcelain -- "${unread[@]}")" ]]; then
  echo "error: uncommitted changes under ${unread[*]}: commit or stash them first" >&2
  exit 2
fi
git ls-files -z -- "${unread[@]}" | xargs -0 rm -f
bytes() { xargs -0 stat -c %s 2>/dev/null | awk '{ s += $1 } END { print s + 0 }' || true; }
left=$( { git ls-files -z; git ls-files -z --others --exclude-standard; } | bytes)
carried=$(find gpu/bin gpu/pylib -type f -print0 2>/dev/null | bytes)
echo "what travels: $((left / 1048576)) MiB of working tree + $((carried / 1048576)) MiB carried (gpu/bin, gpu/pylib); the limit is 64 MiB; restore with: bash gpu/slim.sh --restore"

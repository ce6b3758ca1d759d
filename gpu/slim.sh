#!/usr/bin/env bash
# The device tool sends the working tree (tracked and untracked-not-ignored files) and refuses one
# over 64 MiB; the checkout holds about 80 MB of test fixtures the GPU check never reads.
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
left=$( { git ls-files -z; git ls-files -z --others --exclude-standard; } | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
echo "the working tree that travels: $((left / 1048576)) MiB (limit 64 MiB, carried paths included); restore with: bash gpu/slim.sh --restore"

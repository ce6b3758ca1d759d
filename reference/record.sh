# record KIND GOLDEN INPUT NOTES COMMAND...: runs COMMAND (under NICE_CMD) on INPUT ("-": none)
# into GOLDEN, and appends its manifest row to MANIFEST_LINES (see write_manifest.py). KIND
# `stdout` keeps stdout; `log` keeps stdout, then fairseq's log lines from stderr without their
# time. A failure is kept too: the golden ends with stderr's tail, the notes say so. Sourced by
# lm_goldens.sh and family_goldens.sh, which set NICE_CMD and WORK, and call start_manifest
# first (and goldens_dir for each model's goldens/ folder).

# A new, empty manifest of this run's goldens: MANIFEST_LINES.
start_manifest() {
  MANIFEST_LINES="$WORK/manifest.jsonl"
  rm -f "$MANIFEST_LINES"
}

# goldens_dir MODEL_DIR: prints MODEL_DIR/goldens, made if missing.
goldens_dir() {
  mkdir -p "$1/goldens" && echo "$1/goldens"
}

LOG_RE='^[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2} \| '
strip_time() { sed -E 's/^[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2} \| //'; }

record() {
  local kind=$1 golden=$2 input=$3 notes=$4; shift 4
  local rc=0 err="$golden.stderr"
  [ "$input" = - ] && input=/dev/null
  "${NICE_CMD[@]}" "$@" < "$input" > "$golden.raw" 2> "$err" || rc=$?
  if [ "$kind" = log ]; then
    { cat "$golden.raw"; grep -E "$LOG_RE" "$err" | strip_time || true; } > "$golden"
  else
    cat "$golden.raw" > "$golden"
  fi
  if [ "$rc" != 0 ]; then
    { echo "FAILED (exit $rc); stderr tail:"; tail -n 5 "$err"; } >> "$golden"
    notes="$notes FAILED in fairseq (exit $rc): the golden ends with the error message."
    echo "  $golden: FAILED (exit $rc)" >&2
  fi
  mkdir -p "$WORK/stderr"
  mv "$err" "$WORK/stderr/$(echo "$golden" | tr / _)"
  rm -f "$golden.raw"
  [ "$input" = /dev/null ] && input=-
  python -I -c 'import json, sys; print(json.dumps({"golden": sys.argv[1], "input": sys.argv[2], "kind": sys.argv[3], "notes": sys.argv[4], "exit_code": int(sys.argv[5]), "argv": sys.argv[6:]}))' \
    "$golden" "$input" "$kind" "$notes" "$rc" "$@" >> "$MANIFEST_LINES"
}

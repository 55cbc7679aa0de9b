#!/bin/sh
# tools/fuzz/campaign.sh: a long fuzzing campaign of one surface of tools/fuzz/fuzz.lua.
#
#   tools/fuzz/campaign.sh TILUA SURFACE SEED INPUTS [CHUNK]
#
# Runs inputs FUZZ_START (default 0, to go on where a campaign stopped) .. INPUTS-1 of SURFACE (opt, lua or lower) drawn from SEED with the
# tilua program TILUA (build-asan/tilua: the sanitizer build, where an overflow or a
# use-after-free ends the process with its report), CHUNK inputs per process
# (default 20000). A process that crashes is restarted at the input after the one
# that crashed; that input is copied to tools/fuzz/found/ with the sanitizer's
# report beside it (fix it, then move it to tools/fuzz/corpus/, which ctest
# replays). A process still running after FUZZ_CHUNK_SECONDS (default 1800) is
# stopped and its input counted the same way, as a hang: fuzz.lua's own 10 s
# limit per input is a Lua hook, which work inside one C call never reaches.
# Prints the seed first and a summary line at the end; progress goes
# to $TMPDIR/fuzz-campaign-SURFACE-SEED/log.
set -u
TILUA=$1 SURFACE=$2 SEED=$3 INPUTS=$4 CHUNK=${5:-20000}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
WORK=${TMPDIR:-/tmp}/fuzz-campaign-$SURFACE-$SEED
FOUND=$ROOT/tools/fuzz/found
mkdir -p "$WORK" "$FOUND"
echo "campaign: surface $SURFACE, seed $SEED, inputs ${FUZZ_START:-0}..$((INPUTS - 1)), $TILUA" | tee -a "$WORK/log"
# an input that takes more than FUZZ_RSS_MB (default 3072) of memory is a finding too:
# the sanitizers' hard limit, or the address space of a build without them
RSS=${FUZZ_RSS_MB:-3072}
export ASAN_OPTIONS="detect_leaks=0:exitcode=86:hard_rss_limit_mb=$RSS" UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:exitcode=86"
if ! ldd "$TILUA" 2>/dev/null | grep -q libasan; then ulimit -v $((RSS * 1024)); fi
cd "$ROOT" || exit 2
at=${FUZZ_START:-0} crashes=0 problems=0 start=$(date +%s)
while [ "$at" -lt "$INPUTS" ]; do
  n=$CHUNK
  [ $((at + n)) -gt "$INPUTS" ] && n=$((INPUTS - at))
  rm -f "$WORK/current.index"
  timeout -k 10 "${FUZZ_CHUNK_SECONDS:-1800}" "$TILUA" tools/fuzz/fuzz.lua --surface "$SURFACE" --seed "$SEED" --skip "$at" --inputs "$n" --save "$WORK" --quiet \
    > "$WORK/out" 2> "$WORK/err"
  rc=$?
  if [ $rc -le 1 ]; then
    [ $rc -eq 1 ] && { problems=$((problems + 1)); cat "$WORK/out" "$WORK/err" >> "$WORK/log"; }
    at=$((at + n))
  else # a crash: the input being run is current.*
    set -- $(cat "$WORK/current.index" 2>/dev/null || echo "$SURFACE 0 $at")
    idx=$3
    ext=tir
    [ "$SURFACE" = lua ] && ext=lua
    name=$SURFACE-$SEED-$idx
    cp "$WORK/current.$ext" "$FOUND/$name.$ext"
    cp "$WORK/err" "$FOUND/$name.report"
    crashes=$((crashes + 1))
    what=crash
    [ $rc -eq 124 ] || [ $rc -eq 137 ] && what=hang
    echo "$what at input $idx (exit $rc): tools/fuzz/found/$name.$ext" | tee -a "$WORK/log"
    at=$((idx + 1))
  fi
  echo "$(date +%T) $at inputs done, $crashes crashes, $problems chunks with problems" >> "$WORK/log"
done
echo "campaign: surface $SURFACE, seed $SEED: inputs ${FUZZ_START:-0}..$((at - 1)) in $(( $(date +%s) - start )) s, $crashes crashes, $problems chunks with problems" | tee -a "$WORK/log"
[ $crashes -eq 0 ] && [ $problems -eq 0 ]

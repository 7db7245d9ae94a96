#!/usr/bin/env bash
# A stand-in for compute-sanitizer in gpu-check-sanitize.test: notes its tool, the knobs it
# runs under and its test filter in $CALLS, then prints the summary line the real one ends
# with. With HAZARD=VAR=VALUE a run under that setting reports errors (exit 1, as the
# sanitizer does); with HANG=VAR=VALUE it outlives its time limit.
tool=
filter=
while (($#)); do
  case $1 in
  --tool) tool=$2; shift ;;
  --gtest_filter=*) filter=${1#--gtest_filter=} ;;
  esac
  shift
done
knobs=$(env | grep -E '^LCEJIT_(FWD|DB|LOADED)_' | sort | tr '\n' ' ')
echo "$tool ${knobs:-(defaults) }$filter" >>"$CALLS"
echo "========= COMPUTE-SANITIZER"
echo "[  PASSED  ] 1 test."
if [ -n "${HANG:-}" ] && env | grep -qx "$HANG"; then
  sleep 10
fi
if [ -n "${HAZARD:-}" ] && env | grep -qx "$HAZARD"; then
  echo "========= ERROR SUMMARY: 2 errors"
  exit 1
fi
if [ "$tool" = racecheck ]; then
  echo "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)"
else
  echo "========= ERROR SUMMARY: 0 errors"
fi
exit 0

#!/usr/bin/env bash
# A stand-in for lcejit-bench in gpu-check-compare.test: notes its call (the variant's
# environment, its cache, its arguments) in $CALLS and prints a traced run's log.
echo "X=${X:-unset} cache=${LCEJIT_CACHE_DIR##*/} args=$*" >>"$CALLS"
cat "$(dirname "$(readlink -f "$0")")/bench-trace.log"
[ "${FAIL:-0}" = 1 ] && exit 3
exit 0

#!/usr/bin/env bash
# A stand-in for Nsight Compute's ncu in gpu-check-ncu.test: notes its arguments in $CALLS
# and prints two launches' metrics in the CSV layout of `ncu --csv` (one row a metric).
echo "ncu $*" >>"$CALLS"
# The source page (`--page source --csv`): the table of Inputs/ncu-source.csv.
if [[ " $* " == *" --page source "* ]]; then
  echo '==PROF== Connected to process 1234'
  cat "$(dirname "$0")/ncu-source.csv"
  [ "${FAIL:-0}" = 1 ] && exit 5
  exit 0
fi
h='"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"'
echo '==PROF== Connected to process 1234'
echo "$h"
row() {
  echo "\"$1\",\"1234\",\"lcejit-bench\",\"127.0.0.1\",\"$2\",\"1\",\"7\",\"(384, 1, 1)\",\"(132, 1, 1)\",\"0\",\"9.0\",\"Command line profiler metrics\",\"$3\",\"$4\",\"$5\""
}
row 0 lce_drhs0 gpu__time_duration.sum nsecond 1,607,840
row 0 lce_drhs0 lts__t_sectors_op_red.sum sector 49,250,304
row 0 lce_drhs0 lts__t_sectors_op_read_lookup_miss.sum sector 65,197,665
row 1 lce_drhs0 gpu__time_duration.sum nsecond 1,614,816
row 1 lce_drhs0 lts__t_sectors_op_red.sum sector 49,250,304
row 1 lce_drhs0 lts__t_sectors_op_read_lookup_miss.sum sector 65,201,031
[ "${FAIL:-0}" = 1 ] && exit 5
exit 0

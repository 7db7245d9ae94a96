#!/usr/bin/env bash
# A stand-in for lcejit-bench in gpu-check-targets.test: notes each call's arguments and
# kernel cache in $CALLS and writes canned results to its --json file (figures of the kind
# a device run gives; the series is cold while its cache holds no marker, as a fresh kernel
# cache is). FAIL_ON=WORD makes a call whose arguments contain WORD fail without results.
echo "cache=${LCEJIT_CACHE_DIR##*/} args=$*" >>"$CALLS"
json=
args=" $* "
prev=
for a in "$@"; do
  [ "$prev" = "--json" ] && json=$a
  prev=$a
done
if [ -n "${FAIL_ON:-}" ] && [[ $args == *"$FAIL_ON"* ]]; then
  echo "error: the stand-in was told to fail" >&2
  exit 3
fi
case "$args" in
*" --series "*)
  mkdir -p "$LCEJIT_CACHE_DIR"
  if [ -e "$LCEJIT_CACHE_DIR/marker" ]; then
    echo "| 0 | 13517 | 70.12 | 7.80 | 64.00 | 61.00 | 1.150 | 1.049 | 0 |"
    echo "| 1 | 23512 | 120.00 | 5.10 | 112.00 | 106.00 | 1.132 | 1.057 | 0 |"
    echo '{"series_lcejit_ms": 1885.400, "series_cublas_ms": 1714.000, "compiles": 0, "first_call_ms": 70.120}' >"$json"
  else
    touch "$LCEJIT_CACHE_DIR/marker"
    echo "| # | N | lcejit ms | of it, prepare ms | again ms | cuBLAS ms | ratio | again ratio | compiles |"
    echo "|---|---|---|---|---|---|---|---|---|"
    echo "| 0 | 13517 | 447.60 | 390.20 | 64.00 | 61.00 | 7.338 | 1.049 | 5 |"
    echo "| 1 | 23512 | 3120.50 | 3010.00 | 112.00 | 106.00 | 29.439 | 1.057 | 5 |"
    echo "| 2 | 4100 | 30.00 | 0.40 | 29.00 | 27.00 | 1.111 | 1.074 | 0 |"
    echo '{"series_lcejit_ms": 5303.000, "series_cublas_ms": 1714.000, "compiles": 10, "first_call_ms": 447.600}' >"$json"
  fi
  ;;
*" --mode lean "*)
  echo '[{"case": "A", "n": 8192, "d": 4096, "v": 128256, "softcap": null, "lcejit_ms": 40.1000, "cublas_ms": 37.5000, "ratio": 1.0693, "workspace_bytes": 65011712, "schedule": "lean"}]' >"$json"
  ;;
*" --check "*)
  dh=1.0021e-02
  [[ $args == *" peaked "* ]] && dh=1.3100e-02
  echo "[{\"case\": \"A\", \"n\": 8192, \"d\": 4096, \"v\": 128256, \"softcap\": null, \"lcejit_ms\": 39.0, \"cublas_ms\": 37.0, \"ratio\": 1.05, \"workspace_bytes\": 536870912, \"schedule\": \"s\", \"loss_rel_err\": 5.1e-07, \"dh_rel_err\": $dh, \"dh_floor\": 1.0000e-02, \"dw_rel_err\": 1.0000e-05, \"dw_bf16_floor\": 1.0000e-03}," \
    "{\"case\": \"B\", \"n\": 8192, \"d\": 2304, \"v\": 256000, \"softcap\": 30, \"lcejit_ms\": 45.0, \"cublas_ms\": 41.0, \"ratio\": 1.10, \"workspace_bytes\": 533911040, \"schedule\": \"s\", \"check\": \"skipped: a stand-in's reason\"}]" >"$json"
  ;;
*)
  cat >"$json" <<'EOF'
[{"case": "A", "n": 8192, "d": 4096, "v": 128256, "softcap": null, "lcejit_ms": 37.9000, "cublas_ms": 36.0000, "ratio": 1.0528, "workspace_bytes": 536346624, "schedule": "s", "paired_lcejit_ms": 36.4000, "paired_cublas_ms": 34.7000, "paired_ratio": 1.0610, "paired_ratio_min": 1.0460, "paired_ratio_max": 1.0850},
 {"case": "B", "n": 8192, "d": 2304, "v": 256000, "softcap": 30, "lcejit_ms": 47.9000, "cublas_ms": 39.0000, "ratio": 1.2282, "workspace_bytes": 533911040, "schedule": "s", "paired_lcejit_ms": 51.6000, "paired_cublas_ms": 42.9000, "paired_ratio": 1.1940, "paired_ratio_min": 1.1170, "paired_ratio_max": 1.2090},
 {"case": "C", "n": 32768, "d": 4096, "v": 128256, "softcap": null, "lcejit_ms": 154.1000, "cublas_ms": 149.6000, "ratio": 1.0301, "workspace_bytes": 541065216, "schedule": "s"},
 {"case": "Q", "n": 4096, "d": 4096, "v": 128256, "softcap": null, "lcejit_ms": 20.5000, "cublas_ms": 19.3000, "ratio": 1.0622, "workspace_bytes": 536346624, "schedule": "s", "paired_lcejit_ms": 19.8000, "paired_cublas_ms": 18.6000, "paired_ratio": 1.0600, "paired_ratio_min": 1.0450, "paired_ratio_max": 1.0620},
 {"case": "S", "n": 2048, "d": 4096, "v": 128256, "softcap": null, "lcejit_ms": 9.6000, "cublas_ms": 9.0000, "ratio": 1.0667, "workspace_bytes": 536346624, "schedule": "s", "paired_lcejit_ms": 9.9000, "paired_cublas_ms": 9.1000, "paired_ratio": 1.0870, "paired_ratio_min": 1.0710, "paired_ratio_max": 1.0950},
 {"case": "W", "n": 2048, "d": 8192, "v": 152064, "softcap": null, "lcejit_ms": 21.4000, "cublas_ms": 20.9000, "ratio": 1.0239, "workspace_bytes": 536346624, "schedule": "s", "paired_lcejit_ms": 20.6000, "paired_cublas_ms": 20.9000, "paired_ratio": 0.9856, "paired_ratio_min": 0.9700, "paired_ratio_max": 1.0010}]
EOF
  ;;
esac
echo "| A | 8192 | stand-in |"
exit 0

// The planner's decisions for the LCE (softcap 30, ignore_index -100, bf16 H and W) and
// an f32 variant (@simt), after the whole pass pipeline, under several options.
//
// RUN: lcejit-opt %s --tx-autodiff --tx-simplify --cse --tx-fuse --tx-simplify --cse \
// RUN:   --tx-print-plan="mainloop=mma" -o /dev/null | FileCheck %s --check-prefix=CHECK
// RUN: lcejit-opt %s --tx-autodiff --tx-simplify --cse --tx-fuse --tx-simplify --cse \
// RUN:   --tx-print-plan -o /dev/null | FileCheck %s --check-prefix=WGMMA
// RUN: lcejit-opt %s --tx-autodiff --tx-simplify --cse --tx-fuse --tx-simplify --cse \
// RUN:   --tx-print-plan="mainloop=mma tokens=100" -o /dev/null | FileCheck %s --check-prefix=T100
// RUN: lcejit-opt %s --tx-autodiff --tx-simplify --cse --tx-fuse --tx-simplify --cse \
// RUN:   --tx-print-plan="mainloop=mma tokens=5000" -o /dev/null | FileCheck %s --check-prefix=T5000
// RUN: lcejit-opt %s --tx-autodiff --tx-simplify --cse --tx-fuse --tx-simplify --cse \
// RUN:   --tx-print-plan="mainloop=mma tokens=100000" -o /dev/null | FileCheck %s --check-prefix=T100K
// RUN: lcejit-opt %s --tx-autodiff --tx-simplify --cse --tx-fuse --tx-simplify --cse \
// RUN:   --tx-print-plan="mainloop=mma tokens=5000 budget-mb=1" -o /dev/null | FileCheck %s --check-prefix=TIGHT
// RUN: lcejit-opt %s --tx-autodiff --tx-simplify --cse --tx-fuse --tx-simplify --cse \
// RUN:   --tx-print-plan="mainloop=mma tokens=100 budget-mb=1" -o /dev/null | FileCheck %s --check-prefix=SMALL
// RUN: lcejit-opt %s --tx-autodiff --tx-simplify --cse --tx-fuse --tx-simplify --cse \
// RUN:   --tx-print-plan="arch=80" -o /dev/null | FileCheck %s --check-prefix=SM80
// RUN: lcejit-opt %s --tx-autodiff --tx-simplify --cse --tx-fuse --tx-simplify --cse \
// RUN:   --tx-print-plan="mainloop=mma output-types=-,bf16,bf16" -o /dev/null | FileCheck %s --check-prefix=BF16OUT
// RUN: lcejit-opt %s --tx-autodiff --tx-simplify --cse --tx-fuse --tx-simplify --cse \
// RUN:   --tx-print-plan="exact=true" -o /dev/null | FileCheck %s --check-prefix=EXACT
//
// The pass does not change the IR (it must not fire on the IR):
// RUN: lcejit-opt %s --tx-autodiff --tx-simplify --cse --tx-fuse --tx-simplify --cse > %t.fused.mlir
// RUN: lcejit-opt %t.fused.mlir --tx-print-plan="mainloop=mma tokens=100" -o %t.after.mlir > /dev/null
// RUN: diff %t.fused.mlir %t.after.mlir
//
// Kernel names of the backward use one GEMM counter shared with the forward; the checks
// below capture them (tx-print-plan-kernel-names.mlir checks the names that
// docs/architecture.md promises).

// The default options on sm_90a: every bf16 GEMM on the wgmma mainloop (TMA operands,
// 384 threads); the forward and dZ GEMMs on 128x128 ping-pong tiles, dA and dB on
// 128x256 cooperative ones; the forward GEMM one CTA per (row tile, split) with splits
// of about 32 column tiles; the f32 function (@simt) stays on the SIMT path.
// WGMMA-LABEL: // plan @lce{{$}}
// WGMMA-NEXT: // decision: bucket: N in [4097, 16384] (powers of four from 256)
// WGMMA-NEXT: // decision: mainloop: wgmma for bf16 GEMMs whose K and column count are multiples of 8 (TMA operands, producer + 2 consumer warpgroups): forward and dZ 128x128x64, 6 stages, ping-pong; dA and dB 128x256x64, 4 stages, cooperative
// WGMMA-NEXT: // decision: forward GEMM: tile 128x128x64 (wgmma.bf16, 6 stages, 384 threads, ping-pong consumers), 8 column tiles -> 1 column splits of about 8 tiles, one CTA per (row tile, split); 2 partial entries per row; CTAs of 2 adjacent row tiles as clusters sharing each W tile by TMA multicast when a call's row tiles are a multiple of 2
// WGMMA: "math": "wgmma.bf16",
// WGMMA-NEXT: "tile": {
// WGMMA-NEXT: "bk": 64,
// WGMMA-NEXT: "bm": 128,
// WGMMA-NEXT: "bn": 128,
// WGMMA-NEXT: "cluster_m": 2,
// WGMMA-NEXT: "pingpong": true,
// WGMMA-NEXT: "stages": 6,
// WGMMA-NEXT: "warps_m": 3,
// WGMMA-NEXT: "warps_n": 4
// WGMMA: "kind": "gemm_reduce",
// WGMMA-NEXT: "name": "lce_fwd0"
// WGMMA: "math": "wgmma.bf16",
// WGMMA-NOT: "cluster_m"
// WGMMA: "pingpong": true,
// WGMMA: "kind": "gemm_dz",
// WGMMA: "math": "wgmma.bf16",
// WGMMA: "tile": {
// WGMMA-NEXT: "bk": 64,
// WGMMA-NEXT: "bm": 128,
// WGMMA-NEXT: "bn": 256,
// WGMMA-NEXT: "stages": 4,
// WGMMA: "kind": "gemm_dlhs",
// WGMMA: "math": "wgmma.bf16",
// WGMMA: "kind": "gemm_drhs",
// WGMMA: "splits": 2,
// WGMMA-LABEL: // plan @simt{{$}}
// WGMMA: "math": "simt.f32",

// The default options with the mma.sync mainloop: N = 8192 (bucket (4096, 16384]),
// sm_90a, 512 MiB, fast precision (dZ as one bf16 operand), f32 outputs.
// The schedule of the LCE: row kernel 0 (valid count, clamped target), the forward
// GEMM, row kernel 1 (lse, row losses, gradient scales), the chunk loop dZ -> dH, dW,
// and the last row kernel (the loss).
// CHECK-LABEL: // plan @lce{{$}}
// CHECK-NEXT: // decision: bucket: N in [4097, 16384] (powers of four from 256)
// CHECK-NEXT: // decision: mainloop: mma.sync (asked for by the caller)
// CHECK-NEXT: // decision: forward GEMM: tile 128x128x64 (8 warps, 3 stages, mma.sync.bf16), 8 column tiles; 33 row blocks at N = 4097 (bucket low) -> 8 column splits to fill 132 SMs twice
// [Note: the exact target logit]: the row loss takes the target logit summed again in f64.
// CHECK-NEXT: // decision: loss: lce_zy0 sums the target logit again in f64 (N*64 multiply-adds) for the row loss log1p(exp(z_y - v_y)*S'): on a peaked row the f32 GEMM's own z_y error would be a relative error of the loss ([Note: the exact target logit]){{$}}
// CHECK-NEXT: // decision: backward: vocab-chunked recompute; dZ as bf16 (fast: one bf16 operand, rounded once from f32); chunk width and row blocks chosen per call from N and the 512 MiB budget (see 'run schedule'){{$}}
// CHECK-NEXT: // decision: dZ residual: the target column's bf16 rounding of dZ, added back as a rank-1 update in f32 (darg0[r] += res[r]*arg1[t_r] in dA's last chunk, darg1[t_r] += res[r]*arg0[r] after the chunk loop, summed per target in row order){{$}}
// CHECK-NEXT: // decision: backward: materialized schedule not taken: the GEMMs are not on the wgmma mainloop
// [Note: the target column's dZ]: a row kernel before the chunk loop forms dZ at the target
// column from the loss's terms; the dZ GEMM selects it there.
// CHECK-NEXT: // decision: backward: lce_dzt0 forms dZ at each row's target column as a*expm1(-log1p(X)) + (a + b), {{.*}}([Note: the target column's dZ]){{$}}
// The forward's partials and the row values that only the blocked steps read hold one
// block's rows.
// CHECK-NEXT: // decision: rows: steps 1..7 may run per block of rows (at least 1024 rows) when the budget needs it; partials0, row_l1_2, row_l1_3, row_l1_4, target_logit0, dz_residual0, target_dz0 hold one block's rows{{$}}
// CHECK-NEXT: // decision: target groups ([Note: a group's first and last rows]): each target's first and last rows found by lce_dzgrp0 for the f32 correction (8000 bytes, zeroed once per call): a row whose target no other row has is added without a scan
// CHECK-NEXT: // decision: run schedule (example): N = 4097: 1 row block of 4097 rows, 1 chunk of 1024 columns; workspace 8.5 MiB of the 512.0 MiB budget; one block, one chunk: everything fits
// CHECK-NEXT: // decision: run schedule (example): N = 16384: 1 row block of 16384 rows, 1 chunk of 1024 columns; workspace 34.0 MiB of the 512.0 MiB budget; one block, one chunk: everything fits
// CHECK-NEXT: {
// CHECK-NEXT: "bucket": {
// CHECK-NEXT: "high": 16384,
// CHECK-NEXT: "low": 4097
// CHECK-NEXT: },
// CHECK: "kind": "row",
// CHECK-NEXT: "name": "lce_row0"
// CHECK: "reductions": [
// CHECK-NEXT: "logsumexp",
// CHECK-NEXT: "sum"
// CHECK-NEXT: ]
// CHECK: "kind": "gemm_reduce",
// CHECK-NEXT: "name": "lce_fwd0"
// [Note: the exact target logit]: the target logit again, from the forward's operands.
// CHECK: "kind": "row_dot",
// CHECK-NEXT: "name": "lce_zy0"
// The row loss lse − z_y reads the logsumexp pair: log1p(exp(z_y − v_y)·(expm1(m − z_y) +
// exp(m − z_y)·t)) ([Note: lse minus a logit] in Planner.cpp).
// CHECK: "component": "max",
// CHECK: "component": "rest_sum",
// CHECK: "op": "expm1"
// CHECK: "op": "log1p"
// CHECK: "kind": "row",
// CHECK-NEXT: "name": "lce_row1"
// CHECK: "format": "bf16",
// CHECK: "kind": "gemm_dz",
// CHECK-NEXT: "name": "[[DZ:lce_dz[0-9]+]]"
// CHECK: "kind": "gemm_dlhs",
// CHECK-NEXT: "name": "[[DLHS:lce_dlhs[0-9]+]]"
// CHECK: "out_type": "f32",
// CHECK: "kind": "gemm_drhs",
// CHECK-NEXT: "name": "[[DRHS:lce_drhs[0-9]+]]"
// [Note: the target-column residual]: dW's part of it runs after the loop, in the blocked
// steps, after a kernel that finds each target's first and last rows ([Note: a group's
// first and last rows]) in a zeroed buffer both name.
// CHECK: "find_groups": true,
// CHECK-NEXT: "groups": {
// CHECK-NEXT: "index": [[GRP:[0-9]+]],
// CHECK: "kind": "target_correction",
// CHECK-NEXT: "name": "[[DZGRP:lce_dzgrp[0-9]+]]"
// CHECK: "groups": {
// CHECK-NEXT: "index": [[GRP]],
// CHECK: "kind": "target_correction",
// CHECK-NEXT: "name": "[[DZRES:lce_dzres[0-9]+]]"
// CHECK: "kind": "row",
// CHECK-NEXT: "name": "lce_row2"
// CHECK-NOT: "kind": "cast"
// CHECK: "loop_cols": 1000,
// CHECK: "schedule": {
// CHECK-NEXT: "block_rows": 0,
// CHECK-NEXT: "blocked_steps": [
// CHECK-NEXT: 1,
// CHECK-NEXT: 7
// CHECK-NEXT: ],
// CHECK-NEXT: "budget_bytes": 536870912,
// CHECK: "splits": 8,
// CHECK-NEXT: "steps": [
// CHECK-NEXT: {
// CHECK-NEXT: "launch": "lce_row0"
// CHECK-NEXT: },
// CHECK-NEXT: {
// CHECK-NEXT: "launch": "lce_fwd0"
// CHECK-NEXT: },
// CHECK-NEXT: {
// CHECK-NEXT: "launch": "lce_zy0"
// CHECK-NEXT: },
// CHECK-NEXT: {
// CHECK-NEXT: "launch": "lce_row1"
// CHECK-NEXT: },
// CHECK-NEXT: {
// CHECK-NEXT: "launch": "lce_dzt0"
// CHECK-NEXT: },
// CHECK-NEXT: {
// CHECK-NEXT: "chunk_loop": [
// CHECK-NEXT: "[[DZ]]",
// CHECK-NEXT: "[[DLHS]]",
// CHECK-NEXT: "[[DRHS]]"
// CHECK-NEXT: ]
// CHECK-NEXT: },
// CHECK-NEXT: {
// CHECK-NEXT: "launch": "[[DZGRP]]"
// CHECK-NEXT: },
// CHECK-NEXT: {
// CHECK-NEXT: "launch": "[[DZRES]]"
// CHECK-NEXT: },
// CHECK-NEXT: {
// CHECK-NEXT: "launch": "lce_row2"
// CHECK-NEXT: }
// CHECK-NEXT: ],
// CHECK-NEXT: "target": {
// CHECK-NEXT: "arch": "sm_90a",
// CHECK: "name": "partials0"
// CHECK: "name": "row_l1_4"
// CHECK: "name": "dz_residual0"
// CHECK-NOT: dlhs_acc
// CHECK: "block_local": true,
// CHECK-NEXT: "bytes_fixed": 0,
// CHECK-NEXT: "bytes_per_row": 0,
// CHECK-NEXT: "bytes_per_row_col": 2,
// CHECK-NEXT: "init": "none",
// CHECK-NEXT: "name": "dz{{[0-9]+}}"
// CHECK-NOT: dz_lo
// CHECK: // plan @simt
// The f32 variant runs on SIMT cores with a 64x64 tile, and its dZ chunk is plain f32.
// CHECK-NEXT: // decision: bucket: N in [4097, 16384] (powers of four from 256)
// CHECK-NEXT: // decision: mainloop: mma.sync (asked for by the caller)
// CHECK-NEXT: // decision: forward GEMM: tile 64x64x16 (8 warps, 2 stages, simt.f32), 16 column tiles; 65 row blocks at N = 4097 (bucket low) -> 5 column splits to fill 132 SMs twice
// CHECK-NEXT: // decision: loss: simt_zy0 sums the target logit again in f64
// CHECK-NEXT: // decision: backward: vocab-chunked recompute; dZ as f32 (f32 operands, SIMT backward); chunk width and row blocks chosen per call from N and the 512 MiB budget (see 'run schedule'){{$}}
// CHECK: "format": "f32",
// CHECK: "math": "simt.f32",
// CHECK: "kind": "gemm_dz",
// CHECK-NEXT: "name": "simt_dz{{[0-9]+}}"
// CHECK: "splits": 5,
// CHECK-NOT: dz_lo

// tokens=100 lands in the first bucket [0, 256]: the small tile, and splits chosen for
// N = 1 (every column tile its own split).
// T100: // decision: bucket: N in [0, 256] (powers of four from 256)
// T100-NEXT: // decision: mainloop: mma.sync (asked for by the caller)
// T100-NEXT: // decision: forward GEMM: tile 64x128x32 (4 warps, 3 stages, mma.sync.bf16), 8 column tiles; 1 row blocks at N = 1 (bucket low) -> 8 column splits to fill 132 SMs twice
// T100-NEXT: // decision: loss: lce_zy0
// T100-NEXT: // decision: backward: vocab-chunked recompute; dZ as bf16
// T100: // decision: run schedule (example): N = 1: 1 row block of 1 rows, 1 chunk of 1024 columns; workspace 0.0 MiB of the 512.0 MiB budget; one block, one chunk: everything fits
// T100: "high": 256,
// T100-NEXT: "low": 0
// T100: "splits": 8,

// tokens=5000 is in the same bucket as the default (the Program would be reused).
// T5000: // decision: bucket: N in [4097, 16384] (powers of four from 256)
// T5000-NEXT: // decision: mainloop: mma.sync (asked for by the caller)
// T5000-NEXT: // decision: forward GEMM: tile 128x128x64 (8 warps, 3 stages, mma.sync.bf16), 8 column tiles; 33 row blocks at N = 4097 (bucket low) -> 8 column splits to fill 132 SMs twice
// T5000-NEXT: // decision: loss: lce_zy0
// T5000-NEXT: // decision: backward: vocab-chunked recompute; dZ as bf16

// tokens=100000: enough row blocks that one split fills the GPU (smaller partials); at
// N = 262144 the 512 MiB budget no longer holds all rows with all 1000 columns of dZ, so
// such a call runs in two row blocks.
// T100K: // decision: bucket: N in [65537, 262144] (powers of four from 256)
// T100K-NEXT: // decision: mainloop: mma.sync (asked for by the caller)
// T100K-NEXT: // decision: forward GEMM: tile 128x128x64 (8 warps, 3 stages, mma.sync.bf16), 8 column tiles; 513 row blocks at N = 65537 (bucket low) -> 1 column splits to fill 132 SMs twice
// T100K: // decision: run schedule (example): N = 65537: 1 row block of 65537 rows, 1 chunk of 1024 columns; workspace 130.8 MiB of the 512.0 MiB budget; one block, one chunk: everything fits
// T100K-NEXT: // decision: run schedule (example): N = 262144: 2 row blocks of 131072 rows, 1 chunk of 1024 columns; workspace 262.8 MiB of the 512.0 MiB budget; rows blocked to leave room for wide chunks
// T100K: "splits": 1,
// T100K: "bytes_per_row": 12,
// T100K-NEXT: "bytes_per_row_col": 0,
// T100K-NEXT: "init": "none",
// T100K-NEXT: "name": "partials0"

// budget-mb=1 in the bucket [4097, 16384]: at N = 4097 rows are cut into 5 blocks of 896
// (fewer rows would not hold a useful chunk); at N = 16384 into 16 blocks of 1024: the
// per-row buffers that only the blocked steps read (partials, lse, ...) hold one block's
// rows, so they no longer grow with N.
// TIGHT: // decision: run schedule (example): N = 4097: 5 row blocks of 896 rows, 3 chunks of 384 columns; workspace 0.8 MiB of the 1.0 MiB budget; rows blocked to leave room for wide chunks
// TIGHT-NEXT: // decision: run schedule (example): N = 16384: 16 row blocks of 1024 rows, 4 chunks of 256 columns; workspace 0.8 MiB of the 1.0 MiB budget; rows blocked to leave room for wide chunks

// exact=true: dZ is split into bf16 hi + lo (two arrays of 2 bytes per element), and
// the backward GEMMs take both.
// EXACT: // decision: mainloop: mma.sync (exact precision: dZ is two bf16 operands)
// EXACT: // decision: backward: vocab-chunked recompute; dZ as split_bf16 (exact: bf16 hi + lo, each backward GEMM twice)
// EXACT: "format": "split_bf16",
// EXACT: "kind": "gemm_dz",
// EXACT: "bytes_per_row_col": 2,
// EXACT-NEXT: "init": "none",
// EXACT-NEXT: "name": "dz{{[0-9]+}}"
// EXACT: "bytes_per_row_col": 2,
// EXACT-NEXT: "init": "none",
// EXACT-NEXT: "name": "dz_lo{{[0-9]+}}"

// budget-mb=1 in the bucket [0, 256]: everything fits.
// SMALL: // decision: run schedule (example): N = 256: 1 row block of 256 rows, 1 chunk of 1024 columns; workspace 0.5 MiB of the 1.0 MiB budget; one block, one chunk: everything fits
// SMALL-NOT: OVER BUDGET

// arch=80: the target is sm_80; the decisions do not depend on it yet (mma.sync runs
// on both).
// SM80: // decision: mainloop: mma.sync (sm_80 has no wgmma)
// SM80: // decision: forward GEMM: tile 128x128x64 (8 warps, 3 stages, mma.sync.bf16)
// SM80: "arch": "sm_80",

// output-types=-,bf16,bf16: dH is accumulated in an f32 workspace over the chunks and
// cast once at the end (lce_cast); dW is written as bf16 by the dW kernel directly, so
// rows are never blocked (a bf16 dW cannot accumulate over row blocks).
// BF16OUT: // decision: backward: vocab-chunked recompute; dZ as bf16 (fast: one bf16 operand, rounded once from f32); chunk width and row blocks chosen per call from N and the 512 MiB budget (see 'run schedule'); an f32 accumulator for d{{H|arg0}} (256 B per row of a block)
// With a bf16 dW, dB's part of the target-column residual comes from group sums that a
// TargetCorrection in the chunk loop writes and dB's epilogue adds before the rounding
// ([Note: target group sums]): 2 B per row and column of A, 4 B per 2048 rows and column.
// BF16OUT-NEXT: // decision: dZ residual: the target column's bf16 rounding of dZ, added back as a rank-1 update in f32 (darg0[r] += res[r]*arg1[t_r] in dA's last chunk, darg1 is bf16, written once per chunk: its target rows get the sums of res[r]*arg0[r] over the rows of each 2048-row block with that target (summed per chunk in row order after the dZ GEMM, 130 B per row of workspace) in dB's epilogue, before the rounding){{$}}
// BF16OUT-NEXT: // decision: backward: materialized schedule not taken: the GEMMs are not on the wgmma mainloop
// BF16OUT-NEXT: // decision: backward: lce_dzt0 forms dZ at each row's target column as
// BF16OUT-NEXT: // decision: rows: never blocked: kernel 'lce_drhs{{[0-9]+}}' writes a bf16 gradient
// (Past the RowDot kernel, whose "out" is the target logit.)
// BF16OUT: "kind": "row_dot",
// BF16OUT: "out": {
// BF16OUT-NEXT: "index": [[ACC:[0-9]+]],
// BF16OUT-NEXT: "space": "workspace"
// BF16OUT-NEXT: },
// (A kernel's "kind" follows its body: the group sums' body comes after dA's kind.)
// BF16OUT: "kind": "gemm_dlhs",
// BF16OUT: "sums": {
// BF16OUT-NEXT: "cols": 1000,
// BF16OUT-NEXT: "group_rows": 2048,
// BF16OUT-NEXT: "head": {
// BF16OUT-NEXT: "index": [[HEAD:[0-9]+]],
// BF16OUT: "sums": {
// BF16OUT-NEXT: "index": [[SUMS:[0-9]+]],
// BF16OUT: "kind": "target_correction",
// BF16OUT-NEXT: "name": "lce_dzsum0"
// BF16OUT: "out": {
// BF16OUT-NEXT: "index": 2,
// BF16OUT-NEXT: "space": "output"
// BF16OUT-NEXT: },
// BF16OUT-NEXT: "out_type": "bf16",
// BF16OUT-NEXT: "target_sums": {
// BF16OUT-NEXT: "cols": 1000,
// BF16OUT-NEXT: "group_rows": 2048,
// BF16OUT-NEXT: "head": {
// BF16OUT-NEXT: "index": [[HEAD]],
// BF16OUT: "sums": {
// BF16OUT-NEXT: "index": [[SUMS]],
// BF16OUT: "kind": "gemm_drhs",
// BF16OUT: "in": {
// BF16OUT-NEXT: "index": [[ACC]],
// BF16OUT-NEXT: "space": "workspace"
// BF16OUT-NEXT: },
// BF16OUT-NEXT: "k": 64,
// BF16OUT-NEXT: "out": {
// BF16OUT-NEXT: "index": 1,
// BF16OUT-NEXT: "space": "output"
// BF16OUT-NEXT: },
// BF16OUT-NEXT: "out_type": "bf16"
// BF16OUT-NEXT: },
// BF16OUT-NEXT: "kind": "cast",
// BF16OUT-NEXT: "name": "[[CAST:lce_cast[0-9]+]]"
// BF16OUT: "outputs": [
// BF16OUT-NEXT: {
// BF16OUT-NEXT: "dtype": "f32",
// BF16OUT-NEXT: "name": "result0",
// BF16OUT: "dtype": "bf16",
// BF16OUT-NEXT: "name": "result1",
// BF16OUT: "dtype": "bf16",
// BF16OUT-NEXT: "name": "result2",
// BF16OUT: "chunk_loop": [
// BF16OUT: "launch": "[[CAST]]"
// BF16OUT-NEXT: },
// BF16OUT-NEXT: {
// BF16OUT-NEXT: "launch": "lce_row2"
// BF16OUT: "name": "dz{{[0-9]+}}"
// BF16OUT: "block_local": true,
// BF16OUT-NEXT: "bytes_fixed": 0,
// BF16OUT-NEXT: "bytes_per_row": 256,
// BF16OUT-NEXT: "bytes_per_row_col": 0,
// BF16OUT-NEXT: "init": "none",
// BF16OUT-NEXT: "name": "dlhs_acc{{[0-9]+}}"

func.func @lce(%H: tensor<?x64xbf16>, %W: tensor<1000x64xbf16>, %y: tensor<?x1xi64>) -> (tensor<f32>, tensor<?x64xf32>, tensor<1000x64xf32>) {
  %z0 = tx.matmul %H, %W {transpose_rhs} : tensor<?x64xbf16>, tensor<1000x64xbf16> -> tensor<?x1000xf32>
  %c = tx.constant 30.0 : f32 : tensor<f32>
  %z1 = tx.div %z0, %c : tensor<?x1000xf32>, tensor<f32> -> tensor<?x1000xf32>
  %z2 = tx.tanh %z1 : tensor<?x1000xf32> -> tensor<?x1000xf32>
  %z = tx.mul %c, %z2 : tensor<f32>, tensor<?x1000xf32> -> tensor<?x1000xf32>
  %lse = tx.logsumexp %z {axis = 1 : i64} : tensor<?x1000xf32> -> tensor<?x1xf32>
  %ign = tx.constant -100 : i64 : tensor<i64>
  %valid = tx.cmp ne, %y, %ign : tensor<?x1xi64>, tensor<i64> -> tensor<?x1xi1>
  %zero_i = tx.constant 0 : i64 : tensor<i64>
  %yc = tx.select %valid, %y, %zero_i : tensor<?x1xi1>, tensor<?x1xi64>, tensor<i64> -> tensor<?x1xi64>
  %zy = tx.gather %z, %yc {axis = 1 : i64} : tensor<?x1000xf32>, tensor<?x1xi64> -> tensor<?x1xf32>
  %l = tx.sub %lse, %zy : tensor<?x1xf32>, tensor<?x1xf32> -> tensor<?x1xf32>
  %zf = tx.constant 0.0 : f32 : tensor<f32>
  %lm = tx.select %valid, %l, %zf : tensor<?x1xi1>, tensor<?x1xf32>, tensor<f32> -> tensor<?x1xf32>
  %s = tx.reduce_sum %lm : tensor<?x1xf32> -> tensor<f32>
  %vf = tx.cast %valid : tensor<?x1xi1> -> tensor<?x1xf32>
  %cnt = tx.reduce_sum %vf : tensor<?x1xf32> -> tensor<f32>
  %one = tx.constant 1.0 : f32 : tensor<f32>
  %den = tx.max %cnt, %one : tensor<f32>, tensor<f32> -> tensor<f32>
  %loss = tx.div %s, %den : tensor<f32>, tensor<f32> -> tensor<f32>
  %dH, %dW = tx.grad %loss wrt (%H, %W) : tensor<f32>, tensor<?x64xbf16>, tensor<1000x64xbf16> -> tensor<?x64xf32>, tensor<1000x64xf32>
  return %loss, %dH, %dW : tensor<f32>, tensor<?x64xf32>, tensor<1000x64xf32>
}

func.func @simt(%H: tensor<?x64xf32>, %W: tensor<1000x64xf32>, %y: tensor<?x1xi64>) -> (tensor<f32>, tensor<?x64xf32>, tensor<1000x64xf32>) {
  %z0 = tx.matmul %H, %W {transpose_rhs} : tensor<?x64xf32>, tensor<1000x64xf32> -> tensor<?x1000xf32>
  %c = tx.constant 30.0 : f32 : tensor<f32>
  %z1 = tx.div %z0, %c : tensor<?x1000xf32>, tensor<f32> -> tensor<?x1000xf32>
  %z2 = tx.tanh %z1 : tensor<?x1000xf32> -> tensor<?x1000xf32>
  %z = tx.mul %c, %z2 : tensor<f32>, tensor<?x1000xf32> -> tensor<?x1000xf32>
  %lse = tx.logsumexp %z {axis = 1 : i64} : tensor<?x1000xf32> -> tensor<?x1xf32>
  %ign = tx.constant -100 : i64 : tensor<i64>
  %valid = tx.cmp ne, %y, %ign : tensor<?x1xi64>, tensor<i64> -> tensor<?x1xi1>
  %zero_i = tx.constant 0 : i64 : tensor<i64>
  %yc = tx.select %valid, %y, %zero_i : tensor<?x1xi1>, tensor<?x1xi64>, tensor<i64> -> tensor<?x1xi64>
  %zy = tx.gather %z, %yc {axis = 1 : i64} : tensor<?x1000xf32>, tensor<?x1xi64> -> tensor<?x1xf32>
  %l = tx.sub %lse, %zy : tensor<?x1xf32>, tensor<?x1xf32> -> tensor<?x1xf32>
  %zf = tx.constant 0.0 : f32 : tensor<f32>
  %lm = tx.select %valid, %l, %zf : tensor<?x1xi1>, tensor<?x1xf32>, tensor<f32> -> tensor<?x1xf32>
  %s = tx.reduce_sum %lm : tensor<?x1xf32> -> tensor<f32>
  %vf = tx.cast %valid : tensor<?x1xi1> -> tensor<?x1xf32>
  %cnt = tx.reduce_sum %vf : tensor<?x1xf32> -> tensor<f32>
  %one = tx.constant 1.0 : f32 : tensor<f32>
  %den = tx.max %cnt, %one : tensor<f32>, tensor<f32> -> tensor<f32>
  %loss = tx.div %s, %den : tensor<f32>, tensor<f32> -> tensor<f32>
  %dH, %dW = tx.grad %loss wrt (%H, %W) : tensor<f32>, tensor<?x64xf32>, tensor<1000x64xf32> -> tensor<?x64xf32>, tensor<1000x64xf32>
  return %loss, %dH, %dW : tensor<f32>, tensor<?x64xf32>, tensor<1000x64xf32>
}

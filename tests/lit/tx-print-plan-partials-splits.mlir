// RUN: lcejit-opt %s --tx-fuse --tx-print-plan="mainloop=mma tokens=100" -o /dev/null | FileCheck %s
// RUN: lcejit-opt %s --tx-fuse --tx-print-plan="tokens=100" -o /dev/null | FileCheck %s --check-prefix=WG
//
// Regression test: with two gemm_reduce ops of different
// widths, the planner sizes each partials buffer with the split count known when that
// GEMM is planned (8 for 1000 columns), but raises Program::splits to the maximum (32
// for 4000 columns) afterwards, and every gemm_reduce kernel runs with Program::splits
// (the executor passes program.splits, the grid is (ceil(N / bm), splits)). lce_fwd0
// then writes 4 * 32 * 2 = 256 bytes per row into partials0, sized 4 * 8 * 2 = 64: an
// out-of-bounds write into partials1. Fix: size the partials buffers at the end of
// build() (like scalar_slots), or keep a split count per GemmReduceKernel.
//
// Correct behaviour checked here (the single Program::splits model): every partials
// buffer holds splits x slots f32 per row.

// The same on the wgmma mainloop (splits of about 32 column tiles of 128, or more of at
// least 16 toward a quarter of the SMs: 1 for 1000 columns, 2 for 4000, each with two
// partial entries, one per ping-pong consumer): both partials buffers hold 4 entries x 2
// slots.
// WG-LABEL: // plan @two_heads
// WG: 8 column tiles -> 1 column splits of about 8 tiles
// WG: 32 column tiles -> 2 column splits of about 16 tiles
// WG: "splits": 4,
// WG: "bytes_per_row": 32,
// WG-NEXT: "bytes_per_row_col": 0,
// WG-NEXT: "init": "none",
// WG-NEXT: "name": "partials0"
// WG: "bytes_per_row": 32,
// WG-NEXT: "bytes_per_row_col": 0,
// WG-NEXT: "init": "none",
// WG-NEXT: "name": "partials1"

// CHECK-LABEL: // plan @two_heads
// CHECK: "splits": 32,
// CHECK: "bytes_per_row": 256,
// CHECK-NEXT: "bytes_per_row_col": 0,
// CHECK-NEXT: "init": "none",
// CHECK-NEXT: "name": "partials0"
// CHECK: "bytes_per_row": 256,
// CHECK-NEXT: "bytes_per_row_col": 0,
// CHECK-NEXT: "init": "none",
// CHECK-NEXT: "name": "partials1"
func.func @two_heads(%h: tensor<?x64xbf16>, %w: tensor<1000x64xbf16>, %v: tensor<4000x64xbf16>) -> (tensor<?x1xf32>, tensor<?x1xf32>) {
  %z = tx.matmul %h, %w {transpose_rhs} : tensor<?x64xbf16>, tensor<1000x64xbf16> -> tensor<?x1000xf32>
  %a = tx.logsumexp %z {axis = 1 : i64} : tensor<?x1000xf32> -> tensor<?x1xf32>
  %u = tx.matmul %h, %v {transpose_rhs} : tensor<?x64xbf16>, tensor<4000x64xbf16> -> tensor<?x4000xf32>
  %b = tx.logsumexp %u {axis = 1 : i64} : tensor<?x4000xf32> -> tensor<?x1xf32>
  return %a, %b : tensor<?x1xf32>, tensor<?x1xf32>
}

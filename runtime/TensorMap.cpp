//===- TensorMap.cpp - TMA tensor maps for the sm_90a GEMM operands --------===//

#include "runtime/TensorMap.h"

#include "lcejit/Error.h"
#include "compiler/support/Check.h"

#include <algorithm>

namespace lcejit::runtime {

namespace {
/// One tiled map of `rank` dims (128-byte swizzle, 256-byte L2 promotion, no OOB fill: what
/// every sm90 map of the mainloop uses); `what` names it in the error.
CUtensorMap encodeTiled(CUtensorMapDataType type, cuuint32_t rank, CUdeviceptr data,
                        const cuuint64_t *dims, const cuuint64_t *strides,
                        const cuuint32_t *box, const char *what) {
  const cuuint32_t elementStrides[3] = {1, 1, 1};
  CUtensorMap map;
  CUresult r = cudaDriver().tensorMapEncodeTiled(
      &map, type, rank, reinterpret_cast<void *>(static_cast<uintptr_t>(data)), dims, strides,
      box, elementStrides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throwCudaError(r, what, __FILE__, __LINE__);
  return map;
}
} // namespace

CUtensorMap encodeSm90Operand(const Sm90Operand &op) {
  LCEJIT_CHECK_ARG(op.data % 16 == 0, "sm90 operand data pointer 0x{:x} is not 16-byte aligned",
                   static_cast<uint64_t>(op.data));
  LCEJIT_CHECK_ARG(op.rows >= 0 && op.k >= 0, "sm90 operand of {} rows and k = {}", op.rows,
                   op.k);
  if (op.f32Out) {
    LCEJIT_CHECK_ARG(op.ld > 0 && op.ld % 4 == 0 && op.ld >= op.k,
                     "sm90 f32 output ld = {}: must be a positive multiple of 4 elements (TMA "
                     "rows are 16-byte aligned) and at least k = {}",
                     op.ld, op.k);
    const cuuint64_t dims[2] = {static_cast<cuuint64_t>(std::max<int64_t>(op.k, 1)),
                                static_cast<cuuint64_t>(std::max<int64_t>(op.rows, 1))};
    const cuuint32_t box[2] = {32, 64};
    const cuuint64_t strides[1] = {static_cast<cuuint64_t>(op.ld) * 4};
    return encodeTiled(CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, op.data, dims, strides, box,
                       "cuTensorMapEncodeTiled (sm90 f32 output)");
  }
  if (op.slabs > 0) {
    // [Note: stored values in dW]: (column in the slab, row of the slab, slab).
    LCEJIT_CHECK_ARG(op.slabStride > 0 && op.slabStride % 8 == 0,
                     "sm90 slab operand stride = {}: must be a positive multiple of 8 elements",
                     op.slabStride);
    LCEJIT_CHECK_ARG(op.boxRows >= 8 && op.boxRows <= 256 && op.boxRows % 8 == 0,
                     "sm90 operand box of {} rows (8 to 256, a multiple of 8)", op.boxRows);
    const int64_t slabRows = op.kMajor ? op.rows : op.k;
    const cuuint64_t dims[3] = {128, static_cast<cuuint64_t>(std::max<int64_t>(slabRows, 1)),
                                static_cast<cuuint64_t>(op.slabs)};
    const cuuint32_t box[3] = {64, static_cast<cuuint32_t>(op.kMajor ? op.boxRows : 64), 1};
    const cuuint64_t strides[2] = {256, static_cast<cuuint64_t>(op.slabStride) * 2};
    return encodeTiled(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, op.data, dims, strides, box,
                       "cuTensorMapEncodeTiled (sm90 slab operand)");
  }
  LCEJIT_CHECK_ARG(op.ld > 0 && op.ld % 8 == 0,
                   "sm90 operand ld = {}: must be a positive multiple of 8 elements (TMA rows "
                   "are 16-byte aligned)",
                   op.ld);
  const int64_t contiguous = op.kMajor ? op.k : op.rows;
  LCEJIT_CHECK_ARG(op.ld >= contiguous, "sm90 operand ld = {} is smaller than its {} contiguous "
                   "elements",
                   op.ld, contiguous);
  LCEJIT_CHECK_ARG(op.boxRows >= 8 && op.boxRows <= 256 && op.boxRows % 8 == 0,
                   "sm90 operand box of {} rows (8 to 256, a multiple of 8)", op.boxRows);

  const cuuint64_t rows = static_cast<cuuint64_t>(std::max<int64_t>(op.rows, 1));
  const cuuint64_t k = static_cast<cuuint64_t>(std::max<int64_t>(op.k, 1));
  cuuint64_t dims[2];
  cuuint32_t box[2];
  if (op.kMajor) {
    dims[0] = k;
    dims[1] = rows;
    box[0] = 64;
    box[1] = static_cast<cuuint32_t>(op.boxRows);
  } else {
    dims[0] = rows;
    dims[1] = k;
    box[0] = 64;
    box[1] = 64;
  }
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(op.ld) * 2};
  return encodeTiled(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, op.data, dims, strides, box,
                     "cuTensorMapEncodeTiled (sm90 GEMM operand)");
}

} // namespace lcejit::runtime

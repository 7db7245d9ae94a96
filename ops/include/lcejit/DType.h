//===- lcejit/DType.h - Element types --------------------------------------===//
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace lcejit {

/// Element types lcejit knows. Inputs of the loss are BF16, F16 or F32; targets I32 or
/// I64. I1 is the type of comparisons; F64 exists for the reference interpreters.
enum class DType : uint8_t { BF16, F16, F32, F64, I1, I32, I64 };

/// Bytes per element (I1 is stored as one byte).
int64_t dtypeSize(DType t);
bool isFloat(DType t);
bool isInteger(DType t); ///< I1, I32, I64
/// "bf16", "f16", "f32", "f64", "i1", "i32", "i64".
std::string_view dtypeName(DType t);
/// Parses the names above; also accepts "fp16", "fp32", "bfloat16", "float32", "int32", ...
std::optional<DType> parseDType(std::string_view name);

} // namespace lcejit

#include "compiler/support/Check.h"
#include "lcejit/DType.h"

#include <cctype>
#include <string>

namespace lcejit {

const char *errorKindName(ErrorKind kind) {
  switch (kind) {
  case ErrorKind::InvalidArgument: return "invalid argument";
  case ErrorKind::Unsupported: return "unsupported";
  case ErrorKind::NoDevice: return "no device";
  case ErrorKind::Cuda: return "CUDA error";
  case ErrorKind::Nvrtc: return "NVRTC error";
  case ErrorKind::Cache: return "cache";
  case ErrorKind::DeviceCheck: return "device check failed";
  case ErrorKind::Internal: return "internal error";
  }
  return "unknown";
}

void throwError(ErrorKind kind, const std::string &message) {
  throw Error(kind, fmt::format("lcejit: {}: {}", errorKindName(kind), message));
}

int64_t dtypeSize(DType t) {
  switch (t) {
  case DType::BF16: case DType::F16: return 2;
  case DType::F32: case DType::I32: return 4;
  case DType::F64: case DType::I64: return 8;
  case DType::I1: return 1;
  }
  return 0;
}

bool isFloat(DType t) {
  return t == DType::BF16 || t == DType::F16 || t == DType::F32 || t == DType::F64;
}

bool isInteger(DType t) { return !isFloat(t); }

std::string_view dtypeName(DType t) {
  switch (t) {
  case DType::BF16: return "bf16";
  case DType::F16: return "f16";
  case DType::F32: return "f32";
  case DType::F64: return "f64";
  case DType::I1: return "i1";
  case DType::I32: return "i32";
  case DType::I64: return "i64";
  }
  return "?";
}

std::optional<DType> parseDType(std::string_view name) {
  std::string s;
  for (char c : name)
    s.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  if (s == "bf16" || s == "bfloat16") return DType::BF16;
  if (s == "f16" || s == "fp16" || s == "float16" || s == "half") return DType::F16;
  if (s == "f32" || s == "fp32" || s == "float32" || s == "float") return DType::F32;
  if (s == "f64" || s == "fp64" || s == "float64" || s == "double") return DType::F64;
  if (s == "i1" || s == "bool") return DType::I1;
  if (s == "i32" || s == "int32") return DType::I32;
  if (s == "i64" || s == "int64") return DType::I64;
  return std::nullopt;
}

} // namespace lcejit

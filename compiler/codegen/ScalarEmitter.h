//===- ScalarEmitter.h - ScalarFunc -> CUDA C++ statements
//-----------------===//
//
// The scalar IR of docs/program.md ("Scalar functions") printed as
// straight-line CUDA: one `const T v<i> = ...;` per live instruction, in SSA
// order. Floats are f32 with the accurate libdevice functions (expf, logf,
// expm1f, log1pf; no fast-math) and lcejit::tanh_f32 for tanh ([Note: f32
// tanh] in lcejit_common.cuh), max and min propagate NaN, integer + - * wrap,
// comparisons are ordered (!= is true for NaN), casts follow the Cast
// row of docs/program.md (float -> int truncates toward zero and saturates, NaN
// -> 0; int -> float rounds to nearest; x -> i1 is x != 0).
//
// The same file owns how generated code names types and converts, loads and
// stores values, so the row and GEMM emitters agree on them.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "compiler/codegen/CodeWriter.h"
#include "compiler/plan/Program.h"

#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace lcejit::codegen {

/// The C++ type of a value of type `t` in generated code: f32 float, f64
/// double, i32 int, i64 long long, i1 bool. (bf16 and f16 are storage types:
/// their values are floats.)
const char *valueCType(DType t);

/// The type of the value an element stored as `storage` is loaded as (bf16, f16
/// -> f32).
DType valueTypeOf(DType storage);

/// An f32 literal that reads back as exactly (float)v: "1.5f", "-3.0f",
/// "1e-45f", or lcejit::f32_inf() / f32_nan() for non-finite values.
std::string f32Literal(double v);

/// An integer literal of type `t` (i32, i64, i1).
std::string intLiteral(int64_t v, DType t);

/// `expr` (a value of type `from`) converted to a value of type `to`.
std::string convertValue(const std::string &expr, DType from, DType to);

/// Expression: element `index` of the buffer `ptr` (a `void *` expression)
/// stored as `storage`, as a value of valueTypeOf(storage).
std::string loadElement(DType storage, std::string_view ptr,
                        std::string_view index);

/// Statement: stores `value` (a value of type `from`) as element `index` of
/// `ptr` in `storage` (floats round to nearest even; i1 as one byte 0/1).
std::string storeElement(DType storage, std::string_view ptr,
                         std::string_view index, const std::string &value,
                         DType from);

/// What an Arg instruction reads: an expression and its value type.
struct ArgValue {
  std::string expr;
  DType type = DType::F32;
};
using ArgFn = std::function<ArgValue(int32_t argIndex)>;

/// Which instructions the results of `f` depend on (indexed like f.insts).
std::vector<bool> liveInsts(const plan::ScalarFunc &f);

/// The argument indices read by live Arg instructions, ascending, without
/// duplicates.
std::vector<int32_t> liveArgs(const plan::ScalarFunc &f);

/// Checks that `f` is well formed (operand indices, arities, result indices);
/// throws Error(Internal) naming `what` otherwise.
void verifyScalarFunc(const plan::ScalarFunc &f, std::string_view what);

/// Writes the live instructions of `f` as `const T v<i> = ...;` lines and
/// returns the value name of every result (f.results order). `rowCount` is the
/// expression of N.
std::vector<std::string> emitScalarBody(CodeWriter &w,
                                        const plan::ScalarFunc &f,
                                        const ArgFn &arg,
                                        std::string_view rowCount);

} // namespace lcejit::codegen

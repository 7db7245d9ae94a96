//===- TargetColumn.cpp - The row operand an epilogue compares its column with ==//

#include "compiler/plan/TargetColumn.h"

namespace lcejit::plan {

TargetColumn findTargetColumn(const ScalarFunc &f, const std::vector<Operand> &args,
                              const std::function<bool(const Operand &)> &accept) {
  TargetColumn tc;
  auto inst = [&](int32_t i) -> const ScalarInst & { return f.insts[static_cast<size_t>(i)]; };
  auto throughCast = [&](int32_t i) {
    return inst(i).op == ScalarOp::Cast ? inst(i).operands[0] : i;
  };
  for (int32_t i = 0; i < static_cast<int32_t>(f.insts.size()); ++i) {
    const ScalarInst &in = inst(i);
    if (in.op != ScalarOp::CmpEq && in.op != ScalarOp::CmpNe)
      continue;
    for (int k = 0; k < 2; ++k) {
      const ScalarInst &c = inst(throughCast(in.operands[k]));
      if (!(c.op == ScalarOp::Arg &&
            args[static_cast<size_t>(c.argIndex)].kind == Operand::Kind::ColIndex))
        continue;
      const int32_t t = in.operands[1 - k];
      const int32_t ta = throughCast(t);
      const ScalarInst &ti = inst(ta);
      if (ti.op != ScalarOp::Arg)
        continue;
      const Operand &o = args[static_cast<size_t>(ti.argIndex)];
      if (o.kind != Operand::Kind::Row || !(o.dtype == DType::I32 || o.dtype == DType::I64) ||
          !accept(o))
        continue;
      if (tc.argInst >= 0 && !(args[static_cast<size_t>(tc.arg)] == o))
        tc.ambiguous = true;
      tc.argInst = ta;
      tc.value = t;
      tc.arg = ti.argIndex;
    }
  }
  return tc;
}

} // namespace lcejit::plan

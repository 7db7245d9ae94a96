//===- TestPrograms.cpp - Hand-built Programs for the emitter tests
//--------===//

#include "TestPrograms.h"

#include <cstdint>
#include <limits>
#include <stdexcept>

namespace lcejit::testing {

using namespace lcejit::plan;

int32_t FuncBuilder::push(ScalarInst i) {
  f_.insts.push_back(i);
  return static_cast<int32_t>(f_.insts.size()) - 1;
}

int32_t FuncBuilder::arg(int32_t index, DType type) {
  ScalarInst i;
  i.op = ScalarOp::Arg;
  i.type = type;
  i.argIndex = index;
  return push(i);
}

int32_t FuncBuilder::constF(double v) {
  ScalarInst i;
  i.op = ScalarOp::Const;
  i.type = DType::F32;
  i.fValue = v;
  return push(i);
}

int32_t FuncBuilder::constI(int64_t v, DType type) {
  ScalarInst i;
  i.op = ScalarOp::Const;
  i.type = type;
  i.iValue = v;
  return push(i);
}

int32_t FuncBuilder::rowCount() {
  ScalarInst i;
  i.op = ScalarOp::RowCount;
  i.type = DType::I64;
  return push(i);
}

int32_t FuncBuilder::op(ScalarOp op, DType type, int32_t a, int32_t b,
                        int32_t c) {
  ScalarInst i;
  i.op = op;
  i.type = type;
  i.operands[0] = a;
  i.operands[1] = b;
  i.operands[2] = c;
  return push(i);
}

int32_t FuncBuilder::result(int32_t inst) {
  f_.results.push_back(inst);
  return static_cast<int32_t>(f_.results.size()) - 1;
}

namespace {

Operand rowOperand(BufferRef b, DType t) {
  Operand o;
  o.kind = Operand::Kind::Row;
  o.buf = b;
  o.dtype = t;
  return o;
}

Operand slotOperand(int32_t slot) {
  Operand o;
  o.kind = Operand::Kind::Scalar;
  o.dtype = DType::F64;
  o.slot = slot;
  return o;
}

Operand simple(Operand::Kind k, DType t) {
  Operand o;
  o.kind = k;
  o.dtype = t;
  return o;
}

Operand partials(BufferRef b, int32_t kernel, int32_t slot, ReduceKind r) {
  Operand o;
  o.kind = Operand::Kind::Partials;
  o.buf = b;
  o.dtype = DType::F32;
  o.slot = slot;
  o.reduce = static_cast<int32_t>(r);
  o.partialsOf = kernel;
  return o;
}

RowKernel::Sink sink(RowKernel::Sink::Kind k, int32_t result) {
  RowKernel::Sink s;
  s.kind = k;
  s.result = result;
  return s;
}

/// z = acc, or softcap * tanh(acc / softcap).
int32_t logit(FuncBuilder &fb, int32_t acc, double softcap) {
  if (softcap <= 0)
    return acc;
  int32_t inv = fb.constF(1.0 / softcap);
  int32_t cap = fb.constF(softcap);
  int32_t t = fb.op(ScalarOp::Tanh, DType::F32,
                    fb.op(ScalarOp::Mul, DType::F32, acc, inv));
  return fb.op(ScalarOp::Mul, DType::F32, t, cap);
}

} // namespace

Program makeLceProgram(const LceOptions &o) {
  Program p;
  p.name = o.name;
  p.bucket = o.bucket;
  p.bucketLow = bucketLowerBound(o.bucket);
  p.target = Target{};
  const DType dzType = o.dzFormat == DzFormat::F32 ? DType::F32 : DType::BF16;

  p.inputs = {TensorSpec{"hidden", o.abType, {-1, o.d}},
              TensorSpec{"weight", o.abType, {o.v, o.d}},
              TensorSpec{"targets", DType::I64, {-1}}};
  p.outputs = {TensorSpec{"loss", DType::F32, {}},
               TensorSpec{"grad_hidden", o.dhType, {-1, o.d}},
               TensorSpec{"grad_weight", o.dwType, {o.v, o.d}}};
  const BufferRef hidden{Space::Input, 0}, weight{Space::Input, 1},
      targets{Space::Input, 2};
  const BufferRef loss{Space::Output, 0}, gradHidden{Space::Output, 1},
      gradWeight{Space::Output, 2};
  p.numScalarSlots = 3; // 0: valid rows, 1: loss sum, 2: 1 / valid rows
  p.splits = o.splits;
  p.workspace = {
      BufferSpec{"scalar_slots", 0, 8 * 3, BufferInit::Zero},
      BufferSpec{"error_word", 0, plan::kErrorWordBytes, BufferInit::Zero},
      BufferSpec{"partials0", 4 * o.splits * 3, 0, BufferInit::None},
      BufferSpec{"lse", 4, 0, BufferInit::None},
      BufferSpec{"valid", 1, 0, BufferInit::None},
      BufferSpec{"dz0", 0, 0, BufferInit::None, dtypeSize(dzType), true},
      BufferSpec{"dz_lo0", 0, 0, BufferInit::None,
                 o.dzFormat == DzFormat::SplitBF16 ? 2 : 0, true},
      BufferSpec{"dlhs_acc0", 4 * o.d, 0, BufferInit::None}};
  const BufferRef partialsBuf{Space::Workspace, 2}, lseBuf{Space::Workspace, 3},
      validBuf{Space::Workspace, 4}, dzBuf{Space::Workspace, 5},
      dzLoBuf{Space::Workspace, 6}, dlhsAcc{Space::Workspace, 7};

  // 0: check targets, count valid rows, store the valid mask.
  {
    RowKernel k;
    FuncBuilder fb;
    int32_t y = fb.arg(0, DType::I64);
    int32_t valid =
        fb.op(ScalarOp::CmpNe, DType::I1, y, fb.constI(-100, DType::I64));
    int32_t low =
        fb.op(ScalarOp::CmpLt, DType::I1, y, fb.constI(0, DType::I64));
    int32_t high =
        fb.op(ScalarOp::CmpGe, DType::I1, y, fb.constI(o.v, DType::I64));
    int32_t bad = fb.op(ScalarOp::And, DType::I1, valid,
                        fb.op(ScalarOp::Or, DType::I1, low, high));
    int32_t one = fb.op(ScalarOp::Cast, DType::F32, valid);
    int32_t rBad = fb.result(bad), rY = fb.result(y), rOne = fb.result(one),
            rValid = fb.result(valid);
    k.func = fb.take();
    k.args = {rowOperand(targets, DType::I64)};
    RowKernel::Sink check = sink(RowKernel::Sink::Kind::CheckRow, rBad);
    check.aux = rY;
    RowKernel::Sink count = sink(RowKernel::Sink::Kind::SumScalar, rOne);
    count.slot = 0;
    RowKernel::Sink store = sink(RowKernel::Sink::Kind::StoreRow, rValid);
    store.buf = validBuf;
    store.dtype = DType::I1;
    k.sinks = {check, count, store};
    p.kernels.push_back(Kernel{o.name + "_row0", k});
  }
  // 1: logsumexp of z and the target logit, per row, partial per split.
  const int32_t fwdIndex = static_cast<int32_t>(p.kernels.size());
  {
    GemmReduceKernel k;
    k.gemm.math = o.fwdMath;
    k.gemm.abType = o.abType;
    k.gemm.tile = o.fwdTile;
    k.gemm.k = o.d;
    k.gemm.cols = o.v;
    k.gemm.a = hidden;
    k.gemm.b = weight;
    FuncBuilder fb;
    int32_t acc = fb.arg(0, DType::F32);
    int32_t col = fb.arg(1, DType::I64);
    int32_t y = fb.arg(2, DType::I64);
    int32_t z = logit(fb, acc, o.softcap);
    int32_t hit = fb.op(ScalarOp::CmpEq, DType::I1, col, y);
    int32_t zt = fb.op(ScalarOp::Select, DType::F32, hit, z, fb.constF(0.0));
    fb.result(z);
    fb.result(zt);
    k.gemm.epilogue = fb.take();
    k.gemm.args = {simple(Operand::Kind::Acc, DType::F32),
                   simple(Operand::Kind::ColIndex, DType::I64),
                   rowOperand(targets, DType::I64)};
    k.reductions = {ReduceKind::LogSumExp, ReduceKind::Sum};
    k.partials = partialsBuf;
    p.kernels.push_back(Kernel{o.name + "_fwd0", k});
  }
  // 2: lse and loss per row.
  {
    RowKernel k;
    FuncBuilder fb;
    int32_t lse = fb.arg(0, DType::F32);
    int32_t zt = fb.arg(1, DType::F32);
    int32_t valid = fb.arg(2, DType::I1);
    int32_t l =
        fb.op(ScalarOp::Select, DType::F32, valid,
              fb.op(ScalarOp::Sub, DType::F32, lse, zt), fb.constF(0.0));
    int32_t rLse = fb.result(lse), rLoss = fb.result(l);
    k.func = fb.take();
    k.args = {partials(partialsBuf, fwdIndex, 0, ReduceKind::LogSumExp),
              partials(partialsBuf, fwdIndex, 2, ReduceKind::Sum),
              rowOperand(validBuf, DType::I1)};
    RowKernel::Sink storeLse = sink(RowKernel::Sink::Kind::StoreRow, rLse);
    storeLse.buf = lseBuf;
    storeLse.dtype = DType::F32;
    RowKernel::Sink sum = sink(RowKernel::Sink::Kind::SumScalar, rLoss);
    sum.slot = 1;
    k.sinks = {storeLse, sum};
    p.kernels.push_back(Kernel{o.name + "_row1", k});
  }
  // 3: mean loss (stored once) and 1 / count for the backward.
  {
    RowKernel k;
    FuncBuilder fb;
    int32_t total = fb.arg(0, DType::F32);
    int32_t count = fb.arg(1, DType::F32);
    int32_t denom = fb.op(ScalarOp::Max, DType::F32, count, fb.constF(1.0));
    int32_t mean = fb.op(ScalarOp::Div, DType::F32, total, denom);
    int32_t inv = fb.op(ScalarOp::Div, DType::F32, fb.constF(1.0), denom);
    int32_t rMean = fb.result(mean), rInv = fb.result(inv);
    k.func = fb.take();
    k.args = {slotOperand(1), slotOperand(0)};
    RowKernel::Sink storeLoss = sink(RowKernel::Sink::Kind::StoreScalar, rMean);
    storeLoss.buf = loss;
    storeLoss.dtype = DType::F32;
    RowKernel::Sink storeInv = sink(RowKernel::Sink::Kind::StoreScalar, rInv);
    storeInv.slot = 2;
    k.sinks = {storeLoss, storeInv};
    p.kernels.push_back(Kernel{o.name + "_row2", k});
  }
  // 4-6: per chunk: dZ, dH accumulate, dW.
  Step loop{Step::Kind::ChunkLoop, -1, {}};
  {
    GemmDzKernel k;
    k.gemm.math = o.fwdMath;
    k.gemm.abType = o.abType;
    k.gemm.tile = o.fwdTile;
    k.gemm.k = o.d;
    k.gemm.cols = o.v;
    k.gemm.a = hidden;
    k.gemm.b = weight;
    FuncBuilder fb;
    int32_t acc = fb.arg(0, DType::F32);
    int32_t col = fb.arg(1, DType::I64);
    int32_t y = fb.arg(2, DType::I64);
    int32_t lse = fb.arg(3, DType::F32);
    int32_t inv = fb.arg(4, DType::F32);
    int32_t valid = fb.arg(5, DType::I1);
    int32_t z = logit(fb, acc, o.softcap);
    int32_t prob = fb.op(ScalarOp::Exp, DType::F32,
                         fb.op(ScalarOp::Sub, DType::F32, z, lse));
    int32_t hit = fb.op(ScalarOp::Cast, DType::F32,
                        fb.op(ScalarOp::CmpEq, DType::I1, col, y));
    int32_t g = fb.op(ScalarOp::Mul, DType::F32,
                      fb.op(ScalarOp::Sub, DType::F32, prob, hit), inv);
    if (o.softcap > 0) { // d softcap*tanh(acc/softcap) / d acc = 1 - tanh^2
      int32_t t = fb.op(ScalarOp::Div, DType::F32, z, fb.constF(o.softcap));
      int32_t dt = fb.op(ScalarOp::Sub, DType::F32, fb.constF(1.0),
                         fb.op(ScalarOp::Mul, DType::F32, t, t));
      g = fb.op(ScalarOp::Mul, DType::F32, g, dt);
    }
    fb.result(fb.op(ScalarOp::Select, DType::F32, valid, g, fb.constF(0.0)));
    k.gemm.epilogue = fb.take();
    k.gemm.args = {simple(Operand::Kind::Acc, DType::F32),
                   simple(Operand::Kind::ColIndex, DType::I64),
                   rowOperand(targets, DType::I64),
                   rowOperand(lseBuf, DType::F32),
                   slotOperand(2),
                   rowOperand(validBuf, DType::I1)};
    k.format = o.dzFormat;
    k.dz = dzBuf;
    if (o.dzFormat == DzFormat::SplitBF16)
      k.dzLo = dzLoBuf;
    loop.loopKernels.push_back(static_cast<int32_t>(p.kernels.size()));
    p.kernels.push_back(Kernel{o.name + "_dz0", k});
  }
  {
    GemmDLhsKernel k;
    k.math = o.bwdMath;
    k.tile = o.bwdTile;
    k.format = o.dzFormat;
    k.bType = o.abType;
    k.k = o.d;
    k.dz = dzBuf;
    if (o.dzFormat == DzFormat::SplitBF16)
      k.dzLo = dzLoBuf;
    k.b = weight;
    k.out = dlhsAcc;
    loop.loopKernels.push_back(static_cast<int32_t>(p.kernels.size()));
    p.kernels.push_back(Kernel{o.name + "_dlhs0", k});
  }
  {
    GemmDRhsKernel k;
    k.math = o.bwdMath;
    k.tile = o.bwdTile;
    k.format = o.dzFormat;
    k.aType = o.abType;
    k.k = o.d;
    k.dz = dzBuf;
    if (o.dzFormat == DzFormat::SplitBF16)
      k.dzLo = dzLoBuf;
    k.a = hidden;
    k.out = gradWeight;
    k.outType = o.dwType;
    loop.loopKernels.push_back(static_cast<int32_t>(p.kernels.size()));
    p.kernels.push_back(Kernel{o.name + "_drhs0", k});
  }
  // 7: dH to its output type.
  {
    CastKernel k;
    k.in = dlhsAcc;
    k.out = gradHidden;
    k.outType = o.dhType;
    k.k = o.d;
    p.kernels.push_back(Kernel{o.name + "_cast0", k});
  }
  p.steps = {Step{Step::Kind::Launch, 0, {}},
             Step{Step::Kind::Launch, 1, {}},
             Step{Step::Kind::Launch, 2, {}},
             Step{Step::Kind::Launch, 3, {}},
             loop,
             Step{Step::Kind::Launch, 7, {}}};
  p.schedule.fixedChunkCols = o.chunkCols;
  p.loopCols = o.v;
  p.decisions = {"hand-built test program"};
  return p;
}

/// A row kernel that uses every ScalarOp, every operand kind a row kernel may
/// read and every sink kind, with i32/i64/i1/f32 values.
static Program makeAllOpsProgram() {
  LceOptions o;
  o.name = "ops";
  Program p = makeLceProgram(o);
  p.inputs.push_back(TensorSpec{"xs", DType::BF16, {-1}});
  p.inputs.push_back(TensorSpec{"ys", DType::F16, {-1}});
  p.inputs.push_back(TensorSpec{"counts", DType::I32, {-1}});
  p.inputs.push_back(TensorSpec{"bias", DType::F32, {}});
  p.outputs.push_back(TensorSpec{"out_f16", DType::F16, {-1}});
  p.outputs.push_back(TensorSpec{"out_i32", DType::I32, {-1}});
  p.outputs.push_back(TensorSpec{"out_scalar", DType::I64, {}});
  const BufferRef xs{Space::Input, 3}, ys{Space::Input, 4},
      counts{Space::Input, 5}, bias{Space::Input, 6};
  RowKernel k;
  FuncBuilder fb;
  int32_t x = fb.arg(0, DType::F32);
  int32_t y = fb.arg(1, DType::F32);
  int32_t c = fb.arg(2, DType::I32);
  int32_t b = fb.arg(3, DType::F32);
  int32_t row = fb.arg(4, DType::I64);
  int32_t lse = fb.arg(5, DType::F32);
  int32_t slot = fb.arg(6, DType::F32);
  int32_t n = fb.rowCount();
  int32_t s = fb.op(ScalarOp::Add, DType::F32, x, y);
  s = fb.op(ScalarOp::Sub, DType::F32, s, b);
  s = fb.op(ScalarOp::Mul, DType::F32, s, fb.constF(0.1));
  s = fb.op(ScalarOp::Div, DType::F32, s, fb.constF(3.0));
  s = fb.op(ScalarOp::Max, DType::F32, s,
            fb.op(ScalarOp::Neg, DType::F32, lse));
  s = fb.op(ScalarOp::Min, DType::F32, s, fb.constF(1e30));
  int32_t e =
      fb.op(ScalarOp::Exp, DType::F32, fb.op(ScalarOp::Abs, DType::F32, s));
  int32_t l = fb.op(ScalarOp::Log, DType::F32, e);
  int32_t t = fb.op(ScalarOp::Tanh, DType::F32, l);
  int32_t em = fb.op(ScalarOp::Expm1, DType::F32, t);
  int32_t lp =
      fb.op(ScalarOp::Log1p, DType::F32, fb.op(ScalarOp::Abs, DType::F32, em));
  int32_t f = fb.op(ScalarOp::Add, DType::F32, lp, slot);
  f = fb.op(ScalarOp::Add, DType::F32, f,
            fb.constF(-std::numeric_limits<double>::infinity()));
  int32_t ci = fb.op(ScalarOp::Cast, DType::I64, c);
  int32_t ii = fb.op(
      ScalarOp::Mul, DType::I64, fb.op(ScalarOp::Add, DType::I64, ci, row),
      fb.op(ScalarOp::Sub, DType::I64, n, fb.constI(INT64_MIN, DType::I64)));
  ii = fb.op(ScalarOp::Max, DType::I64, ii,
             fb.op(ScalarOp::Neg, DType::I64, ii));
  ii = fb.op(ScalarOp::Min, DType::I64, ii,
             fb.op(ScalarOp::Abs, DType::I64, ci));
  int32_t i32 = fb.op(ScalarOp::Cast, DType::I32, ii);
  i32 = fb.op(ScalarOp::Add, DType::I32, i32, fb.constI(INT32_MIN, DType::I32));
  int32_t fi = fb.op(ScalarOp::Cast, DType::I32, f); // float -> int truncates
  int32_t q1 = fb.op(ScalarOp::CmpEq, DType::I1, x, y);
  int32_t q2 = fb.op(ScalarOp::CmpNe, DType::I1, x, y);
  int32_t q3 = fb.op(ScalarOp::CmpLe, DType::I1, x, y);
  int32_t q4 = fb.op(ScalarOp::CmpGt, DType::I1, ci, row);
  int32_t q = fb.op(
      ScalarOp::And, DType::I1, fb.op(ScalarOp::Or, DType::I1, q1, q2),
      fb.op(ScalarOp::Not, DType::I1, fb.op(ScalarOp::And, DType::I1, q3, q4)));
  int32_t qf = fb.op(ScalarOp::Cast, DType::I1, f); // f != 0
  q = fb.op(ScalarOp::Or, DType::I1, q, qf);
  int32_t sel = fb.op(ScalarOp::Select, DType::F32, q, f,
                      fb.op(ScalarOp::Cast, DType::F32, fi));
  int32_t rSel = fb.result(sel), rI32 = fb.result(i32), rQ = fb.result(q),
          rI = fb.result(ii), rN = fb.result(n);
  k.func = fb.take();
  Operand scalarBias;
  scalarBias.kind = Operand::Kind::Scalar;
  scalarBias.buf = bias;
  scalarBias.dtype = DType::F32;
  k.args = {
      rowOperand(xs, DType::BF16),
      rowOperand(ys, DType::F16),
      rowOperand(counts, DType::I32),
      scalarBias,
      simple(Operand::Kind::RowIndex, DType::I64),
      partials(BufferRef{Space::Workspace, 2}, 1, 0, ReduceKind::LogSumExp),
      slotOperand(2)};
  RowKernel::Sink s1 = sink(RowKernel::Sink::Kind::StoreRow, rSel);
  s1.buf = BufferRef{Space::Output, 3};
  s1.dtype = DType::F16;
  RowKernel::Sink s2 = sink(RowKernel::Sink::Kind::StoreRow, rI32);
  s2.buf = BufferRef{Space::Output, 4};
  s2.dtype = DType::I32;
  RowKernel::Sink s3 = sink(RowKernel::Sink::Kind::CheckRow, rQ);
  s3.aux = rI;
  RowKernel::Sink s4 = sink(RowKernel::Sink::Kind::SumScalar, rSel);
  s4.slot = 1;
  RowKernel::Sink s5 = sink(RowKernel::Sink::Kind::StoreScalar, rN);
  s5.buf = BufferRef{Space::Output, 5};
  s5.dtype = DType::I64;
  k.sinks = {s1, s2, s3, s4, s5};
  p.kernels.push_back(Kernel{"ops_all", k});
  p.steps.push_back(
      Step{Step::Kind::Launch, static_cast<int32_t>(p.kernels.size()) - 1, {}});
  // A max-reduction GEMM with a column operand and a scalar from a buffer, so
  // every epilogue operand kind and reduce kind is compiled.
  {
    GemmReduceKernel g;
    g.gemm.math = MathMode::TensorCoreBF16;
    g.gemm.abType = DType::BF16;
    g.gemm.tile = TileConfig{64, 128, 32, 1, 4, 3};
    g.gemm.k = o.d;
    g.gemm.cols = o.v;
    g.gemm.a = BufferRef{Space::Input, 0};
    g.gemm.b = BufferRef{Space::Input, 1};
    p.inputs.push_back(TensorSpec{"col_bias", DType::BF16, {o.v}});
    FuncBuilder gb;
    int32_t acc = gb.arg(0, DType::F32);
    int32_t cb = gb.arg(1, DType::F32);
    int32_t sc = gb.arg(2, DType::F32);
    int32_t ri = gb.arg(3, DType::I64);
    int32_t z = gb.op(ScalarOp::Add, DType::F32,
                      gb.op(ScalarOp::Mul, DType::F32, acc, sc), cb);
    gb.result(z);
    gb.result(gb.op(ScalarOp::Cast, DType::F32, ri));
    gb.result(z);
    g.gemm.epilogue = gb.take();
    Operand colBias;
    colBias.kind = Operand::Kind::Col;
    colBias.buf = BufferRef{Space::Input, 7};
    colBias.dtype = DType::BF16;
    g.gemm.args = {simple(Operand::Kind::Acc, DType::F32), colBias, scalarBias,
                   simple(Operand::Kind::RowIndex, DType::I64)};
    g.reductions = {ReduceKind::Max, ReduceKind::Sum, ReduceKind::LogSumExp};
    p.workspace.push_back(
        BufferSpec{"partials_ops", 4 * o.splits * 4, 0, BufferInit::None});
    g.partials = BufferRef{Space::Workspace,
                           static_cast<int32_t>(p.workspace.size()) - 1};
    p.kernels.push_back(Kernel{"ops_gemm_max", g});
    p.steps.push_back(Step{
        Step::Kind::Launch, static_cast<int32_t>(p.kernels.size()) - 1, {}});
  }
  return p;
}

std::vector<std::string> testProgramNames() {
  return {"bf16", "bf16_softcap", "f32_simt", "f16", "small_bucket", "all_ops"};
}

Program makeTestProgram(const std::string &name) {
  LceOptions o;
  if (name == "bf16")
    return makeLceProgram(o);
  if (name == "bf16_softcap") {
    o.name = "lcesc";
    o.softcap = 30.0;
    o.d = 200; // K not a multiple of the tile's BK
    o.v = 1000;
    o.chunkCols = 512;
    return makeLceProgram(o);
  }
  if (name == "f32_simt") {
    o.name = "lce32";
    o.abType = DType::F32;
    o.d = 200;
    o.fwdTile = TileConfig{64, 64, 16, 2, 4, 2};
    o.bwdTile = TileConfig{64, 64, 16, 2, 4, 2};
    o.fwdMath = MathMode::SimtF32;
    o.bwdMath = MathMode::SimtF32;
    o.dzFormat = DzFormat::F32;
    o.dwType = DType::F32;
    o.dhType = DType::F32;
    o.chunkCols = 4096;
    return makeLceProgram(o);
  }
  if (name == "f16") {
    o.name = "lce16";
    o.abType = DType::F16;
    o.fwdMath = MathMode::TensorCoreF16;
    o.bwdMath = MathMode::SimtF32;
    o.bwdTile = TileConfig{64, 64, 16, 2, 4, 2};
    o.dzFormat = DzFormat::F32;
    o.dwType = DType::F16;
    o.dhType = DType::F16;
    o.v = 128256;
    return makeLceProgram(o);
  }
  if (name == "small_bucket") {
    o.name = "lcesb";
    o.bucket = 256;
    o.fwdTile = TileConfig{64, 128, 32, 1, 4, 3};
    o.bwdTile = TileConfig{64, 128, 32, 1, 4, 3};
    o.dwType = DType::F32;
    o.d = 64;
    o.v = 1000;
    o.chunkCols = 1024;
    return makeLceProgram(o);
  }
  if (name == "all_ops")
    return makeAllOpsProgram();
  throw std::invalid_argument("unknown test program " + name);
}

} // namespace lcejit::testing

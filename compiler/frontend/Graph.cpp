//===- Graph.cpp - The tensor-expression frontend -------------------------===//

#include "compiler/frontend/Graph.h"
#include "compiler/support/Check.h"
#include "compiler/support/ContentHash.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>

namespace lcejit::fe {

const char *opKindName(OpKind k) {
  switch (k) {
  case OpKind::Input: return "input";
  case OpKind::Constant: return "constant";
  case OpKind::Iota: return "iota";
  case OpKind::Dim: return "size";
  case OpKind::Matmul: return "matmul";
  case OpKind::Cast: return "cast";
  case OpKind::Broadcast: return "broadcast";
  case OpKind::Add: return "add";
  case OpKind::Sub: return "sub";
  case OpKind::Mul: return "mul";
  case OpKind::Div: return "div";
  case OpKind::Max: return "max";
  case OpKind::Neg: return "neg";
  case OpKind::Exp: return "exp";
  case OpKind::Log: return "log";
  case OpKind::Tanh: return "tanh";
  case OpKind::Cmp: return "cmp";
  case OpKind::Select: return "select";
  case OpKind::Sum: return "sum";
  case OpKind::MaxReduce: return "max_reduce";
  case OpKind::Mean: return "mean";
  case OpKind::LogSumExp: return "logsumexp";
  case OpKind::Gather: return "gather";
  case OpKind::Grad: return "grad";
  case OpKind::GradResult: return "grad_result";
  }
  return "?";
}

static const char *cmpName(Cmp c) {
  static const char *n[] = {"eq", "ne", "lt", "le", "gt", "ge"};
  return n[static_cast<int>(c)];
}

std::string shapeString(const Shape &s) {
  std::vector<std::string> parts;
  for (int64_t d : s)
    parts.push_back(d == kN ? "N" : std::to_string(d));
  return fmt::format("[{}]", fmt::join(parts, ", "));
}

const Shape &Tensor::shape() const { return graph_->node(id_).shape; }
DType Tensor::dtype() const { return graph_->node(id_).dtype; }

Graph::Graph(std::string name) : name_(std::move(name)) {
  LCEJIT_CHECK_ARG(!name_.empty(), "Graph: name must not be empty");
}

const Node &Graph::node(int32_t id) const {
  LCEJIT_CHECK(id >= 0 && id < static_cast<int32_t>(nodes_.size()), "node id {}", id);
  return nodes_[static_cast<size_t>(id)];
}

Tensor Graph::push(Node n) {
  nodes_.push_back(std::move(n));
  return Tensor(this, static_cast<int32_t>(nodes_.size()) - 1);
}

void Graph::checkOwned(const char *op, const char *arg, Tensor t) const {
  LCEJIT_CHECK_ARG(t.valid(), "{}: argument '{}' is an empty Tensor", op, arg);
  LCEJIT_CHECK_ARG(t.graph() == this, "{}: argument '{}' belongs to another graph", op, arg);
}

Shape Graph::broadcastOrThrow(const char *op, const Shape &a, const Shape &b) const {
  if (a.empty())
    return b;
  if (b.empty())
    return a;
  LCEJIT_CHECK_ARG(a.size() == b.size(),
                   "{}: shapes {} and {} have different ranks (broadcasting needs equal ranks "
                   "or a rank-0 operand)",
                   op, shapeString(a), shapeString(b));
  Shape out;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] == b[i])
      out.push_back(a[i]);
    else if (a[i] == 1)
      out.push_back(b[i]);
    else if (b[i] == 1)
      out.push_back(a[i]);
    else
      LCEJIT_CHECK_ARG(false, "{}: shapes {} and {} do not broadcast (dimension {})", op,
                       shapeString(a), shapeString(b), i);
  }
  return out;
}

Tensor Graph::input(const std::string &name, Shape shape, DType dtype) {
  LCEJIT_CHECK_ARG(!name.empty(), "input: name must not be empty");
  for (int32_t id : inputs_)
    LCEJIT_CHECK_ARG(nodes_[static_cast<size_t>(id)].name != name,
                     "input: name '{}' is used twice", name);
  for (int64_t d : shape)
    LCEJIT_CHECK_ARG(d == kN || d > 0, "input '{}': dimension {} in shape {} must be positive or kN",
                     name, d, shapeString(shape));
  LCEJIT_CHECK_ARG(dtype != DType::F64, "input '{}': f64 inputs are not supported", name);
  Node n;
  n.kind = OpKind::Input;
  n.shape = std::move(shape);
  n.dtype = dtype;
  n.name = name;
  Tensor t = push(std::move(n));
  inputs_.push_back(t.id());
  return t;
}

Tensor Graph::constant(double value, DType dtype) {
  Node n;
  n.kind = OpKind::Constant;
  n.dtype = dtype;
  if (isFloat(dtype))
    n.fValue = value;
  else
    n.iValue = static_cast<int64_t>(value);
  return push(std::move(n));
}

Tensor Graph::iota(Shape shape, int64_t axis, DType dtype) {
  LCEJIT_CHECK_ARG(dtype == DType::I32 || dtype == DType::I64, "iota: dtype must be i32 or i64, got {}",
                   dtypeName(dtype));
  LCEJIT_CHECK_ARG(axis >= 0 && axis < static_cast<int64_t>(shape.size()),
                   "iota: axis {} out of range for shape {}", axis, shapeString(shape));
  for (int64_t d : shape)
    LCEJIT_CHECK_ARG(d > 0, "iota: shape {} must be static", shapeString(shape));
  Node n;
  n.kind = OpKind::Iota;
  n.shape = std::move(shape);
  n.dtype = dtype;
  n.axis = axis;
  return push(std::move(n));
}

Tensor Graph::size(Tensor x, int64_t axis) {
  checkOwned("size", "x", x);
  LCEJIT_CHECK_ARG(axis >= 0 && axis < static_cast<int64_t>(x.shape().size()),
                   "size: axis {} out of range for shape {}", axis, shapeString(x.shape()));
  Node n;
  n.kind = OpKind::Dim;
  n.inputs = {x.id()};
  n.dtype = DType::I64;
  n.axis = axis;
  return push(std::move(n));
}

Tensor Graph::matmul(Tensor a, Tensor b, bool ta, bool tb) {
  checkOwned("matmul", "a", a);
  checkOwned("matmul", "b", b);
  const Shape &sa = a.shape(), &sb = b.shape();
  LCEJIT_CHECK_ARG(sa.size() == 2 && sb.size() == 2, "matmul: operands must be rank 2, got {} and {}",
                   shapeString(sa), shapeString(sb));
  LCEJIT_CHECK_ARG(isFloat(a.dtype()) && isFloat(b.dtype()),
                   "matmul: operands must be floating point, got {} and {}", dtypeName(a.dtype()),
                   dtypeName(b.dtype()));
  int64_t ka = ta ? sa[0] : sa[1];
  int64_t kb = tb ? sb[1] : sb[0];
  LCEJIT_CHECK_ARG(ka == kb, "matmul: contraction sizes differ ({} of a{} vs {} of b{})",
                   ka == kN ? std::string("N") : std::to_string(ka), ta ? "ᵀ" : "",
                   kb == kN ? std::string("N") : std::to_string(kb), tb ? "ᵀ" : "");
  Node n;
  n.kind = OpKind::Matmul;
  n.inputs = {a.id(), b.id()};
  n.shape = {ta ? sa[1] : sa[0], tb ? sb[0] : sb[1]};
  n.dtype = DType::F32;
  n.transposeA = ta;
  n.transposeB = tb;
  return push(std::move(n));
}

Tensor Graph::cast(Tensor x, DType dtype) {
  checkOwned("cast", "x", x);
  if (x.dtype() == dtype)
    return x;
  LCEJIT_CHECK_ARG(isFloat(dtype) || (dtype != DType::I1 && isInteger(x.dtype())),
                   "cast: cannot convert {} to {}", dtypeName(x.dtype()), dtypeName(dtype));
  Node n;
  n.kind = OpKind::Cast;
  n.inputs = {x.id()};
  n.shape = x.shape();
  n.dtype = dtype;
  return push(std::move(n));
}

Tensor Graph::broadcast(Tensor x, Shape shape) {
  checkOwned("broadcast", "x", x);
  Shape b = broadcastOrThrow("broadcast", x.shape(), shape);
  LCEJIT_CHECK_ARG(b == shape, "broadcast: cannot broadcast {} to {}", shapeString(x.shape()),
                   shapeString(shape));
  if (x.shape() == shape)
    return x;
  Node n;
  n.kind = OpKind::Broadcast;
  n.inputs = {x.id()};
  n.shape = std::move(shape);
  n.dtype = x.dtype();
  return push(std::move(n));
}

Tensor Graph::elementwise(OpKind k, const char *op, Tensor a, Tensor b, bool floatOnly) {
  checkOwned(op, "a", a);
  checkOwned(op, "b", b);
  LCEJIT_CHECK_ARG(a.dtype() == b.dtype(), "{}: dtypes differ ({} and {}); cast one first", op,
                   dtypeName(a.dtype()), dtypeName(b.dtype()));
  LCEJIT_CHECK_ARG(a.dtype() != DType::I1, "{}: i1 operands are not supported", op);
  LCEJIT_CHECK_ARG(!floatOnly || isFloat(a.dtype()), "{}: operands must be floating point, got {}",
                   op, dtypeName(a.dtype()));
  Node n;
  n.kind = k;
  n.inputs = {a.id(), b.id()};
  n.shape = broadcastOrThrow(op, a.shape(), b.shape());
  n.dtype = a.dtype();
  return push(std::move(n));
}

Tensor Graph::add(Tensor a, Tensor b) { return elementwise(OpKind::Add, "add", a, b, false); }
Tensor Graph::sub(Tensor a, Tensor b) { return elementwise(OpKind::Sub, "sub", a, b, false); }
Tensor Graph::mul(Tensor a, Tensor b) { return elementwise(OpKind::Mul, "mul", a, b, false); }
Tensor Graph::div(Tensor a, Tensor b) { return elementwise(OpKind::Div, "div", a, b, true); }
Tensor Graph::max(Tensor a, Tensor b) { return elementwise(OpKind::Max, "max", a, b, false); }

Tensor Graph::unaryFloat(OpKind k, const char *op, Tensor x) {
  checkOwned(op, "x", x);
  LCEJIT_CHECK_ARG(isFloat(x.dtype()), "{}: operand must be floating point, got {}", op,
                   dtypeName(x.dtype()));
  Node n;
  n.kind = k;
  n.inputs = {x.id()};
  n.shape = x.shape();
  n.dtype = x.dtype();
  return push(std::move(n));
}

Tensor Graph::neg(Tensor x) { return unaryFloat(OpKind::Neg, "neg", x); }
Tensor Graph::exp(Tensor x) { return unaryFloat(OpKind::Exp, "exp", x); }
Tensor Graph::log(Tensor x) { return unaryFloat(OpKind::Log, "log", x); }
Tensor Graph::tanh(Tensor x) { return unaryFloat(OpKind::Tanh, "tanh", x); }

Tensor Graph::compare(Cmp cmp, Tensor a, Tensor b) {
  checkOwned("compare", "a", a);
  checkOwned("compare", "b", b);
  LCEJIT_CHECK_ARG(a.dtype() == b.dtype(), "compare: dtypes differ ({} and {})", dtypeName(a.dtype()),
                   dtypeName(b.dtype()));
  Node n;
  n.kind = OpKind::Cmp;
  n.inputs = {a.id(), b.id()};
  n.shape = broadcastOrThrow("compare", a.shape(), b.shape());
  n.dtype = DType::I1;
  n.cmp = cmp;
  return push(std::move(n));
}

Tensor Graph::select(Tensor c, Tensor a, Tensor b) {
  checkOwned("select", "cond", c);
  checkOwned("select", "a", a);
  checkOwned("select", "b", b);
  LCEJIT_CHECK_ARG(c.dtype() == DType::I1, "select: condition must be i1, got {}", dtypeName(c.dtype()));
  LCEJIT_CHECK_ARG(a.dtype() == b.dtype(), "select: value dtypes differ ({} and {})", dtypeName(a.dtype()),
                   dtypeName(b.dtype()));
  Node n;
  n.kind = OpKind::Select;
  n.inputs = {c.id(), a.id(), b.id()};
  n.shape = broadcastOrThrow("select", broadcastOrThrow("select", c.shape(), a.shape()), b.shape());
  n.dtype = a.dtype();
  return push(std::move(n));
}

Tensor Graph::reduce(OpKind k, const char *op, Tensor x, std::optional<int64_t> axis, bool floatOnly) {
  checkOwned(op, "x", x);
  const Shape &s = x.shape();
  if (axis)
    LCEJIT_CHECK_ARG(*axis >= 0 && *axis < static_cast<int64_t>(s.size()),
                     "{}: axis {} out of range for shape {}", op, *axis, shapeString(s));
  LCEJIT_CHECK_ARG(x.dtype() != DType::I1, "{}: cast i1 values before reducing them", op);
  LCEJIT_CHECK_ARG(!floatOnly || isFloat(x.dtype()), "{}: operand must be floating point, got {}",
                   op, dtypeName(x.dtype()));
  Node n;
  n.kind = k;
  n.inputs = {x.id()};
  if (axis) {
    n.shape = s;
    n.shape[static_cast<size_t>(*axis)] = 1;
  }
  n.dtype = x.dtype();
  n.axis = axis;
  return push(std::move(n));
}

Tensor Graph::sum(Tensor x, std::optional<int64_t> axis) { return reduce(OpKind::Sum, "sum", x, axis, false); }
Tensor Graph::maxReduce(Tensor x, std::optional<int64_t> axis) {
  return reduce(OpKind::MaxReduce, "max_reduce", x, axis, false);
}
Tensor Graph::mean(Tensor x, std::optional<int64_t> axis) { return reduce(OpKind::Mean, "mean", x, axis, true); }
Tensor Graph::logsumexp(Tensor x, int64_t axis) {
  return reduce(OpKind::LogSumExp, "logsumexp", x, axis, true);
}

Tensor Graph::gather(Tensor source, Tensor index, int64_t axis) {
  checkOwned("gather", "source", source);
  checkOwned("gather", "index", index);
  const Shape &s = source.shape(), &i = index.shape();
  LCEJIT_CHECK_ARG(axis >= 0 && axis < static_cast<int64_t>(s.size()),
                   "gather: axis {} out of range for shape {}", axis, shapeString(s));
  LCEJIT_CHECK_ARG(index.dtype() == DType::I32 || index.dtype() == DType::I64,
                   "gather: index dtype must be i32 or i64, got {}", dtypeName(index.dtype()));
  LCEJIT_CHECK_ARG(s.size() == i.size(), "gather: index shape {} and source shape {} differ in rank",
                   shapeString(i), shapeString(s));
  for (size_t d = 0; d < s.size(); ++d)
    LCEJIT_CHECK_ARG(static_cast<int64_t>(d) == axis || s[d] == i[d],
                     "gather: index shape {} and source shape {} differ outside axis {}",
                     shapeString(i), shapeString(s), axis);
  Node n;
  n.kind = OpKind::Gather;
  n.inputs = {source.id(), index.id()};
  n.shape = i;
  n.dtype = source.dtype();
  n.axis = axis;
  return push(std::move(n));
}

std::vector<Tensor> Graph::grad(Tensor loss, const std::vector<Tensor> &wrt) {
  checkOwned("grad", "loss", loss);
  LCEJIT_CHECK_ARG(loss.shape().empty() && isFloat(loss.dtype()),
                   "grad: loss must be a rank-0 float tensor, got {} {}", dtypeName(loss.dtype()),
                   shapeString(loss.shape()));
  LCEJIT_CHECK_ARG(!wrt.empty(), "grad: wrt must not be empty");
  Node g;
  g.kind = OpKind::Grad;
  g.inputs.push_back(loss.id());
  for (const Tensor &w : wrt) {
    checkOwned("grad", "wrt", w);
    LCEJIT_CHECK_ARG(isFloat(w.dtype()), "grad: cannot differentiate with respect to a {} value",
                     dtypeName(w.dtype()));
    g.inputs.push_back(w.id());
  }
  int32_t gid = push(std::move(g)).id();
  std::vector<Tensor> out;
  for (size_t i = 0; i < wrt.size(); ++i) {
    Node r;
    r.kind = OpKind::GradResult;
    r.inputs = {gid};
    r.iValue = static_cast<int64_t>(i);
    r.shape = wrt[i].shape();
    r.dtype = DType::F32;
    out.push_back(push(std::move(r)));
  }
  return out;
}

void Graph::output(const std::string &name, Tensor t) {
  checkOwned("output", "t", t);
  LCEJIT_CHECK_ARG(!name.empty(), "output: name must not be empty");
  for (auto &[n, id] : outputs_)
    LCEJIT_CHECK_ARG(n != name, "output: name '{}' is used twice", name);
  outputs_.emplace_back(name, t.id());
}

Tensor Graph::scalarLike(double v, Tensor like) { return constant(v, like.dtype()); }

std::string Graph::str() const {
  std::string out = fmt::format("graph @{} {{\n", name_);
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node &n = nodes_[i];
    std::vector<std::string> ins;
    for (int32_t in : n.inputs)
      ins.push_back(fmt::format("%{}", in));
    std::string attrs;
    switch (n.kind) {
    case OpKind::Input: attrs = fmt::format(" \"{}\"", n.name); break;
    case OpKind::Constant:
      attrs = isFloat(n.dtype) ? fmt::format(" {}", n.fValue) : fmt::format(" {}", n.iValue);
      break;
    case OpKind::Matmul:
      if (n.transposeA) attrs += " transpose_a";
      if (n.transposeB) attrs += " transpose_b";
      break;
    case OpKind::Cmp: attrs = fmt::format(" {}", cmpName(n.cmp)); break;
    case OpKind::GradResult: attrs = fmt::format(" #{}", n.iValue); break;
    default: break;
    }
    if (n.axis)
      attrs += fmt::format(" axis={}", *n.axis);
    out += fmt::format("  %{} = {}{}{}{} : {} {}\n", i, opKindName(n.kind), attrs,
                       ins.empty() ? "" : " ", fmt::join(ins, ", "), dtypeName(n.dtype),
                       shapeString(n.shape));
  }
  for (auto &[name, id] : outputs_)
    out += fmt::format("  output \"{}\" = %{}\n", name, id);
  out += "}\n";
  return out;
}

std::string Graph::fingerprint() const { return contentHashHex(str()); }

// Operators.
static Graph *graphOf(Tensor a) {
  LCEJIT_CHECK_ARG(a.valid(), "operator on an empty Tensor");
  return a.graph();
}
Tensor operator+(Tensor a, Tensor b) { return graphOf(a)->add(a, b); }
Tensor operator-(Tensor a, Tensor b) { return graphOf(a)->sub(a, b); }
Tensor operator*(Tensor a, Tensor b) { return graphOf(a)->mul(a, b); }
Tensor operator/(Tensor a, Tensor b) { return graphOf(a)->div(a, b); }
Tensor operator-(Tensor a) { return graphOf(a)->neg(a); }
Tensor operator+(Tensor a, double b) { return a + graphOf(a)->scalarFor(b, a); }
Tensor operator-(Tensor a, double b) { return a - graphOf(a)->scalarFor(b, a); }
Tensor operator*(Tensor a, double b) { return a * graphOf(a)->scalarFor(b, a); }
Tensor operator/(Tensor a, double b) { return a / graphOf(a)->scalarFor(b, a); }
Tensor operator*(double a, Tensor b) { return graphOf(b)->scalarFor(a, b) * b; }
Tensor operator-(double a, Tensor b) { return graphOf(b)->scalarFor(a, b) - b; }

} // namespace lcejit::fe

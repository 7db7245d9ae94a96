//===- Graph.h - The tensor-expression frontend ---------------------------===//
//
// Users describe a loss as a graph of tensor expressions over tensors with static sizes
// and one symbolic size N (kN). The graph is plain C++ (no MLIR in this header); it
// checks shapes and dtypes as nodes are added, prints itself (the "graph" stage of
// lcejit-dump) and is lowered to the tx dialect by lowerToTx (Lower.h).
//
//   fe::Graph g("lce");
//   auto H = g.input("H", {fe::kN, 4096}, DType::BF16);
//   auto W = g.input("W", {128256, 4096}, DType::BF16);
//   auto z = g.matmul(H, W, /*transposeA=*/false, /*transposeB=*/true);
//   ...
//   auto grads = g.grad(loss, {H, W});
//
// Bad input throws lcejit::Error(InvalidArgument) naming the op, the argument and the
// shapes or dtypes involved.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "lcejit/DType.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace lcejit::fe {

/// The symbolic token count N in a shape.
inline constexpr int64_t kN = -1;

using Shape = std::vector<int64_t>;

enum class Cmp { Eq, Ne, Lt, Le, Gt, Ge };

class Graph;

/// A handle to a node of a Graph (cheap to copy).
class Tensor {
public:
  Tensor() = default;
  Tensor(Graph *g, int32_t id) : graph_(g), id_(id) {}
  Graph *graph() const { return graph_; }
  int32_t id() const { return id_; }
  bool valid() const { return graph_ != nullptr; }
  const Shape &shape() const;
  DType dtype() const;

private:
  Graph *graph_ = nullptr;
  int32_t id_ = -1;
};

enum class OpKind {
  Input, Constant, Iota, Dim, Matmul, Cast, Broadcast, Add, Sub, Mul, Div, Max, Neg, Exp, Log,
  Tanh, Cmp, Select, Sum, MaxReduce, Mean, LogSumExp, Gather, Grad, GradResult
};
const char *opKindName(OpKind k);

struct Node {
  OpKind kind = OpKind::Input;
  std::vector<int32_t> inputs;
  Shape shape;
  DType dtype = DType::F32;
  std::string name;            ///< Input
  double fValue = 0.0;         ///< Constant (float)
  int64_t iValue = 0;          ///< Constant (integer), GradResult index
  std::optional<int64_t> axis; ///< Iota, reductions, Gather
  bool transposeA = false, transposeB = false;
  Cmp cmp = Cmp::Eq;
};

class Graph {
public:
  explicit Graph(std::string name = "lce");
  // Tensors point at their graph: a graph never moves (hold it by unique_ptr).
  Graph(const Graph &) = delete;
  Graph &operator=(const Graph &) = delete;

  const std::string &name() const { return name_; }
  const std::vector<Node> &nodes() const { return nodes_; }
  const Node &node(int32_t id) const;
  const std::vector<std::pair<std::string, int32_t>> &outputs() const { return outputs_; }
  const std::vector<int32_t> &inputs() const { return inputs_; }

  // Leaves.
  Tensor input(const std::string &name, Shape shape, DType dtype);
  Tensor constant(double value, DType dtype = DType::F32);
  Tensor iota(Shape shape, int64_t axis, DType dtype = DType::I64);
  /// The size of `x` along `axis` as a rank-0 i64 (the runtime N for a kN dimension).
  Tensor size(Tensor x, int64_t axis);

  // Matmul and conversions.
  Tensor matmul(Tensor a, Tensor b, bool transposeA = false, bool transposeB = false);
  Tensor cast(Tensor x, DType dtype);
  Tensor upcast(Tensor x) { return cast(x, DType::F32); }
  Tensor broadcast(Tensor x, Shape shape);

  // Elementwise (NumPy broadcasting with equal ranks, or rank 0).
  Tensor add(Tensor a, Tensor b);
  Tensor sub(Tensor a, Tensor b);
  Tensor mul(Tensor a, Tensor b);
  Tensor div(Tensor a, Tensor b);
  Tensor max(Tensor a, Tensor b);
  Tensor neg(Tensor x);
  Tensor exp(Tensor x);
  Tensor log(Tensor x);
  Tensor tanh(Tensor x);
  Tensor compare(Cmp cmp, Tensor a, Tensor b);
  Tensor select(Tensor cond, Tensor a, Tensor b);

  // Reductions: with an axis the dimension is kept (size 1); without, rank 0.
  Tensor sum(Tensor x, std::optional<int64_t> axis = std::nullopt);
  Tensor maxReduce(Tensor x, std::optional<int64_t> axis = std::nullopt);
  Tensor mean(Tensor x, std::optional<int64_t> axis = std::nullopt);
  Tensor logsumexp(Tensor x, int64_t axis);
  Tensor gather(Tensor source, Tensor index, int64_t axis);

  /// Gradients of a rank-0 float loss with respect to float inputs (f32, their shapes).
  std::vector<Tensor> grad(Tensor loss, const std::vector<Tensor> &wrt);

  /// Marks a result of the graph.
  void output(const std::string &name, Tensor t);

  /// Human-readable listing (the "graph" stage of the dump).
  std::string str() const;
  /// Stable hex digest (XXH3-128, 32 digits) of everything that defines the graph.
  std::string fingerprint() const;

private:
  friend class Tensor;
  Tensor push(Node n);
  void checkOwned(const char *op, const char *arg, Tensor t) const;
  Shape broadcastOrThrow(const char *op, const Shape &a, const Shape &b) const;
  Tensor elementwise(OpKind k, const char *op, Tensor a, Tensor b, bool floatOnly);
  Tensor unaryFloat(OpKind k, const char *op, Tensor x);
  Tensor reduce(OpKind k, const char *op, Tensor x, std::optional<int64_t> axis, bool floatOnly);
  /// A scalar constant of `like`'s dtype.
  Tensor scalarLike(double v, Tensor like);

  std::string name_;
  std::vector<Node> nodes_;
  std::vector<int32_t> inputs_;
  std::vector<std::pair<std::string, int32_t>> outputs_;

public:
  // Scalar conveniences used by the operators below.
  Tensor scalarFor(double v, Tensor like) { return scalarLike(v, like); }
};

std::string shapeString(const Shape &s);

// Operators (both operands must come from the same graph).
Tensor operator+(Tensor a, Tensor b);
Tensor operator-(Tensor a, Tensor b);
Tensor operator*(Tensor a, Tensor b);
Tensor operator/(Tensor a, Tensor b);
Tensor operator-(Tensor a);
Tensor operator+(Tensor a, double b);
Tensor operator-(Tensor a, double b);
Tensor operator*(Tensor a, double b);
Tensor operator/(Tensor a, double b);
Tensor operator*(double a, Tensor b);
Tensor operator-(double a, Tensor b);

} // namespace lcejit::fe

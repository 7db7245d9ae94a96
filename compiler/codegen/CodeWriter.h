//===- CodeWriter.h - The one writer of generated CUDA text
//----------------===//
//
// All generated source goes through a CodeWriter: it owns indentation and line
// breaks, formats with fmt ("{}" placeholders, checked at compile time), and
// opens and closes braces in pairs (block()). Emitters never concatenate code
// strings by hand beyond a single expression.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <fmt/format.h>

#include <string>
#include <string_view>
#include <utility>

namespace lcejit::codegen {

class CodeWriter {
public:
  explicit CodeWriter(int indentWidth = 2) : indentWidth_(indentWidth) {}

  /// One line at the current indentation: fmt::format(f, args...) + '\n'.
  template <class... Args>
  void line(fmt::format_string<Args...> f, Args &&...args) {
    put(fmt::format(f, std::forward<Args>(args)...));
  }
  /// One line of literal text (no formatting) at the current indentation.
  void text(std::string_view s) { put(s); }
  /// An empty line.
  void blank() { out_ += '\n'; }
  /// `// ...` lines at the current indentation, one per line of `s`.
  void comment(std::string_view s);
  /// A `//===---...---===//` rule at the current indentation.
  void rule();
  /// Text appended verbatim (no indentation); a final newline is added if
  /// missing.
  void raw(std::string_view s);

  void indent() { ++level_; }
  void dedent();
  int level() const { return level_; }

  /// RAII brace pair: the constructor writes `<header> {` and indents, the
  /// destructor dedents and writes `}<trailer>` (e.g. trailer ";" for a
  /// struct).
  class Block {
  public:
    Block(CodeWriter &w, std::string_view header, std::string trailer);
    Block(Block &&other) noexcept
        : w_(other.w_), trailer_(std::move(other.trailer_)) {
      other.w_ = nullptr;
    }
    Block(const Block &) = delete;
    Block &operator=(const Block &) = delete;
    Block &operator=(Block &&) = delete;
    ~Block();

  private:
    CodeWriter *w_;
    std::string trailer_;
  };
  [[nodiscard]] Block block(std::string_view header, std::string trailer = "") {
    return Block(*this, header, std::move(trailer));
  }

  const std::string &str() const { return out_; }
  std::string take() { return std::move(out_); }

private:
  void put(std::string_view s);

  std::string out_;
  int level_ = 0;
  int indentWidth_;
};

} // namespace lcejit::codegen

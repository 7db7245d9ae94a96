//===- CodeWriter.cpp - The one writer of generated CUDA text
//--------------===//

#include "compiler/codegen/CodeWriter.h"
#include "compiler/support/Check.h"

namespace lcejit::codegen {

void CodeWriter::put(std::string_view s) {
  if (!s.empty())
    out_.append(static_cast<size_t>(level_ * indentWidth_), ' ');
  out_.append(s);
  out_ += '\n';
}

void CodeWriter::comment(std::string_view s) {
  size_t start = 0;
  while (true) {
    size_t end = s.find('\n', start);
    std::string_view piece =
        s.substr(start, end == std::string_view::npos ? end : end - start);
    put(piece.empty() ? std::string("//") : fmt::format("// {}", piece));
    if (end == std::string_view::npos)
      break;
    start = end + 1;
  }
}

void CodeWriter::rule() {
  int width = 80 - level_ * indentWidth_ - 10; // "//===" + dashes + "===//"
  put(fmt::format("//==={}===//",
                  std::string(static_cast<size_t>(std::max(width, 4)), '-')));
}

void CodeWriter::raw(std::string_view s) {
  out_.append(s);
  if (!s.empty() && s.back() != '\n')
    out_ += '\n';
}

void CodeWriter::dedent() {
  LCEJIT_CHECK(level_ > 0, "CodeWriter::dedent below level 0");
  --level_;
}

CodeWriter::Block::Block(CodeWriter &w, std::string_view header,
                         std::string trailer)
    : w_(&w), trailer_(std::move(trailer)) {
  w.put(header.empty() ? std::string("{") : fmt::format("{} {{", header));
  w.indent();
}

CodeWriter::Block::~Block() {
  if (!w_)
    return;
  w_->level_ = w_->level_ > 0 ? w_->level_ - 1 : 0;
  w_->put(fmt::format("}}{}", trailer_));
}

} // namespace lcejit::codegen

//===- CodeWriterTest.cpp - The one code writer
//----------------------------===//

#include "compiler/codegen/CodeWriter.h"
#include "lcejit/Error.h"

#include <gtest/gtest.h>

using lcejit::codegen::CodeWriter;

TEST(CodeWriter, LinesBlocksAndIndentation) {
  CodeWriter w;
  w.line("int x = {};", 3);
  {
    auto s = w.block("struct S", ";");
    w.line("float {};", "y");
    {
      auto f = w.block("void f()");
      w.text("return;");
      w.blank();
    }
  }
  EXPECT_EQ(w.str(), "int x = 3;\n"
                     "struct S {\n"
                     "  float y;\n"
                     "  void f() {\n"
                     "    return;\n"
                     "\n"
                     "  }\n"
                     "};\n");
}

TEST(CodeWriter, CommentsAndRules) {
  CodeWriter w;
  w.indent();
  w.comment("one\n\nthree");
  w.rule();
  w.dedent();
  w.raw("verbatim");
  std::string s = w.str();
  EXPECT_NE(s.find("  // one\n  //\n  // three\n"), std::string::npos) << s;
  size_t rule = s.find("  //===");
  ASSERT_NE(rule, std::string::npos);
  size_t end = s.find('\n', rule);
  EXPECT_EQ(end - rule, 80u) << s.substr(rule, end - rule);
  EXPECT_EQ(s.substr(s.size() - 9), "verbatim\n");
}

TEST(CodeWriter, DedentBelowZeroIsAnInternalError) {
  CodeWriter w;
  EXPECT_THROW(w.dedent(), lcejit::Error);
}

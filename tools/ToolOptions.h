//===- ToolOptions.h - llvm::cl setup shared by the lcejit tools -------------===//
//
// The tools parse their command lines with llvm::cl (LLVM is linked into them already),
// so `--help`, `--version`, unknown options and bad values behave as in every LLVM tool:
//   - `--help` (and `-h`) prints the tool's own options only: LLVM's and MLIR's options
//     that are linked in are hidden (HideUnrelatedOptions), not removed;
//   - an unknown option or a value that does not parse fails with
//     "<tool>: for the --<option> option: ..." naming the option and the value, exit 1;
//   - range checks after parsing use the same form (failOption()).
// Values go either way: `--tokens 8192` and `--tokens=8192`.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "compiler/support/BuildId.h"
#include "lcejit/DType.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdlib>
#include <optional>
#include <string>

namespace lcejit::tools {

/// A DType by any name parseDType() accepts (bf16, bfloat16, fp16, half, f32, ...); the
/// values listed with cl::values are the ones --help shows.
struct DTypeParser : llvm::cl::parser<DType> {
  using llvm::cl::parser<DType>::parser;
  bool parse(llvm::cl::Option &o, llvm::StringRef, llvm::StringRef arg, DType &value) {
    if (std::optional<DType> t = parseDType(arg)) {
      value = *t;
      return false;
    }
    return o.error("'" + arg + "' is not a dtype (bf16, fp16, fp32, i32, i64)");
  }
};

/// Reports a bad value of `option` in LLVM's form and exits with status 1.
[[noreturn]] inline void failOption(const llvm::cl::Option &option, const llvm::Twine &message) {
  // Option::error is not const; the message is all it uses.
  const_cast<llvm::cl::Option &>(option).error(message);
  std::exit(1);
}

/// Parses argv: only the options of `category` (and --help, --version) show in --help,
/// `-h` means --help, --version prints the tool and lcejit's build id. Exits on a parse
/// error (status 1) and after --help/--version (status 0).
inline void parseToolOptions(int argc, char **argv, llvm::cl::OptionCategory &category,
                             llvm::StringRef overview) {
  static llvm::cl::opt<bool> shortHelp("h", llvm::cl::desc("Alias for --help"),
                                       llvm::cl::cat(category));
  static std::string tool = llvm::sys::path::filename(argv[0]).str();
  llvm::cl::SetVersionPrinter([](llvm::raw_ostream &os) {
    os << tool << " (lcejit " << buildId() << ")\n";
  });
  llvm::cl::HideUnrelatedOptions(category);
  llvm::cl::ParseCommandLineOptions(argc, argv, overview);
  if (shortHelp) {
    llvm::cl::PrintHelpMessage(/*Hidden=*/false, /*Categorized=*/true);
    std::exit(0);
  }
}

} // namespace lcejit::tools

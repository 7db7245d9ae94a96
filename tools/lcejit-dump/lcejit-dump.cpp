//===- lcejit-dump.cpp - Show every stage of one problem --------------------===//
//
//   lcejit-dump lce --tokens N --hidden D --vocab V [--dtype bf16|fp16|fp32]
//       [--softcap C] [--ignore-index I] [--emit=graph|mlir|passes|plan|cuda|ptx|sass|all]
//       [--out-dir DIR] [--n-series N1,N2,...]
//
// (llvm::cl: `--help` lists every option with its default; tools/ToolOptions.h.)
//
// Prints (or writes under --out-dir) the stages in pipeline order: the frontend graph,
// the tx MLIR, the MLIR after each pass, the Program as JSON with the planner's
// decisions, the cache key and bucket, the CUDA source, the PTX, NVRTC's ptxas resource
// lines and SASS where cuobjdump exists. The stage dumps compile with NVRTC directly (so
// they are complete even on a cache hit). --n-series instead plans and compiles what each
// N needs through the real cache (memory + LCEJIT_CACHE_DIR) without running anything and
// ends with `compiles: K buckets: B`, K counting actual NVRTC compiles only.
//
//===----------------------------------------------------------------------===//

#include "compiler/plan/SchedulePolicy.h"
#include "compiler/support/Check.h"
#include "compiler/support/Knobs.h"
#include "ops/lib/LceJit.h"
#include "runtime/CudaDriver.h"
#include "runtime/Nvrtc.h"
#include "tools/ToolOptions.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

using namespace lcejit;
namespace fs = std::filesystem;

namespace {

namespace cl = llvm::cl;

cl::OptionCategory kCategory("lcejit-dump options");

cl::opt<std::string> problemArg(cl::Positional, cl::desc("lce"), cl::cat(kCategory));
cl::opt<int64_t> tokensOpt("tokens", cl::value_desc("N"),
                           cl::desc("token count (picks the shape bucket); required unless "
                                    "--n-series"),
                           cl::cat(kCategory));
cl::opt<int64_t> hiddenOpt("hidden", cl::value_desc("D"), cl::desc("hidden size (required)"),
                           cl::cat(kCategory));
cl::opt<int64_t> vocabOpt("vocab", cl::value_desc("V"), cl::desc("vocabulary size (required)"),
                          cl::cat(kCategory));
cl::opt<DType, false, tools::DTypeParser>
    dtypeOpt("dtype", cl::desc("of H, W and dH (default: bf16)"), cl::init(DType::BF16),
             cl::values(clEnumValN(DType::BF16, "bf16", "bfloat16"),
                        clEnumValN(DType::F16, "fp16", "float16"),
                        clEnumValN(DType::F32, "fp32", "float32")),
             cl::cat(kCategory));
cl::opt<DType, false, tools::DTypeParser>
    targetDTypeOpt("target-dtype", cl::desc("of the targets y (default: i64)"),
                   cl::init(DType::I64),
                   cl::values(clEnumValN(DType::I32, "i32", "int32"),
                              clEnumValN(DType::I64, "i64", "int64")),
                   cl::cat(kCategory));
cl::opt<DType, false, tools::DTypeParser> gradWeightDTypeOpt(
    "grad-weight-dtype", cl::desc("dW: fp32 or the same as --dtype (default: fp32)"),
    cl::init(DType::F32), cl::cat(kCategory));
cl::opt<double> softcapOpt("softcap", cl::value_desc("C"), cl::desc("logits become C*tanh(z/C)"),
                           cl::cat(kCategory));
cl::opt<int64_t> ignoreIndexOpt("ignore-index", cl::value_desc("I"),
                                cl::desc("targets equal to I are left out (default: -100)"),
                                cl::init(-100), cl::cat(kCategory));
cl::opt<bool> noIgnoreIndexOpt("no-ignore-index", cl::desc("every target counts"),
                               cl::cat(kCategory));
cl::opt<Reduction> reductionOpt("reduction", cl::desc("loss reduction (default: mean)"),
                                cl::init(Reduction::Mean),
                                cl::values(clEnumValN(Reduction::Mean, "mean", "mean over counted rows"),
                                           clEnumValN(Reduction::Sum, "sum", "sum over counted rows")),
                                cl::cat(kCategory));
cl::opt<int64_t> budgetMbOpt("budget-mb", cl::value_desc("M"),
                             cl::desc("workspace budget in MiB (default: 512)"), cl::init(512),
                             cl::cat(kCategory));
cl::opt<Precision> precisionOpt(
    "precision", cl::desc("gradient precision of bf16 inputs (default: fast)"), cl::init(Precision::Fast),
    cl::values(clEnumValN(Precision::Fast, "fast", "bf16 inputs: dZ rounded once to bf16"),
               clEnumValN(Precision::Exact, "exact",
                          "bf16 inputs: dZ as a hi+lo bf16 pair (backward GEMMs twice)")),
    cl::cat(kCategory));
cl::opt<std::string> archOpt("arch", cl::value_desc("sm_XY[a]"),
                             cl::desc("sm_90a | sm_80 | ... (default: the GPU, else sm_90a)"),
                             cl::cat(kCategory));

/// --emit values: the pipeline stages in pipeline::kAllStages order, and "all".
enum class EmitArg { Graph, Mlir, Passes, Plan, Cuda, Ptx, Sass, All };
static_assert(std::size(pipeline::kAllStages) == size_t(EmitArg::All));
cl::list<EmitArg> emitOpt(
    "emit", cl::CommaSeparated, cl::desc("stages to show, in pipeline order (default: all)"),
    cl::values(clEnumValN(EmitArg::Graph, "graph", "the frontend graph"),
               clEnumValN(EmitArg::Mlir, "mlir", "tx MLIR as lowered"),
               clEnumValN(EmitArg::Passes, "passes", "the MLIR after each pass"),
               clEnumValN(EmitArg::Plan, "plan",
                          "cache key, bucket, workspace, decisions, the Program as JSON"),
               clEnumValN(EmitArg::Cuda, "cuda", "the generated CUDA module"),
               clEnumValN(EmitArg::Ptx, "ptx", "PTX and NVRTC's ptxas -v lines"),
               clEnumValN(EmitArg::Sass, "sass", "cuobjdump -sass, where it exists"),
               clEnumValN(EmitArg::All, "all", "every stage")),
    cl::cat(kCategory));
cl::opt<std::string> outDirOpt("out-dir", cl::value_desc("DIR"),
                               cl::desc("write one file per stage instead of printing"),
                               cl::cat(kCategory));
cl::list<int64_t> nSeriesOpt("n-series", cl::CommaSeparated, cl::value_desc("N1,N2,..."),
                             cl::desc("plan+compile (no run) what each N needs through the "
                                      "cache; ends with \"compiles: K buckets: B\""),
                             cl::cat(kCategory));

[[noreturn]] void fail(const std::string &msg) {
  llvm::errs() << "lcejit-dump: " << msg << "\n";
  std::exit(1);
}

struct Args {
  int64_t tokens = -1;
  LinearCrossEntropyOptions options;
  std::optional<int32_t> archSm; ///< --arch: the SM version (two digits after "sm_")
  std::set<pipeline::Stage> emit;
  std::optional<fs::path> outDir;
  std::vector<int64_t> nSeries;
};

Args parseArgs(int argc, char **argv) {
  tools::parseToolOptions(
      argc, argv, kCategory,
      "shows every stage of the compilation of the fused linear cross entropy for one "
      "shape\n\n  lcejit-dump lce --tokens N --hidden D --vocab V [options]\n");
  if (problemArg.getNumOccurrences() == 0)
    fail("no problem given: lcejit-dump lce --tokens N --hidden D --vocab V (see --help)");
  if (problemArg != "lce")
    fail(fmt::format("unknown problem '{}' (only 'lce' exists)", problemArg.getValue()));
  Args a;
  a.nSeries.assign(nSeriesOpt.begin(), nSeriesOpt.end());
  if (tokensOpt.getNumOccurrences()) {
    if (tokensOpt < 0)
      tools::failOption(tokensOpt, fmt::format("must be >= 0, got {}", tokensOpt.getValue()));
    a.tokens = tokensOpt;
  } else if (a.nSeries.empty()) {
    tools::failOption(tokensOpt, "must be given (or --n-series)");
  }
  for (int64_t n : a.nSeries)
    if (n < 0)
      tools::failOption(nSeriesOpt, fmt::format("N must be >= 0, got {}", n));
  if (hiddenOpt <= 0)
    tools::failOption(hiddenOpt, hiddenOpt.getNumOccurrences()
                                     ? fmt::format("must be > 0, got {}", hiddenOpt.getValue())
                                     : std::string("must be given"));
  if (vocabOpt <= 0)
    tools::failOption(vocabOpt, vocabOpt.getNumOccurrences()
                                    ? fmt::format("must be > 0, got {}", vocabOpt.getValue())
                                    : std::string("must be given"));
  if (budgetMbOpt < 0)
    tools::failOption(budgetMbOpt, fmt::format("must be >= 0, got {}", budgetMbOpt.getValue()));
  LinearCrossEntropyOptions &o = a.options;
  o.hidden = hiddenOpt;
  o.vocab = vocabOpt;
  o.dtype = dtypeOpt;
  o.targetDType = targetDTypeOpt;
  o.gradWeightDType = gradWeightDTypeOpt;
  if (softcapOpt.getNumOccurrences())
    o.softcap = softcapOpt;
  o.ignoreIndex = ignoreIndexOpt.getValue();
  if (noIgnoreIndexOpt)
    o.ignoreIndex.reset();
  o.reduction = reductionOpt;
  o.workspaceBudgetBytes = budgetMbOpt << 20;
  o.precision = precisionOpt;
  if (archOpt.getNumOccurrences()) {
    const std::string &arch = archOpt;
    int sm = 0;
    if (arch.rfind("sm_", 0) != 0 || arch.size() < 5 ||
        llvm::StringRef(arch).substr(3, 2).getAsInteger(10, sm))
      tools::failOption(archOpt, fmt::format("must look like sm_90a or sm_80, got '{}'", arch));
    if (sm < 80)
      tools::failOption(archOpt, fmt::format("'{}': lcejit needs sm_80 or newer", arch));
    a.archSm = sm;
  }
  for (EmitArg e : emitOpt) {
    if (e == EmitArg::All)
      a.emit.insert(std::begin(pipeline::kAllStages), std::end(pipeline::kAllStages));
    else
      a.emit.insert(pipeline::kAllStages[static_cast<size_t>(e)]);
  }
  if (outDirOpt.getNumOccurrences())
    a.outDir = fs::path(outDirOpt.getValue());
  if (a.emit.empty())
    for (pipeline::Stage st : pipeline::kAllStages)
      a.emit.insert(st);
  return a;
}

plan::Target targetFor(const Args &a) {
  if (a.archSm) {
    plan::Target t;
    t.smVersion = *a.archSm;
    if (t.smVersion != 90)
      t.numSMs = 108; // an A100-class part; only changes the split heuristic
    return t;
  }
  if (runtime::cudaAvailable())
    return ops::LceJit::deviceTarget();
  return ops::LceJit::defaultTarget();
}

/// Writes each stage to stdout or to a file under --out-dir.
class Output {
public:
  explicit Output(const Args &a) : args_(a) {
    if (a.outDir)
      fs::create_directories(*a.outDir);
  }
  bool wants(pipeline::Stage s) const { return args_.emit.count(s) > 0; }
  void emit(pipeline::Stage s, std::string_view title, std::string_view text, const char *ext) {
    if (!wants(s))
      return;
    if (args_.outDir) {
      std::string name = fmt::format("{:02}-{}{}", ++count_, pipeline::stageName(s), ext);
      std::ofstream f(*args_.outDir / name);
      f << text;
      std::cout << fmt::format("wrote {} ({})\n", (*args_.outDir / name).string(), title);
    } else {
      std::cout << fmt::format("==== {}: {} ====\n", pipeline::stageName(s), title) << text;
      if (!text.empty() && text.back() != '\n')
        std::cout << "\n";
    }
  }

private:
  const Args &args_;
  int count_ = 0;
};

/// cuobjdump from the CUDA toolkit, else the first one on PATH (e.g. the PyPI wheel
/// nvidia-cuda-cuobjdump, on a machine with NVRTC but no toolkit).
std::string findCuobjdump() {
  for (const char *p : {"/usr/local/cuda/bin/cuobjdump", "/usr/bin/cuobjdump"})
    if (fs::exists(p))
      return p;
  if (const char *path = std::getenv("PATH")) {
    std::string_view rest(path);
    while (!rest.empty()) {
      const size_t colon = rest.find(':');
      const fs::path dir(std::string(rest.substr(0, colon)));
      rest = colon == std::string_view::npos ? std::string_view() : rest.substr(colon + 1);
      if (!dir.empty() && fs::exists(dir / "cuobjdump"))
        return (dir / "cuobjdump").string();
    }
  }
  return {};
}

std::string sassOf(const std::vector<uint8_t> &cubin) {
  std::string tool = findCuobjdump();
  if (tool.empty())
    return "cuobjdump was not found on this machine: SASS skipped (the PTX above is complete).\n";
  fs::path tmp = fs::temp_directory_path() / fmt::format("lcejit-dump-{}.cubin", ::getpid());
  {
    std::ofstream f(tmp, std::ios::binary);
    f.write(reinterpret_cast<const char *>(cubin.data()), static_cast<std::streamsize>(cubin.size()));
  }
  std::string cmd = fmt::format("{} -sass {} 2>&1", tool, tmp.string());
  std::string out;
  if (FILE *p = ::popen(cmd.c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0)
      out.append(buf, n);
    int rc = ::pclose(p);
    if (rc != 0)
      out = fmt::format("cuobjdump failed ({}):\n{}", rc, out);
  }
  fs::remove(tmp);
  return out;
}

int runSeries(const Args &a) {
  ops::LceJit jit(a.options);
  plan::Target target = targetFor(a);
  int64_t before = ops::LceJit::programCompileCount();
  int64_t modulesBefore = runtime::KernelCache::global().compileCount();
  std::set<int64_t> buckets;
  for (int64_t n : a.nSeries) {
    ops::ProgramLookup l = jit.lookup(n, target, /*compile=*/true);
    const plan::Program &p = l.compiled->program;
    buckets.insert(p.bucket);
    std::cout << fmt::format("N={} bucket=[{},{}] program={} binary={}\n", n, p.bucketLow,
                             p.bucket, l.planned ? "planned" : "cached",
                             runtime::cacheOriginName(l.binaryOrigin));
  }
  int64_t compiles = ops::LceJit::programCompileCount() - before;
  int64_t modules = runtime::KernelCache::global().compileCount() - modulesBefore;
  std::cout << fmt::format("compiles: {} (NVRTC modules: {}) buckets: {}\n", compiles, modules,
                           buckets.size());
  return 0;
}

int runDump(const Args &a) {
  Output out(a);
  pipeline::TraceSink sink;
  sink.emit = [&](pipeline::Stage s, std::string_view title, std::string_view text) {
    if (s == pipeline::Stage::Plan || s == pipeline::Stage::Cuda)
      return; // printed below with more context
    out.emit(s, title, text, s == pipeline::Stage::Graph ? ".txt" : ".mlir");
  };
  ops::LceJit jit(a.options, sink);
  plan::Target target = targetFor(a);
  ops::ProgramLookup l = jit.lookup(a.tokens, target, /*compile=*/false);
  const ops::CompiledProgram &cp = *l.compiled;
  const plan::Program &p = cp.program;

  std::string planText;
  planText += fmt::format("// cache key: {}\n", cp.cacheKey);
  planText += fmt::format("// bucket: N = {} -> [{}, {}]\n", a.tokens, p.bucketLow, p.bucket);
  planText += fmt::format("// target: {} ({} SMs)\n", p.target.archName(), p.target.numSMs);
  int64_t wsBytes = 0;
  plan::RunSchedule sched = p.runSchedule(a.tokens);
  const plan::RunSchedule free = p.runSchedule(a.tokens, /*outputFree=*/true);
  // [Note: values scaled in place]: a slab-only Program leaves the calls it does not serve
  // to the recompute Program of the bucket.
  std::optional<ops::LceJit> recompute;
  std::shared_ptr<const ops::CompiledProgram> rp;
  if (p.schedule.slabOnly && !plan::servesCall(p, sched)) {
    recompute.emplace(a.options, pipeline::TraceSink{}, false, false, /*recompute=*/true);
    rp = recompute->lookup(a.tokens, target, /*compile=*/false).compiled;
    sched = rp->program.runSchedule(a.tokens);
    rp->program.workspaceOffsets(sched, &wsBytes);
  } else {
    p.workspaceOffsets(sched, &wsBytes);
  }
  planText += fmt::format("// workspace at N = {}: {} bytes ({:.1f} MiB)\n", a.tokens, wsBytes,
                          double(wsBytes) / (1 << 20));
  if (rp)
    planText += fmt::format("// run schedule of a call that adds to {}: the recompute Program "
                            "of the bucket (cache key {}): {}\n",
                            p.outputs[static_cast<size_t>(p.schedule.slabOutput)].name,
                            rp->cacheKey, sched.describe());
  else
    planText += fmt::format("// run schedule: {}\n", sched.describe());
  // [Note: stored values in dW]: a call that overwrites dW may be cut otherwise.
  if (free.slabGroup > 0 || rp)
    planText += fmt::format("// run schedule of a call that overwrites {}: {}{}\n",
                            p.outputs[static_cast<size_t>(p.schedule.slabOutput)].name,
                            plan::servesCall(p, free) ? "" : "the recompute Program: ",
                            plan::servesCall(p, free)
                                ? free.describe()
                                : rp->program.runSchedule(a.tokens).describe());
  for (const std::string &d : p.decisions)
    planText += fmt::format("// decision: {}\n", d);
  planText += p.toJson(2) + "\n";
  out.emit(pipeline::Stage::Plan, "Program (plan)", planText, ".json");
  out.emit(pipeline::Stage::Cuda, "CUDA source", cp.source(), ".cu");

  if (out.wants(pipeline::Stage::Ptx) || out.wants(pipeline::Stage::Sass)) {
    runtime::NvrtcRequest req;
    req.source = cp.source();
    req.arch = target.archName();
    req.label = p.name;
    runtime::NvrtcOutput nv = runtime::compileCuda(req);
    std::string ptxas = fmt::format("// NVRTC {} {} in {:.0f} ms, options: {}\n", nv.nvrtcVersion,
                                    nv.arch, nv.compileMs, fmt::join(nv.options, " "));
    for (const runtime::PtxasKernelInfo &k : nv.kernels)
      ptxas += fmt::format("// ptxas {}: {} registers, {} bytes smem, {} bytes stack, spill "
                           "stores {} loads {}\n",
                           k.kernel, k.registers, k.sharedBytes, k.stackFrameBytes,
                           k.spillStoreBytes, k.spillLoadBytes);
    out.emit(pipeline::Stage::Ptx, "PTX and ptxas -v", ptxas + nv.ptx, ".ptx");
    out.emit(pipeline::Stage::Sass, "SASS (cuobjdump -sass)", sassOf(nv.cubin), ".sass");
  }
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  Args a = parseArgs(argc, argv);
  try {
    return a.nSeries.empty() ? runDump(a) : runSeries(a);
  } catch (const Error &e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
}

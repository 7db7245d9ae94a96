//===- lcejit-dump.cpp - Show every stage of one problem --------------------===//
//
//   lcejit-dump lce --tokens N --hidden D --vocab V [--dtype bf16|fp16|fp32]
//       [--softcap C] [--ignore-index I] [--emit=graph|mlir|passes|plan|cuda|ptx|sass|all]
//       [--out-dir DIR] [--n-series N1,N2,...]
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

#include "compiler/support/Check.h"
#include "compiler/support/Knobs.h"
#include "ops/lib/LceJit.h"
#include "runtime/CudaDriver.h"
#include "runtime/Nvrtc.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

using namespace lcejit;
namespace fs = std::filesystem;

namespace {

const char *kUsage = R"(usage: lcejit-dump lce --tokens N --hidden D --vocab V [options]

Shows every stage of the compilation of the fused linear cross entropy for one shape.

options:
  --tokens N            token count (picks the shape bucket)            (required)
  --hidden D            hidden size                                     (required)
  --vocab V             vocabulary size                                 (required)
  --dtype T             bf16 | fp16 | fp32 (H, W, dH)                   [bf16]
  --target-dtype T      i32 | i64                                       [i64]
  --grad-weight-dtype T fp32 | same as --dtype                          [fp32]
  --softcap C           logits become C*tanh(z/C)
  --ignore-index I      targets equal to I are left out                 [-100]
  --no-ignore-index     every target counts
  --reduction R         mean | sum                                      [mean]
  --budget-mb M         workspace budget in MiB                         [512]
  --precision P         fast | exact (bf16 gradients)                   [fast]
  --arch A              sm_90a | sm_80 | ... (default: the GPU, else sm_90a)
  --emit=S[,S...]       graph,mlir,passes,plan,cuda,ptx,sass or all     [all]
  --out-dir DIR         write one file per stage instead of printing
  --n-series N1,N2,...  plan+compile (no run) what each N needs through the
                        cache; ends with "compiles: K buckets: B"
  -h, --help            this text
)";

[[noreturn]] void usageError(const std::string &msg) {
  std::cerr << "lcejit-dump: " << msg << "\n\n" << kUsage;
  std::exit(2);
}

int64_t parseInt(const std::string &flag, const std::string &v) {
  try {
    size_t pos = 0;
    long long x = std::stoll(v, &pos);
    if (pos != v.size())
      throw std::invalid_argument(v);
    return x;
  } catch (const std::exception &) {
    usageError(fmt::format("{} expects an integer, got '{}'", flag, v));
  }
}

double parseDouble(const std::string &flag, const std::string &v) {
  try {
    size_t pos = 0;
    double x = std::stod(v, &pos);
    if (pos != v.size())
      throw std::invalid_argument(v);
    return x;
  } catch (const std::exception &) {
    usageError(fmt::format("{} expects a number, got '{}'", flag, v));
  }
}

DType parseType(const std::string &flag, const std::string &v) {
  auto t = parseDType(v);
  if (!t)
    usageError(fmt::format("{}: unknown dtype '{}'", flag, v));
  return *t;
}

std::vector<std::string> split(const std::string &s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep))
    if (!item.empty())
      out.push_back(item);
  return out;
}

struct Args {
  int64_t tokens = -1;
  LinearCrossEntropyOptions options;
  std::optional<std::string> arch;
  std::set<pipeline::Stage> emit;
  std::optional<fs::path> outDir;
  std::vector<int64_t> nSeries;
};

Args parseArgs(int argc, char **argv) {
  Args a;
  a.options.workspaceBudgetBytes = int64_t(512) << 20;
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "-h" || args[0] == "--help") {
    std::cout << kUsage;
    std::exit(args.empty() ? 2 : 0);
  }
  if (args[0] != "lce")
    usageError(fmt::format("unknown problem '{}' (only 'lce' exists)", args[0]));
  for (size_t i = 1; i < args.size(); ++i) {
    std::string flag = args[i], value;
    if (auto eq = flag.find('='); eq != std::string::npos && flag.rfind("--", 0) == 0) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
    } else if (flag != "--no-ignore-index" && flag != "-h" && flag != "--help") {
      if (i + 1 >= args.size())
        usageError(fmt::format("{} needs a value", flag));
      value = args[++i];
    }
    if (flag == "--tokens") a.tokens = parseInt(flag, value);
    else if (flag == "--hidden") a.options.hidden = parseInt(flag, value);
    else if (flag == "--vocab") a.options.vocab = parseInt(flag, value);
    else if (flag == "--dtype") a.options.dtype = parseType(flag, value);
    else if (flag == "--target-dtype") a.options.targetDType = parseType(flag, value);
    else if (flag == "--grad-weight-dtype") a.options.gradWeightDType = parseType(flag, value);
    else if (flag == "--softcap") a.options.softcap = parseDouble(flag, value);
    else if (flag == "--ignore-index") a.options.ignoreIndex = parseInt(flag, value);
    else if (flag == "--no-ignore-index") a.options.ignoreIndex.reset();
    else if (flag == "--reduction") {
      if (value == "mean") a.options.reduction = Reduction::Mean;
      else if (value == "sum") a.options.reduction = Reduction::Sum;
      else usageError(fmt::format("--reduction must be mean or sum, got '{}'", value));
    } else if (flag == "--budget-mb") a.options.workspaceBudgetBytes = parseInt(flag, value) << 20;
    else if (flag == "--precision") {
      if (value == "fast") a.options.precision = Precision::Fast;
      else if (value == "exact") a.options.precision = Precision::Exact;
      else usageError(fmt::format("--precision must be fast or exact, got '{}'", value));
    }
    else if (flag == "--arch") a.arch = value;
    else if (flag == "--emit") {
      for (const std::string &s : split(value, ',')) {
        if (s == "all") {
          for (pipeline::Stage st : pipeline::kAllStages)
            a.emit.insert(st);
        } else if (auto st = pipeline::parseStage(s)) {
          a.emit.insert(*st);
        } else {
          usageError(fmt::format("--emit: unknown stage '{}'", s));
        }
      }
    } else if (flag == "--out-dir") a.outDir = value;
    else if (flag == "--n-series") {
      for (const std::string &s : split(value, ','))
        a.nSeries.push_back(parseInt(flag, s));
      if (a.nSeries.empty())
        usageError("--n-series needs at least one N");
    } else if (flag == "-h" || flag == "--help") {
      std::cout << kUsage;
      std::exit(0);
    } else {
      usageError(fmt::format("unknown option '{}'", flag));
    }
  }
  if (a.nSeries.empty() && a.tokens == -1)
    usageError("--tokens is required");
  if (a.tokens < -1 || (a.tokens == -1 && std::find(args.begin(), args.end(), "--tokens") != args.end()))
    usageError(fmt::format("--tokens must be >= 0, got {}", a.tokens));
  for (int64_t n : a.nSeries)
    if (n < 0)
      usageError(fmt::format("--n-series: N must be >= 0, got {}", n));
  if (a.options.hidden <= 0)
    usageError("--hidden is required (and must be > 0)");
  if (a.options.vocab <= 0)
    usageError("--vocab is required (and must be > 0)");
  if (a.emit.empty())
    for (pipeline::Stage st : pipeline::kAllStages)
      a.emit.insert(st);
  return a;
}

plan::Target targetFor(const Args &a) {
  if (a.arch) {
    plan::Target t;
    const std::string &s = *a.arch;
    if (s.rfind("sm_", 0) != 0 || s.size() < 5)
      usageError(fmt::format("--arch must look like sm_90a or sm_80, got '{}'", s));
    t.smVersion = static_cast<int32_t>(parseInt("--arch", s.substr(3, 2)));
    if (t.smVersion < 80)
      usageError(fmt::format("--arch {}: lcejit needs sm_80 or newer", s));
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

std::string findCuobjdump() {
  for (const char *p : {"/usr/local/cuda/bin/cuobjdump", "/usr/bin/cuobjdump"})
    if (fs::exists(p))
      return p;
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
  p.workspaceOffsets(sched, &wsBytes);
  planText += fmt::format("// workspace at N = {}: {} bytes ({:.1f} MiB)\n", a.tokens, wsBytes,
                          double(wsBytes) / (1 << 20));
  planText += fmt::format("// run schedule: {}\n", sched.describe());
  for (const std::string &d : p.decisions)
    planText += fmt::format("// decision: {}\n", d);
  planText += p.toJson(2) + "\n";
  out.emit(pipeline::Stage::Plan, "Program (plan)", planText, ".json");
  out.emit(pipeline::Stage::Cuda, "CUDA source", cp.source, ".cu");

  if (out.wants(pipeline::Stage::Ptx) || out.wants(pipeline::Stage::Sass)) {
    runtime::NvrtcRequest req;
    req.source = cp.source;
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

//===- LceJit.cpp - The JIT behind LinearCrossEntropy ----------------------===//

#include "ops/lib/LceJit.h"
#include "compiler/codegen/DeviceHeaders.h"
#include "compiler/codegen/Emitter.h"
#include "compiler/frontend/LceGraph.h"
#include "compiler/support/Check.h"
#include "compiler/support/Knobs.h"
#include "runtime/CudaDriver.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <limits>
#include <thread>
#include <filesystem>
#include <fstream>
#include <map>

namespace lcejit::ops {

LinearCrossEntropyOptions validateOptions(const LinearCrossEntropyOptions &o) {
  LinearCrossEntropyOptions v = o;
  LCEJIT_CHECK_ARG(o.hidden > 0, "options.hidden (D) must be positive, got {}", o.hidden);
  LCEJIT_CHECK_ARG(o.device >= -1,
                   "options.device = {} must be a device ordinal (>= 0) or -1 (the device "
                   "current at the first call)",
                   o.device);
  LCEJIT_CHECK_ARG(o.hidden % 8 == 0,
                   "options.hidden (D) = {} must be a multiple of 8 (rows of 16 bytes)", o.hidden);
  LCEJIT_CHECK_ARG(o.vocab > 0, "options.vocab (V) must be positive, got {}", o.vocab);
  LCEJIT_CHECK_ARG(o.vocab < (int64_t(1) << 31), "options.vocab (V) = {} must be below 2^31", o.vocab);
  LCEJIT_CHECK_ARG(o.dtype == DType::BF16 || o.dtype == DType::F16 || o.dtype == DType::F32,
                   "options.dtype must be bf16, f16 or f32, got {}", dtypeName(o.dtype));
  LCEJIT_CHECK_ARG(o.targetDType == DType::I32 || o.targetDType == DType::I64,
                   "options.targetDType must be i32 or i64, got {}", dtypeName(o.targetDType));
  LCEJIT_CHECK_ARG(o.gradWeightDType == DType::F32 || o.gradWeightDType == o.dtype,
                   "options.gradWeightDType must be f32 or the input dtype {}, got {}",
                   dtypeName(o.dtype), dtypeName(o.gradWeightDType));
  if (o.softcap)
    LCEJIT_CHECK_ARG(*o.softcap > 0.0 && std::isfinite(*o.softcap),
                     "options.softcap must be a finite value > 0, got {}", *o.softcap);
  LCEJIT_CHECK_ARG(o.precision == Precision::Fast || o.precision == Precision::Exact,
                   "options.precision must be Fast or Exact, got {}", static_cast<int>(o.precision));
  LCEJIT_CHECK_ARG(o.workspaceBudgetBytes >= 0, "options.workspaceBudgetBytes must be >= 0, got {}",
                   o.workspaceBudgetBytes);
  if (v.workspaceBudgetBytes == 0) {
    if (auto mb = knobs::workspaceMB())
      v.workspaceBudgetBytes = *mb << 20;
    else
      v.workspaceBudgetBytes = int64_t(512) << 20;
  }
  return v;
}

fe::LceSpec lceSpecOf(const LinearCrossEntropyOptions &o) {
  fe::LceSpec s;
  s.hidden = o.hidden;
  s.vocab = o.vocab;
  s.dtype = o.dtype;
  s.targetType = o.targetDType;
  s.softcap = o.softcap;
  s.ignoreIndex = o.ignoreIndex;
  s.reduction = o.reduction == Reduction::Mean ? fe::LceReduction::Mean : fe::LceReduction::Sum;
  return s;
}

LceJit::LceJit(const LinearCrossEntropyOptions &options, pipeline::TraceSink trace,
               bool forwardOnly, bool scaledGradients, bool recompute)
    : options_(validateOptions(options)), forwardOnly_(forwardOnly),
      scaledGradients_(scaledGradients && !forwardOnly), recompute_(recompute),
      trace_(std::move(trace)) {
  fe::LceSpec spec = lceSpecOf(options_);
  spec.gradients = !forwardOnly;
  spec.gradScale = scaledGradients_;
  graph_ = fe::buildLceGraph(spec);
  fused_ = pipeline::compileGraph(*graph_, trace_);
}

plan::PlanOptions LceJit::planOptions(int64_t n, const plan::Target &target) const {
  plan::PlanOptions p;
  p.name = "lce";
  p.tokens = n;
  p.target = target;
  p.workspaceBudgetBytes = options_.workspaceBudgetBytes;
  p.exactGradients = options_.precision == Precision::Exact;
  if (auto t = knobs::gemmTile())
    p.tensorCoreTile = plan::TileConfig{(*t)[0], (*t)[1], (*t)[2], (*t)[3], (*t)[4], (*t)[5]};
  const std::string &mainloop = knobs::mainloop();
  p.mainloop = mainloop == "mma"     ? plan::Mainloop::MmaSync
               : mainloop == "wgmma" ? plan::Mainloop::Wgmma
                                     : plan::Mainloop::Auto;
  p.backward = !recompute_ && knobs::backward() == "materialized"
                   ? plan::PlanOptions::Backward::Materialized
                   : plan::PlanOptions::Backward::Recompute;
  p.targetResidual = knobs::targetResidual();
  p.targetGroups = knobs::targetGroups();
  p.tmaStore = knobs::tmaStore();
  if (const std::optional<int64_t> r = knobs::loadedSumsRows())
    p.loadedSumsMaxRows = *r;
  p.exactTargetLogit = knobs::exactTarget();
  p.multicast = knobs::multicast();
  p.rowScaled = knobs::rowScaled();
  p.splitK = knobs::splitK();
  p.daStreamK = knobs::daStreamK();
  p.daChain = knobs::daChain();
  p.storeInOutput = knobs::storeInOutput();
  p.blockRows = knobs::blockRows().value_or(0);
  p.lhsTileWidth = static_cast<int32_t>(knobs::daTile().value_or(0));
  p.forwardOrderGroup = static_cast<int32_t>(knobs::fwdGroup().value_or(0));
  p.forwardCluster = static_cast<int32_t>(knobs::fwdCluster().value_or(0));
  p.dbCluster = static_cast<int32_t>(knobs::dbCluster().value_or(0));
  p.forwardHalves = knobs::fwdHalves();
  if (const std::optional<std::string> &h = knobs::fwdL2()) {
    // Checked by the knob: two of normal, first, last.
    const size_t comma = h->find(',');
    p.forwardL2 = plan::L2Hints{*plan::parseL2Hint(std::string_view(*h).substr(0, comma)),
                                *plan::parseL2Hint(std::string_view(*h).substr(comma + 1))};
  }
  if (forwardOnly_)
    p.outputTypes = {DType::F32};
  else
    p.outputTypes = {DType::F32, options_.dtype, options_.gradWeightDType};
  plan::InputCheck check;
  check.input = 2; // y
  check.lo = 0;
  check.hi = options_.vocab;
  check.exempt = options_.ignoreIndex;
  p.checks.push_back(check);
  return p;
}

std::string LceJit::cacheKey(int64_t n, const plan::Target &target) const {
  const auto &o = options_;
  std::string tile;
  if (auto t = knobs::gemmTile())
    tile = fmt::format("|tile={}", fmt::join(*t, ","));
  if (knobs::mainloop() != "auto")
    tile += "|mainloop=" + knobs::mainloop();
  if (const std::string b = recompute_ ? "recompute" : knobs::backward();
      b != "materialized") // the default
    tile += "|backward=" + b;
  if (!knobs::targetResidual())
    tile += "|no-target-residual";
  if (!knobs::targetGroups())
    tile += "|no-target-groups";
  if (!knobs::tmaStore())
    tile += "|no-tma-store";
  if (const std::optional<int64_t> r = knobs::loadedSumsRows())
    tile += fmt::format("|loaded-sums-rows={}", *r);
  if (!knobs::exactTarget())
    tile += "|no-exact-target";
  if (!knobs::multicast())
    tile += "|no-multicast";
  if (!knobs::rowScaled())
    tile += "|no-row-scaled";
  if (!knobs::splitK())
    tile += "|no-split-k";
  if (!knobs::daStreamK())
    tile += "|no-da-stream-k";
  if (!knobs::daChain())
    tile += "|no-da-chain";
  if (!knobs::storeInOutput())
    tile += "|no-store-in-output";
  if (auto r = knobs::blockRows())
    tile += fmt::format("|block-rows={}", *r);
  if (auto t = knobs::daTile())
    tile += fmt::format("|da-tile={}", *t);
  if (auto g = knobs::fwdGroup())
    tile += fmt::format("|fwd-group={}", *g);
  if (const std::optional<std::string> &h = knobs::fwdL2())
    tile += fmt::format("|fwd-l2={}", *h);
  if (auto c = knobs::fwdCluster())
    tile += fmt::format("|fwd-cluster={}", *c);
  if (auto c = knobs::dbCluster())
    tile += fmt::format("|db-cluster={}", *c);
  if (auto h = knobs::fwdHalves())
    tile += *h ? "|fwd-halves" : "|fwd-pingpong";
  // Every field of plan::Target: the SM count sets the column splits, the shared memory
  // limit bounds the tile and stage choice, the memory interface the forward's CTA order
  // (absent when unknown).
  static_assert(sizeof(plan::Target) == 4 * sizeof(int32_t),
                "a new plan::Target field changes plans: add it to this key");
  if (target.memoryBusBits > 0)
    tile += fmt::format("|bus={}", target.memoryBusBits);
  return fmt::format("{}|D={}|V={}|{}/{}/{}|budget={}|{}|{}|sm={}|sms={}|smem={}{}|bucket={}",
                     fused_->fingerprint(), o.hidden, o.vocab, dtypeName(o.dtype),
                     dtypeName(o.targetDType), dtypeName(o.gradWeightDType),
                     o.workspaceBudgetBytes, o.precision == Precision::Exact ? "exact" : "fast",
                     target.archName(), target.smVersion, target.numSMs,
                     target.maxSharedPerBlock, tile, plan::bucketOf(n));
}

plan::Target LceJit::defaultTarget() { return plan::Target{}; }

plan::Target LceJit::deviceTarget() {
  runtime::ensureContext();
  return targetForDevice(runtime::currentDeviceInfo());
}

plan::Target LceJit::targetForDevice(const runtime::DeviceInfo &info) {
  if (info.smVersion() < 80)
    LCEJIT_THROW(Unsupported,
                 "GPU {} (compute capability {}.{}) is not supported: lcejit needs 8.0 or newer "
                 "(mma.sync bf16)",
                 info.name, info.smMajor, info.smMinor);
  return runtime::targetFor(info);
}

namespace {
std::atomic<int64_t> &programCompiles() {
  static std::atomic<int64_t> n{0};
  return n;
}

struct ProgramCache {
  std::mutex mu;
  std::map<std::string, std::shared_ptr<CompiledProgram>> programs;
  static ProgramCache &global() {
    static ProgramCache c;
    return c;
  }
};
} // namespace

CallPathCounters &callPathCounters() {
  static CallPathCounters c;
  return c;
}

ProgramLookup LceJit::lookup(int64_t n, const plan::Target &target, bool compile) {
  LCEJIT_CHECK_ARG(n >= 0, "N must be >= 0, got {}", n);
  callPathCounters().programLookups.fetch_add(1, std::memory_order_relaxed);
  std::string key = cacheKey(n, target);
  ProgramCache &cache = ProgramCache::global();
  ProgramLookup result;
  std::shared_ptr<CompiledProgram> entry;
  {
    std::lock_guard<std::mutex> lock(cache.mu);
    auto it = cache.programs.find(key);
    if (it != cache.programs.end())
      entry = it->second;
  }
  if (!entry) {
    auto fresh = std::make_shared<CompiledProgram>();
    fresh->program = fused_->plan(planOptions(n, target));
    fresh->parts = codegen::emitCudaParts(fresh->program);
    fresh->cacheKey = key;
    if (trace_) {
      trace_.emit(pipeline::Stage::Plan, fmt::format("plan for N = {}", n), fresh->program.toJson(2));
      trace_.emit(pipeline::Stage::Cuda, "CUDA source", fresh->source());
    }
    std::lock_guard<std::mutex> lock(cache.mu);
    auto [it, inserted] = cache.programs.emplace(key, fresh);
    entry = it->second;
    result.planned = inserted;
  }
  if (compile) {
    bool done = false;
    {
      std::lock_guard<std::mutex> lock(cache.mu);
      done = !entry->binaries.empty();
    }
    if (!done) {
      // [Note: module parts]: one NVRTC program per part, in parallel threads; the
      // KernelCache makes concurrent requests for one key wait for a single compile.
      const size_t parts = entry->parts.size();
      std::vector<runtime::KernelLookup> got(parts);
      std::vector<std::thread> threads;
      std::vector<std::exception_ptr> errors(parts);
      for (size_t i = 0; i < parts; ++i)
        threads.emplace_back([&, i] {
          try {
            runtime::KernelRequest req;
            req.label = fmt::format("{}.{}", entry->program.name,
                                    fmt::join(entry->parts[i].entryPoints(), "+"));
            req.bucket = fmt::format("[{},{}]", entry->program.bucketLow, entry->program.bucket);
            req.source = entry->parts[i].source;
            req.arch = target.archName();
            req.deviceHeaderHash = codegen::deviceHeaderHash();
            got[i] = runtime::KernelCache::global().get(req);
          } catch (...) {
            errors[i] = std::current_exception();
          }
        });
      for (std::thread &t : threads)
        t.join();
      for (const std::exception_ptr &e : errors)
        if (e)
          std::rethrow_exception(e);
      std::vector<std::shared_ptr<const runtime::CompiledBinary>> binaries;
      bool compiled = false, disk = false;
      for (const runtime::KernelLookup &k : got) {
        binaries.push_back(k.binary);
        compiled |= k.origin == runtime::CacheOrigin::Compiled;
        disk |= k.origin == runtime::CacheOrigin::Disk;
      }
      result.binaryOrigin = compiled ? runtime::CacheOrigin::Compiled
                            : disk   ? runtime::CacheOrigin::Disk
                                     : runtime::CacheOrigin::Memory;
      if (compiled)
        programCompiles().fetch_add(1);
      std::lock_guard<std::mutex> lock(cache.mu);
      if (entry->binaries.empty())
        entry->binaries = std::move(binaries);
    }
  }
  result.compiled = entry;
  return result;
}

int64_t LceJit::programCompileCount() { return programCompiles().load(); }

int64_t grownWorkspaceBytes(int64_t held, int64_t needed, int64_t budget) {
  LCEJIT_CHECK_ARG(held >= 0 && needed >= 0 && budget >= 0,
                   "workspace sizes must be >= 0, got held {} needed {} budget {}", held, needed,
                   budget);
  constexpr int64_t kMin = 256; // the smallest allocation: a valid, aligned pointer
  if (held == 0)
    return std::max(needed, kMin);
  const int64_t doubled = held > std::numeric_limits<int64_t>::max() / 2 ? held : 2 * held;
  return std::max({needed, kMin, std::min(budget, doubled)});
}

void throwBadTarget(const LinearCrossEntropyOptions &o, int64_t row, int64_t value) {
  std::string ignore =
      o.ignoreIndex ? fmt::format(" and is not ignore_index ({})", *o.ignoreIndex) : "";
  LCEJIT_THROW(DeviceCheck, "targets[{}] = {} is outside [0, V = {}){}", row, value, o.vocab,
               ignore);
}

pipeline::TraceSink dumpSinkFromKnobs(const std::string &prefix) {
  if (!knobs::anyDumpEnabled())
    return {};
  std::filesystem::path dir = knobs::dumpDir();
  pipeline::TraceSink sink;
  auto counter = std::make_shared<int>(0);
  sink.emit = [dir, prefix, counter](pipeline::Stage stage, std::string_view title,
                                     std::string_view text) {
    if (!knobs::dumpEnabled(stage))
      return;
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    std::string name = fmt::format("{}.{:02}.{}.txt", prefix, (*counter)++,
                                   pipeline::stageName(stage));
    std::ofstream out(dir / name);
    out << "// " << title << "\n" << text;
  };
  return sink;
}

} // namespace lcejit::ops

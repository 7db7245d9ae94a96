//===- NvrtcTest.cpp - NVRTC compiles (no GPU needed) ----------------------===//

#include "TestSupport.h"

#include "runtime/Nvrtc.h"
#include "runtime/DiskCache.h"

#include <fstream>
#include <regex>

using namespace lcejit;
using namespace lcejit::runtime;
using lcejit::testing::expectError;
using lcejit::testing::ScopedEnv;
using lcejit::testing::TempDir;
namespace fs = std::filesystem;

namespace {

const std::string kAxpy = R"(
extern "C" __global__ void axpy(float a, const float *x, float *y, long long n) {
  __shared__ float buf[256];
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  buf[threadIdx.x] = i < n ? x[i] : 0.f;
  __syncthreads();
  if (i < n) y[i] = a * buf[255 - threadIdx.x] + y[i];
}
extern "C" __global__ void scale(float *y, long long n) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) y[i] *= 2.f;
}
)";

std::string readText(const fs::path &p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

const PtxasKernelInfo *findKernel(const std::vector<PtxasKernelInfo> &ks, const std::string &n) {
  for (const PtxasKernelInfo &k : ks)
    if (k.kernel == n)
      return &k;
  return nullptr;
}

void checkCompile(const std::string &arch) {
  NvrtcOutput out =
      compileCuda(NvrtcRequest{kAxpy + lcejit::testing::uniqueSourceTag(), arch, {}, "axpy"});
  ASSERT_GT(out.cubin.size(), 64u);
  EXPECT_EQ(std::string(out.cubin.begin(), out.cubin.begin() + 4), "\x7f" "ELF");
  EXPECT_NE(out.ptx.find(".target " + arch), std::string::npos) << out.ptx.substr(0, 400);
  EXPECT_NE(out.ptx.find(".entry axpy"), std::string::npos);
  EXPECT_NE(out.log.find("ptxas info"), std::string::npos) << "log kept: " << out.log;
  EXPECT_EQ(out.arch, arch);
  EXPECT_GT(out.compileMs, 0.0);
  EXPECT_TRUE(std::regex_match(out.nvrtcVersion, std::regex(R"(\d+\.\d+)"))) << out.nvrtcVersion;
  ASSERT_EQ(out.kernels.size(), 2u) << out.log;
  const PtxasKernelInfo *axpy = findKernel(out.kernels, "axpy");
  ASSERT_NE(axpy, nullptr) << out.log;
  EXPECT_EQ(axpy->arch, arch);
  EXPECT_GT(axpy->registers, 0);
  EXPECT_EQ(axpy->sharedBytes, 1024);
  EXPECT_EQ(axpy->barriers, 1);
  EXPECT_EQ(axpy->spillStoreBytes, 0);
  EXPECT_FALSE(axpy->lines.empty());
  const PtxasKernelInfo *scale = findKernel(out.kernels, "scale");
  ASSERT_NE(scale, nullptr);
  EXPECT_EQ(scale->sharedBytes, 0);
}

TEST(NvrtcTest, UniqueSourceTagReachesThePtx) {
  std::string tag = lcejit::testing::uniqueSourceTag();
  NvrtcOutput a = compileCuda(NvrtcRequest{kAxpy + tag, "sm_80", {}, "tag"});
  NvrtcOutput b =
      compileCuda(NvrtcRequest{kAxpy + lcejit::testing::uniqueSourceTag(), "sm_80", {}, "tag"});
  EXPECT_NE(a.ptx.find("lcejit_test_nonce"), std::string::npos);
  EXPECT_NE(a.ptx, b.ptx) << "two tags must give two PTX texts";
}

TEST(NvrtcTest, CompilesForSm90a) { checkCompile("sm_90a"); }
TEST(NvrtcTest, CompilesForSm80) { checkCompile("sm_80"); }

TEST(NvrtcTest, OptionsAreStandardPlusIncludesPlusExtra) {
  ScopedEnv env{{"LCEJIT_CUDA_INCLUDE", "/inc/a:/inc/b"}};
  std::vector<std::string> opts = nvrtcOptions("sm_90a", {"-lineinfo"});
  EXPECT_EQ(opts, (std::vector<std::string>{"--gpu-architecture=sm_90a", "-std=c++17",
                                            "--ptxas-options=-v", "-I/inc/a", "-I/inc/b",
                                            "-lineinfo"}));
}

TEST(NvrtcTest, CudaHeadersResolveThroughTheDefaultIncludeDirs) {
  const char *src = R"(
#include <cuda/std/cstdint>
#include <cuda_bf16.h>
extern "C" __global__ void conv(const __nv_bfloat16 *x, float *y, cuda::std::int64_t n) {
  cuda::std::int64_t i = blockIdx.x * (cuda::std::int64_t)blockDim.x + threadIdx.x;
  if (i < n) y[i] = __bfloat162float(x[i]);
}
)";
  NvrtcOutput out = compileCuda(
      NvrtcRequest{src + lcejit::testing::uniqueSourceTag(), "sm_90a", {}, "headers"});
  EXPECT_FALSE(out.cubin.empty());
  EXPECT_NE(findKernel(out.kernels, "conv"), nullptr);
}

TEST(NvrtcTest, IncludeKnobIsUsed) {
  TempDir dumps;
  ScopedEnv env{{"LCEJIT_CUDA_INCLUDE", "/nonexistent/include"},
                {"LCEJIT_DUMP_DIR", dumps.path().string()}};
  std::string msg = expectError(ErrorKind::Nvrtc, [] {
    compileCuda(NvrtcRequest{"#include <cuda_bf16.h>\n", "sm_90a", {}, "noinc"});
  });
  EXPECT_NE(msg.find("cuda_bf16.h"), std::string::npos) << msg;
}

TEST(NvrtcTest, SyntaxErrorGivesLogSourcePathAndRecompileCommand) {
  TempDir dumps;
  ScopedEnv env{{"LCEJIT_DUMP_DIR", dumps.path().string()}};
  const std::string src = "extern \"C\" __global__ void broken(float *p) { p[0] = ; }\n";
  std::string msg = expectError(ErrorKind::Nvrtc, [&] {
    compileCuda(NvrtcRequest{src, "sm_90a", {"-lineinfo"}, "broken kernel"});
  });
  EXPECT_NE(msg.find("error"), std::string::npos) << msg;
  EXPECT_NE(msg.find("expected an expression"), std::string::npos) << "the NVRTC log: " << msg;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(msg, m, std::regex(R"(source: (\S+\.cu))"))) << msg;
  fs::path path = m[1].str();
  EXPECT_EQ(path.parent_path(), dumps.path());
  ASSERT_TRUE(fs::exists(path)) << path;
  EXPECT_EQ(readText(path), src);
  fs::path options = path;
  options.replace_extension(".options");
  EXPECT_NE(readText(options).find("-lineinfo"), std::string::npos);
  EXPECT_NE(msg.find("recompile: nvcc -cubin --gpu-architecture=sm_90a"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find(path.string() + " -o "), std::string::npos) << msg;
}

TEST(NvrtcTest, FailureWithoutDumpDirWritesToTemp) {
  ScopedEnv env{{"LCEJIT_DUMP_DIR", std::nullopt}};
  std::string msg = expectError(ErrorKind::Nvrtc, [] {
    compileCuda(NvrtcRequest{"this is not CUDA\n", "sm_80", {}, "junk"});
  });
  std::smatch m;
  ASSERT_TRUE(std::regex_search(msg, m, std::regex(R"(source: (\S+\.cu))"))) << msg;
  EXPECT_TRUE(fs::exists(m[1].str())) << m[1].str();
  EXPECT_NE(m[1].str().find("lcejit-failures"), std::string::npos);
  fs::path reproducer = m[1].str();
  for (const char *ext : {".cu", ".options", ".log"})
    fs::remove(reproducer.replace_extension(ext));
}

TEST(NvrtcTest, BadArchs) {
  std::string msg = expectError(ErrorKind::InvalidArgument, [] {
    compileCuda(NvrtcRequest{kAxpy, "compute_90", {}, "x"});
  });
  EXPECT_NE(msg.find("compute_90"), std::string::npos) << msg;
  msg = expectError(ErrorKind::Unsupported,
                    [] { compileCuda(NvrtcRequest{kAxpy, "sm_35", {}, "x"}); });
  EXPECT_NE(msg.find("sm_35"), std::string::npos) << msg;
  EXPECT_NE(msg.find("sm_90"), std::string::npos) << "lists the supported archs: " << msg;
}

TEST(NvrtcTest, SupportedArchsIncludeHopperAndAmpere) {
  const std::vector<int> &archs = nvrtcSupportedArchs();
  EXPECT_NE(std::find(archs.begin(), archs.end(), 90), archs.end());
  EXPECT_NE(std::find(archs.begin(), archs.end(), 80), archs.end());
}

TEST(PtxasParseTest, EntriesSpillsAndDeviceFunctions) {
  const char *log =
      "ptxas info    : 0 bytes gmem\n"
      "ptxas info    : Function properties for helper\n"
      "ptxas         .     24 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads\n"
      "ptxas info    : Compiling entry function 'gemm' for 'sm_90a'\n"
      "ptxas info    : Function properties for gemm\n"
      "ptxas         .     48 bytes stack frame, 40 bytes spill stores, 36 bytes spill loads\n"
      "ptxas info    : Used 255 registers, used 1 barriers, 6152 bytes smem, 400 bytes "
      "cmem[0]\n"
      "ptxas info    : Compile time = 11.5 ms\n"
      "some warning line\n"
      "ptxas info    : Compiling entry function '_Z3rowPf' for 'sm_90a'\n"
      "ptxas info    : Function properties for devfn\n"
      "ptxas         .     16 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\n"
      "ptxas info    : Function properties for _Z3rowPf\n"
      "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 12 registers, used 0 barriers\n";
  std::vector<PtxasKernelInfo> ks = parsePtxasInfo(log);
  ASSERT_EQ(ks.size(), 2u);
  EXPECT_EQ(ks[0].kernel, "gemm");
  EXPECT_EQ(ks[0].arch, "sm_90a");
  EXPECT_EQ(ks[0].registers, 255);
  EXPECT_EQ(ks[0].barriers, 1);
  EXPECT_EQ(ks[0].sharedBytes, 6152);
  EXPECT_EQ(ks[0].constBytes, 400);
  EXPECT_EQ(ks[0].stackFrameBytes, 48);
  EXPECT_EQ(ks[0].spillStoreBytes, 40);
  EXPECT_EQ(ks[0].spillLoadBytes, 36);
  EXPECT_DOUBLE_EQ(ks[0].ptxasMs, 11.5);
  EXPECT_EQ(ks[0].lines.size(), 5u);
  EXPECT_EQ(ks[1].kernel, "_Z3rowPf");
  EXPECT_EQ(ks[1].registers, 12);
  EXPECT_EQ(ks[1].spillStoreBytes, 0) << "devfn's spills belong to devfn, not the entry";
  EXPECT_EQ(ks[1].stackFrameBytes, 0);
  EXPECT_TRUE(parsePtxasInfo("no ptxas here\n").empty());
}

TEST(NvrtcTest, NvccCommandQuotesAndDropsNvrtcOnlyOptions) {
  std::string cmd = nvccCommand({"--gpu-architecture=sm_90a", "-default-device", "-DX=a b"},
                                "/tmp/my dir/k.cu", "/tmp/k.cubin");
  EXPECT_EQ(cmd, "nvcc -cubin --gpu-architecture=sm_90a '-DX=a b' '/tmp/my dir/k.cu' -o "
                 "/tmp/k.cubin");
}

//===----------------------------------------------------------------------===//
// Identity for the disk cache key: [Note: NVRTC identity], includedHeaders()
//===----------------------------------------------------------------------===//

TEST(NvrtcIdentityTest, FullVersionHasReleaseBuildAndLibraryFile) {
  const std::string &v = nvrtcFullVersion();
  EXPECT_EQ(v.rfind(nvrtcVersion() + " (", 0), 0u) << v;
  // e.g. "13.0 (V13.0.88, CL-36424714, NVVM 7.0.1; libnvrtc.so.13 109338064 bytes)"
  std::regex full(R"(\d+\.\d+ \(V\d+\.\d+\.\d+, \S+, NVVM [0-9.]+; libnvrtc\S* \d+ bytes\))");
  EXPECT_TRUE(std::regex_match(v, full)) << v;
  EXPECT_NE(v.find("V" + nvrtcVersion() + "."), std::string::npos)
      << "the patch release belongs to the same major.minor: " << v;
  EXPECT_EQ(&v, &nvrtcFullVersion()) << "computed once per process";
}

TEST(NvrtcIdentityTest, LibraryIdentityNamesTheLoadedFile) {
  const std::string id = nvrtcLibraryIdentity();
  // e.g. "nvrtc 13.0; /usr/.../libnvrtc.so.13.0.88; size 109338064; mtime ...; ctime ...;
  // dev ...; ino ..."
  std::regex re(R"(nvrtc \d+\.\d+; (/\S*libnvrtc\S*); size (\d+); mtime \d+\.\d{9}; )"
                R"(ctime \d+\.\d{9}; dev \d+; ino (\d+))");
  std::smatch m;
  ASSERT_TRUE(std::regex_match(id, m, re)) << id;
  EXPECT_EQ(std::to_string(fs::file_size(m[1].str())), m[2].str()) << id;
  EXPECT_NE(nvrtcFullVersion().find(" " + m[2].str() + " bytes"), std::string::npos)
      << "the version names the same file: " << nvrtcFullVersion() << " / " << id;
  EXPECT_EQ(nvrtcLibraryIdentity(), id) << "stable while the file is";
}

TEST(NvrtcIdentityTest, TheProbeIsWhatTheMemoKeeps) {
  // The process's value, from a memo or probed, is the probe's: the disk key does not
  // depend on which.
  EXPECT_EQ(nvrtcProbeFullVersion(), nvrtcFullVersion());
}

TEST(NvrtcIdentityTest, TheMemoSavesTheProbeAndFollowsTheIdentity) {
  TempDir dir;
  int probes = 0;
  auto probe = [&] {
    ++probes;
    return std::string("13.0 (V13.0.88, CL-1, NVVM 7.0.1; libnvrtc.so.13 5 bytes)");
  };
  NvrtcFullVersion first = resolveNvrtcFullVersion(dir.path(), "identity 1", probe);
  EXPECT_EQ(probes, 1);
  EXPECT_FALSE(first.fromMemo);
  EXPECT_TRUE(first.stored);
  NvrtcFullVersion second = resolveNvrtcFullVersion(dir.path(), "identity 1", probe);
  EXPECT_EQ(probes, 1) << "the memo answered";
  EXPECT_TRUE(second.fromMemo);
  EXPECT_EQ(second.value, first.value);
  // Another file (replaced, touched, elsewhere): probed again.
  NvrtcFullVersion other = resolveNvrtcFullVersion(dir.path(), "identity 2", probe);
  EXPECT_EQ(probes, 2);
  EXPECT_FALSE(other.fromMemo);
  // No cache directory (LCEJIT_CACHE=0) or no identity: always probed, nothing written.
  TempDir empty;
  EXPECT_FALSE(resolveNvrtcFullVersion(std::nullopt, "identity 1", probe).fromMemo);
  EXPECT_FALSE(resolveNvrtcFullVersion(empty.path(), "", probe).stored);
  EXPECT_EQ(probes, 4);
  EXPECT_TRUE(fs::is_empty(empty.path()));
  // A failed probe is not kept: the next process tries again.
  auto failing = [&] {
    ++probes;
    return std::string("13.0 (no PTX banner (nvrtcCompileProgram failed); lib 5 bytes)");
  };
  EXPECT_FALSE(resolveNvrtcFullVersion(dir.path(), "identity 3", failing).stored);
  EXPECT_FALSE(resolveNvrtcFullVersion(dir.path(), "identity 3", failing).fromMemo);
  EXPECT_EQ(probes, 6);
}

struct IncludedHeadersTest : ::testing::Test {
  TempDir inc, inc2;
  void write(const fs::path &p, const std::string &text) {
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary | std::ios::trunc) << text;
  }
  /// Replaces a file the way editors and package managers do (a new inode), so the
  /// change is seen even within one time stamp tick at the same size.
  void replace(const fs::path &p, const std::string &text) {
    write(fs::path(p.string() + ".new"), text);
    fs::rename(p.string() + ".new", p);
  }
  std::vector<std::string> dirs() const { return {inc.path().string(), inc2.path().string()}; }
  void SetUp() override {
    write(inc.path() / "top.h", "#pragma once\n#include \"sub/mid.h\"\n#include <utility>\n");
    write(inc.path() / "sub" / "mid.h", "  #  include \"leaf.h\" // next to mid.h\n");
    write(inc.path() / "sub" / "leaf.h", "int leaf = 1;\n");
    write(inc2.path() / "other.h", "#if 0\n#include <top.h>\n#endif\n");
  }
};

TEST_F(IncludedHeadersTest, FollowsIncludesTransitively) {
  IncludedHeaders h = includedHeaders("#include <top.h>\n__global__ void k() {}\n", dirs());
  EXPECT_EQ(h.files, (std::vector<std::string>{(inc.path() / "top.h").string(),
                                               (inc.path() / "sub" / "mid.h").string(),
                                               (inc.path() / "sub" / "leaf.h").string()}));
  EXPECT_EQ(h.builtin, (std::vector<std::string>{"utility"}));
  EXPECT_EQ(h.hash.size(), 32u);
  EXPECT_EQ(h.hash, includedHeaders("#include <top.h>\n__global__ void k() {}\n", dirs()).hash);
  // Includes under #if 0 count too: the set may be larger, never smaller.
  IncludedHeaders o = includedHeaders("#include \"other.h\"\n", dirs());
  EXPECT_EQ(o.files.size(), 4u);
  // Comments (the prelude's "// #include ..." lines) do not.
  IncludedHeaders none = includedHeaders("// #include <top.h>\nint x;\n", dirs());
  EXPECT_TRUE(none.files.empty());
  EXPECT_NE(none.hash, h.hash);
}

TEST_F(IncludedHeadersTest, AnyHeaderContentChangesTheHash) {
  const std::string src = "#include <top.h>\n";
  std::string h0 = includedHeaders(src, dirs()).hash;
  replace(inc.path() / "sub" / "leaf.h", "int leaf = 2;\n"); // same size, other bytes
  std::string h1 = includedHeaders(src, dirs()).hash;
  EXPECT_NE(h1, h0) << "a leaf header two levels down changed";
  replace(inc.path() / "sub" / "leaf.h", "int leaf = 1;\n");
  EXPECT_EQ(includedHeaders(src, dirs()).hash, h0) << "content, not time stamps";
  write(inc.path() / "top.h", "#pragma once\n#include \"sub/mid.h\"\n#include <utility>\n\n");
  EXPECT_NE(includedHeaders(src, dirs()).hash, h0);
}

TEST_F(IncludedHeadersTest, SearchOrderDecides) {
  // top.h in the first dir shadows one in the second; a change to the shadowed copy does
  // not matter, a copy placed earlier does.
  write(inc2.path() / "top.h", "int shadowed;\n");
  const std::string src = "#include <top.h>\n";
  std::string h0 = includedHeaders(src, dirs()).hash;
  write(inc2.path() / "top.h", "int shadowed2;\n");
  EXPECT_EQ(includedHeaders(src, dirs()).hash, h0);
  std::vector<std::string> swapped = {inc2.path().string(), inc.path().string()};
  EXPECT_NE(includedHeaders(src, swapped).hash, h0);
}

TEST(IncludedHeadersRealTest, TheToolkitHeadersOfTheDevicePreludeAreHashed) {
  IncludedHeaders h = includedHeaders("#include <cuda_bf16.h>\n#include <cuda_fp16.h>\n",
                                      knobs::cudaIncludeDirs());
  auto has = [&](const std::string &name) {
    for (const std::string &f : h.files)
      if (fs::path(f).filename() == name)
        return true;
    return false;
  };
  for (const char *name : {"cuda_bf16.h", "cuda_bf16.hpp", "cuda_fp16.h", "cuda_fp16.hpp"})
    EXPECT_TRUE(has(name)) << name << " not among " << h.files.size() << " files";
}

} // namespace

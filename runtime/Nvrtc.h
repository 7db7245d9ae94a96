//===- Nvrtc.h - CUDA C++ source to cubin with NVRTC -----------------------===//
//
// One function, compileCuda(), turns generated CUDA C++ into a cubin for one arch. The
// NVRTC log is always kept (warnings and the `ptxas -v` resource report), the PTX is
// kept too (nvrtcGetPTX works after an sm_XY compile), and the resource report is parsed
// per kernel.
//
// [Note: options] The option list is a pure function of (arch, extra options, the
// LCEJIT_CUDA_INCLUDE knob): nvrtcOptions(). The kernel cache hashes exactly this list
// into its key, and compileCuda() passes exactly this list to NVRTC. NVRTC has no
// built-in headers, so every include directory is passed as -I.
//
// [Note: compute cache] On a machine with a CUDA driver, NVRTC's sm_XY compile goes
// through the driver's compute cache (~/.nv/ComputeCache; CUDA_CACHE_PATH,
// CUDA_CACHE_DISABLE=1 and CUDA_CACHE_MAXSIZE are read by the driver, not by lcejit).
// On a hit there ptxas does not run: the cubin is the same, but the log has no ptxas
// lines, so `kernels` is empty (measured on the H200 machine; on a machine without
// libcuda ptxas always runs). Module::attributes() gives registers, shared and local
// memory of a loaded kernel in every case; set CUDA_CACHE_DISABLE=1 to see the ptxas
// report (spills) of every compile.
//
// [Note: NVRTC identity] nvrtcVersion() gives only major.minor, and a patch release of
// the toolkit keeps it while changing the code NVRTC generates. nvrtcFullVersion() adds
// what NVRTC does expose: the "Cuda compilation tools, release X.Y, VX.Y.Z" and
// "Compiler Build ID: CL-N" lines it writes at the top of every PTX (read once per
// process from an empty program compiled for the oldest supported compute_XY, about
// 10-20 ms, no ptxas and no driver involved), and the resolved file name and size of the
// libnvrtc.so actually loaded (found with dl_iterate_phdr). The directory is left out on
// purpose: one library mounted at two paths makes the same cubins.
//
// [Note: reproducers] When NVRTC fails, the source, the options and the log are written
// to LCEJIT_DUMP_DIR (or, if unset, <temp>/lcejit-failures), and Error(Nvrtc) carries the
// log, the source path and a one-line nvcc command that recompiles it.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lcejit::runtime {

/// What `ptxas -v` reported for one entry function.
struct PtxasKernelInfo {
  std::string kernel; ///< the entry name as ptxas prints it (mangled unless extern "C")
  std::string arch;   ///< e.g. "sm_90a"
  int32_t registers = -1;
  int32_t barriers = 0;
  int64_t sharedBytes = 0;   ///< static shared memory ("smem")
  int64_t constBytes = 0;    ///< cmem[0]
  int64_t stackFrameBytes = 0;
  int64_t spillStoreBytes = 0;
  int64_t spillLoadBytes = 0;
  double ptxasMs = 0;
  std::vector<std::string> lines; ///< the raw ptxas lines about this kernel
  bool operator==(const PtxasKernelInfo &) const = default;
};

/// Parses the `ptxas -v` lines of an NVRTC log, one entry per compiled entry function,
/// in the order ptxas reports them. Lines that are not ptxas info are ignored.
std::vector<PtxasKernelInfo> parsePtxasInfo(std::string_view log);

struct NvrtcRequest {
  std::string source;
  std::string arch = "sm_90a";           ///< "sm_XY" or "sm_XYa" (plan::Target::archName())
  std::vector<std::string> extraOptions; ///< appended after the standard options
  std::string label = "lcejit";          ///< names the program in errors and reproducers
};

struct NvrtcOutput {
  std::vector<uint8_t> cubin;
  std::string ptx;
  std::string log; ///< the full NVRTC log, always kept
  std::vector<PtxasKernelInfo> kernels; ///< empty on a compute-cache hit (see above)
  std::vector<std::string> options;     ///< exactly what was passed to NVRTC
  std::string nvrtcVersion;         ///< e.g. "13.0"
  std::string arch;
  double compileMs = 0; ///< wall time of nvrtcCompileProgram
};

/// The full option list for an arch: --gpu-architecture=<arch>, -std=c++17,
/// --ptxas-options=-v, -I<dir> for each LCEJIT_CUDA_INCLUDE dir, then `extra`.
std::vector<std::string> nvrtcOptions(std::string_view arch,
                                      const std::vector<std::string> &extra = {});

/// "major.minor" of the NVRTC library in use.
const std::string &nvrtcVersion();

/// Everything that identifies the NVRTC in use, for the disk cache key ([Note: NVRTC
/// identity]), e.g. "13.0 (V13.0.88, CL-36424714, NVVM 7.0.1; libnvrtc.so.13 109338064 bytes)".
/// Once per process: from the memo of the loaded library's identity in the disk cache when
/// there is one ([Note: NVRTC identity memo]), else probed (and the memo written).
const std::string &nvrtcFullVersion();

/// nvrtcFullVersion() as the probe computes it: an NVRTC compile of an empty program for
/// its PTX banner (10-30 ms), every time it is called.
std::string nvrtcProbeFullVersion();

/// The loaded libnvrtc file as the file system knows it: NVRTC's major.minor, the resolved
/// path, size, mtime, ctime, device and inode; "" when the file is not found.
std::string nvrtcLibraryIdentity();

/// The memo of nvrtcFullVersion() ([Note: memos] in DiskCache.h).
inline constexpr std::string_view kNvrtcVersionMemo = "nvrtc-version";

/// [Note: NVRTC identity memo] The PTX banner in nvrtcFullVersion() costs an NVRTC compile
/// of an empty program, 10-30 ms: most of a process's first call on a warm disk cache,
/// where nothing else is compiled (measured: docs/performance.md, session 24). It is a
/// function of the libnvrtc file, so the disk cache keeps it as a memo under that file's
/// identity (nvrtcLibraryIdentity()): a library replaced, rewritten, touched or mounted
/// elsewhere has another identity and is probed again. The probe's value is what the
/// memo holds, so the disk key is the same either way. With the disk cache off
/// (LCEJIT_CACHE=0), or the library not found, it is probed; a failed probe ("no PTX
/// banner") is not kept.
struct NvrtcFullVersion {
  std::string value;
  bool fromMemo = false; ///< read from the memo (the probe did not run)
  bool stored = false;   ///< probed and written as the memo
};
/// nvrtcFullVersion()'s steps, for tests: the memo under `memoRoot` (none: probe only)
/// for `libraryIdentity` (empty: probe only), else `probe()`.
NvrtcFullVersion resolveNvrtcFullVersion(const std::optional<std::filesystem::path> &memoRoot,
                                         std::string_view libraryIdentity,
                                         const std::function<std::string()> &probe);

/// The headers a CUDA source reaches through #include, resolved like NVRTC does (a quoted
/// include first next to the including file, then each -I dir in order) and followed
/// transitively. Every #include line counts, whatever #if surrounds it: the set can only
/// be larger than what the preprocessor reads, never smaller. Names found in no dir are
/// NVRTC's built-in headers (<utility>, <cstring>, ...), covered by nvrtcFullVersion().
struct IncludedHeaders {
  std::string hash;                ///< XXH3-128 hex over every (name, content hash) reached
  std::vector<std::string> files;  ///< resolved paths, in first-reached order
  std::vector<std::string> builtin; ///< names found in no include dir
};
/// See IncludedHeaders. File contents are cached per process and re-read when a file's
/// inode, size, mtime or ctime changes. Never throws: an unreadable file enters as such.
IncludedHeaders includedHeaders(std::string_view source,
                                const std::vector<std::string> &includeDirs);

/// The sm_XY numbers this NVRTC can compile for (e.g. 75 80 86 ... 90 100 120).
const std::vector<int> &nvrtcSupportedArchs();

/// Compiles. Throws Error(InvalidArgument) for a malformed arch, Error(Unsupported) for an
/// arch NVRTC does not know, Error(Nvrtc) when compilation fails (see [Note: reproducers]).
NvrtcOutput compileCuda(const NvrtcRequest &request);

/// The nvcc command that recompiles `sourcePath` with NVRTC options `options` into
/// `cubinPath` (NVRTC-only options are dropped). Exposed for tests.
std::string nvccCommand(const std::vector<std::string> &options, const std::string &sourcePath,
                        const std::string &cubinPath);

} // namespace lcejit::runtime

// inspect: what lcejit compiles for the fused linear cross entropy of one shape, without
// a GPU: the plan (the planner's decisions, the run schedule for N, the Program) and the
// CUDA C++ it generates.
//
//   inspect [N D V [softcap]]          (default: the Llama-3 head, N = 8192)
#include <lcejit/LinearCrossEntropy.h>

#include <cstdlib>
#include <iostream>
#include <string>

int main(int argc, char **argv) {
  int64_t n = 8192;
  lcejit::LinearCrossEntropyOptions o;
  o.hidden = 4096;
  o.vocab = 128256;
  if (argc >= 4) {
    n = std::atoll(argv[1]);
    o.hidden = std::atoll(argv[2]);
    o.vocab = std::atoll(argv[3]);
  }
  if (argc >= 5)
    o.softcap = std::atof(argv[4]);
  try {
    lcejit::LinearCrossEntropy op(o); // builds the loss with the frontend, runs the passes
    std::cout << "N = " << n << " falls in bucket " << lcejit::LinearCrossEntropy::bucketOf(n)
              << "; workspace " << op.workspaceBytes(n) << " bytes\n"
              << "schedule: " << op.scheduleSummary(n) << "\n\n"
              << op.inspect(n, "plan") << "\n";
    std::string cuda = op.inspect(n, "cuda");
    std::cout << "CUDA source: " << cuda.size() << " bytes; its kernels:\n";
    for (size_t at = cuda.find("extern \"C\" __global__"); at != std::string::npos;
         at = cuda.find("extern \"C\" __global__", at + 1))
      std::cout << "  " << cuda.substr(at, cuda.find('(', at) - at) << "\n";
  } catch (const lcejit::Error &e) {
    std::cerr << "inspect: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

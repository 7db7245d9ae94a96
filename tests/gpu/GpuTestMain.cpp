//===- GpuTestMain.cpp - Runner of the GPU suite ---------------------------===//
//
// Exits 77 (ctest: skipped, with the reason printed) when there is no CUDA driver or no
// GPU, so a machine without a GPU never counts these tests as passed.
//
//===----------------------------------------------------------------------===//

#include "runtime/CudaDriver.h"

#include <gtest/gtest.h>

#include <iostream>

int main(int argc, char **argv) {
  ::testing::InitGoogleTest(&argc, argv);
  std::string why;
  if (!lcejit::runtime::cudaAvailable(&why)) {
    std::cout << "lcejit-gpu-tests: SKIPPED, no GPU: " << why << "\n";
    return 77;
  }
  lcejit::runtime::DeviceInfo info = lcejit::runtime::deviceInfo(0);
  std::cout << "lcejit-gpu-tests on " << info.name << " (sm_" << info.smVersion() << ", "
            << info.numSMs << " SMs, driver " << info.driverVersion << ")\n";
  return RUN_ALL_TESTS();
}

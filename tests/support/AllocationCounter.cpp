//===- AllocationCounter.cpp - The counting global operator new (tests) ----===//

#include "tests/support/AllocationCounter.h"

#include <cstdlib>
#include <new>

namespace {
thread_local bool gCounting = false;
thread_local long gAllocations = 0;

void *countedAlloc(std::size_t n) {
  if (gCounting)
    ++gAllocations;
  if (void *p = std::malloc(n ? n : 1))
    return p;
  throw std::bad_alloc();
}

void *countedAlignedAlloc(std::size_t n, std::align_val_t a) {
  if (gCounting)
    ++gAllocations;
  const std::size_t align = static_cast<std::size_t>(a);
  const std::size_t size = (n + align - 1) / align * align;
  if (void *p = std::aligned_alloc(align, size ? size : align))
    return p;
  throw std::bad_alloc();
}
} // namespace

namespace lcejit::testsupport {
void beginCountingAllocations() {
  gAllocations = 0;
  gCounting = true;
}
long endCountingAllocations() {
  gCounting = false;
  return gAllocations;
}
} // namespace lcejit::testsupport

void *operator new(std::size_t n) { return countedAlloc(n); }
void *operator new[](std::size_t n) { return countedAlloc(n); }
void *operator new(std::size_t n, std::align_val_t a) { return countedAlignedAlloc(n, a); }
void *operator new[](std::size_t n, std::align_val_t a) { return countedAlignedAlloc(n, a); }
void operator delete(void *p) noexcept { std::free(p); }
void operator delete[](void *p) noexcept { std::free(p); }
void operator delete(void *p, std::size_t) noexcept { std::free(p); }
void operator delete[](void *p, std::size_t) noexcept { std::free(p); }
void operator delete(void *p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void *p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void *p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void *p, std::size_t, std::align_val_t) noexcept { std::free(p); }

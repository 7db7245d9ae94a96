//===- lcejit_emu_fiber.h - Emulated CUDA threads as fibers (tests only) ---------===//
//
// [Note: emulated threads as fibers] The host emulation ([Note: host emulation],
// [Note: sm90 host emulation]) runs every CUDA thread of the CTAs that must be live
// together as a fiber: its own stack, switched to and from by a few instructions on
// one OS thread. The first version ran each CUDA thread as a std::thread; every warp
// shuffle, mma.sync and barrier then cost each of its threads a kernel context switch
// (12.7 million of them for one 128 x 256 mma.sync test: 45 s, 57 of it system time).
//
// The fibers are scheduled in rounds: each live fiber runs until it blocks (a barrier,
// an mbarrier or a flag it waits on, `block`) or ends. So
//  - a wait is a loop `while (!done) block(what)`: the fiber gives up the OS thread and
//    looks again in the next round;
//  - the order of the fibers in a round is a permutation drawn from a seeded generator
//    (LCEJIT_EMU_SEED, default 1; 0 keeps thread order): a run is deterministic for a
//    seed, and across the rounds of one run every thread gets ahead of the others that
//    wait with it, as on the hardware (where no order between warps is promised);
//  - events that can let a waiter go on (an arrival, a completed transaction, a flag
//    written, a fiber's end) count as progress; a round in which every live fiber was
//    blocked and none made progress, twice running, is a deadlock: the launch aborts
//    naming the blocked threads and what each waits on (and the hook's state, the
//    mbarriers for sm90), at once instead of after a timeout. A fiber that spins on
//    a flag (`__nanosleep`) yields without counting as blocked; a launch where nothing
//    made progress for LCEJIT_EMU_TIMEOUT seconds (default 60) aborts too.
//  - Deferred work (sm90's TMA loads in mode Late) is kept by the scheduler and run
//    between rounds, when the round it waits for comes (`defer`).
//
// The switch is a hand-written x86-64 routine (callee-saved registers, the stack
// pointer, MXCSR and the x87 control word); elsewhere ucontext's swapcontext.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

// Under AddressSanitizer (scripts/test --sanitize builds the tests that include this) every
// switch is announced, so that ASan knows which stack is live.
#if defined(__SANITIZE_ADDRESS__)
#define LCEJIT_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LCEJIT_EMU_ASAN 1
#endif
#endif
#ifdef LCEJIT_EMU_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

#if defined(__x86_64__)
// void lcejit_emu_switch(void **save_sp, void *load_sp): saves this context on its stack,
// stores the stack pointer in *save_sp, and resumes the context whose stack pointer is
// load_sp. Weak and hidden: every translation unit that includes this header has a copy,
// the linker keeps one.
asm(R"(
  .pushsection .text
  .weak lcejit_emu_switch
  .hidden lcejit_emu_switch
  .type lcejit_emu_switch, @function
lcejit_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size lcejit_emu_switch, .-lcejit_emu_switch

  .weak lcejit_emu_fiber_start
  .hidden lcejit_emu_fiber_start
  .type lcejit_emu_fiber_start, @function
lcejit_emu_fiber_start:
  movq %r12, %rdi
  callq *%r13
  ud2
  .size lcejit_emu_fiber_start, .-lcejit_emu_fiber_start
  .popsection
)");
extern "C" void lcejit_emu_switch(void **save_sp, void *load_sp);
extern "C" void lcejit_emu_fiber_start();
#endif

namespace lcejit_emu {

[[noreturn]] inline void fail(const char *what) {
  std::fprintf(stderr, "lcejit_emu: %s\n", what);
  std::abort();
}

namespace fiber {

/// A fiber's stack: reserved without backing (only the pages a thread touches are
/// memory), with a guard page below it.
class Stack {
public:
  static constexpr size_t kBytes = size_t(1) << 20;
  Stack() {
    base_ = ::mmap(nullptr, kBytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base_ == MAP_FAILED)
      fail("mmap of a fiber stack failed");
    ::mprotect(base_, 4096, PROT_NONE);
  }
  ~Stack() { ::munmap(base_, kBytes); }
  Stack(const Stack &) = delete;
  Stack &operator=(const Stack &) = delete;
  unsigned char *top() const { return static_cast<unsigned char *>(base_) + kBytes; }
  unsigned char *bottom() const { return static_cast<unsigned char *>(base_); }

private:
  void *base_;
};

struct Fiber {
  std::function<void()> body;
  std::string label;          ///< "block x thread t", for a deadlock's report
  bool done = false;
  bool blocked = false;       ///< it gave up the thread in `block` (not in `yield`)
  void *asan_fake_stack = nullptr;
  const char *waiting = "";   ///< what it waits on, while blocked
#if defined(__x86_64__)
  void *sp = nullptr;
#else
  ucontext_t ctx;
#endif
};

class Scheduler;
inline thread_local Scheduler *current = nullptr;

/// Runs a set of fibers to their ends (see the Note).
class Scheduler {
public:
  /// Called before fiber i resumes: installs its thread-local view (threadIdx, ...).
  std::function<void(size_t)> on_resume;
  /// Prints the launch's synchronization state when it deadlocks.
  std::function<void()> on_deadlock;

  void add(std::function<void()> body, std::string label) {
    fibers_.emplace_back(new Fiber);
    fibers_.back()->body = std::move(body);
    fibers_.back()->label = std::move(label);
  }

  void run() {
    Scheduler *outer = current;
    current = this;
    ensure_stacks();
    for (size_t i = 0; i < fibers_.size(); ++i)
      prepare(i);
    std::vector<size_t> order(fibers_.size());
    for (size_t i = 0; i < order.size(); ++i)
      order[i] = i;
    std::mt19937_64 rng(seed());
    const bool shuffle = seed() != 0;
    size_t live = fibers_.size();
    int stuck = 0;
    auto last_progress = std::chrono::steady_clock::now();
    bool progressed_since_check = false;
    unsigned long long rounds = 0;
    while (live > 0) {
      if (shuffle)
        std::shuffle(order.begin(), order.end(), rng);
      const unsigned long long before = progress_;
      bool all_blocked = true;
      for (size_t i : order) {
        Fiber &f = *fibers_[i];
        if (f.done)
          continue;
        resume(i);
        if (f.done) {
          --live;
          ++progress_;
        } else if (!f.blocked) {
          all_blocked = false;
        }
      }
      ++round_;
      run_deferred();
      if (progress_ != before) {
        stuck = 0;
        progressed_since_check = true;
      } else if (live > 0 && all_blocked && deferred_.empty()) {
        if (++stuck >= 2)
          deadlock("every thread waits and none made progress for two rounds");
      } else {
        stuck = 0;
      }
      // The clock, every 1024 rounds: a stretch of that many without any progress that
      // has lasted LCEJIT_EMU_TIMEOUT seconds is threads spinning on what never comes.
      if (live > 0 && (++rounds & 1023) == 0) {
        const auto now = std::chrono::steady_clock::now();
        if (progressed_since_check)
          last_progress = now;
        else if (now - last_progress > std::chrono::duration<double>(timeout_seconds()))
          deadlock("no progress within LCEJIT_EMU_TIMEOUT seconds (threads spinning)");
        progressed_since_check = false;
      }
    }
    // Work still deferred when every thread has ended (a load nobody waited for) lands
    // before the launch's memory goes.
    while (!deferred_.empty()) {
      ++round_;
      run_deferred();
    }
    current = outer;
  }

  /// The running fiber gives up the thread until the next round; `what` names the wait.
  void block(const char *what) {
    Fiber &f = *fibers_[running_];
    f.blocked = true;
    f.waiting = what;
    suspend();
    f.blocked = false;
  }
  /// The running fiber gives up the thread without waiting on anything (a spin loop's
  /// sleep): not a sign of deadlock by itself.
  void yield() { suspend(); }
  void progress() { ++progress_; }
  size_t running() const { return running_; }
  unsigned long long round() const { return round_; }
  /// Runs `work` after the round `rounds` from now has ended (0: after this one).
  void defer(unsigned rounds, std::function<void()> work) {
    deferred_.push_back(Deferred{round_ + rounds, std::move(work)});
  }
  /// Draws a number in [0, n) from the launch's generator (0 when unshuffled).
  unsigned draw(unsigned n) {
    if (seed() == 0 || n <= 1)
      return 0;
    return static_cast<unsigned>(draws_() % n);
  }

  static unsigned long long seed() {
    static const unsigned long long s = [] {
      const char *v = std::getenv("LCEJIT_EMU_SEED");
      return v ? std::strtoull(v, nullptr, 10) : 1ull;
    }();
    return s;
  }
  static double timeout_seconds() {
    static const double t = [] {
      const char *v = std::getenv("LCEJIT_EMU_TIMEOUT");
      return v ? std::atof(v) : 60.0;
    }();
    return t;
  }

private:
  struct Deferred {
    unsigned long long due;
    std::function<void()> work;
  };

  static void entry(void *self) {
    Scheduler *s = static_cast<Scheduler *>(self);
    Fiber &f = *s->fibers_[s->running_];
    s->arrived(f);
    f.body();
    f.done = true;
    s->suspend();
    fail("a finished fiber was resumed");
  }
#if !defined(__x86_64__)
  static void entry_uc(unsigned hi, unsigned lo) {
    entry(reinterpret_cast<void *>((static_cast<uintptr_t>(hi) << 32) | lo));
  }
#endif

  void ensure_stacks() {
    // Stacks are kept across launches (one mmap each, reused by the next launch's fibers).
    std::vector<std::unique_ptr<Stack>> &pool = stack_pool();
    while (pool.size() < fibers_.size())
      pool.emplace_back(new Stack);
  }
  static std::vector<std::unique_ptr<Stack>> &stack_pool() {
    static thread_local std::vector<std::unique_ptr<Stack>> pool;
    return pool;
  }

  void prepare(size_t i) {
    Fiber &f = *fibers_[i];
    Stack &st = *stack_pool()[i];
#if defined(__x86_64__)
    // The frame lcejit_emu_switch pops: MXCSR + x87 control word, r15, r14, r13 (the
    // entry), r12 (its argument), rbx, rbp, the return address (the start routine), laid
    // out so that the start routine's call finds a 16-byte aligned stack.
    uintptr_t top = reinterpret_cast<uintptr_t>(st.top()) & ~uintptr_t(15);
    uint64_t *sp = reinterpret_cast<uint64_t *>(top - 128);
    uint32_t mxcsr;
    uint16_t fpucw;
    asm volatile("stmxcsr %0" : "=m"(mxcsr));
    asm volatile("fnstcw %0" : "=m"(fpucw));
    sp[0] = static_cast<uint64_t>(mxcsr) | (static_cast<uint64_t>(fpucw) << 32);
    sp[1] = 0;                                          // r15
    sp[2] = 0;                                          // r14
    sp[3] = reinterpret_cast<uint64_t>(&Scheduler::entry); // r13
    sp[4] = reinterpret_cast<uint64_t>(this);           // r12
    sp[5] = 0;                                          // rbx
    sp[6] = 0;                                          // rbp
    sp[7] = reinterpret_cast<uint64_t>(&lcejit_emu_fiber_start);
    f.sp = sp;
#else
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = st.bottom() + 4096;
    f.ctx.uc_stack.ss_size = Stack::kBytes - 4096;
    f.ctx.uc_link = nullptr;
    const uintptr_t self = reinterpret_cast<uintptr_t>(this);
    makecontext(&f.ctx, reinterpret_cast<void (*)()>(&Scheduler::entry_uc), 2,
                static_cast<unsigned>(self >> 32), static_cast<unsigned>(self));
#endif
  }

  void resume(size_t i) {
    running_ = i;
    if (on_resume)
      on_resume(i);
#ifdef LCEJIT_EMU_ASAN
    void *fake = nullptr;
    const Stack &st = *stack_pool()[i];
    __sanitizer_start_switch_fiber(&fake, st.bottom() + 4096, Stack::kBytes - 4096);
#endif
#if defined(__x86_64__)
    lcejit_emu_switch(&main_sp_, fibers_[i]->sp);
#else
    swapcontext(&main_ctx_, &fibers_[i]->ctx);
#endif
#ifdef LCEJIT_EMU_ASAN
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
  }
  void suspend() {
    Fiber &f = *fibers_[running_];
#ifdef LCEJIT_EMU_ASAN
    // A fiber that has ended gives its fake stack back.
    __sanitizer_start_switch_fiber(f.done ? nullptr : &f.asan_fake_stack, main_bottom_,
                                   main_size_);
#endif
#if defined(__x86_64__)
    lcejit_emu_switch(&f.sp, main_sp_);
#else
    swapcontext(&f.ctx, &main_ctx_);
#endif
    arrived(f);
  }
  /// On a fiber, after the switch to it: tells ASan the switch is done (and learns the
  /// scheduler's stack, to announce the switch back).
  void arrived(Fiber &f) {
#ifdef LCEJIT_EMU_ASAN
    __sanitizer_finish_switch_fiber(f.asan_fake_stack, &main_bottom_, &main_size_);
#else
    (void)f;
#endif
  }

  void run_deferred() {
    if (deferred_.empty())
      return;
    std::vector<Deferred> due, later;
    for (Deferred &d : deferred_)
      (d.due < round_ ? due : later).push_back(std::move(d));
    deferred_ = std::move(later);
    for (Deferred &d : due) {
      d.work();
      ++progress_;
    }
  }

  [[noreturn]] void deadlock(const char *why) {
    std::fprintf(stderr, "lcejit_emu: a deadlock: %s (round %llu, seed %llu)\n", why, round_,
                 seed());
    size_t shown = 0, live = 0;
    for (size_t i = 0; i < fibers_.size(); ++i) {
      if (fibers_[i]->done)
        continue;
      if (++live <= 16) {
        const Fiber &f = *fibers_[i];
        // `waiting` is the last barrier wait; a spinning thread is not in it now.
        if (f.blocked)
          std::fprintf(stderr, "  %s waits on %s\n", f.label.c_str(), f.waiting);
        else
          std::fprintf(stderr, "  %s spins (a __nanosleep loop)%s%s\n", f.label.c_str(),
                       *f.waiting ? "; its last barrier wait was on " : "", f.waiting);
        ++shown;
      }
    }
    if (live > shown)
      std::fprintf(stderr, "  ... and %zu more threads that have not ended\n", live - shown);
    if (on_deadlock)
      on_deadlock();
    std::abort();
  }

  std::vector<std::unique_ptr<Fiber>> fibers_;
  std::vector<Deferred> deferred_;
  size_t running_ = 0;
  unsigned long long progress_ = 0, round_ = 0;
  std::mt19937_64 draws_{seed() * 0x9E3779B97F4A7C15ull + 7};
#if defined(__x86_64__)
  void *main_sp_ = nullptr;
#else
  ucontext_t main_ctx_;
#endif
  const void *main_bottom_ = nullptr; ///< the scheduler's stack, for ASan
  size_t main_size_ = 0;
};

/// The fiber-side calls; outside a launch (no scheduler) a wait that does not hold is a
/// deadlock of one thread.
inline void block(const char *what) {
  if (!current)
    fail(what);
  current->block(what);
}
inline void yield() {
  if (current)
    current->yield();
}
inline void progress() {
  if (current)
    current->progress();
}
template <class Done> inline void wait_for(Done done, const char *what) {
  if (done())
    return;
  while (!done())
    block(what);
  progress();
}

} // namespace fiber
} // namespace lcejit_emu

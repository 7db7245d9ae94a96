//===- KnobsTest.cpp - The environment knob registry -----------------------===//

#include "TestSupport.h"

#include "compiler/support/Knobs.h"

#include <atomic>
#include <filesystem>
#include <optional>
#include <set>
#include <thread>
#include <vector>

using namespace lcejit;
using lcejit::testing::expectError;
using lcejit::testing::ScopedEnv;

namespace {

/// Every knob unset, so each test starts from the defaults.
struct KnobsTest : ::testing::Test {
  ScopedEnv env;
  void SetUp() override {
    for (const knobs::KnobInfo &k : knobs::allKnobs())
      env.set(std::string(k.name), std::nullopt);
  }
};

TEST_F(KnobsTest, Defaults) {
  EXPECT_TRUE(knobs::cacheEnabled());
  EXPECT_FALSE(knobs::alwaysCompile());
  EXPECT_FALSE(knobs::assertNoCompile());
  EXPECT_FALSE(knobs::logEnabled(knobs::LogTopic::Compile));
  EXPECT_FALSE(knobs::anyDumpEnabled());
  for (int s = 0; s < knobs::kNumDumpStages; ++s)
    EXPECT_FALSE(knobs::dumpEnabled(static_cast<knobs::DumpStage>(s)));
  EXPECT_FALSE(knobs::dumpDirIsSet());
  EXPECT_EQ(knobs::dumpDir(), "lcejit-dump");
  EXPECT_FALSE(knobs::workspaceMB().has_value());
  EXPECT_EQ(knobs::cacheMaxMB(), 1024);
}

TEST_F(KnobsTest, DefaultCudaIncludeDirsHoldTheCudaHeaders) {
  const std::vector<std::string> &dirs = knobs::cudaIncludeDirs();
  ASSERT_FALSE(dirs.empty());
  EXPECT_TRUE(std::filesystem::exists(std::filesystem::path(dirs[0]) / "cuda_fp16.h"))
      << dirs[0];
}

TEST_F(KnobsTest, CacheDirFollowsHomeAndOverride) {
  env.set("HOME", "/home/someone");
  EXPECT_EQ(knobs::cacheDir(), "/home/someone/.cache/lcejit");
  env.set("HOME", std::nullopt);
  EXPECT_EQ(knobs::cacheDir(), "/tmp/lcejit-cache");
  env.set("LCEJIT_CACHE_DIR", "/var/tmp/kc");
  EXPECT_EQ(knobs::cacheDir(), "/var/tmp/kc");
}

TEST_F(KnobsTest, BooleanSpellings) {
  for (const char *t : {"1", "true", "TRUE", "yes", "On", " 1 "}) {
    env.set("LCEJIT_ALWAYS_COMPILE", t);
    EXPECT_TRUE(knobs::alwaysCompile()) << t;
  }
  for (const char *f : {"0", "false", "No", "off"}) {
    env.set("LCEJIT_ALWAYS_COMPILE", f);
    EXPECT_FALSE(knobs::alwaysCompile()) << f;
  }
  env.set("LCEJIT_CACHE", "0");
  EXPECT_FALSE(knobs::cacheEnabled());
  env.set("LCEJIT_CACHE", "");
  EXPECT_TRUE(knobs::cacheEnabled()) << "empty means unset";
  env.set("LCEJIT_ASSERT_NO_COMPILE", "1");
  EXPECT_TRUE(knobs::assertNoCompile());
}

TEST_F(KnobsTest, InvalidBooleanNamesVariableAndValue) {
  env.set("LCEJIT_CACHE", "maybe");
  std::string msg = expectError(ErrorKind::InvalidArgument, [] { knobs::cacheEnabled(); });
  EXPECT_NE(msg.find("LCEJIT_CACHE"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'maybe'"), std::string::npos) << msg;
  // The whole snapshot is refused: a typo anywhere is noticed at the first knob read.
  expectError(ErrorKind::InvalidArgument, [] { knobs::cacheDir(); });
  env.set("LCEJIT_CACHE", "1");
  EXPECT_TRUE(knobs::cacheEnabled());
}

TEST_F(KnobsTest, DumpList) {
  env.set("LCEJIT_DUMP", "cuda, PTX,plan");
  EXPECT_TRUE(knobs::dumpEnabled(knobs::DumpStage::Cuda));
  EXPECT_TRUE(knobs::dumpEnabled(knobs::DumpStage::Ptx));
  EXPECT_TRUE(knobs::dumpEnabled(knobs::DumpStage::Plan));
  EXPECT_FALSE(knobs::dumpEnabled(knobs::DumpStage::Graph));
  EXPECT_FALSE(knobs::dumpEnabled(knobs::DumpStage::Sass));
  EXPECT_TRUE(knobs::anyDumpEnabled());
  env.set("LCEJIT_DUMP", "all");
  for (int s = 0; s < knobs::kNumDumpStages; ++s)
    EXPECT_TRUE(knobs::dumpEnabled(static_cast<knobs::DumpStage>(s)))
        << knobs::dumpStageName(static_cast<knobs::DumpStage>(s));
  env.set("LCEJIT_DUMP", "cuda,ptxx");
  std::string msg = expectError(ErrorKind::InvalidArgument, [] { knobs::anyDumpEnabled(); });
  EXPECT_NE(msg.find("LCEJIT_DUMP"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'ptxx'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("sass"), std::string::npos) << "lists the valid items: " << msg;
}

TEST_F(KnobsTest, DumpDir) {
  env.set("LCEJIT_DUMP_DIR", "/tmp/dumps");
  EXPECT_TRUE(knobs::dumpDirIsSet());
  EXPECT_EQ(knobs::dumpDir(), "/tmp/dumps");
}

TEST_F(KnobsTest, LogList) {
  env.set("LCEJIT_LOG", "compile");
  EXPECT_TRUE(knobs::logEnabled(knobs::LogTopic::Compile));
  EXPECT_FALSE(knobs::logEnabled(knobs::LogTopic::Prepare));
  env.set("LCEJIT_LOG", "prepare");
  EXPECT_FALSE(knobs::logEnabled(knobs::LogTopic::Compile));
  EXPECT_TRUE(knobs::logEnabled(knobs::LogTopic::Prepare));
  env.set("LCEJIT_LOG", "all");
  EXPECT_TRUE(knobs::logEnabled(knobs::LogTopic::Compile));
  EXPECT_TRUE(knobs::logEnabled(knobs::LogTopic::Prepare));
  env.set("LCEJIT_LOG", "compiles");
  std::string msg = expectError(ErrorKind::InvalidArgument, [] {
    knobs::logEnabled(knobs::LogTopic::Compile);
  });
  EXPECT_NE(msg.find("LCEJIT_LOG"), std::string::npos) << msg;
}

TEST_F(KnobsTest, CudaIncludeIsAColonList) {
  env.set("LCEJIT_CUDA_INCLUDE", "/a:/b/c::/d ");
  EXPECT_EQ(knobs::cudaIncludeDirs(), (std::vector<std::string>{"/a", "/b/c", "/d"}));
}

TEST_F(KnobsTest, WorkspaceMB) {
  env.set("LCEJIT_WORKSPACE_MB", "512");
  ASSERT_TRUE(knobs::workspaceMB().has_value());
  EXPECT_EQ(*knobs::workspaceMB(), 512);
  for (const char *bad : {"-3", "0", "abc", "12MB", "1e3", "99999999999"}) {
    env.set("LCEJIT_WORKSPACE_MB", bad);
    std::string msg = expectError(ErrorKind::InvalidArgument, [] { knobs::workspaceMB(); });
    EXPECT_NE(msg.find("LCEJIT_WORKSPACE_MB"), std::string::npos) << msg;
    EXPECT_NE(msg.find(bad), std::string::npos) << msg;
    EXPECT_NE(msg.find("positive integer number of MiB"), std::string::npos) << msg;
  }
}

/// The integer knobs with a fixed set of values: unset by default (the planner's choice),
/// each good value read back, each bad one an error naming the variable and the value.
/// LCEJIT_DA_TILE takes one of the three dA widths, LCEJIT_FWD_GROUP an even count from 2
/// to 64, LCEJIT_FWD_CLUSTER a cluster of 2 or 4, LCEJIT_DB_CLUSTER one of 1, 2 or 4.
TEST_F(KnobsTest, ChoiceKnobs) {
  struct Choice {
    const char *name;
    std::optional<int64_t> (*get)();
    std::vector<const char *> good, bad;
  };
  const Choice choices[] = {
      {"LCEJIT_DA_TILE", knobs::daTile, {"128", "192", "256"}, {"100", "0", "wide", "512"}},
      {"LCEJIT_FWD_GROUP", knobs::fwdGroup, {"2", "4", "8", "64"}, {"3", "0", "66", "many"}},
      {"LCEJIT_FWD_CLUSTER", knobs::fwdCluster, {"2", "4"}, {"1", "3", "8", "quad"}},
      {"LCEJIT_DB_CLUSTER", knobs::dbCluster, {"1", "2", "4"}, {"0", "3", "8", "pair"}},
  };
  for (const Choice &c : choices) {
    SCOPED_TRACE(c.name);
    env.set(c.name, std::nullopt);
    EXPECT_FALSE(c.get().has_value()) << "default: the planner's choice";
    for (const char *good : c.good) {
      env.set(c.name, good);
      ASSERT_TRUE(c.get().has_value()) << good;
      EXPECT_EQ(*c.get(), std::stoll(good));
    }
    for (const char *bad : c.bad) {
      env.set(c.name, bad);
      std::string msg = expectError(ErrorKind::InvalidArgument, [&] { c.get(); });
      EXPECT_NE(msg.find(c.name), std::string::npos) << msg;
      EXPECT_NE(msg.find(bad), std::string::npos) << msg;
    }
    env.set(c.name, std::nullopt);
  }
}

/// LCEJIT_FWD_L2: unset by default (no hints); two of normal, first, last, read back
/// normalized (lower case, no blanks); anything else an error naming the variable and
/// the value.
TEST_F(KnobsTest, ForwardL2Hints) {
  env.set("LCEJIT_FWD_L2", std::nullopt);
  EXPECT_FALSE(knobs::fwdL2().has_value()) << "default: no hints";
  const std::pair<const char *, const char *> good[] = {
      {"last,normal", "last,normal"},
      {"normal,first", "normal,first"},
      {" Last , First ", "last,first"},
      {"normal,normal", "normal,normal"}};
  for (const auto &[in, out] : good) {
    env.set("LCEJIT_FWD_L2", in);
    ASSERT_TRUE(knobs::fwdL2().has_value()) << in;
    EXPECT_EQ(*knobs::fwdL2(), out) << in;
  }
  for (const char *bad : {"last", "last,", "last,normal,first", "keep,normal", "1,2"}) {
    env.set("LCEJIT_FWD_L2", bad);
    std::string msg = expectError(ErrorKind::InvalidArgument, [] { knobs::fwdL2(); });
    EXPECT_NE(msg.find("LCEJIT_FWD_L2"), std::string::npos) << msg;
    EXPECT_NE(msg.find(bad), std::string::npos) << msg;
  }
  env.set("LCEJIT_FWD_L2", std::nullopt);
}

TEST_F(KnobsTest, BlockRows) {
  EXPECT_FALSE(knobs::blockRows().has_value()) << "default: the run schedule's choice";
  env.set("LCEJIT_BLOCK_ROWS", "2048");
  ASSERT_TRUE(knobs::blockRows().has_value());
  EXPECT_EQ(*knobs::blockRows(), 2048);
  for (const char *bad : {"0", "-128", "2k"}) {
    env.set("LCEJIT_BLOCK_ROWS", bad);
    std::string msg = expectError(ErrorKind::InvalidArgument, [] { knobs::blockRows(); });
    EXPECT_NE(msg.find("LCEJIT_BLOCK_ROWS"), std::string::npos) << msg;
    EXPECT_NE(msg.find(bad), std::string::npos) << msg;
    EXPECT_NE(msg.find("positive integer number of rows"), std::string::npos)
        << "the unit is rows: " << msg;
  }
}

/// [Note: sm90 loaded sums]: unset (the planner's by card: [Note: loaded sums by card]), a
/// number of rows, or 0
/// (reduce-adds always); anything else names the variable and the value.
TEST_F(KnobsTest, LoadedSumsRows) {
  EXPECT_FALSE(knobs::loadedSumsRows().has_value()) << "default: the planner's threshold";
  for (const auto &[text, rows] : {std::pair{"0", 0}, {"1024", 1024}, {" 2048 ", 2048}}) {
    env.set("LCEJIT_LOADED_SUMS_ROWS", text);
    ASSERT_TRUE(knobs::loadedSumsRows().has_value()) << text;
    EXPECT_EQ(*knobs::loadedSumsRows(), rows) << text;
  }
  for (const char *bad : {"-1", "1k", "many"}) {
    env.set("LCEJIT_LOADED_SUMS_ROWS", bad);
    std::string msg =
        expectError(ErrorKind::InvalidArgument, [] { knobs::loadedSumsRows(); });
    EXPECT_NE(msg.find("LCEJIT_LOADED_SUMS_ROWS"), std::string::npos) << msg;
    EXPECT_NE(msg.find(std::string("'") + bad + "'"), std::string::npos) << msg;
  }
  env.set("LCEJIT_LOADED_SUMS_ROWS", std::nullopt);
}

TEST_F(KnobsTest, CacheMaxMB) {
  EXPECT_EQ(knobs::cacheMaxMB(), 1024) << "default";
  env.set("LCEJIT_CACHE_MAX_MB", " 64 ");
  EXPECT_EQ(knobs::cacheMaxMB(), 64);
  env.set("LCEJIT_CACHE_MAX_MB", "0");
  EXPECT_EQ(knobs::cacheMaxMB(), 0) << "0 = no limit";
  env.set("LCEJIT_CACHE_MAX_MB", "");
  EXPECT_EQ(knobs::cacheMaxMB(), 1024) << "empty = unset";
  for (const char *bad : {"-1", "abc", "1.5", "64MB", "1e3", "99999999999999"}) {
    env.set("LCEJIT_CACHE_MAX_MB", bad);
    std::string msg = expectError(ErrorKind::InvalidArgument, [] { knobs::cacheMaxMB(); });
    EXPECT_NE(msg.find("LCEJIT_CACHE_MAX_MB"), std::string::npos) << msg;
    EXPECT_NE(msg.find(bad), std::string::npos) << msg;
    EXPECT_NE(msg.find("0 = no limit"), std::string::npos) << msg;
  }
}

TEST_F(KnobsTest, GemmTile) {
  EXPECT_FALSE(knobs::gemmTile().has_value());
  env.set("LCEJIT_GEMM_TILE", " 128x256x32:2x4:3 ");
  ASSERT_TRUE(knobs::gemmTile().has_value());
  EXPECT_EQ(*knobs::gemmTile(), (std::array<int32_t, 6>{128, 256, 32, 2, 4, 3}));
  for (const char *bad : {"128x256x32", "128x256x32:2x4", "128x256x32:2x4:3x", "0x128x32:2x4:3",
                          "128x128x32:2x4:-1", "a", "128x128x32:2x4:3:1", "4096x128x32:2x4:3"}) {
    env.set("LCEJIT_GEMM_TILE", bad);
    std::string msg = expectError(ErrorKind::InvalidArgument, [] { knobs::gemmTile(); });
    EXPECT_NE(msg.find("LCEJIT_GEMM_TILE"), std::string::npos) << msg;
    EXPECT_NE(msg.find(bad), std::string::npos) << msg;
  }
}

TEST_F(KnobsTest, Mainloop) {
  EXPECT_EQ(knobs::mainloop(), "auto");
  for (const char *ok : {"mma", "wgmma", " auto "}) {
    env.set("LCEJIT_MAINLOOP", ok);
    std::string want = ok;
    want.erase(0, want.find_first_not_of(' '));
    want.erase(want.find_last_not_of(' ') + 1);
    EXPECT_EQ(knobs::mainloop(), want);
  }
  for (const char *bad : {"WGMMA", "hopper", "mma.sync"}) {
    env.set("LCEJIT_MAINLOOP", bad);
    std::string msg = expectError(ErrorKind::InvalidArgument, [] { knobs::mainloop(); });
    EXPECT_NE(msg.find("LCEJIT_MAINLOOP"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'" + std::string(bad) + "'"), std::string::npos) << msg;
  }
}

/// The boolean switches that are on by default and off only for comparisons: each reads
/// 0/off and 1/on/yes, and names itself and the value it rejects.
TEST_F(KnobsTest, DefaultOnSwitches) {
  struct Switch {
    const char *name;
    bool (*get)();
  };
  const Switch switches[] = {{"LCEJIT_TARGET_RESIDUAL", knobs::targetResidual},
                             {"LCEJIT_TARGET_GROUPS", knobs::targetGroups},
                             {"LCEJIT_TMA_STORE", knobs::tmaStore},
                             {"LCEJIT_EXACT_TARGET", knobs::exactTarget},
                             {"LCEJIT_MULTICAST", knobs::multicast},
                             {"LCEJIT_ROW_SCALED", knobs::rowScaled},
                             {"LCEJIT_SPLIT_K", knobs::splitK},
                             {"LCEJIT_DA_STREAMK", knobs::daStreamK},
                             {"LCEJIT_DA_CHAIN", knobs::daChain},
                             {"LCEJIT_STORE_IN_OUTPUT", knobs::storeInOutput}};
  for (const Switch &sw : switches) {
    SCOPED_TRACE(sw.name);
    env.set(sw.name, std::nullopt);
    EXPECT_TRUE(sw.get()) << "on by default";
    for (const char *off : {"0", "off"}) {
      env.set(sw.name, off);
      EXPECT_FALSE(sw.get()) << off;
    }
    for (const char *on : {"1", "on", "yes"}) {
      env.set(sw.name, on);
      EXPECT_TRUE(sw.get()) << on;
    }
    env.set(sw.name, "maybe");
    std::string msg = expectError(ErrorKind::InvalidArgument, [&] { sw.get(); });
    EXPECT_NE(msg.find(sw.name), std::string::npos) << msg;
    EXPECT_NE(msg.find("'maybe'"), std::string::npos) << msg;
    env.set(sw.name, std::nullopt);
  }
}

/// LCEJIT_FWD_HALVES: unset by default (the planner's per-card choice); 0/off and 1/on
/// are read back as asked; anything else names the variable and the value.
TEST_F(KnobsTest, ForwardHalvesIsUnsetOrAsked) {
  env.set("LCEJIT_FWD_HALVES", std::nullopt);
  EXPECT_FALSE(knobs::fwdHalves().has_value()) << "default: the planner's choice";
  for (const char *off : {"0", "off"}) {
    env.set("LCEJIT_FWD_HALVES", off);
    ASSERT_TRUE(knobs::fwdHalves().has_value()) << off;
    EXPECT_FALSE(*knobs::fwdHalves()) << off;
  }
  for (const char *on : {"1", "on"}) {
    env.set("LCEJIT_FWD_HALVES", on);
    ASSERT_TRUE(knobs::fwdHalves().has_value()) << on;
    EXPECT_TRUE(*knobs::fwdHalves()) << on;
  }
  env.set("LCEJIT_FWD_HALVES", "maybe");
  std::string msg = expectError(ErrorKind::InvalidArgument, [] { knobs::fwdHalves(); });
  EXPECT_NE(msg.find("LCEJIT_FWD_HALVES"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'maybe'"), std::string::npos) << msg;
  env.set("LCEJIT_FWD_HALVES", std::nullopt);
}

TEST_F(KnobsTest, ReadOnceUntilReload) {
  env.set("LCEJIT_ALWAYS_COMPILE", "1");
  EXPECT_TRUE(knobs::alwaysCompile());
  ::setenv("LCEJIT_ALWAYS_COMPILE", "0", 1); // no reload: the snapshot stays
  EXPECT_TRUE(knobs::alwaysCompile());
  knobs::reloadForTesting();
  EXPECT_FALSE(knobs::alwaysCompile());
}

TEST_F(KnobsTest, ReferencesSurviveReload) {
  env.set("LCEJIT_CACHE_DIR", "/first");
  const std::string &first = knobs::cacheDir();
  env.set("LCEJIT_CACHE_DIR", "/second");
  EXPECT_EQ(knobs::cacheDir(), "/second");
  EXPECT_EQ(first, "/first");
}

TEST_F(KnobsTest, ConcurrentFirstReads) {
  env.set("LCEJIT_CACHE_DIR", "/concurrent");
  env.set("LCEJIT_LOG", "compile");
  knobs::reloadForTesting();
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i)
        if (knobs::cacheDir() != "/concurrent" || !knobs::logEnabled(knobs::LogTopic::Compile))
          ++bad;
    });
  for (std::thread &t : threads)
    t.join();
  EXPECT_EQ(bad.load(), 0);
}

TEST_F(KnobsTest, RegistryListsEveryKnob) {
  std::set<std::string> names;
  for (const knobs::KnobInfo &k : knobs::allKnobs()) {
    names.insert(std::string(k.name));
    EXPECT_FALSE(k.doc.empty()) << k.name;
    EXPECT_FALSE(k.type.empty()) << k.name;
    EXPECT_FALSE(k.defaultValue.empty()) << k.name;
  }
  std::set<std::string> expected = {
      "LCEJIT_CACHE_DIR",      "LCEJIT_CACHE",        "LCEJIT_CACHE_MAX_MB", "LCEJIT_DUMP",
      "LCEJIT_DUMP_DIR",       "LCEJIT_ALWAYS_COMPILE", "LCEJIT_ASSERT_NO_COMPILE",
      "LCEJIT_LOG",            "LCEJIT_CUDA_INCLUDE", "LCEJIT_WORKSPACE_MB",
      "LCEJIT_GEMM_TILE",      "LCEJIT_MAINLOOP",     "LCEJIT_BACKWARD",
      "LCEJIT_TARGET_RESIDUAL", "LCEJIT_SPLIT_K",     "LCEJIT_BLOCK_ROWS",
      "LCEJIT_STORE_IN_OUTPUT", "LCEJIT_DA_TILE",   "LCEJIT_DA_STREAMK",
      "LCEJIT_DA_CHAIN",       "LCEJIT_TARGET_GROUPS", "LCEJIT_FWD_GROUP",
      "LCEJIT_FWD_L2",         "LCEJIT_FWD_CLUSTER",  "LCEJIT_FWD_HALVES",
      "LCEJIT_LOADED_SUMS_ROWS", "LCEJIT_DB_CLUSTER"};
  EXPECT_EQ(names, expected);
  env.set("LCEJIT_LOG", "compile");
  std::string help = knobs::describeKnobs();
  for (const std::string &n : expected)
    EXPECT_NE(help.find(n), std::string::npos) << n;
  EXPECT_NE(help.find("current: 'compile'"), std::string::npos) << help;
}

} // namespace

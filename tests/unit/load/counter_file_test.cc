#include "load/counter_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace leapcache::load {
namespace {

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(CounterFile, KeepsTheTotalsOfEveryThreadInOneLine) {
  const std::string path = ::testing::TempDir() + "/counts-" + std::to_string(getpid());
  CounterFile file(path);
  ASSERT_TRUE(file.Flush());
  EXPECT_EQ(Read(path), "verified=0 mismatched=0 missing=0\n");
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&file] {
      for (int i = 0; i < 1000; ++i) file.Add(1, i % 100 == 0 ? 1 : 0, 2);
    });
  }
  for (std::thread& t : threads) t.join();
  // Written at most every 200 ms while they grow: the file may lag until the flush.
  ASSERT_TRUE(file.Flush());
  EXPECT_EQ(Read(path), "verified=4000 mismatched=40 missing=8000\n");
  EXPECT_NE(access((path + ".tmp").c_str(), F_OK), 0) << "the temporary file was renamed";
  unlink(path.c_str());
}

TEST(CounterFile, AnUnwritablePathIsReported) {
  CounterFile file("/nonexistent-directory/counts");
  EXPECT_FALSE(file.Flush());
  file.Add(1, 0, 0);  // and the run goes on
}

}  // namespace
}  // namespace leapcache::load

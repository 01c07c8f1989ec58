#include "load/mooncake_trace.h"

#include <gtest/gtest.h>

#include <cctype>
#include <ostream>
#include <string>

namespace leapcache::load {
namespace {

MooncakeTraceOptions Options() { return MooncakeTraceOptions{}; }

TEST(MooncakeTrace, ParsesALine) {
  absl::StatusOr<WorkloadRequest> r = ParseMooncakeLine(
      R"({"timestamp": 1500, "input_length": 1100, "output_length": 52, "hash_ids": [7, 8, 9]})", 1,
      Options());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_DOUBLE_EQ(r->arrival_s, 1.5);
  EXPECT_EQ(r->input_tokens, 1100);
  EXPECT_EQ(r->output_tokens, 52);
  EXPECT_EQ(r->block_ids, (std::vector<uint64_t>{7, 8, 9}));
  EXPECT_EQ(FullBlocks(*r, 512), 2);
}

TEST(MooncakeTrace, IgnoresUnknownFieldsAndFieldOrder) {
  absl::StatusOr<WorkloadRequest> r = ParseMooncakeLine(
      R"({"hash_ids": [1], "model": "x", "extra": [1, "a", null], "output_length": 3,)"
      R"( "input_length": 512, "timestamp": 0, "flag": true})",
      1, Options());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->block_ids.size(), 1u);
  EXPECT_EQ(FullBlocks(*r, 512), 1);
}

struct BadLine {
  std::string line;
  std::string expected;  // a part of the error message
};

// Only letters, digits and spaces: test listings are parsed by CMake, to which brackets and
// semicolons in a parameter's printout mean lists.
void PrintTo(const BadLine& b, std::ostream* os) {
  for (char c : b.expected) *os << (std::isalnum(static_cast<unsigned char>(c)) ? c : ' ');
}

class MooncakeBadLine : public ::testing::TestWithParam<BadLine> {};

TEST_P(MooncakeBadLine, IsRejectedWithTheLineAndField) {
  absl::StatusOr<WorkloadRequest> r = ParseMooncakeLine(GetParam().line, 17, Options());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("line 17"), std::string::npos) << r.status();
  EXPECT_NE(r.status().message().find(GetParam().expected), std::string::npos) << r.status();
}

INSTANTIATE_TEST_SUITE_P(
    Lines, MooncakeBadLine,
    ::testing::Values(
        BadLine{"not json", "not a JSON object"},
        BadLine{R"({"input_length": 10, "output_length": 1, "hash_ids": [1]})", "timestamp"},
        BadLine{R"({"timestamp": 0, "output_length": 1, "hash_ids": [1]})", "input_length"},
        BadLine{R"({"timestamp": 0, "input_length": 10, "hash_ids": [1]})", "output_length"},
        BadLine{R"({"timestamp": 0, "input_length": 10, "output_length": 1})", "hash_ids"},
        BadLine{R"({"timestamp": -5, "input_length": 10, "output_length": 1, "hash_ids": [1]})",
                "timestamp must be >= 0"},
        BadLine{R"({"timestamp": 0, "input_length": -1, "output_length": 1, "hash_ids": []})",
                "input_length must be a non-negative integer"},
        BadLine{R"({"timestamp": 0, "input_length": 10.5, "output_length": 1, "hash_ids": [1]})",
                "input_length must be a non-negative integer"},
        BadLine{R"({"timestamp": 0, "input_length": 10, "output_length": "x", "hash_ids": [1]})",
                "output_length"},
        BadLine{R"({"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1, -2]})",
                "hash_ids element"},
        BadLine{R"({"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": 3})",
                "hash_ids must be an array"},
        BadLine{R"({"timestamp": 0, "input_length": 1100, "output_length": 1, "hash_ids": [1, 2]})",
                "hash_ids has 2 ids but input_length 1100 spans 3 blocks"},
        BadLine{R"({"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]} x)",
                "text after the object"},
        BadLine{R"({"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1])",
                "expected ',' or '}'"},
        BadLine{R"({"timestamp": 0, "o": {"a": 1}, "input_length": 10})", "nested objects"}));

TEST(MooncakeTrace, ParsesATraceSkippingBlankLinesAndStopsAtMax) {
  const std::string text =
      "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 1, \"hash_ids\": [1, 2]}\n"
      "\n"
      "{\"timestamp\": 10, \"input_length\": 100, \"output_length\": 2, \"hash_ids\": [3]}\n"
      "{\"timestamp\": 20, \"input_length\": 100, \"output_length\": 3, \"hash_ids\": [4]}\n";
  absl::StatusOr<std::vector<WorkloadRequest>> all = ParseMooncakeTrace(text, "t", Options());
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 3u);
  EXPECT_DOUBLE_EQ((*all)[1].arrival_s, 0.01);
  MooncakeTraceOptions two = Options();
  two.max_requests = 2;
  absl::StatusOr<std::vector<WorkloadRequest>> some = ParseMooncakeTrace(text, "t", two);
  ASSERT_TRUE(some.ok());
  EXPECT_EQ(some->size(), 2u);
}

TEST(MooncakeTrace, ABadLineFailsTheWholeTraceNamingFileAndLine) {
  const std::string text =
      "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [1]}\n"
      "{\"timestamp\": 5, \"input_length\": 10, \"output_length\": 1}\n";
  absl::StatusOr<std::vector<WorkloadRequest>> r = ParseMooncakeTrace(text, "trace.jsonl", Options());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("trace.jsonl: line 2: missing field hash_ids"),
            std::string::npos)
      << r.status();
}

TEST(MooncakeTrace, RejectsTimeGoingBackwardsAndEmptyTraces) {
  const std::string text =
      "{\"timestamp\": 50, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [1]}\n"
      "{\"timestamp\": 5, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [2]}\n";
  absl::StatusOr<std::vector<WorkloadRequest>> r = ParseMooncakeTrace(text, "t", Options());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("line 2: timestamp goes backwards"), std::string::npos);
  EXPECT_FALSE(ParseMooncakeTrace("\n\n", "t", Options()).ok());
  EXPECT_EQ(LoadMooncakeTrace("/nonexistent/trace.jsonl", Options()).status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace leapcache::load

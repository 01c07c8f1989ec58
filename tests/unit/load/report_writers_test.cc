#include <gtest/gtest.h>

#include <cmath>

#include "load/json_writer.h"
#include "load/report_json.h"
#include "load/report_markdown.h"

namespace leapcache::load {
namespace {

TEST(JsonWriter, WritesNestedValuesWithCommasAndEscapes) {
  JsonWriter w;
  w.BeginObject();
  w.Key("a").Int(-3);
  w.Key("s").String("q\"\\\n\x01");
  w.Key("list").BeginArray().Uint(1).Double(0.5).Bool(true).Double(NAN).EndArray();
  w.Key("empty").BeginObject().EndObject();
  w.EndObject();
  EXPECT_EQ(w.str(),
            "{\n  \"a\": -3,\n  \"s\": \"q\\\"\\\\\\n\\u0001\",\n  \"list\": [\n    1,\n    0.5,\n"
            "    true,\n    null\n  ],\n  \"empty\": {}\n}");
}

LoadReport TwoFormats() {
  LoadReport report;
  report.command = "leapcache-load --out=x";
  report.workload = "w";
  report.model = {2, 2, 128, 128, client::StateKind::kGdn};
  report.workload_requests = 4;
  for (const char* label : {"fp32", "leap8"}) {
    FormatRun r;
    r.label = label;
    r.checkpoint_bytes = std::string(label) == "fp32" ? 262400 : 78080;
    r.resident_checkpoints = std::string(label) == "fp32" ? 10 : 32;
    r.budget_bytes = 8 << 20;
    r.counters.requests = 4;
    r.counters.lookups = 4;
    r.counters.lookup_hits = std::string(label) == "fp32" ? 1 : 2;
    r.counters.input_tokens = 1000;
    r.counters.hit_tokens = std::string(label) == "fp32" ? 250 : 500;
    report.runs.push_back(r);
  }
  return report;
}

TEST(ReportMarkdown, HeadlineComparesEachFormatWithFp32) {
  const std::string md = HeadlineTable(TwoFormats());
  // 2 x 2 x 128 x 128 x 4 = 262,144 FP32 bytes; 78,080 stored is 70.2% less; 32 / 10 resident.
  EXPECT_NE(md.find("| leap8 | 78080 | 70.2% | 8.0 | 32 | 3.20x | 50.0% | 50.0% |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| fp32 | 262400 | -0.1% | 8.0 | 10 | 1.00x | 25.0% | 25.0% |"),
            std::string::npos)
      << md;
  const std::string full = ReportToMarkdown(TwoFormats(), {"leap8: broken"});
  EXPECT_NE(full.find("VIOLATED"), std::string::npos);
  EXPECT_NE(full.find("  - leap8: broken"), std::string::npos);
}

TEST(ReportJson, RecordsConsistencyAndHeadlineNumbers) {
  const std::string json = ReportToJson(TwoFormats(), {});
  EXPECT_NE(json.find("\"consistent\": true"), std::string::npos);
  EXPECT_NE(json.find("\"request_hit_rate\": 0.5"), std::string::npos);
  EXPECT_NE(json.find("\"resident_checkpoints\": 32"), std::string::npos);
  EXPECT_NE(ReportToJson(TwoFormats(), {"x"}).find("\"consistent\": false"), std::string::npos);
}

}  // namespace
}  // namespace leapcache::load

#include "service/metrics/text_format.h"

#include <charconv>
#include <cmath>

namespace leapcache::metrics {
namespace {

void AppendEscaped(std::string* out, const std::string& s, bool escape_quotes) {
  for (char c : s) {
    if (c == '\\') {
      out->append("\\\\");
    } else if (c == '\n') {
      out->append("\\n");
    } else if (c == '"' && escape_quotes) {
      out->append("\\\"");
    } else {
      out->push_back(c);
    }
  }
}

// name{k="v",...,extra_name="extra_value"} value\n
void AppendSample(std::string* out, const std::string& name, const Labels& labels,
                  const char* extra_name, const std::string& extra_value, double value) {
  out->append(name);
  if (!labels.empty() || extra_name != nullptr) {
    out->push_back('{');
    bool first = true;
    for (const auto& [k, v] : labels) {
      if (!first) out->push_back(',');
      first = false;
      out->append(k).append("=\"");
      AppendEscaped(out, v, /*escape_quotes=*/true);
      out->push_back('"');
    }
    if (extra_name != nullptr) {
      if (!first) out->push_back(',');
      out->append(extra_name).append("=\"").append(extra_value).push_back('"');
    }
    out->push_back('}');
  }
  out->push_back(' ');
  out->append(FormatValue(value));
  out->push_back('\n');
}

const char* TypeName(MetricType t) {
  switch (t) {
    case MetricType::kCounter:
      return "counter";
    case MetricType::kGauge:
      return "gauge";
    case MetricType::kHistogram:
      return "histogram";
  }
  return "untyped";
}

}  // namespace

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  // Integers below 2^53 print exactly without an exponent (byte counts stay readable).
  if (v == std::trunc(v) && std::fabs(v) < 9007199254740992.0) {
    char buf[32];
    auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), static_cast<int64_t>(v));
    return std::string(buf, end);
  }
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);  // shortest round-trip form
  return std::string(buf, end);
}

std::string SerializeText(const std::vector<FamilySnapshot>& families) {
  std::string out;
  for (const FamilySnapshot& f : families) {
    out.append("# HELP ").append(f.name).push_back(' ');
    AppendEscaped(&out, f.help, /*escape_quotes=*/false);
    out.append("\n# TYPE ").append(f.name).push_back(' ');
    out.append(TypeName(f.type)).push_back('\n');
    for (const MetricSnapshot& m : f.metrics) {
      if (f.type != MetricType::kHistogram) {
        AppendSample(&out, f.name, m.labels, nullptr, "", m.value);
        continue;
      }
      const HistogramSnapshot& h = m.histogram;
      for (size_t i = 0; i < h.upper_bounds.size(); ++i) {
        AppendSample(&out, f.name + "_bucket", m.labels, "le", FormatValue(h.upper_bounds[i]),
                     static_cast<double>(h.cumulative_counts[i]));
      }
      AppendSample(&out, f.name + "_bucket", m.labels, "le", "+Inf", static_cast<double>(h.count));
      AppendSample(&out, f.name + "_sum", m.labels, nullptr, "", h.sum);
      AppendSample(&out, f.name + "_count", m.labels, nullptr, "", static_cast<double>(h.count));
    }
  }
  return out;
}

}  // namespace leapcache::metrics

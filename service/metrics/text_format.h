// Renders collected metric families in the Prometheus text exposition format, version 0.0.4
// (https://prometheus.io/docs/instrumenting/exposition_formats/): the body of GET /metrics.
//
// Per family: "# HELP", "# TYPE", then one line per series; histograms as _bucket{le=...}
// (cumulative, "+Inf" last), _sum and _count. Label values escape \, " and newline; help text
// escapes \ and newline. Numbers are written in their shortest round-trip form, integers
// without exponent, and +Inf / -Inf / NaN as the format spells them.
#pragma once

#include <string>
#include <vector>

#include "service/metrics/family.h"

namespace leapcache::metrics {

// The Content-Type of the rendered text.
inline constexpr char kTextContentType[] = "text/plain; version=0.0.4; charset=utf-8";

std::string SerializeText(const std::vector<FamilySnapshot>& families);

// One sample value as the format writes it ("1", "0.25", "+Inf", "NaN").
std::string FormatValue(double v);

}  // namespace leapcache::metrics

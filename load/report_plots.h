// PNG plots of a load report, drawn by gnuplot (Debian's gnuplot-nox) from generated data files
// and scripts that stay in the output directory beside the images, so a plot can be restyled
// and redrawn by hand:
//   headline.png  request and token hit rate per format (bars), and resident checkpoints
//   latency.png   p50 and p99 of lookup, get and put per format (log scale)
#pragma once

#include <string>

#include "absl/status/status.h"
#include "load/load_report.h"

namespace leapcache::load {

// Writes the .dat/.gp files into `dir` and runs `gnuplot` (a program name looked up on PATH,
// or a path) on each. UNAVAILABLE if gnuplot cannot be run, INTERNAL if it fails or draws no
// image.
absl::Status WritePlots(const LoadReport& report, const std::string& dir,
                        const std::string& gnuplot = "gnuplot");

}  // namespace leapcache::load

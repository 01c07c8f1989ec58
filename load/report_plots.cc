#include "load/report_plots.h"

#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"

extern char** environ;

namespace leapcache::load {
namespace {

absl::Status WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  if (!out.flush()) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

// Runs `gnuplot script` in `dir` and checks that `png` came out non-empty.
absl::Status RunGnuplot(const std::string& gnuplot, const std::string& dir,
                        const std::string& script, const std::string& png) {
  const std::string script_path = absl::StrCat(dir, "/", script);
  std::vector<std::string> args = {gnuplot, script_path};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, gnuplot.c_str(), nullptr, nullptr, argv.data(), environ);
  if (rc != 0) {
    return absl::UnavailableError(absl::StrCat("cannot run ", gnuplot, " (", std::strerror(rc),
                                               "): install gnuplot-nox for the plots"));
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return absl::InternalError(absl::StrCat("waitpid: ", std::strerror(errno)));
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::InternalError(absl::StrCat(gnuplot, " failed on ", script_path,
                                            " (status ", status, ")"));
  }
  struct stat st {};
  const std::string png_path = absl::StrCat(dir, "/", png);
  if (stat(png_path.c_str(), &st) != 0 || st.st_size == 0) {
    return absl::InternalError(absl::StrCat(gnuplot, " drew no ", png_path));
  }
  return absl::OkStatus();
}

// gnuplot runs in our working directory, so the scripts name their files by the output
// directory as given (relative or absolute), quoted.
std::string Quoted(const std::string& dir, const std::string& file) {
  return absl::StrCat("'", dir, "/", file, "'");
}

}  // namespace

absl::Status WritePlots(const LoadReport& report, const std::string& dir,
                        const std::string& gnuplot) {
  if (dir.find('\'') != std::string::npos) {
    return absl::InvalidArgumentError("the output directory's path must not contain a quote");
  }
  std::string headline = "# format request_hit_rate_pct token_hit_rate_pct resident_checkpoints\n";
  std::string latency = "# format lookup_p50 lookup_p99 get_p50 get_p99 put_p50 put_p99 (us)\n";
  for (const FormatRun& r : report.runs) {
    absl::StrAppend(&headline, absl::StrFormat("%s %.3f %.3f %u\n", r.label,
                                               100.0 * RequestHitRate(r), 100.0 * TokenHitRate(r),
                                               r.resident_checkpoints));
    // gnuplot's log scale rejects zeros: a call never made is drawn at 1 us.
    auto at_least_1 = [](double v) { return v < 1 ? 1.0 : v; };
    absl::StrAppend(&latency, absl::StrFormat(
        "%s %.1f %.1f %.1f %.1f %.1f %.1f\n", r.label, at_least_1(r.lookup_latency.p50_us),
        at_least_1(r.lookup_latency.p99_us), at_least_1(r.get_latency.p50_us),
        at_least_1(r.get_latency.p99_us), at_least_1(r.put_latency.p50_us),
        at_least_1(r.put_latency.p99_us)));
  }
  LC_RETURN_IF_ERROR(WriteText(absl::StrCat(dir, "/headline.dat"), headline));
  LC_RETURN_IF_ERROR(WriteText(absl::StrCat(dir, "/latency.dat"), latency));

  const std::string budget =
      report.runs.empty() ? "" : absl::StrFormat("%.0f MiB", report.runs[0].budget_bytes / 1048576.0);
  const std::string headline_gp = absl::StrCat(
      "set terminal pngcairo size 1200,480 font 'sans,10'\n",
      "set output ", Quoted(dir, "headline.png"), "\n",
      "set multiplot layout 1,2 title 'leapcache-load: same workload, same ", budget,
      " state budget'\n",
      "set style data histograms\nset style histogram clustered gap 1\n",
      "set style fill solid 0.8 border -1\nset boxwidth 0.9\nset grid ytics\n",
      "set key top left\nset yrange [0:100]\nset ylabel 'hit rate (%)'\n",
      "set title 'request and token hit rate'\n",
      "plot ", Quoted(dir, "headline.dat"),
      " using 2:xtic(1) title 'requests', '' using 3 title 'tokens'\n",
      "set yrange [0:*]\nset ylabel 'checkpoints'\nset title 'resident checkpoints at the end'\n",
      "plot ", Quoted(dir, "headline.dat"), " using 4:xtic(1) title 'resident' lc rgb '#4477aa'\n",
      "unset multiplot\n");
  const std::string latency_gp = absl::StrCat(
      "set terminal pngcairo size 900,480 font 'sans,10'\n",
      "set output ", Quoted(dir, "latency.png"), "\n",
      "set title 'call latency per format (p50 solid, p99 light)'\n",
      "set style data histograms\nset style histogram clustered gap 1\n",
      "set style fill solid 0.8 border -1\nset boxwidth 0.9\nset grid ytics\n",
      "set logscale y\nset ylabel 'microseconds'\nset key outside right\n",
      "plot ", Quoted(dir, "latency.dat"),
      " using 2:xtic(1) title 'lookup p50' lc rgb '#4477aa', '' using 3 title 'lookup p99' lc rgb "
      "'#a6c4e4', '' using 4 title 'get p50' lc rgb '#228833', '' using 5 title 'get p99' lc rgb "
      "'#a6dba0', '' using 6 title 'put p50' lc rgb '#cc6677', '' using 7 title 'put p99' lc rgb "
      "'#f2b8c6'\n");
  LC_RETURN_IF_ERROR(WriteText(absl::StrCat(dir, "/headline.gp"), headline_gp));
  LC_RETURN_IF_ERROR(WriteText(absl::StrCat(dir, "/latency.gp"), latency_gp));
  LC_RETURN_IF_ERROR(RunGnuplot(gnuplot, dir, "headline.gp", "headline.png"));
  return RunGnuplot(gnuplot, dir, "latency.gp", "latency.png");
}

}  // namespace leapcache::load

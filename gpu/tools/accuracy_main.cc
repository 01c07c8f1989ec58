// leapcache-accuracy: how far each state format drifts from the FP32 recurrence.
//
// For GDN and KDA it generates synthetic trajectories (tools/synthetic.h; `--heads` heads per
// kind, dk = dv = 128, FLA conventions: in-kernel l2 norm of q and k, scale dk^-1/2), runs the
// FP32 reference and every format over them, and reports at 1K, 4K, 16K and 64K steps:
//   state   ||S - S_ref||_F / ||S_ref||_F            (summed over heads)
//   readout sqrt(sum_{s<=t} ||o_s - o_ref_s||^2 / sum_{s<=t} ||o_ref_s||^2)
// plus each format's bytes per element. Writes accuracy.json and accuracy.md to --out.
// `--check` exits 1 unless the window format's acceptance criteria hold at 4K steps.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gpu/format/format.h"
#include "gpu/reference/per_step.h"
#include "gpu/reference/recurrence.h"
#include "gpu/reference/window.h"
#include "gpu/tools/synthetic.h"

namespace leapcache::tools {
namespace {

using reference::StateTracker;
using reference::StepInput;
using reference::StepOptions;

constexpr int kDim = 128;
constexpr int kCheckStep = 4096;

struct Options {
  int steps = 65536;
  int heads = 4;
  uint64_t seed = 1;
  int threads = 0;
  std::vector<StateKind> kinds = {StateKind::kGdn, StateKind::kKda};
  std::vector<std::string> formats;  // empty: all
  std::string out = ".";
  bool check = false;
};

// One row of the table: a storage format and how it is advanced.
struct FormatDef {
  std::string name;
  std::string description;
  bool window = false;
  BlobSpec spec;
};

BlobSpec PerStepSpec(StateKind kind, Codec codec, int bits) {
  BlobSpec s;
  s.kind = kind;
  s.dk = s.dv = kDim;
  s.codec = codec;
  s.bits = bits;
  s.p = 1;
  s.r = 0;
  s.smoothing = false;
  return s;
}

BlobSpec WindowSpec(StateKind kind, Codec codec, int bits, int r, bool smoothing) {
  BlobSpec s = PerStepSpec(kind, codec, bits);
  s.p = 16;
  s.r = r;
  s.smoothing = smoothing;
  return s;
}

std::vector<FormatDef> AllFormats(StateKind kind) {
  std::vector<FormatDef> f;
  f.push_back({"fp32", "per-step FP32 (the reference itself)", false, PerStepSpec(kind, Codec::kFp32, 32)});
  f.push_back({"bf16", "per-step BF16", false, PerStepSpec(kind, Codec::kBf16, 16)});
  f.push_back({"fp16", "per-step FP16", false, PerStepSpec(kind, Codec::kFp16, 16)});
  f.push_back({"int8-row", "per-step INT8, per-key-row absmax", false, PerStepSpec(kind, Codec::kIntRow, 8)});
  f.push_back({"int8-col", "per-step INT8, per-value-column absmax", false, PerStepSpec(kind, Codec::kIntCol, 8)});
  f.push_back({"bf16-w", "per-window BF16 (p=16)", true, WindowSpec(kind, Codec::kBf16, 16, 0, false)});
  f.push_back({"int8-w", "per-window INT8 (p=16, r=0, no smoothing)", true, WindowSpec(kind, Codec::kLeap, 8, 0, false)});
  f.push_back({"int8-w+comp", "+ compensators (r=4, no smoothing)", true, WindowSpec(kind, Codec::kLeap, 8, 4, false)});
  f.push_back({"int8-w+smooth", "+ smoothing only (r=0)", true, WindowSpec(kind, Codec::kLeap, 8, 0, true)});
  f.push_back({"leap-8", "window format, 8-bit (p=16, r=4, smoothing)", true, BlobSpec::Leap(kind, 8)});
  f.push_back({"leap-6", "window format, 6-bit (p=16, r=6, smoothing)", true, BlobSpec::Leap(kind, 6)});
  f.push_back({"leap-4", "window format, 4-bit (p=16, r=8, smoothing)", true, BlobSpec::Leap(kind, 4)});
  return f;
}

StepOptions FlaStepOptions() { return StepOptions{true, 1.0f / std::sqrt(static_cast<float>(kDim))}; }

std::unique_ptr<StateTracker> MakeTracker(const FormatDef& f) {
  if (f.window) {
    auto w = reference::WindowState::Create(
        reference::WindowOptions{f.spec, FlaStepOptions(), reference::RecordPrecision::kFp16}, nullptr);
    if (!w.ok()) {
      std::fprintf(stderr, "%s: %s\n", f.name.c_str(), w.status().ToString().c_str());
      std::exit(1);
    }
    return std::move(w).value();
  }
  auto s = reference::PerStepState::Create(f.spec, FlaStepOptions(), nullptr);
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\n", f.name.c_str(), s.status().ToString().c_str());
    std::exit(1);
  }
  return std::move(s).value();
}

double CheckpointBytesPerElement(const FormatDef& f) {
  return static_cast<double>(ComputeLayout(f.spec).payload_bytes) / (kDim * kDim);
}

// A live state's worst case: the boundary payload plus a full window of records.
double LiveBytesPerElement(const FormatDef& f) {
  double bytes = static_cast<double>(ComputeLayout(f.spec).payload_bytes);
  if (f.window) {
    bytes += (f.spec.p - 1) * static_cast<double>(reference::WindowState::RecordBytes(f.spec.kind, kDim, kDim)) +
             static_cast<double>(reference::WindowState::WindowHeaderBytes(f.spec.kind, kDim));
  }
  return bytes / (kDim * kDim);
}

std::vector<int> Checkpoints(int steps) {
  std::vector<int> c;
  for (int t : {1024, 4096, 16384, 65536}) {
    if (t <= steps) c.push_back(t);
  }
  if (c.empty() || c.back() != steps) {
    if (std::find(c.begin(), c.end(), steps) == c.end() && steps < 1024) c.push_back(steps);
  }
  return c;
}

// Squared error sums of one (kind, head, format) run at each checkpoint.
struct Sums {
  std::vector<double> state_err, state_ref, out_err, out_ref;
};

// The FP32 reference of one (kind, head): outputs of every step and states at checkpoints.
struct Reference {
  std::vector<float> o;                    // [steps][dv]
  std::vector<std::vector<float>> states;  // per checkpoint, [dk][dv]
};

struct Inputs {
  std::vector<float> q, k, v, g;
  float beta = 0.0f;
};

class Run {
 public:
  explicit Run(Options o) : o_(std::move(o)), checkpoints_(Checkpoints(o_.steps)) {}

  int Main();

 private:
  template <typename F>
  void ForEachToken(StateKind kind, int head, F&& f) const {
    SyntheticTrajectory traj(TrajectoryOptions{kind, kDim, kDim, o_.seed, head, o_.heads});
    Inputs in;
    in.q.resize(kDim);
    in.k.resize(kDim);
    in.v.resize(kDim);
    in.g.resize(reference::GateSize(kind, kDim));
    for (int t = 0; t < o_.steps; ++t) {
      traj.Next(in.q.data(), in.k.data(), in.v.data(), in.g.data(), &in.beta);
      f(t, StepInput{in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta});
    }
  }

  Reference RunReference(StateKind kind, int head) const;
  Sums RunFormat(StateKind kind, int head, const FormatDef& f, const Reference& ref) const;
  void Parallel(size_t n, const std::function<void(size_t)>& job) const;
  std::string Markdown(const std::map<std::string, std::vector<Sums>>& per_kind_format) const;

  Options o_;
  std::vector<int> checkpoints_;
};

Reference Run::RunReference(StateKind kind, int head) const {
  Reference ref;
  ref.o.resize(static_cast<size_t>(o_.steps) * kDim);
  std::vector<float> S(kDim * kDim, 0.0f);
  size_t next = 0;
  ForEachToken(kind, head, [&](int t, const StepInput& in) {
    reference::RecurrentStep(kind, kDim, kDim, FlaStepOptions(), in, S.data(),
                             ref.o.data() + static_cast<size_t>(t) * kDim);
    if (next < checkpoints_.size() && t + 1 == checkpoints_[next]) {
      ref.states.push_back(S);
      ++next;
    }
  });
  return ref;
}

Sums Run::RunFormat(StateKind kind, int head, const FormatDef& f, const Reference& ref) const {
  auto tracker = MakeTracker(f);
  Sums s;
  double oe = 0.0, orf = 0.0;
  std::vector<float> o(kDim), S(kDim * kDim);
  size_t next = 0;
  ForEachToken(kind, head, [&](int t, const StepInput& in) {
    const Status st = tracker->Step(in, o.data());
    if (!st.ok()) {
      std::fprintf(stderr, "%s %s head %d step %d: %s\n", StateKindName(kind), f.name.c_str(),
                   head, t, st.ToString().c_str());
      std::exit(1);
    }
    const float* r = ref.o.data() + static_cast<size_t>(t) * kDim;
    for (int j = 0; j < kDim; ++j) {
      oe += (static_cast<double>(o[j]) - r[j]) * (static_cast<double>(o[j]) - r[j]);
      orf += static_cast<double>(r[j]) * r[j];
    }
    if (next < checkpoints_.size() && t + 1 == checkpoints_[next]) {
      tracker->State(S.data());
      double se = 0.0, sr = 0.0;
      for (int i = 0; i < kDim * kDim; ++i) {
        const double d = static_cast<double>(S[i]) - ref.states[next][i];
        se += d * d;
        sr += static_cast<double>(ref.states[next][i]) * ref.states[next][i];
      }
      s.state_err.push_back(se);
      s.state_ref.push_back(sr);
      s.out_err.push_back(oe);
      s.out_ref.push_back(orf);
      ++next;
    }
  });
  return s;
}

void Run::Parallel(size_t n, const std::function<void(size_t)>& job) const {
  std::atomic<size_t> next{0};
  int threads = o_.threads > 0 ? o_.threads : static_cast<int>(std::thread::hardware_concurrency());
  threads = std::max(1, std::min<int>(threads, static_cast<int>(n)));
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i) {
    pool.emplace_back([&] {
      for (size_t j; (j = next.fetch_add(1)) < n;) job(j);
    });
  }
  for (auto& t : pool) t.join();
}

double Ratio(double err, double ref) { return ref > 0.0 ? std::sqrt(err / ref) : 0.0; }

std::string StepLabel(int t) { return t % 1024 == 0 ? std::to_string(t / 1024) + "K" : std::to_string(t); }

std::string Sci(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2e", x);
  return b;
}

int Run::Main() {
  const auto start = std::chrono::steady_clock::now();
  // Phase 1: the FP32 reference of every (kind, head).
  std::vector<std::pair<StateKind, int>> heads;
  for (StateKind kind : o_.kinds) {
    for (int h = 0; h < o_.heads; ++h) heads.emplace_back(kind, h);
  }
  std::vector<Reference> refs(heads.size());
  Parallel(heads.size(), [&](size_t i) { refs[i] = RunReference(heads[i].first, heads[i].second); });

  // Phase 2: every format on every (kind, head).
  struct Job {
    size_t head_index;
    FormatDef format;
  };
  std::vector<Job> jobs;
  for (size_t i = 0; i < heads.size(); ++i) {
    for (const FormatDef& f : AllFormats(heads[i].first)) {
      if (o_.formats.empty() ||
          std::find(o_.formats.begin(), o_.formats.end(), f.name) != o_.formats.end()) {
        jobs.push_back({i, f});
      }
    }
  }
  std::vector<Sums> results(jobs.size());
  std::mutex mu;
  size_t done = 0;
  const bool progress = isatty(STDERR_FILENO) != 0;  // a live line on terminals only
  Parallel(jobs.size(), [&](size_t j) {
    const auto& [kind, head] = heads[jobs[j].head_index];
    results[j] = RunFormat(kind, head, jobs[j].format, refs[jobs[j].head_index]);
    std::lock_guard<std::mutex> lock(mu);
    ++done;
    if (progress) {
      std::fprintf(stderr, "\r[%zu/%zu] %s %-14s head %d ", done, jobs.size(), StateKindName(kind),
                   jobs[j].format.name.c_str(), head);
    }
  });
  if (progress) std::fprintf(stderr, "\n");

  // Aggregate over heads: key "<kind>/<format>" -> summed squared errors per checkpoint.
  std::map<std::string, std::vector<Sums>> grouped;
  for (size_t j = 0; j < jobs.size(); ++j) {
    grouped[std::string(StateKindName(heads[jobs[j].head_index].first)) + "/" + jobs[j].format.name]
        .push_back(results[j]);
  }
  auto total = [&](const std::string& key, size_t c, bool state) {
    double e = 0.0, r = 0.0;
    for (const Sums& s : grouped[key]) {
      e += state ? s.state_err[c] : s.out_err[c];
      r += state ? s.state_ref[c] : s.out_ref[c];
    }
    return Ratio(e, r);
  };

  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // JSON.
  std::ostringstream js;
  js << "{\n  \"tool\": \"leapcache-accuracy\",\n  \"steps\": " << o_.steps
     << ",\n  \"heads_per_kind\": " << o_.heads << ",\n  \"seed\": " << o_.seed
     << ",\n  \"dk\": " << kDim << ",\n  \"dv\": " << kDim << ",\n  \"seconds\": " << seconds
     << ",\n  \"checkpoints\": [";
  for (size_t c = 0; c < checkpoints_.size(); ++c) js << (c ? ", " : "") << checkpoints_[c];
  js << "],\n  \"results\": [\n";
  bool first = true;
  for (StateKind kind : o_.kinds) {
    for (const FormatDef& f : AllFormats(kind)) {
      const std::string key = std::string(StateKindName(kind)) + "/" + f.name;
      if (!grouped.count(key)) continue;
      js << (first ? "" : ",\n") << "    {\"kind\": \"" << StateKindName(kind) << "\", \"format\": \""
         << f.name << "\", \"description\": \"" << f.description << "\", \"spec\": \""
         << f.spec.ToString() << "\", \"checkpoint_bytes_per_element\": "
         << CheckpointBytesPerElement(f) << ", \"live_bytes_per_element\": " << LiveBytesPerElement(f)
         << ", \"state_rel_error\": [";
      for (size_t c = 0; c < checkpoints_.size(); ++c) js << (c ? ", " : "") << Sci(total(key, c, true));
      js << "], \"readout_rel_error\": [";
      for (size_t c = 0; c < checkpoints_.size(); ++c) js << (c ? ", " : "") << Sci(total(key, c, false));
      js << "]}";
      first = false;
    }
  }
  js << "\n  ]\n}\n";

  // Markdown: one table per kind.
  std::ostringstream md;
  md << "Relative error against the FP32 recurrence; " << o_.heads << " heads per kind, dk = dv = "
     << kDim << ", seed " << o_.seed << ". B/elem: boundary checkpoint payload; live: with a full "
     << "window of records.\n";
  for (StateKind kind : o_.kinds) {
    md << "\n**" << (kind == StateKind::kGdn ? "GDN" : "KDA") << "**\n\n| format | B/elem | live B/elem |";
    for (int t : checkpoints_) md << " state " << StepLabel(t) << " |";
    for (int t : checkpoints_) md << " readout " << StepLabel(t) << " |";
    md << "\n|---|---:|---:|";
    for (size_t c = 0; c < 2 * checkpoints_.size(); ++c) md << "---:|";
    md << "\n";
    for (const FormatDef& f : AllFormats(kind)) {
      const std::string key = std::string(StateKindName(kind)) + "/" + f.name;
      if (!grouped.count(key)) continue;
      char b[64];
      std::snprintf(b, sizeof b, "| %s | %.4f | %.4f |", f.name.c_str(), CheckpointBytesPerElement(f),
                    LiveBytesPerElement(f));
      md << b;
      for (size_t c = 0; c < checkpoints_.size(); ++c) md << " " << Sci(total(key, c, true)) << " |";
      for (size_t c = 0; c < checkpoints_.size(); ++c) md << " " << Sci(total(key, c, false)) << " |";
      md << "\n";
    }
  }

  // Acceptance at 4K steps (the window format vs the per-step baselines, and the ablation).
  std::ostringstream checks;
  bool pass = true;
  const auto at = std::find(checkpoints_.begin(), checkpoints_.end(), kCheckStep);
  if (at != checkpoints_.end()) {
    const size_t c = static_cast<size_t>(at - checkpoints_.begin());
    for (StateKind kind : o_.kinds) {
      const std::string k = StateKindName(kind);
      auto readout = [&](const std::string& f) {
        const std::string key = k + "/" + f;
        return grouped.count(key) ? total(key, c, false) : NAN;
      };
      auto expect = [&](bool ok, const std::string& what) {
        checks << (ok ? "PASS " : "FAIL ") << k << ": " << what << "\n";
        pass = pass && ok;
      };
      const double leap = readout("leap-8"), bf16 = readout("bf16"), i8c = readout("int8-col"),
                   i8r = readout("int8-row"), w = readout("int8-w"), wc = readout("int8-w+comp");
      if (std::isnan(leap)) continue;
      expect(leap < bf16, "leap-8 readout " + Sci(leap) + " < per-step bf16 " + Sci(bf16));
      expect(leap * 5 <= std::min(i8c, i8r),
             "leap-8 readout at least 5x below per-step int8 (row " + Sci(i8r) + ", col " + Sci(i8c) + ")");
      expect(i8c > w && w > wc && wc > leap,
             "ablation monotone: int8-col " + Sci(i8c) + " > int8-w " + Sci(w) + " > +comp " +
                 Sci(wc) + " > +smoothing (leap-8) " + Sci(leap));
    }
  }

  std::filesystem::create_directories(o_.out);
  std::ofstream(std::filesystem::path(o_.out) / "accuracy.json") << js.str();
  std::ofstream(std::filesystem::path(o_.out) / "accuracy.md") << md.str();
  std::printf("%s\n%s", md.str().c_str(), checks.str().c_str());
  std::printf("wrote %s/accuracy.{json,md} in %.1f s\n", o_.out.c_str(), seconds);
  return o_.check && !pass ? 1 : 0;
}

[[noreturn]] void Usage(int code) {
  std::fprintf(code ? stderr : stdout,
               "usage: leapcache-accuracy [--steps N] [--heads N] [--seed S] [--kinds gdn,kda]\n"
               "                          [--formats a,b,...] [--threads N] [--out DIR] [--check]\n"
               "  --steps N     tokens per trajectory (default 65536; checkpoints 1K/4K/16K/64K)\n"
               "  --heads N     heads per kind (default 4)\n"
               "  --formats     subset of: fp32 bf16 fp16 int8-row int8-col bf16-w int8-w\n"
               "                int8-w+comp int8-w+smooth leap-8 leap-6 leap-4\n"
               "  --check       exit 1 unless the acceptance criteria hold at 4K steps\n");
  std::exit(code);
}

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

int ParseInt(const std::string& flag, const std::string& v, int lo, int hi) {
  char* end = nullptr;
  const long x = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || x < lo || x > hi) {
    std::fprintf(stderr, "%s must be an integer in [%d, %d] (got '%s')\n", flag.c_str(), lo, hi, v.c_str());
    Usage(2);
  }
  return static_cast<int>(x);
}

Options ParseFlags(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i], v;
    if (a == "--help" || a == "-h") Usage(0);
    if (a == "--check") {
      o.check = true;
      continue;
    }
    if (const auto eq = a.find('='); eq != std::string::npos) {
      v = a.substr(eq + 1);
      a = a.substr(0, eq);
    } else if (i + 1 < argc) {
      v = argv[++i];
    } else {
      std::fprintf(stderr, "%s needs a value\n", a.c_str());
      Usage(2);
    }
    if (a == "--steps") {
      o.steps = ParseInt(a, v, 1, 1 << 24);
    } else if (a == "--heads") {
      o.heads = ParseInt(a, v, 1, 64);
    } else if (a == "--seed") {
      o.seed = static_cast<uint64_t>(ParseInt(a, v, 0, 1 << 30));
    } else if (a == "--threads") {
      o.threads = ParseInt(a, v, 1, 256);
    } else if (a == "--out") {
      o.out = v;
    } else if (a == "--formats") {
      o.formats = Split(v);
      const auto all = AllFormats(StateKind::kGdn);
      for (const std::string& f : o.formats) {
        if (std::none_of(all.begin(), all.end(), [&](const FormatDef& d) { return d.name == f; })) {
          std::fprintf(stderr, "unknown format '%s'\n", f.c_str());
          Usage(2);
        }
      }
    } else if (a == "--kinds") {
      o.kinds.clear();
      for (const std::string& k : Split(v)) {
        if (k == "gdn") {
          o.kinds.push_back(StateKind::kGdn);
        } else if (k == "kda") {
          o.kinds.push_back(StateKind::kKda);
        } else {
          std::fprintf(stderr, "unknown kind '%s'\n", k.c_str());
          Usage(2);
        }
      }
    } else {
      std::fprintf(stderr, "unknown flag %s\n", a.c_str());
      Usage(2);
    }
  }
  return o;
}

}  // namespace
}  // namespace leapcache::tools

int main(int argc, char** argv) {
  return leapcache::tools::Run(leapcache::tools::ParseFlags(argc, argv)).Main();
}

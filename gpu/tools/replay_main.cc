// leapcache-replay: runs one state format of the CPU reference over an external trajectory of
// one head (q, k, v, g, beta as .npy files, e.g. dumped from a real model) and writes the outputs
// and the final state, so a format's error can be measured on real data against --format fp32.
//
// Everything is checked before any output is written: flag values (exit 2), then every input
// file's dtype, shape against the others and finiteness, and the replay itself (exit 1). Outputs
// are written under temporary names and renamed, so a failed run never leaves a partial o.npy.
#include <charconv>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "gpu/format/format.h"
#include "gpu/format/status.h"
#include "gpu/reference/codec.h"
#include "gpu/reference/per_step.h"
#include "gpu/reference/recurrence.h"
#include "gpu/reference/tracker.h"
#include "gpu/reference/window.h"
#include "gpu/tools/npy.h"

namespace leapcache::tools {
namespace {

namespace fs = std::filesystem;
using reference::StateTracker;

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;  // bad input files, a failed replay, unwritable output
constexpr int kExitUsage = 2;    // bad command line

constexpr char kUsage[] =
    R"(Usage: leapcache-replay --kind gdn|kda --in DIR --out DIR [options]

Runs one state format of the CPU reference over a recorded trajectory of one head
and writes the per-token outputs and the final state.

Input (--in DIR): little-endian float32 ('<f4') C-order .npy files
  q.npy      [T, dk]                    queries
  k.npy      [T, dk]                    keys
  v.npy      [T, dv]                    values
  g.npy      [T] (gdn) or [T, dk] (kda) log decays
  beta.npy   [T]                        delta-rule step sizes
  h0.npy     [dk, dv]                   initial state (optional; zero if absent)
dk and dv must be multiples of 16 in [16, 256]. Inputs are used as given: no
normalisation and o_t = S_t^T q_t, unless --l2norm-qk or --scale say otherwise.

Output (--out DIR, created if missing):
  o.npy      [T, dv]                    per-token outputs
  state.npy  [dk, dv]                   final state as the format holds it, in fp32

Options:
  --kind gdn|kda    recurrence (required)
  --format F        fp32, bf16, fp16, int8-row, int8-col or window (default window);
                    all but window re-encode the state after every token
  --bits 8|6|4      integer width of int8-row, int8-col and window (default 8)
  --p N             window length, window only (default 16)
  --r N             compensator pairs, window only (default 4 at 8 bits, 6 at 6, 8 at 4)
  --no-smoothing    window only: no per-key-row smoothing scales
  --l2norm-qk       l2-normalise q and k of every token
  --scale X         multiply q by X, after any normalisation (default 1)
  --in DIR          input folder (required)
  --out DIR         output folder (required)
  --help            print this help and exit

Flags take a value as --flag VALUE or --flag=VALUE. On success one summary line
goes to stdout (seconds: the replay alone, without file I/O).
Exit status: 0 success, 1 bad input file or failed replay, 2 bad command line.
)";

enum class Format { kFp32, kBf16, kFp16, kIntRow, kIntCol, kWindow };

struct Flags {
  bool help = false;
  std::optional<StateKind> kind;
  Format format = Format::kWindow;
  std::string format_name = "window";
  std::optional<int> bits, p, r;
  bool no_smoothing = false;
  bool l2norm_qk = false;
  float scale = 1.0f;
  std::string in, out;
};

struct FlagInfo {
  std::string_view name;
  bool takes_value;
};
constexpr FlagInfo kFlags[] = {
    {"--kind", true}, {"--format", true},        {"--bits", true},       {"--p", true},
    {"--r", true},    {"--no-smoothing", false}, {"--l2norm-qk", false}, {"--scale", true},
    {"--in", true},   {"--out", true},           {"--help", false},
};

const FlagInfo* FindFlag(std::string_view name) {
  for (const FlagInfo& f : kFlags) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

StatusOr<int> ParseInt(std::string_view flag, const std::string& value) {
  int v = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc() || end != value.data() + value.size()) {
    return InvalidArgumentError(std::string(flag) + ": '" + value + "' is not an integer");
  }
  return v;
}

StatusOr<float> ParseFloat(std::string_view flag, const std::string& value) {
  float v = 0.0f;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc() || end != value.data() + value.size() || !std::isfinite(v)) {
    return InvalidArgumentError(std::string(flag) + ": '" + value + "' is not a finite number");
  }
  return v;
}

// Applies one flag. Value checks that need no input file happen here so that they exit 2.
Status ApplyFlag(std::string_view name, const std::string& value, Flags& f) {
  if (name == "--kind") {
    if (value == "gdn") {
      f.kind = StateKind::kGdn;
    } else if (value == "kda") {
      f.kind = StateKind::kKda;
    } else {
      return InvalidArgumentError("--kind: unknown kind '" + value + "' (expected gdn or kda)");
    }
  } else if (name == "--format") {
    static constexpr std::pair<std::string_view, Format> kFormats[] = {
        {"fp32", Format::kFp32},       {"bf16", Format::kBf16},       {"fp16", Format::kFp16},
        {"int8-row", Format::kIntRow}, {"int8-col", Format::kIntCol}, {"window", Format::kWindow},
    };
    for (const auto& [n, fmt] : kFormats) {
      if (value == n) {
        f.format = fmt;
        f.format_name = value;
        return OkStatus();
      }
    }
    return InvalidArgumentError("--format: unknown format '" + value +
                                "' (expected fp32, bf16, fp16, int8-row, int8-col or window)");
  } else if (name == "--bits") {
    LEAPCACHE_ASSIGN_OR_RETURN(f.bits, ParseInt(name, value));
    if (*f.bits != 8 && *f.bits != 6 && *f.bits != 4) {
      return InvalidArgumentError("--bits must be 8, 6 or 4 (got " + value + ")");
    }
  } else if (name == "--p") {
    LEAPCACHE_ASSIGN_OR_RETURN(f.p, ParseInt(name, value));
  } else if (name == "--r") {
    LEAPCACHE_ASSIGN_OR_RETURN(f.r, ParseInt(name, value));
  } else if (name == "--no-smoothing") {
    f.no_smoothing = true;
  } else if (name == "--l2norm-qk") {
    f.l2norm_qk = true;
  } else if (name == "--scale") {
    LEAPCACHE_ASSIGN_OR_RETURN(f.scale, ParseFloat(name, value));
  } else if (name == "--in") {
    f.in = value;
  } else if (name == "--out") {
    f.out = value;
  } else if (name == "--help") {
    f.help = true;
  }
  return OkStatus();
}

// The spec of the chosen format for dims dk, dv.
BlobSpec MakeSpec(const Flags& f, int dk, int dv) {
  const int bits = f.bits.value_or(8);
  if (f.format == Format::kWindow) {
    BlobSpec s = BlobSpec::Leap(*f.kind, bits, dk, dv);
    if (f.p) s.p = *f.p;
    if (f.r) s.r = *f.r;
    if (f.no_smoothing) s.smoothing = false;
    return s;
  }
  // Per-step formats: re-encoded every token, so no window, compensators or smoothing.
  BlobSpec s;
  s.kind = *f.kind;
  s.dk = dk;
  s.dv = dv;
  s.p = 1;
  s.r = 0;
  s.smoothing = false;
  s.bits = bits;
  switch (f.format) {
    case Format::kFp32:
      s.codec = Codec::kFp32;
      s.bits = 32;
      break;
    case Format::kBf16:
      s.codec = Codec::kBf16;
      s.bits = 16;
      break;
    case Format::kFp16:
      s.codec = Codec::kFp16;
      s.bits = 16;
      break;
    case Format::kIntRow:
      s.codec = Codec::kIntRow;
      break;
    case Format::kIntCol:
      s.codec = Codec::kIntCol;
      break;
    case Format::kWindow:  // handled above
      break;
  }
  return s;
}

StatusOr<Flags> ParseFlags(int argc, char** argv) {
  Flags f;
  std::set<std::string, std::less<>> seen;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help") {  // wins over any other problem on the line
      f.help = true;
      return f;
    }
  }
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0) {
      return InvalidArgumentError("unexpected argument '" + arg + "' (flags start with --)");
    }
    const size_t eq = arg.find('=');
    const std::string name = arg.substr(0, eq);
    const FlagInfo* info = FindFlag(name);
    if (info == nullptr) return InvalidArgumentError("unknown flag " + name);
    if (!seen.insert(name).second) return InvalidArgumentError(name + " is given more than once");
    std::string value;
    if (eq != std::string::npos) {
      if (!info->takes_value) return InvalidArgumentError(name + " takes no value");
      value = arg.substr(eq + 1);
    } else if (info->takes_value) {
      // "--in --out x" is a forgotten value, not an input folder called "--out".
      if (i + 1 == argc || std::string_view(argv[i + 1]).starts_with("--")) {
        return InvalidArgumentError(name + " needs a value");
      }
      value = argv[++i];
    }
    if (info->takes_value && value.empty()) return InvalidArgumentError(name + " needs a value");
    LEAPCACHE_RETURN_IF_ERROR(ApplyFlag(name, value, f));
  }
  if (!f.kind) return InvalidArgumentError("missing required flag --kind");
  if (f.in.empty()) return InvalidArgumentError("missing required flag --in");
  if (f.out.empty()) return InvalidArgumentError("missing required flag --out");
  const bool is_float =
      f.format == Format::kFp32 || f.format == Format::kBf16 || f.format == Format::kFp16;
  // A flag that cannot affect the chosen format is a mistake in a sweep script, not a no-op.
  if (is_float && f.bits) {
    return InvalidArgumentError("--bits applies to int8-row, int8-col and window, not to " +
                                f.format_name);
  }
  if (f.format != Format::kWindow) {
    for (auto [flag, given] : {std::pair{"--p", f.p.has_value()}, std::pair{"--r", f.r.has_value()},
                               std::pair{"--no-smoothing", f.no_smoothing}}) {
      if (given) {
        return InvalidArgumentError(std::string(flag) +
                                    " applies to --format window only, not to " + f.format_name);
      }
    }
  }
  // p and r ranges are the format's: let it judge them now, with placeholder dims, so that a bad
  // value is a usage error (exit 2) rather than a failure after reading every file.
  if (Status s = ValidateSpec(MakeSpec(f, kMinDim, kMinDim)); !s.ok()) {
    return InvalidArgumentError("--format " + f.format_name + ": " + s.message());
  }
  return f;
}

// One input file as read; Run checks its shape against the others, then its values.
struct Input {
  std::string path;
  NpyArray array;
};

StatusOr<Input> Load(const fs::path& dir, const char* name) {
  Input in;
  in.path = (dir / name).string();
  LEAPCACHE_ASSIGN_OR_RETURN(in.array, ReadNpy(in.path));
  return in;
}

// "<path>: shape (200, 16) does not match the expected (200, 32) [T, dk]" + how it was derived.
Status CheckShape(const Input& in, const std::vector<int64_t>& want, const std::string& meaning,
                  const std::string& hint = "") {
  if (in.array.shape == want) return OkStatus();
  return InvalidArgumentError(in.path + ": shape " + ShapeToString(in.array.shape) +
                              " does not match the expected " + ShapeToString(want) + " " +
                              meaning + hint);
}

Status Run(const Flags& f) {
  const fs::path in_dir(f.in), out_dir(f.out);
  std::error_code ec;
  if (!fs::is_directory(in_dir, ec)) return NotFoundError("--in " + f.in + ": no such folder");
  if (fs::exists(out_dir, ec) && !fs::is_directory(out_dir, ec)) {
    return InvalidArgumentError("--out " + f.out + ": exists and is not a folder");
  }

  // q fixes T and dk, v fixes dv; every other file is checked against them.
  LEAPCACHE_ASSIGN_OR_RETURN(Input q, Load(in_dir, "q.npy"));
  if (q.array.shape.size() != 2) {
    return InvalidArgumentError(q.path + ": shape " + ShapeToString(q.array.shape) +
                                " is not 2-d; expected [T, dk]");
  }
  const int64_t T = q.array.shape[0], dk64 = q.array.shape[1];
  LEAPCACHE_ASSIGN_OR_RETURN(Input v, Load(in_dir, "v.npy"));
  if (v.array.shape.size() != 2 || v.array.shape[0] != T) {
    return InvalidArgumentError(v.path + ": shape " + ShapeToString(v.array.shape) +
                                " does not match the expected (" + std::to_string(T) +
                                ", dv) [T, dv] (T = " + std::to_string(T) + " from q.npy)");
  }
  const int64_t dv64 = v.array.shape[1];
  // Range-check before narrowing to int; ValidateSpec then gives the format's own message.
  const auto narrow = [](int64_t d) { return static_cast<int>(std::min<int64_t>(d, 1 << 30)); };
  const int dk = narrow(dk64), dv = narrow(dv64);
  const BlobSpec spec = MakeSpec(f, dk, dv);
  if (Status s = ValidateSpec(spec); !s.ok()) {
    return InvalidArgumentError("dk = " + std::to_string(dk64) + " (from " + q.path +
                                ") and dv = " + std::to_string(dv64) + " (from " + v.path +
                                ") do not fit the format: " + s.message());
  }
  const std::string dims = " (T = " + std::to_string(T) + ", dk = " + std::to_string(dk) +
                           " from q.npy, dv = " + std::to_string(dv) + " from v.npy)";
  LEAPCACHE_ASSIGN_OR_RETURN(Input k, Load(in_dir, "k.npy"));
  LEAPCACHE_RETURN_IF_ERROR(CheckShape(k, {T, dk}, "[T, dk]" + dims));
  LEAPCACHE_ASSIGN_OR_RETURN(Input g, Load(in_dir, "g.npy"));
  const bool gdn = *f.kind == StateKind::kGdn;
  const std::vector<int64_t> g_gdn = {T}, g_kda = {T, dk};
  std::string g_hint;
  if (gdn && g.array.shape == g_kda) g_hint = "; it fits --kind kda, which has one gate per key";
  if (!gdn && g.array.shape == g_gdn) g_hint = "; it fits --kind gdn, which has one gate per token";
  LEAPCACHE_RETURN_IF_ERROR(CheckShape(
      g, gdn ? g_gdn : g_kda,
      std::string(gdn ? "[T] for --kind gdn" : "[T, dk] for --kind kda") + dims, g_hint));
  LEAPCACHE_ASSIGN_OR_RETURN(Input beta, Load(in_dir, "beta.npy"));
  LEAPCACHE_RETURN_IF_ERROR(CheckShape(beta, {T}, "[T]" + dims));
  std::optional<Input> h0;
  if (fs::exists(in_dir / "h0.npy", ec)) {
    LEAPCACHE_ASSIGN_OR_RETURN(h0, Load(in_dir, "h0.npy"));
    LEAPCACHE_RETURN_IF_ERROR(CheckShape(*h0, {dk, dv}, "[dk, dv]" + dims));
  }
  for (const Input* in : {&q, &k, &v, &g, &beta}) {
    LEAPCACHE_RETURN_IF_ERROR(CheckFinite(in->path, in->array));
  }
  if (h0) {
    LEAPCACHE_RETURN_IF_ERROR(CheckFinite(h0->path, h0->array));
    // Also the codec's magnitude bound, so the error names the file rather than "state".
    if (Status s = reference::ValidateState(h0->array.data.data(), h0->array.data.size());
        !s.ok()) {
      return Status(s.code(), h0->path + ": " + s.message());
    }
  }

  reference::StepOptions step;
  step.l2norm_qk = f.l2norm_qk;
  step.scale = f.scale;
  const float* h0_kv = h0 ? h0->array.data.data() : nullptr;
  std::unique_ptr<StateTracker> tracker;
  if (f.format == Format::kWindow) {
    reference::WindowOptions options;
    options.spec = spec;
    options.step = step;
    options.records = reference::RecordPrecision::kFp16;
    LEAPCACHE_ASSIGN_OR_RETURN(tracker, reference::WindowState::Create(options, h0_kv));
  } else {
    LEAPCACHE_ASSIGN_OR_RETURN(tracker, reference::PerStepState::Create(spec, step, h0_kv));
  }

  const int gate = reference::GateSize(spec.kind, dk);
  NpyArray o{{T, dv}, std::vector<float>(static_cast<size_t>(T) * dv)};
  NpyArray state{{dk, dv}, std::vector<float>(static_cast<size_t>(dk) * dv)};
  const auto start = std::chrono::steady_clock::now();
  for (int64_t t = 0; t < T; ++t) {
    reference::StepInput in;
    in.q = q.array.data.data() + t * dk;
    in.k = k.array.data.data() + t * dk;
    in.v = v.array.data.data() + t * dv;
    in.g = g.array.data.data() + t * gate;
    in.beta = beta.array.data[t];
    if (Status s = tracker->Step(in, o.data.data() + t * dv); !s.ok()) {
      return Status(s.code(), "replay failed at token " + std::to_string(t) + " of " +
                                  std::to_string(T) + " with " + spec.ToString() + ": " +
                                  s.message());
    }
  }
  tracker->State(state.data.data());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  // Finite inputs can still overflow fp32 on the way (e.g. positive log decays); such outputs
  // would poison whatever compares them, so they are an error, not a file.
  for (auto [name, array] : {std::pair{"o", &o}, std::pair{"state", &state}}) {
    if (Status s = CheckFinite(name, *array); !s.ok()) {
      return OutOfRangeError("replay overflowed fp32 with " + spec.ToString() + ": " + s.message());
    }
  }

  fs::create_directories(out_dir, ec);
  if (ec) return InvalidArgumentError("--out " + f.out + ": cannot create: " + ec.message());
  const std::string o_path = (out_dir / "o.npy").string();
  LEAPCACHE_RETURN_IF_ERROR(WriteNpy(o_path, o.shape, o.data));
  if (Status s = WriteNpy((out_dir / "state.npy").string(), state.shape, state.data); !s.ok()) {
    fs::remove(o_path, ec);  // no o.npy without the state.npy of the same run
    return s;
  }

  std::ostringstream line;
  line << "leapcache-replay: T=" << T << " dk=" << dk << " dv=" << dv
       << " kind=" << StateKindName(spec.kind) << " format=" << f.format_name << " spec=["
       << spec.ToString() << "] seconds=" << std::fixed << std::setprecision(6) << seconds;
  std::cout << line.str() << std::endl;
  return OkStatus();
}

int Main(int argc, char** argv) {
  StatusOr<Flags> flags = ParseFlags(argc, argv);
  if (!flags.ok()) {
    std::cerr << "leapcache-replay: " << flags.status().message() << "\n\n" << kUsage;
    return kExitUsage;
  }
  if (flags->help) {
    std::cout << kUsage;
    return kExitOk;
  }
  if (Status s = Run(*flags); !s.ok()) {
    std::cerr << "leapcache-replay: error: " << s.message() << "\n";
    return kExitFailure;
  }
  return kExitOk;
}

}  // namespace
}  // namespace leapcache::tools

int main(int argc, char** argv) { return leapcache::tools::Main(argc, argv); }

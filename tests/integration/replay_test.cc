// End-to-end test of the leapcache-replay binary: trajectories written with WriteNpy, the binary
// run as a user would run it, its outputs read back and compared with the in-process FP32
// recurrence. No numpy and no GPU needed.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "gpu/format/format.h"
#include "gpu/reference/recurrence.h"
#include "gpu/tools/npy.h"

#ifndef LEAPCACHE_REPLAY_BIN
#error "LEAPCACHE_REPLAY_BIN must be the path of the leapcache-replay binary"
#endif

namespace leapcache::tools {
namespace {

namespace fs = std::filesystem;

::testing::AssertionResult Contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\"" << text << "\" does not contain \"" << part << "\"";
}

struct Trajectory {
  StateKind kind = StateKind::kGdn;
  int T = 0, dk = 0, dv = 0;
  std::vector<float> q, k, v, g, beta, h0;  // h0 empty: zero initial state, no h0.npy
};

// Unit-norm q and k (the tool applies no normalisation by default), N(0, 1) values, beta in
// (0.1, 0.9) and log decays of a few to a few hundred tokens' half-life: a stable delta rule.
Trajectory MakeTrajectory(StateKind kind, int T, int dk, int dv, uint32_t seed, bool with_h0,
                          float qk_norm = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  Trajectory t;
  t.kind = kind;
  t.T = T;
  t.dk = dk;
  t.dv = dv;
  auto unit_rows = [&](std::vector<float>& x) {
    x.resize(static_cast<size_t>(T) * dk);
    for (float& e : x) e = normal(rng);
    for (int i = 0; i < T; ++i) {
      float ss = 0.0f;
      for (int a = 0; a < dk; ++a) ss += x[i * dk + a] * x[i * dk + a];
      const float inv = qk_norm / std::sqrt(ss);
      for (int a = 0; a < dk; ++a) x[i * dk + a] *= inv;
    }
  };
  unit_rows(t.q);
  unit_rows(t.k);
  t.v.resize(static_cast<size_t>(T) * dv);
  for (float& e : t.v) e = normal(rng);
  t.g.resize(static_cast<size_t>(T) * reference::GateSize(kind, dk));
  for (float& e : t.g) e = -(0.002f + 0.3f * uniform(rng));
  t.beta.resize(T);
  for (float& e : t.beta) e = 0.1f + 0.8f * uniform(rng);
  if (with_h0) {
    t.h0.resize(static_cast<size_t>(dk) * dv);
    for (float& e : t.h0) e = 0.5f * normal(rng);
  }
  return t;
}

struct Reference {
  std::vector<float> o, state;
};

Reference RunReference(const Trajectory& t, const reference::StepOptions& opts) {
  Reference r;
  r.o.resize(static_cast<size_t>(t.T) * t.dv);
  r.state = t.h0.empty() ? std::vector<float>(static_cast<size_t>(t.dk) * t.dv, 0.0f) : t.h0;
  const int gate = reference::GateSize(t.kind, t.dk);
  for (int i = 0; i < t.T; ++i) {
    reference::StepInput in;
    in.q = t.q.data() + i * t.dk;
    in.k = t.k.data() + i * t.dk;
    in.v = t.v.data() + i * t.dv;
    in.g = t.g.data() + i * gate;
    in.beta = t.beta[i];
    reference::RecurrentStep(t.kind, t.dk, t.dv, opts, in, r.state.data(), r.o.data() + i * t.dv);
  }
  return r;
}

// max |a - b| / max |b|: the relative error of the worst element against the data's scale.
double MaxRelError(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    num = std::max(num, std::fabs(static_cast<double>(a[i]) - b[i]));
    den = std::max(den, std::fabs(static_cast<double>(b[i])));
  }
  return den == 0.0 ? num : num / den;
}

struct Result {
  int exit_code = -1;
  std::string out, err;
};

class ReplayTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("replay_test_" + std::string(info->name()) + "_" +
                                        std::to_string(std::random_device{}()));
    fs::create_directories(dir_ / "in");
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  std::string In(const std::string& name = "") const { return (dir_ / "in" / name).string(); }
  std::string Out(const std::string& name = "") const { return (dir_ / "out" / name).string(); }

  void Write(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& d) {
    const Status s = WriteNpy(In(name), shape, d);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }

  void WriteTrajectory(const Trajectory& t) {
    const int64_t T = t.T, dk = t.dk, dv = t.dv;
    Write("q.npy", {T, dk}, t.q);
    Write("k.npy", {T, dk}, t.k);
    Write("v.npy", {T, dv}, t.v);
    if (t.kind == StateKind::kGdn) {
      Write("g.npy", {T}, t.g);
    } else {
      Write("g.npy", {T, dk}, t.g);
    }
    Write("beta.npy", {T}, t.beta);
    if (!t.h0.empty()) {
      Write("h0.npy", {dk, dv}, t.h0);
    } else {
      fs::remove(In("h0.npy"));  // left by an earlier trajectory of the same test
    }
  }

  // Runs the binary with `args` (--in and --out are added unless `add_dirs` is false).
  Result Run(const std::string& args, bool add_dirs = true) const {
    const std::string out_txt = (dir_ / "stdout.txt").string();
    const std::string err_txt = (dir_ / "stderr.txt").string();
    std::string cmd = std::string("'") + LEAPCACHE_REPLAY_BIN + "' " + args;
    if (add_dirs) cmd += " --in '" + In() + "' --out '" + Out() + "'";
    cmd += " >'" + out_txt + "' 2>'" + err_txt + "'";
    const int status = std::system(cmd.c_str());
    Result r;
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    auto slurp = [](const std::string& path) {
      std::ifstream in(path);
      return std::string(std::istreambuf_iterator<char>(in), {});
    };
    r.out = slurp(out_txt);
    r.err = slurp(err_txt);
    return r;
  }

  NpyArray ReadOut(const std::string& name) const {
    StatusOr<NpyArray> a = ReadNpy(Out(name));
    EXPECT_TRUE(a.ok()) << a.status().ToString();
    return a.ok() ? *a : NpyArray{};
  }

  fs::path dir_;
};

constexpr int kT = 200;

TEST_F(ReplayTest, Fp32MatchesTheReferenceGdn) {
  const Trajectory t = MakeTrajectory(StateKind::kGdn, kT, 32, 48, 1, /*with_h0=*/true);
  WriteTrajectory(t);
  const Result r = Run("--kind gdn --format fp32");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const NpyArray o = ReadOut("o.npy"), state = ReadOut("state.npy");
  EXPECT_EQ(o.shape, (std::vector<int64_t>{kT, 48}));
  EXPECT_EQ(state.shape, (std::vector<int64_t>{32, 48}));
  const Reference ref = RunReference(t, {});
  EXPECT_LE(MaxRelError(o.data, ref.o), 1e-6);
  EXPECT_LE(MaxRelError(state.data, ref.state), 1e-6);
  EXPECT_TRUE(Contains(r.out,
                       "T=200 dk=32 dv=48 kind=gdn format=fp32 spec=[fp32/gdn dk=32 dv=48 "
                       "bits=32 p=1 r=0] seconds="));
  EXPECT_TRUE(r.err.empty()) << r.err;
  EXPECT_FALSE(fs::exists(Out("o.npy.partial")));
}

TEST_F(ReplayTest, Fp32MatchesTheReferenceKdaWithEqualsSyntax) {
  const Trajectory t = MakeTrajectory(StateKind::kKda, kT, 64, 32, 2, /*with_h0=*/false);
  WriteTrajectory(t);
  const Result r = Run("--kind=kda --format=fp32 --in='" + In() + "' --out='" + Out() + "'",
                       /*add_dirs=*/false);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Reference ref = RunReference(t, {});
  EXPECT_LE(MaxRelError(ReadOut("o.npy").data, ref.o), 1e-6);
  EXPECT_LE(MaxRelError(ReadOut("state.npy").data, ref.state), 1e-6);
}

TEST_F(ReplayTest, Fp32AppliesL2NormAndScale) {
  // Raw q, k of norm 3: only correct if the tool normalises them when asked.
  const Trajectory t = MakeTrajectory(StateKind::kKda, kT, 32, 32, 3, /*with_h0=*/true, 3.0f);
  WriteTrajectory(t);
  const Result r = Run("--kind kda --format fp32 --l2norm-qk --scale 0.17677669");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  reference::StepOptions opts;
  opts.l2norm_qk = true;
  opts.scale = 0.17677669f;
  const Reference ref = RunReference(t, opts);
  EXPECT_LE(MaxRelError(ReadOut("o.npy").data, ref.o), 1e-6);
  EXPECT_LE(MaxRelError(ReadOut("state.npy").data, ref.state), 1e-6);
  // And that the flags mattered at all.
  EXPECT_GT(MaxRelError(ReadOut("o.npy").data, RunReference(t, {}).o), 0.1);
}

TEST_F(ReplayTest, Window8BitIsCloseToTheReference) {
  for (StateKind kind : {StateKind::kGdn, StateKind::kKda}) {
    const bool gdn = kind == StateKind::kGdn;
    SCOPED_TRACE(gdn ? "gdn" : "kda");
    const Trajectory t = MakeTrajectory(kind, kT, 32, 48, gdn ? 4 : 5, /*with_h0=*/gdn);
    WriteTrajectory(t);
    const Result r = Run(std::string("--kind ") + (gdn ? "gdn" : "kda"));  // window, 8 bits
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const Reference ref = RunReference(t, {});
    const double o_err = MaxRelError(ReadOut("o.npy").data, ref.o);
    const double s_err = MaxRelError(ReadOut("state.npy").data, ref.state);
    // Measured 5.3e-3 / 5.9e-4 (gdn, with h0) and 2.7e-3 / 6.0e-4 (kda): deterministic inputs
    // and code, so the margin only absorbs compiler differences.
    EXPECT_LE(o_err, 1e-2);
    EXPECT_LE(s_err, 5e-3);
    EXPECT_GT(o_err, 0.0);  // it really ran the lossy format
    std::cout << "window 8-bit max relative error: o " << o_err << ", state " << s_err << "\n";
    EXPECT_TRUE(Contains(r.out, std::string("format=window spec=[leap/") + (gdn ? "gdn" : "kda") +
                                    " dk=32 dv=48 bits=8 p=16 r=4 smoothing]"));
  }
}

TEST_F(ReplayTest, EveryFormatRuns) {
  const Trajectory t = MakeTrajectory(StateKind::kGdn, 64, 16, 32, 6, /*with_h0=*/true);
  WriteTrajectory(t);
  const Reference ref = RunReference(t, {});
  // max_err is about 2-3x the measured error (2.2e-3, 3.9e-4, 7.4e-3, 2.8e-2, 3.5e-2, 1.1e-2).
  struct Case {
    const char* flags;
    const char* spec;
    double max_err;
  };
  const Case cases[] = {
      {"--format bf16", "bf16/gdn dk=16 dv=32 bits=16 p=1 r=0", 0.01},
      {"--format fp16", "fp16/gdn dk=16 dv=32 bits=16 p=1 r=0", 2e-3},
      {"--format int8-row", "int-row/gdn dk=16 dv=32 bits=8 p=1 r=0", 0.02},
      {"--format int8-col --bits 6", "int-col/gdn dk=16 dv=32 bits=6 p=1 r=0", 0.06},
      {"--format window --bits 4", "leap/gdn dk=16 dv=32 bits=4 p=16 r=8 smoothing", 0.08},
      {"--bits 6 --p 8 --r 2 --no-smoothing", "leap/gdn dk=16 dv=32 bits=6 p=8 r=2 no-smoothing",
       0.03},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.flags);
    const Result r = Run(std::string("--kind gdn ") + c.flags);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(Contains(r.out, std::string("spec=[") + c.spec + "]"));
    EXPECT_LE(MaxRelError(ReadOut("o.npy").data, ref.o), c.max_err);
  }
}

TEST_F(ReplayTest, ZeroTokensGivesTheInitialState) {
  Trajectory t = MakeTrajectory(StateKind::kGdn, 0, 16, 16, 7, /*with_h0=*/true);
  WriteTrajectory(t);
  const Result r = Run("--kind gdn --format fp32");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(ReadOut("o.npy").shape, (std::vector<int64_t>{0, 16}));
  EXPECT_EQ(ReadOut("state.npy").data, t.h0);
}

TEST_F(ReplayTest, NanInputIsRejectedWithFileAndIndex) {
  Trajectory t = MakeTrajectory(StateKind::kGdn, kT, 32, 32, 8, /*with_h0=*/false);
  t.k[3 * 32 + 5] = std::nanf("");
  WriteTrajectory(t);
  const Result r = Run("--kind gdn");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(
      Contains(r.err, In("k.npy") + ": non-finite value nan at flat index 101 (index [3, 5])"));
  EXPECT_FALSE(fs::exists(Out()));  // nothing written, not even the folder
}

TEST_F(ReplayTest, InfiniteInitialStateIsRejected) {
  Trajectory t = MakeTrajectory(StateKind::kGdn, 10, 16, 16, 9, /*with_h0=*/true);
  t.h0[17] = -INFINITY;
  WriteTrajectory(t);
  const Result r = Run("--kind gdn");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(Contains(r.err, "h0.npy: non-finite value -inf at flat index 17 (index [1, 1])"));
}

TEST_F(ReplayTest, GdnGateShapeForKdaIsRejected) {
  const Trajectory t = MakeTrajectory(StateKind::kGdn, kT, 32, 32, 10, /*with_h0=*/false);
  WriteTrajectory(t);  // g.npy is [T]
  const Result r = Run("--kind kda");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(Contains(r.err, In("g.npy") + ": shape (200,) does not match the expected (200, 32) "
                                            "[T, dk] for --kind kda"));
  EXPECT_TRUE(Contains(r.err, "it fits --kind gdn"));
  EXPECT_FALSE(fs::exists(Out("o.npy")));
}

TEST_F(ReplayTest, MismatchedShapesAreRejected) {
  const Trajectory t = MakeTrajectory(StateKind::kGdn, kT, 32, 32, 11, /*with_h0=*/true);
  WriteTrajectory(t);
  Write("beta.npy", {kT - 1}, std::vector<float>(kT - 1, 0.5f));
  Result r = Run("--kind gdn");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(Contains(r.err, "beta.npy: shape (199,) does not match the expected (200,) [T]"));

  WriteTrajectory(t);
  Write("h0.npy", {32, 16}, std::vector<float>(32 * 16));
  r = Run("--kind gdn");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(
      Contains(r.err, "h0.npy: shape (32, 16) does not match the expected (32, 32) [dk, dv]"));

  WriteTrajectory(t);
  Write("v.npy", {kT + 1, 32}, std::vector<float>((kT + 1) * 32));
  r = Run("--kind gdn");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(Contains(r.err, "v.npy: shape (201, 32) does not match the expected (200, dv)"));
}

TEST_F(ReplayTest, DimsOutsideTheFormatAreRejected) {
  const Trajectory t = MakeTrajectory(StateKind::kGdn, 10, 24, 32, 12, /*with_h0=*/false);
  WriteTrajectory(t);
  const Result r = Run("--kind gdn");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(Contains(r.err, "dk must be a multiple of 16 in [16, 256] (got 24)"));
  EXPECT_TRUE(Contains(r.err, "q.npy"));
}

TEST_F(ReplayTest, WrongDtypeAndMissingFileAreRejected) {
  const Trajectory t = MakeTrajectory(StateKind::kGdn, 10, 16, 16, 13, /*with_h0=*/false);
  WriteTrajectory(t);
  {
    // A float64 q.npy, as np.save(x) of a float64 array writes it.
    std::string header = "{'descr': '<f8', 'fortran_order': False, 'shape': (10, 16), }";
    while ((10 + header.size() + 1) % 64 != 0) header += ' ';
    header += '\n';
    std::ofstream out(In("q.npy"), std::ios::binary);
    out.write("\x93NUMPY\x01\x00", 8);
    const char len[2] = {static_cast<char>(header.size()), 0};
    out.write(len, 2);
    out << header << std::string(10 * 16 * 8, '\0');
  }
  Result r = Run("--kind gdn");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(Contains(r.err, In("q.npy") + ": dtype '<f8' (float64) is not supported"));

  WriteTrajectory(t);
  fs::remove(In("beta.npy"));
  r = Run("--kind gdn");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(Contains(r.err, In("beta.npy") + ": no such file"));
}

TEST_F(ReplayTest, BadCommandLinesExit2WithUsage) {
  const Trajectory t = MakeTrajectory(StateKind::kGdn, 10, 16, 16, 14, /*with_h0=*/false);
  WriteTrajectory(t);
  struct Case {
    const char* args;
    const char* what;
  };
  const Case cases[] = {
      {"--kind gdn --frobnicate", "unknown flag --frobnicate"},
      {"--format fp32", "missing required flag --kind"},
      {"--kind gdn --format int4", "--format: unknown format 'int4'"},
      {"--kind gla", "--kind: unknown kind 'gla'"},
      {"--kind gdn --bits 5", "--bits must be 8, 6 or 4 (got 5)"},
      {"--kind gdn --bits eight", "--bits: 'eight' is not an integer"},
      {"--kind gdn --p 40", "p must be in [1, 32] (got 40)"},
      {"--kind gdn --r 9", "r must be in [0, 8] (got 9)"},
      {"--kind gdn --scale nan", "--scale: 'nan' is not a finite number"},
      {"--kind gdn --format fp32 --bits 8", "--bits applies to int8-row, int8-col and window"},
      {"--kind gdn --format int8-row --p 4", "--p applies to --format window only"},
      {"--kind gdn --kind kda", "--kind is given more than once"},
      {"--kind gdn --l2norm-qk=yes", "--l2norm-qk takes no value"},
      {"--kind gdn stray", "unexpected argument 'stray'"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.args);
    const Result r = Run(c.args);
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_TRUE(Contains(r.err, c.what));
    EXPECT_TRUE(Contains(r.err, "Usage: leapcache-replay"));
    EXPECT_FALSE(fs::exists(Out()));
  }
  Result r = Run("--kind gdn --in", /*add_dirs=*/false);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(Contains(r.err, "--in needs a value"));
  r = Run("--kind gdn --in '" + In() + "'", /*add_dirs=*/false);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(Contains(r.err, "missing required flag --out"));
}

TEST_F(ReplayTest, HelpPrintsUsage) {
  const Result r = Run("--help", /*add_dirs=*/false);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(Contains(r.out, "Usage: leapcache-replay --kind gdn|kda --in DIR --out DIR"));
  EXPECT_TRUE(r.err.empty());
}

TEST_F(ReplayTest, MissingInputFolderExits1) {
  const Result r = Run("--kind gdn --in '" + (dir_ / "nope").string() + "' --out '" + Out() + "'",
                       /*add_dirs=*/false);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(Contains(r.err, "nope: no such folder"));
}

}  // namespace
}  // namespace leapcache::tools

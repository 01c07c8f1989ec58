#include "gpu/reference/window.h"

#include <cmath>
#include <string>

#include "gpu/format/half.h"

namespace leapcache::reference {

namespace {

// Power of two 2^e with max|x| / 2^e in [1, 2) (1 for an all-zero vector): dividing by it is
// exact, and it keeps every stored fp16 entry normal-range relative to the largest one.
float RecordScale(const float* x, int n) {
  float m = 0.0f;
  for (int i = 0; i < n; ++i) m = std::fmax(m, std::fabs(x[i]));
  if (m == 0.0f) return 1.0f;
  int e = 0;
  std::frexp(m, &e);  // m = f * 2^e, f in [0.5, 1)
  return std::ldexp(1.0f, e - 1);
}

}  // namespace

size_t WindowState::RecordBytes(StateKind kind, int dk, int dv) {
  // k, u fp16; w_j fp32; G_j fp32 [1] or [dk].
  return 2 * static_cast<size_t>(dk) + 2 * static_cast<size_t>(dv) + 4 +
         4 * static_cast<size_t>(GateSize(kind, dk));
}

size_t WindowState::WindowHeaderBytes(StateKind kind, int dk) {
  return 4 * static_cast<size_t>(GateSize(kind, dk)) + 4;  // G and the record count
}

WindowState::WindowState(const WindowOptions& options)
    : options_(options), gate_size_(GateSize(options.spec.kind, options.spec.dk)) {}

StatusOr<std::unique_ptr<WindowState>> WindowState::Create(const WindowOptions& options,
                                                           const float* h0_kv) {
  LEAPCACHE_RETURN_IF_ERROR(ValidateSpec(options.spec));
  std::unique_ptr<WindowState> w(new WindowState(options));
  std::vector<float> zero;
  if (h0_kv == nullptr) {
    zero.assign(static_cast<size_t>(options.spec.dk) * options.spec.dv, 0.0f);
    h0_kv = zero.data();
  }
  LEAPCACHE_ASSIGN_OR_RETURN(std::vector<uint8_t> blob, Encode(options.spec, h0_kv, Orientation::kKV));
  LEAPCACHE_RETURN_IF_ERROR(w->ResetBase(std::move(blob)));
  return w;
}

Status WindowState::ResetBase(std::vector<uint8_t> blob) {
  LEAPCACHE_ASSIGN_OR_RETURN(UnpackedBlob base, Unpack(blob));
  blob_ = std::move(blob);
  base_ = std::move(base);
  G_.assign(gate_size_, 0.0f);
  records_.clear();
  return OkStatus();
}

WindowState::Record WindowState::MakeRecord(const float* k, const float* u,
                                            const std::vector<float>& G) const {
  const int dk = options_.spec.dk, dv = options_.spec.dv;
  Record r;
  r.gcum = G;
  r.k.assign(k, k + dk);
  r.u.assign(u, u + dv);
  if (options_.records == RecordPrecision::kFp32) return r;
  const float sk = RecordScale(k, dk), su = RecordScale(u, dv);
  for (int a = 0; a < dk; ++a) r.k[a] = RoundToHalf(k[a] / sk);
  for (int j = 0; j < dv; ++j) r.u[j] = RoundToHalf(u[j] / su);
  r.scale = sk * su;
  return r;
}

void WindowState::Readout(const std::vector<float>& G, const std::vector<Record>& records,
                          const float* x, float* out) const {
  const int dk = options_.spec.dk, dv = options_.spec.dv;
  const bool gdn = options_.spec.kind == StateKind::kGdn;
  std::vector<float> y(dk);
  for (int a = 0; a < dk; ++a) y[a] = std::exp(G[gdn ? 0 : a]) * x[a];
  BaseReadout(base_, y.data(), out);
  for (const Record& r : records) {
    float d = 0.0f;
    if (gdn) {
      for (int a = 0; a < dk; ++a) d += r.k[a] * x[a];
      d *= std::exp(G[0] - r.gcum[0]);
    } else {
      for (int a = 0; a < dk; ++a) d += r.k[a] * x[a] * std::exp(G[a] - r.gcum[a]);
    }
    const float coef = r.scale * d;
    for (int j = 0; j < dv; ++j) out[j] += coef * r.u[j];
  }
}

void WindowState::Reconstruct(const std::vector<float>& G, const std::vector<Record>& records,
                              float* S) const {
  const int dk = options_.spec.dk, dv = options_.spec.dv;
  const bool gdn = options_.spec.kind == StateKind::kGdn;
  Dequantize(base_, S);
  for (int a = 0; a < dk; ++a) {
    const float decay = std::exp(G[gdn ? 0 : a]);
    for (int j = 0; j < dv; ++j) S[a * dv + j] *= decay;
  }
  for (const Record& r : records) {
    for (int a = 0; a < dk; ++a) {
      const float ka = r.scale * std::exp(G[gdn ? 0 : a] - r.gcum[gdn ? 0 : a]) * r.k[a];
      for (int j = 0; j < dv; ++j) S[a * dv + j] += ka * r.u[j];
    }
  }
}

Status WindowState::Step(const StepInput& in, float* o) {
  const BlobSpec& s = options_.spec;
  LEAPCACHE_RETURN_IF_ERROR(ValidateStepInput(s.kind, s.dk, s.dv, in));
  std::vector<float> q(s.dk), k(s.dk), u(s.dv), out(s.dv);
  PrepareQK(s.dk, options_.step, in.q, in.k, q.data(), k.data());

  std::vector<float> G = G_;
  for (int i = 0; i < gate_size_; ++i) G[i] += std::fmax(in.g[i], kMinLogGate);
  Readout(G, records_, k.data(), u.data());
  for (int j = 0; j < s.dv; ++j) u[j] = in.beta * (in.v[j] - u[j]);
  for (int j = 0; j < s.dv; ++j) {
    if (!std::isfinite(u[j])) return OutOfRangeError("the update u overflowed fp32");
  }
  std::vector<Record> records = records_;
  records.push_back(MakeRecord(k.data(), u.data(), G));
  Readout(G, records, q.data(), out.data());

  if (static_cast<int>(records.size()) == s.p) {  // boundary refit
    std::vector<float> S(static_cast<size_t>(s.dk) * s.dv);
    Reconstruct(G, records, S.data());
    LEAPCACHE_ASSIGN_OR_RETURN(std::vector<uint8_t> blob, Encode(s, S.data(), Orientation::kKV));
    LEAPCACHE_RETURN_IF_ERROR(ResetBase(std::move(blob)));
  } else {
    G_ = std::move(G);
    records_ = std::move(records);
  }
  std::copy(out.begin(), out.end(), o);
  return OkStatus();
}

StatusOr<std::unique_ptr<WindowState>> WindowState::FromSnapshot(const WindowOptions& options,
                                                                 const WindowSnapshot& snap) {
  LEAPCACHE_RETURN_IF_ERROR(ValidateSpec(options.spec));
  std::unique_ptr<WindowState> w(new WindowState(options));
  LEAPCACHE_ASSIGN_OR_RETURN(const BlobSpec spec, ParseBlob(snap.blob));
  const BlobSpec& want = options.spec;
  if (spec.kind != want.kind || spec.dk != want.dk || spec.dv != want.dv ||
      spec.codec != want.codec || spec.bits != want.bits || spec.r != want.r ||
      spec.smoothing != want.smoothing) {
    return InvalidArgumentError("snapshot blob is " + spec.ToString() + ", window wants " +
                                want.ToString());
  }
  const size_t n = snap.k.size();
  if (n >= static_cast<size_t>(want.p) || snap.u.size() != n || snap.scale.size() != n ||
      snap.gcum.size() != n || snap.G.size() != static_cast<size_t>(w->gate_size_)) {
    return InvalidArgumentError("snapshot record arrays disagree with each other or with p");
  }
  LEAPCACHE_RETURN_IF_ERROR(w->ResetBase(snap.blob));
  w->G_ = snap.G;
  for (size_t j = 0; j < n; ++j) {
    if (snap.k[j].size() != static_cast<size_t>(want.dk) ||
        snap.u[j].size() != static_cast<size_t>(want.dv) ||
        snap.gcum[j].size() != static_cast<size_t>(w->gate_size_)) {
      return InvalidArgumentError("snapshot record " + std::to_string(j) + " has a wrong shape");
    }
    w->records_.push_back(Record{snap.k[j], snap.u[j], snap.scale[j], snap.gcum[j]});
  }
  return w;
}

WindowSnapshot WindowState::Snapshot() const {
  WindowSnapshot s;
  s.blob = blob_;
  s.G = G_;
  for (const Record& r : records_) {
    s.k.push_back(r.k);
    s.u.push_back(r.u);
    s.scale.push_back(r.scale);
    s.gcum.push_back(r.gcum);
  }
  return s;
}

void WindowState::State(float* S_kv) const { Reconstruct(G_, records_, S_kv); }

}  // namespace leapcache::reference

#include "tests/integration/service/checkpoint_data.h"

#include <cmath>
#include <cstring>
#include <random>

#include "gpu/format/half.h"
#include "gpu/reference/codec.h"

namespace leapcache::testing {

client::NamespaceSpec SmallNamespace(const std::string& tenant, int layers, int heads, int d,
                                     client::StorageFormat format) {
  client::NamespaceSpec s;
  s.tenant = tenant;
  s.model = {layers, heads, d, d, client::StateKind::kGdn};
  s.format = format;
  return s;
}

BlobSpec ToBlobSpec(const client::NamespaceSpec& spec) {
  BlobSpec b;
  b.kind = spec.model.kind == client::StateKind::kGdn ? StateKind::kGdn : StateKind::kKda;
  b.dk = spec.model.dk;
  b.dv = spec.model.dv;
  b.codec = static_cast<Codec>(static_cast<int>(spec.format.codec));
  b.bits = spec.format.bits;
  b.p = spec.format.p;
  b.r = spec.format.r;
  b.smoothing = spec.format.smoothing;
  return b;
}

std::vector<float> MakeStates(const client::NamespaceSpec& spec, uint64_t seed) {
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + 1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(spec.model.linear_layers) * spec.model.total_heads *
                       spec.model.dk * spec.model.dv);
  for (float& x : v) x = normal(rng);
  return v;
}

std::vector<float> SliceHeads(const client::NamespaceSpec& spec, const std::vector<float>& states,
                              int h0, int h1) {
  const size_t per = static_cast<size_t>(spec.model.dk) * spec.model.dv;
  std::vector<float> out;
  for (int l = 0; l < spec.model.linear_layers; ++l) {
    for (int h = h0; h < h1; ++h) {
      const float* s = states.data() + (static_cast<size_t>(l) * spec.model.total_heads + h) * per;
      out.insert(out.end(), s, s + per);
    }
  }
  return out;
}

std::vector<float> ToLayout(const client::NamespaceSpec& spec, const std::vector<float>& kv,
                            client::Layout layout) {
  if (layout == client::Layout::kKV) return kv;
  const int dk = spec.model.dk, dv = spec.model.dv;
  const size_t per = static_cast<size_t>(dk) * dv;
  std::vector<float> out(kv.size());
  for (size_t s = 0; s < kv.size() / per; ++s) {
    for (int a = 0; a < dk; ++a) {
      for (int j = 0; j < dv; ++j) out[s * per + j * dk + a] = kv[s * per + a * dv + j];
    }
  }
  return out;
}

std::vector<float> FromLayout(const client::NamespaceSpec& spec, const std::vector<float>& v,
                              client::Layout layout) {
  if (layout == client::Layout::kKV) return v;
  const int dk = spec.model.dk, dv = spec.model.dv;
  const size_t per = static_cast<size_t>(dk) * dv;
  std::vector<float> out(v.size());
  for (size_t s = 0; s < v.size() / per; ++s) {
    for (int a = 0; a < dk; ++a) {
      for (int j = 0; j < dv; ++j) out[s * per + a * dv + j] = v[s * per + j * dk + a];
    }
  }
  return out;
}

std::vector<uint8_t> EncodeBlobs(const client::NamespaceSpec& spec, const std::vector<float>& kv) {
  const BlobSpec b = ToBlobSpec(spec);
  const size_t per = static_cast<size_t>(b.dk) * b.dv;
  std::vector<uint8_t> out;
  for (size_t s = 0; s < kv.size() / per; ++s) {
    StatusOr<std::vector<uint8_t>> blob =
        reference::Encode(b, kv.data() + s * per, Orientation::kKV);
    if (!blob.ok()) return {};
    out.insert(out.end(), blob->begin(), blob->end());
  }
  return out;
}

std::vector<float> DecodeBlobs(const client::NamespaceSpec& spec, std::span<const uint8_t> blobs,
                               client::Layout layout) {
  const BlobSpec b = ToBlobSpec(spec);
  const size_t blob_bytes = ComputeLayout(b).blob_bytes();
  const size_t per = static_cast<size_t>(b.dk) * b.dv;
  std::vector<float> out(blobs.size() / blob_bytes * per);
  for (size_t s = 0; s < blobs.size() / blob_bytes; ++s) {
    if (!reference::Decode(blobs.subspan(s * blob_bytes, blob_bytes), out.data() + s * per,
                           layout == client::Layout::kKV ? Orientation::kKV : Orientation::kVK)
             .ok()) {
      return {};
    }
  }
  return out;
}

std::span<const uint8_t> AsBytes(const std::vector<float>& v) {
  return {reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(float)};
}

std::vector<float> FloatsOf(std::span<const uint8_t> bytes) {
  std::vector<float> v(bytes.size() / 4);
  if (!v.empty()) std::memcpy(v.data(), bytes.data(), v.size() * 4);
  return v;
}

std::vector<uint8_t> ToBf16Bytes(const std::vector<float>& v) {
  std::vector<uint8_t> out(v.size() * 2);
  for (size_t i = 0; i < v.size(); ++i) StoreU16(out.data() + 2 * i, FloatToBf16(v[i]));
  return out;
}

std::vector<float> FromBf16Bytes(std::span<const uint8_t> bytes) {
  std::vector<float> out(bytes.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) out[i] = Bf16ToFloat(LoadU16(bytes.data() + 2 * i));
  return out;
}

double RelativeError(const std::vector<float>& reference, const std::vector<float>& value) {
  if (reference.size() != value.size()) return INFINITY;
  double num = 0, den = 0;
  for (size_t i = 0; i < reference.size(); ++i) {
    const double d = static_cast<double>(reference[i]) - value[i];
    num += d * d;
    den += static_cast<double>(reference[i]) * reference[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

client::BlockHash TestHash(uint64_t i, uint8_t salt) {
  client::BlockHash h{};
  for (int b = 0; b < 8; ++b) h[b] = static_cast<uint8_t>(i >> (8 * b));
  h[16] = 0x5A;
  h[31] = salt;
  return h;
}

}  // namespace leapcache::testing

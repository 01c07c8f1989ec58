#include "gpu/reference/codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "gpu/format/half.h"
#include "gpu/reference/compensators.h"
#include "gpu/reference/packing.h"

namespace leapcache::reference {

namespace {

// Round to nearest, ties to even, as the kernels' __float2int_rn.
int RoundCode(float x, int q) {
  const float r = std::nearbyint(x);  // default rounding mode: to nearest even
  return static_cast<int>(std::clamp(r, static_cast<float>(-q), static_cast<float>(q)));
}

void StoreFloats(uint8_t* dst, const std::vector<float>& v) {
  std::memcpy(dst, v.data(), v.size() * sizeof(float));
}

void LoadFloats(const uint8_t* src, std::vector<float>& v, size_t n) {
  v.resize(n);
  std::memcpy(v.data(), src, n * sizeof(float));
}

// The integer codecs: fills codes [dv][dk] and the scales of spec from S [dk][dv].
void QuantizeInteger(const BlobSpec& s, const float* S, const float* E, std::vector<int8_t>& codes,
                     std::vector<float>& row_scale, std::vector<float>& col_scale) {
  const int dk = s.dk, dv = s.dv, q = MaxCode(s.bits);
  codes.assign(static_cast<size_t>(dk) * dv, 0);
  if (s.codec == Codec::kIntRow) {
    row_scale.assign(dk, 0.0f);
    for (int a = 0; a < dk; ++a) {
      float m = 0.0f;
      for (int j = 0; j < dv; ++j) m = std::max(m, std::fabs(S[a * dv + j]));
      row_scale[a] = std::max(m, kScaleFloor);
      for (int j = 0; j < dv; ++j) {
        codes[j * dk + a] = static_cast<int8_t>(RoundCode(q * (S[a * dv + j] / row_scale[a]), q));
      }
    }
    return;
  }
  // kIntCol and kLeap: E is S (int-col) or the residual (leap).
  row_scale.assign(dk, 1.0f);
  if (s.codec == Codec::kLeap && s.smoothing) {
    for (int a = 0; a < dk; ++a) {
      float sum = 0.0f;
      for (int j = 0; j < dv; ++j) sum += std::fabs(E[a * dv + j]);
      row_scale[a] = std::max(std::sqrt(sum / static_cast<float>(dv)), kScaleFloor);
    }
  }
  // t = E / s_k, computed once and reused for the column maximum and the codes.
  std::vector<float> t(static_cast<size_t>(dk) * dv);
  for (int a = 0; a < dk; ++a) {
    for (int j = 0; j < dv; ++j) t[a * dv + j] = E[a * dv + j] / row_scale[a];
  }
  col_scale.assign(dv, 0.0f);
  for (int j = 0; j < dv; ++j) {
    float m = 0.0f;
    for (int a = 0; a < dk; ++a) m = std::max(m, std::fabs(t[a * dv + j]));
    col_scale[j] = std::max(m, kScaleFloor);
    for (int a = 0; a < dk; ++a) {
      codes[j * dk + a] = static_cast<int8_t>(RoundCode(q * (t[a * dv + j] / col_scale[j]), q));
    }
  }
}

}  // namespace

Status ValidateState(const float* state, size_t n) {
  if (state == nullptr) return InvalidArgumentError("state is null");
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(state[i])) {
      return InvalidArgumentError("state element " + std::to_string(i) + " is not finite");
    }
    if (std::fabs(state[i]) > kMaxStateMagnitude) {
      return OutOfRangeError("state element " + std::to_string(i) +
                             " exceeds the codec range of 2^64 in magnitude");
    }
  }
  return OkStatus();
}

StatusOr<std::vector<uint8_t>> Encode(const BlobSpec& s, const float* state, Orientation layout) {
  LEAPCACHE_RETURN_IF_ERROR(ValidateSpec(s));
  if (layout != Orientation::kKV && layout != Orientation::kVK) {
    return InvalidArgumentError("layout must be kv or vk");
  }
  const int dk = s.dk, dv = s.dv;
  const size_t n = static_cast<size_t>(dk) * dv;
  LEAPCACHE_RETURN_IF_ERROR(ValidateState(state, n));
  std::vector<float> S(n);  // [dk][dv]
  for (int a = 0; a < dk; ++a) {
    for (int j = 0; j < dv; ++j) {
      S[a * dv + j] = layout == Orientation::kKV ? state[a * dv + j] : state[j * dk + a];
    }
  }
  const PayloadLayout l = ComputeLayout(s);
  std::vector<uint8_t> blob(l.blob_bytes(), 0);
  uint8_t* payload = blob.data() + kHeaderBytes;

  switch (s.codec) {
    case Codec::kFp32:
    case Codec::kBf16:
    case Codec::kFp16:
      for (int j = 0; j < dv; ++j) {
        for (int a = 0; a < dk; ++a) {
          const float x = S[a * dv + j];
          const size_t i = static_cast<size_t>(j) * dk + a;
          if (s.codec == Codec::kFp32) {
            std::memcpy(payload + 4 * i, &x, 4);
          } else {
            // fp16 saturates at +-65504 rather than overflowing to infinity.
            const uint16_t h = s.codec == Codec::kBf16
                                   ? FloatToBf16(x)
                                   : FloatToHalf(std::clamp(x, -65504.0f, 65504.0f));
            StoreU16(payload + 2 * i, h);
          }
        }
      }
      break;
    case Codec::kIntRow:
    case Codec::kIntCol:
    case Codec::kLeap: {
      std::vector<float> E = S;
      if (s.codec == Codec::kLeap && s.r > 0) {
        std::vector<uint16_t> kh(static_cast<size_t>(s.r) * dk), vh(static_cast<size_t>(s.r) * dv);
        std::vector<float> kf(kh.size()), vf(vh.size());
        FitCompensators(S.data(), dk, dv, s.r, kh.data(), vh.data(), kf.data(), vf.data());
        for (int a = 0; a < dk; ++a) {
          for (int j = 0; j < dv; ++j) {
            float c = 0.0f;
            for (int h = 0; h < s.r; ++h) c += kf[h * dk + a] * vf[h * dv + j];
            E[a * dv + j] = S[a * dv + j] - c;
          }
        }
        uint8_t* comp = payload + l.comp_offset;  // rows [K~_h (dk) | U~_h (dv)]
        for (int h = 0; h < s.r; ++h) {
          uint8_t* row = comp + 2 * static_cast<size_t>(h) * (dk + dv);
          for (int a = 0; a < dk; ++a) StoreU16(row + 2 * a, kh[h * dk + a]);
          for (int j = 0; j < dv; ++j) StoreU16(row + 2 * (dk + j), vh[h * dv + j]);
        }
      }
      std::vector<int8_t> codes;
      std::vector<float> row_scale, col_scale;
      QuantizeInteger(s, S.data(), E.data(), codes, row_scale, col_scale);
      for (int j = 0; j < dv; ++j) {
        PackCodes(codes.data() + static_cast<size_t>(j) * dk, dk, s.bits,
                  payload + l.codes_offset + static_cast<size_t>(j) * dk * s.bits / 8);
      }
      if (HasRowScales(s)) StoreFloats(payload + l.row_scale_offset, row_scale);
      if (HasColScales(s)) StoreFloats(payload + l.col_scale_offset, col_scale);
      break;
    }
  }
  SealBlob(s, blob);
  return blob;
}

StatusOr<UnpackedBlob> Unpack(std::span<const uint8_t> blob) {
  LEAPCACHE_ASSIGN_OR_RETURN(const BlobSpec s, ParseBlob(blob));
  const PayloadLayout l = ComputeLayout(s);
  const uint8_t* payload = blob.data() + kHeaderBytes;
  // Stored scales and factors come from a checksummed blob, but a hand-made blob with a valid
  // checksum could still carry infinities or NaNs: reject them rather than decode garbage.
  LEAPCACHE_RETURN_IF_ERROR(CheckStoredValues(s, blob.subspan(kHeaderBytes, l.payload_bytes)));
  const int dk = s.dk, dv = s.dv;
  const size_t n = static_cast<size_t>(dk) * dv;
  UnpackedBlob u;
  u.spec = s;
  if (!IsIntegerCodec(s.codec)) {
    u.dense.resize(n);
    for (size_t i = 0; i < n; ++i) {
      if (s.codec == Codec::kFp32) {
        std::memcpy(&u.dense[i], payload + 4 * i, 4);
      } else {
        const uint16_t h = LoadU16(payload + 2 * i);
        u.dense[i] = s.codec == Codec::kBf16 ? Bf16ToFloat(h) : HalfToFloat(h);
      }
    }
    return u;
  }
  u.codes.resize(n);
  for (int j = 0; j < dv; ++j) {
    UnpackCodes(payload + l.codes_offset + static_cast<size_t>(j) * dk * s.bits / 8, dk, s.bits,
                u.codes.data() + static_cast<size_t>(j) * dk);
  }
  const float q = static_cast<float>(MaxCode(s.bits));
  if (HasRowScales(s)) {
    LoadFloats(payload + l.row_scale_offset, u.row_scale, dk);
  } else {
    u.row_scale.assign(dk, 1.0f);
  }
  u.col_factor.assign(dv, 1.0f / q);
  if (HasColScales(s)) {
    std::vector<float> col_scale;
    LoadFloats(payload + l.col_scale_offset, col_scale, dv);
    for (int j = 0; j < dv; ++j) {
      // May underflow to 0 for an all-zero column (scale at the 2^-149 floor): its codes are 0.
      u.col_factor[j] = col_scale[j] / q;
    }
  }
  const uint8_t* comp = payload + l.comp_offset;
  u.kfac.resize(static_cast<size_t>(s.r) * dk);
  u.vfac.resize(static_cast<size_t>(s.r) * dv);
  for (int h = 0; h < s.r; ++h) {
    const uint8_t* row = comp + 2 * static_cast<size_t>(h) * (dk + dv);
    for (int a = 0; a < dk; ++a) u.kfac[h * dk + a] = HalfToFloat(LoadU16(row + 2 * a));
    for (int j = 0; j < dv; ++j) u.vfac[h * dv + j] = HalfToFloat(LoadU16(row + 2 * (dk + j)));
  }
  return u;
}

void BaseReadout(const UnpackedBlob& b, const float* y, float* out) {
  const int dk = b.spec.dk, dv = b.spec.dv;
  if (!IsIntegerCodec(b.spec.codec)) {
    for (int j = 0; j < dv; ++j) {
      float acc = 0.0f;
      for (int a = 0; a < dk; ++a) acc += b.dense[j * dk + a] * y[a];
      out[j] = acc;
    }
    return;
  }
  std::vector<float> ys(dk);
  for (int a = 0; a < dk; ++a) ys[a] = b.row_scale[a] * y[a];
  for (int j = 0; j < dv; ++j) {
    float acc = 0.0f;
    const int8_t* c = b.codes.data() + static_cast<size_t>(j) * dk;
    for (int a = 0; a < dk; ++a) acc += static_cast<float>(c[a]) * ys[a];
    out[j] = acc * b.col_factor[j];
  }
  for (int h = 0; h < b.spec.r; ++h) {
    float kd = 0.0f;
    for (int a = 0; a < dk; ++a) kd += b.kfac[h * dk + a] * y[a];
    for (int j = 0; j < dv; ++j) out[j] += b.vfac[h * dv + j] * kd;
  }
}

void Dequantize(const UnpackedBlob& b, float* S) {
  const int dk = b.spec.dk, dv = b.spec.dv;
  for (int a = 0; a < dk; ++a) {
    for (int j = 0; j < dv; ++j) {
      const size_t i = static_cast<size_t>(j) * dk + a;
      if (!IsIntegerCodec(b.spec.codec)) {
        S[a * dv + j] = b.dense[i];
        continue;
      }
      float x = static_cast<float>(b.codes[i]) * b.row_scale[a] * b.col_factor[j];
      for (int h = 0; h < b.spec.r; ++h) x += b.kfac[h * dk + a] * b.vfac[h * dv + j];
      S[a * dv + j] = x;
    }
  }
}

Status Decode(std::span<const uint8_t> blob, float* out, Orientation layout) {
  if (layout != Orientation::kKV && layout != Orientation::kVK) {
    return InvalidArgumentError("layout must be kv or vk");
  }
  LEAPCACHE_ASSIGN_OR_RETURN(const UnpackedBlob b, Unpack(blob));
  const int dk = b.spec.dk, dv = b.spec.dv;
  std::vector<float> S(static_cast<size_t>(dk) * dv);
  Dequantize(b, S.data());
  for (int a = 0; a < dk; ++a) {
    for (int j = 0; j < dv; ++j) {
      (layout == Orientation::kKV ? out[a * dv + j] : out[j * dk + a]) = S[a * dv + j];
    }
  }
  return OkStatus();
}

}  // namespace leapcache::reference

#include "numerics/mx.h"

#include <algorithm>

namespace a4w4::numerics {

int scale_exponent(float amax, a4w4_scale_mode mode) {
  int exponent = 0;
  const float fraction = std::frexp(amax, &exponent);  // amax = fraction * 2^exponent, [0.5, 1)
  const float m = fraction * 2.0f;                     // exact: amax = m * 2^(exponent - 1)
  const int e = exponent - 1 - 2;                      // E - emax_elem
  switch (mode) {
    case A4W4_SCALE_FLOOR:
      return e;
    case A4W4_SCALE_RCEIL:
      return e + (m > 1.5f ? 1 : 0);
    case A4W4_SCALE_EVEN:
      return e + (m >= 1.75f ? 1 : 0);
  }
  return e;
}

uint8_t quantize_block(std::span<const float, kBlockSize> values, a4w4_scale_mode mode,
                       uint8_t* packed_out) {
  float amax = 0.0f;
  bool non_finite = false;
  for (float v : values) {
    non_finite |= !std::isfinite(v);
    amax = std::max(amax, std::fabs(v));
  }
  if (non_finite) {
    std::fill_n(packed_out, kBlockSize / 2, uint8_t{0});
    return kScaleNaN;
  }
  int e = -kScaleBias;  // the all-zero block's scale byte is 0
  if (amax != 0.0f) e = std::clamp(scale_exponent(amax, mode), -kScaleBias, kScaleBias);
  const double inverse_scale = std::ldexp(1.0, -e);  // exact, and v * inverse_scale is exact
  for (int i = 0; i < kBlockSize; i += 2) {
    packed_out[i / 2] = pack_e2m1(float_to_e2m1(values[i] * inverse_scale),
                                  float_to_e2m1(values[i + 1] * inverse_scale));
  }
  return static_cast<uint8_t>(e + kScaleBias);
}

}  // namespace a4w4::numerics

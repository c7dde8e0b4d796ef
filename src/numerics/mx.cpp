#include "numerics/mx.h"

#include <algorithm>

namespace a4w4::numerics {

uint8_t quantize_block(std::span<const float, kBlockSize> values, a4w4_scale_mode mode,
                       uint8_t* packed_out) {
  // For non-negative floats the bit patterns order like the values, and NaN/Inf patterns are the
  // largest, so one max over |v| bits finds amax and flags non-finite blocks at once.
  uint32_t amax_bits = 0;
  for (float v : values) amax_bits = std::max(amax_bits, float_bits(v) & 0x7FFFFFFFu);
  const uint8_t scale = block_scale_byte(amax_bits, mode);
  for (int i = 0; i < kBlockSize; i += 2)
    packed_out[i / 2] = pack_e2m1(encode_element(values[i], scale), encode_element(values[i + 1], scale));
  return scale;
}

}  // namespace a4w4::numerics

#include "test_support.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <stdexcept>

namespace a4w4_test {

// ---- Formats ---------------------------------------------------------------------------------

double e8m0_value(uint8_t byte) {
  if (byte == 0xFF) return std::numeric_limits<double>::quiet_NaN();
  return std::ldexp(1.0, static_cast<int>(byte) - 127);
}

double fp16_to_double(uint16_t bits) {
  const double sign = (bits & 0x8000u) ? -1.0 : 1.0;
  const int exponent_field = (bits >> 10) & 0x1F;
  const int fraction = bits & 0x3FF;
  if (exponent_field == 0x1F)
    return fraction ? std::numeric_limits<double>::quiet_NaN()
                    : sign * std::numeric_limits<double>::infinity();
  if (exponent_field == 0) return sign * std::ldexp(static_cast<double>(fraction), -24);
  return sign * std::ldexp(static_cast<double>(1024 + fraction), exponent_field - 25);
}

double bf16_to_double(uint16_t bits) {
  const double sign = (bits & 0x8000u) ? -1.0 : 1.0;
  const int exponent_field = (bits >> 7) & 0xFF;
  const int fraction = bits & 0x7F;
  if (exponent_field == 0xFF)
    return fraction ? std::numeric_limits<double>::quiet_NaN()
                    : sign * std::numeric_limits<double>::infinity();
  if (exponent_field == 0) return sign * std::ldexp(static_cast<double>(fraction), -133);
  return sign * std::ldexp(static_cast<double>(128 + fraction), exponent_field - 134);
}

double f32_bits_to_double(uint32_t bits) {
  const double sign = (bits & 0x80000000u) ? -1.0 : 1.0;
  const int exponent_field = static_cast<int>((bits >> 23) & 0xFF);
  const uint32_t fraction = bits & 0x7FFFFFu;
  if (exponent_field == 0xFF)
    return fraction ? std::numeric_limits<double>::quiet_NaN()
                    : sign * std::numeric_limits<double>::infinity();
  if (exponent_field == 0) return sign * std::ldexp(static_cast<double>(fraction), -149);
  return sign * std::ldexp(static_cast<double>((1u << 23) + fraction), exponent_field - 150);
}

FloatFormat format_of(a4w4_dtype dtype) {
  switch (dtype) {
    case A4W4_DTYPE_BF16:
      return {8, -126, std::ldexp(255.0, 120)};  // 0x1.FEp127
    case A4W4_DTYPE_F16:
      return {11, -14, 65504.0};
    case A4W4_DTYPE_F32:
      return {24, -126, std::ldexp(16777215.0, 104)};  // FLT_MAX
    default:
      throw std::logic_error("format_of: not a float dtype");
  }
}

double round_to_format(const FloatFormat& format, double hi, double lo) {
  if (std::isnan(hi) || std::isinf(hi)) return hi;
  if (hi == 0.0) {
    if (lo == 0.0) return hi;
    hi = lo;
    lo = 0.0;
  }
  const double magnitude = std::fabs(hi);
  // Direction of the tail relative to the magnitude: > 0 means the exact value is farther from 0.
  const double tail = std::signbit(hi) ? -lo : lo;
  int frexp_exponent = 0;
  std::frexp(magnitude, &frexp_exponent);  // magnitude in [2^(x-1), 2^x)
  const int exponent = std::max(frexp_exponent - 1, format.min_exponent);
  const int quantum = exponent - (format.precision - 1);
  const double scaled = std::ldexp(magnitude, -quantum);  // exact
  const double below = std::floor(scaled);
  const double fraction = scaled - below;  // exact
  bool up = false;
  if (fraction > 0.5) {
    up = true;
  } else if (fraction == 0.5) {
    if (tail != 0.0)
      up = tail > 0.0;
    else
      up = std::fmod(below, 2.0) != 0.0;  // tie: to the even significand
  }
  double result = std::ldexp(up ? below + 1.0 : below, quantum);
  if (result > format.max_finite) result = std::numeric_limits<double>::infinity();
  return std::copysign(result, hi);
}

double round_to_dtype(a4w4_dtype dtype, double hi, double lo) {
  return round_to_format(format_of(dtype), hi, lo);
}

uint16_t fp16_bits_of(double exact) {
  const uint16_t sign = std::signbit(exact) ? 0x8000u : 0u;
  if (std::isnan(exact)) return static_cast<uint16_t>(0x7E00u | sign);
  const double a = std::fabs(exact);
  if (std::isinf(a)) return static_cast<uint16_t>(0x7C00u | sign);
  if (a == 0.0) return sign;
  if (a < std::ldexp(1.0, -14)) {
    const double m = std::ldexp(a, 24);
    if (m != std::floor(m)) throw std::logic_error("fp16_bits_of: value not representable");
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(m));
  }
  int e = 0;
  std::frexp(a, &e);
  const int exponent = e - 1;
  const double m = std::ldexp(a, 10 - exponent) - 1024.0;
  if (exponent > 15 || m != std::floor(m))
    throw std::logic_error("fp16_bits_of: value not representable");
  return static_cast<uint16_t>(sign | ((exponent + 15) << 10) | static_cast<uint16_t>(m));
}

uint16_t bf16_bits_of(double exact) {
  if (std::isnan(exact)) return std::signbit(exact) ? 0xFFC0u : 0x7FC0u;
  const float f = static_cast<float>(exact);
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  if (static_cast<double>(f) != exact || (bits & 0xFFFFu) != 0)
    throw std::logic_error("bf16_bits_of: value not representable");
  return static_cast<uint16_t>(bits >> 16);
}

int dtype_bits(a4w4_dtype dtype) {
  const int bits = a4w4_dtype_bits(dtype);  // 0 for a value that is no dtype
  if (bits == 0) throw std::logic_error("dtype_bits: invalid dtype");
  return bits;
}

std::string hex_byte(uint8_t value) {
  static const char* digits = "0123456789ABCDEF";
  return std::string("0x") + digits[value >> 4] + digits[value & 0xF];
}

// ---- HostTensor ------------------------------------------------------------------------------

HostTensor HostTensor::matrix(a4w4_dtype dtype, int64_t rows, int64_t cols, int64_t row_stride,
                              uint8_t fill) {
  HostTensor t;
  t.dtype_ = dtype;
  t.rows_ = rows;
  t.cols_ = cols;
  t.stride_ = row_stride > 0 ? row_stride : cols;
  if (t.stride_ < cols) throw std::logic_error("HostTensor: row stride below row length");
  if (dtype == A4W4_DTYPE_E2M1 && (t.stride_ % 2 != 0 || cols % 2 != 0))
    throw std::logic_error("HostTensor: odd E2M1 row");
  t.bytes_.assign(static_cast<size_t>(rows * t.stride_ * dtype_bits(dtype) / 8), fill);
  return t;
}

HostTensor HostTensor::vector(a4w4_dtype dtype, int64_t n, int64_t stride, uint8_t fill) {
  HostTensor t = matrix(dtype, n, 1, stride, fill);
  t.rank1_ = true;
  return t;
}

a4w4_tensor HostTensor::desc(a4w4_device device) const {
  void* data = const_cast<uint8_t*>(bytes_.data());
  if (rank1_) {
    a4w4_tensor t = a4w4_tensor_1d(data, dtype_, rows_, device);
    t.strides[0] = stride_;
    return t;
  }
  return a4w4_tensor_2d(data, dtype_, rows_, cols_, stride_, device);
}

bool HostTensor::byte_in_view(size_t offset) const {
  const int64_t bits = dtype_bits(dtype_);
  const int64_t element = static_cast<int64_t>(offset) * 8 / bits;  // first element in the byte
  return element / stride_ < rows_ && element % stride_ < cols_;
}

double HostTensor::get(int64_t r, int64_t c) const {
  const int64_t i = index(r, c);
  switch (dtype_) {
    case A4W4_DTYPE_F32: {
      uint32_t bits;
      std::memcpy(&bits, bytes_.data() + i * 4, 4);
      return f32_bits_to_double(bits);
    }
    case A4W4_DTYPE_BF16:
    case A4W4_DTYPE_F16: {
      uint16_t bits;
      std::memcpy(&bits, bytes_.data() + i * 2, 2);
      return dtype_ == A4W4_DTYPE_BF16 ? bf16_to_double(bits) : fp16_to_double(bits);
    }
    default:
      throw std::logic_error("HostTensor::get: not a float dtype");
  }
}

void HostTensor::set_bits(int64_t r, int64_t c, uint32_t bits) {
  const int64_t i = index(r, c);
  if (dtype_ == A4W4_DTYPE_F32) {
    std::memcpy(bytes_.data() + i * 4, &bits, 4);
  } else {
    const auto half = static_cast<uint16_t>(bits);
    std::memcpy(bytes_.data() + i * 2, &half, 2);
  }
}

void HostTensor::set(int64_t r, int64_t c, double exact) {
  switch (dtype_) {
    case A4W4_DTYPE_F32: {
      const float f = static_cast<float>(exact);
      if (!std::isnan(exact) && static_cast<double>(f) != exact)
        throw std::logic_error("HostTensor::set: value not representable in f32");
      set_bits(r, c, std::bit_cast<uint32_t>(f));
      break;
    }
    case A4W4_DTYPE_BF16:
      set_bits(r, c, bf16_bits_of(exact));
      break;
    case A4W4_DTYPE_F16:
      set_bits(r, c, fp16_bits_of(exact));
      break;
    default:
      throw std::logic_error("HostTensor::set: not a float dtype");
  }
}

uint8_t HostTensor::code(int64_t r, int64_t c) const {
  const int64_t i = index(r, c);
  const uint8_t b = bytes_[static_cast<size_t>(i / 2)];
  return (i % 2 == 0) ? static_cast<uint8_t>(b & 0xF) : static_cast<uint8_t>(b >> 4);
}

void HostTensor::set_code(int64_t r, int64_t c, uint8_t code) {
  const int64_t i = index(r, c);
  uint8_t& b = bytes_[static_cast<size_t>(i / 2)];
  if (i % 2 == 0)
    b = static_cast<uint8_t>((b & 0xF0) | (code & 0xF));
  else
    b = static_cast<uint8_t>((b & 0x0F) | ((code & 0xF) << 4));
}

uint8_t HostTensor::byte(int64_t r, int64_t c) const {
  return bytes_[static_cast<size_t>(index(r, c))];
}

void HostTensor::set_byte(int64_t r, int64_t c, uint8_t value) {
  bytes_[static_cast<size_t>(index(r, c))] = value;
}

void HostTensor::fill_bytes(uint8_t value) {
  std::fill(bytes_.begin(), bytes_.end(), value);
}

void HostTensor::fill_random_bytes(std::mt19937_64& rng) {
  for (auto& b : bytes_) b = static_cast<uint8_t>(rng());
}

::testing::AssertionResult bytes_unchanged(const std::vector<uint8_t>& before,
                                           const HostTensor& after) {
  if (before.size() != after.bytes().size())
    return ::testing::AssertionFailure() << "buffer size changed";
  for (size_t i = 0; i < before.size(); ++i) {
    if (before[i] != after.bytes()[i])
      return ::testing::AssertionFailure()
             << "byte " << i << " changed from " << hex_byte(before[i]) << " to "
             << hex_byte(after.bytes()[i]) << " (" << a4w4_dtype_name(after.dtype()) << " ["
             << after.rows() << ", " << after.cols() << "] stride " << after.stride() << ")";
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult gaps_unchanged(const std::vector<uint8_t>& before,
                                          const HostTensor& after) {
  for (size_t i = 0; i < before.size(); ++i) {
    if (!after.byte_in_view(i) && before[i] != after.bytes()[i])
      return ::testing::AssertionFailure()
             << "byte " << i << " outside the view changed from " << hex_byte(before[i]) << " to "
             << hex_byte(after.bytes()[i]) << " (" << a4w4_dtype_name(after.dtype()) << " ["
             << after.rows() << ", " << after.cols() << "] stride " << after.stride() << ")";
  }
  return ::testing::AssertionSuccess();
}

// ---- MX operands -----------------------------------------------------------------------------

MxOperand random_mx(std::mt19937_64& rng, int64_t rows, int64_t k, const ScaleRange& range,
                    int64_t value_pad, int64_t scale_pad) {
  MxOperand op{HostTensor::matrix(A4W4_DTYPE_E2M1, rows, k, k + value_pad),
               HostTensor::matrix(A4W4_DTYPE_E8M0, rows, k / 32, k / 32 + scale_pad)};
  op.values.fill_random_bytes(rng);  // every nibble uniform over the 16 codes, padding included
  op.scales.fill_random_bytes(rng);  // padding: random bytes (0xFF NaN ones too)
  std::uniform_int_distribution<int> scale(range.lo, range.hi);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < k / 32; ++b) {
      const bool nan = range.nan_fraction > 0.0 && unit(rng) < range.nan_fraction;
      op.scales.set_byte(r, b, nan ? uint8_t{0xFF} : static_cast<uint8_t>(scale(rng)));
    }
  }
  return op;
}

void fill_random_floats(std::mt19937_64& rng, HostTensor& t, int min_exp, int max_exp) {
  const FloatFormat format = format_of(t.dtype());
  std::uniform_int_distribution<int> exponent(min_exp, max_exp);
  for (int64_t r = 0; r < t.rows(); ++r) {
    for (int64_t c = 0; c < t.cols(); ++c) {
      const uint64_t bits = rng();
      const double significand =
          1.0 + std::ldexp(static_cast<double>(bits >> 11), -53);  // [1, 2), 53 random bits
      double value = std::ldexp(significand, exponent(rng));
      if (bits & 1) value = -value;
      t.set(r, c, round_to_format(format, value));
    }
  }
}

// ---- GEMM reference --------------------------------------------------------------------------

namespace {

// Knuth's TwoSum: s + err == a + b exactly.
void two_sum(double a, double b, double& s, double& err) {
  s = a + b;
  const double bb = s - a;
  err = (a - (s - bb)) + (b - bb);
}

}  // namespace

GemmReference reference_gemm(const MxOperand& a, const MxOperand& b, float alpha, float beta,
                             const HostTensor* c, const HostTensor* bias) {
  const int64_t m_size = a.rows(), n_size = b.rows(), k = a.k(), blocks = k / 32;
  if (b.k() != k) throw std::logic_error("reference_gemm: K mismatch");
  GemmReference ref;
  ref.m = m_size;
  ref.n = n_size;
  ref.terms = blocks + 2;
  ref.hi.resize(static_cast<size_t>(m_size * n_size));
  ref.lo.resize(ref.hi.size());
  ref.magnitude.resize(ref.hi.size());
  // Twice each E2M1 value is an integer: decode both operands once.
  std::vector<int> a2(static_cast<size_t>(m_size * k)), b2(static_cast<size_t>(n_size * k));
  for (int64_t r = 0; r < m_size; ++r)
    for (int64_t i = 0; i < k; ++i)
      a2[static_cast<size_t>(r * k + i)] = static_cast<int>(2.0 * kE2M1Table[a.values.code(r, i)]);
  for (int64_t r = 0; r < n_size; ++r)
    for (int64_t i = 0; i < k; ++i)
      b2[static_cast<size_t>(r * k + i)] = static_cast<int>(2.0 * kE2M1Table[b.values.code(r, i)]);

  std::vector<double> terms;
  for (int64_t m = 0; m < m_size; ++m) {
    for (int64_t n = 0; n < n_size; ++n) {
      terms.clear();
      bool nan = false;
      for (int64_t blk = 0; blk < blocks; ++blk) {
        const uint8_t sa = a.scales.byte(m, blk), sb = b.scales.byte(n, blk);
        if (sa == 0xFF || sb == 0xFF) nan = true;
        int64_t isum = 0;  // sum of (2a)(2b): 4 * the in-block dot product, exact
        for (int64_t i = blk * 32; i < blk * 32 + 32; ++i)
          isum += a2[static_cast<size_t>(m * k + i)] * b2[static_cast<size_t>(n * k + i)];
        // alpha (24 bits) * isum (<= 13 bits) * 2^(sa+sb-256): exact in double.
        terms.push_back(static_cast<double>(alpha) *
                        std::ldexp(static_cast<double>(isum), sa + sb - 254 - 2));
      }
      if (c != nullptr) terms.push_back(static_cast<double>(beta) * c->get(m, n));  // exact
      if (bias != nullptr) terms.push_back(bias->get(n));
      const size_t at = static_cast<size_t>(m * n_size + n);
      double magnitude = 0.0;
      bool finite = true;
      for (double t : terms) {
        magnitude += std::fabs(t);
        finite &= std::isfinite(t);
      }
      ref.magnitude[at] = magnitude;
      if (nan) {
        ref.hi[at] = std::numeric_limits<double>::quiet_NaN();
        ref.lo[at] = 0.0;
        continue;
      }
      if (!finite) {  // IEEE semantics of Inf (and NaN from C or bias): a plain sum
        double s = 0.0;
        for (double t : terms) s += t;
        ref.hi[at] = s;
        ref.lo[at] = 0.0;
        continue;
      }
      // Compensated sum (Ogita, Rump, Oishi "Sum2"), then normalised to hi + lo.
      double s = 0.0, comp = 0.0;
      for (double t : terms) {
        double err;
        two_sum(s, t, s, err);
        comp += err;
      }
      double hi, lo;
      two_sum(s, comp, hi, lo);
      ref.hi[at] = hi;
      ref.lo[at] = lo;
    }
  }
  return ref;
}

::testing::AssertionResult check_gemm(const GemmReference& ref, const HostTensor& d,
                                      double accumulation_eps, CompareStats* stats_out) {
  if (d.rows() != ref.m || d.cols() != ref.n)
    return ::testing::AssertionFailure() << "check_gemm: shape mismatch";
  const a4w4_dtype dtype = d.dtype();
  const FloatFormat format = format_of(dtype);
  const double min_normal = std::ldexp(1.0, format.min_exponent);
  CompareStats stats;
  std::ostringstream failures;
  int64_t failure_count = 0;
  double diff2 = 0.0, ref2 = 0.0;
  auto report = [&](int64_t m, int64_t n, double expected, double got, const char* why) {
    if (failure_count++ < 8) {
      const size_t at = static_cast<size_t>(m * ref.n + n);
      failures << "\n  D[" << m << ", " << n << "] (" << a4w4_dtype_name(dtype) << "): got " << got
               << ", expected " << expected << " (exact " << ref.hi[at] << " + " << ref.lo[at]
               << ", sum of |terms| " << ref.magnitude[at] << "): " << why;
    }
  };
  failures.precision(17);
  for (int64_t m = 0; m < ref.m; ++m) {
    for (int64_t n = 0; n < ref.n; ++n) {
      const size_t at = static_cast<size_t>(m * ref.n + n);
      const double hi = ref.hi[at], lo = ref.lo[at];
      const double got = d.get(m, n);
      const double expected = round_to_format(format, hi, lo);
      if (std::isnan(expected)) {
        if (!std::isnan(got)) report(m, n, expected, got, "the reference is NaN");
        ++stats.nan;
        continue;
      }
      if (std::isnan(got)) {
        report(m, n, expected, got, "NaN where the reference is not");
        continue;
      }
      if (got == expected) {
        ++stats.exact;
      } else {
        // What the exact value, perturbed by a reordered accumulation, may round to.
        const double slack =
            accumulation_eps * static_cast<double>(ref.terms + 2) * ref.magnitude[at] * 1.0001 +
            std::fabs(lo);
        const double low = round_to_format(format, hi - slack);
        const double high = round_to_format(format, hi + slack);
        if (std::isfinite(slack) && low <= got && got <= high) {
          ++stats.allowance;
        } else {
          report(m, n, expected, got, "not the correctly rounded value");
          continue;
        }
      }
      if (std::isinf(got))
        ++stats.inf;
      else if (got == 0.0)
        ++stats.zero;
      else
        ++stats.finite_nonzero;
      const double exact = hi + lo;
      if (std::isfinite(got) && std::fabs(expected) >= min_normal && std::isfinite(expected)) {
        diff2 += (got - exact) * (got - exact);
        ref2 += exact * exact;
      }
    }
  }
  if (stats_out != nullptr) *stats_out = stats;
  if (failure_count > 0)
    return ::testing::AssertionFailure()
           << failure_count << " of " << ref.m * ref.n << " elements wrong:" << failures.str();
  const double bound = dtype == A4W4_DTYPE_F32 ? 1e-7 : (dtype == A4W4_DTYPE_BF16 ? 4e-3 : 1e-3);
  if (ref2 > 0.0 && std::sqrt(diff2 / ref2) > bound)
    return ::testing::AssertionFailure()
           << "||D - ref|| / ||ref|| = " << std::sqrt(diff2 / ref2) << " > " << bound;
  return ::testing::AssertionSuccess();
}

// ---- Quantizer -------------------------------------------------------------------------------

uint8_t reference_e2m1_code(double x) {
  const uint8_t sign = std::signbit(x) ? 0x8 : 0x0;
  const double magnitude = std::fabs(x);
  // The contract: |x| > 6 saturates to 6 (never Inf). (Also keeps the distance comparison below
  // exact: for |x| <= 6 coming from a 24-bit float, |x| - g is exact in double.)
  if (magnitude > 6.0) return static_cast<uint8_t>(sign | 7);
  int best = 0;
  double best_distance = std::numeric_limits<double>::infinity();
  for (int code = 0; code < 8; ++code) {
    const double distance = std::fabs(magnitude - kE2M1Table[code]);
    if (distance < best_distance || (distance == best_distance && code % 2 == 0)) {
      best = code;
      best_distance = distance;
    }
  }
  return static_cast<uint8_t>(sign | best);
}

QuantizedBlock reference_quantize_block(const double* values, a4w4_scale_mode mode) {
  QuantizedBlock out{};
  double amax = 0.0;
  bool non_finite = false;
  for (int i = 0; i < 32; ++i) {
    non_finite |= !std::isfinite(values[i]);
    amax = std::max(amax, std::fabs(values[i]));
  }
  if (non_finite) {
    out.scale = 0xFF;
    return out;  // codes 0
  }
  if (amax == 0.0) {
    out.scale = 0;
    for (int i = 0; i < 32; ++i) out.codes[i] = std::signbit(values[i]) ? 0x8 : 0x0;
    return out;
  }
  // E: the largest integer with 2^E <= amax (searched, so fp32 subnormals get their true E).
  int big_e = -1100;
  for (int e = -160; e <= 130; ++e)
    if (std::ldexp(1.0, e) <= amax) big_e = e;
  const double m = amax / std::ldexp(1.0, big_e);  // exact, in [1, 2)
  int e = big_e - 2;
  switch (mode) {
    case A4W4_SCALE_FLOOR:
      break;
    case A4W4_SCALE_RCEIL:
      // The smallest e with amax <= 6 * 2^e, searched.
      e = big_e - 4;
      while (amax > 6.0 * std::ldexp(1.0, e)) ++e;
      break;
    case A4W4_SCALE_EVEN:
      if (m >= 1.75) ++e;
      break;
  }
  e = std::clamp(e, -127, 127);
  out.scale = static_cast<uint8_t>(e + 127);
  for (int i = 0; i < 32; ++i) out.codes[i] = reference_e2m1_code(std::ldexp(values[i], -e));
  return out;
}

}  // namespace a4w4_test

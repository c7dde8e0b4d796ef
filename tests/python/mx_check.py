"""Independent MX decoding for the tests: ml_dtypes' float4_e2m1fn / float8_e8m0fnu, not a4w4."""

import a4w4
import ml_dtypes
import numpy as np


def decode_scales(s: np.ndarray) -> np.ndarray:
    """E8M0 bytes -> float64 (NaN for 0xFF), through ml_dtypes.float8_e8m0fnu."""
    return s.view(ml_dtypes.float8_e8m0fnu).astype(np.float64)


def decode_fp4(q: np.ndarray) -> np.ndarray:
    """Packed E2M1 uint8 [R, K/2] -> float64 [R, K], through ml_dtypes.float4_e2m1fn."""
    return a4w4.unpack_fp4(q).view(ml_dtypes.float4_e2m1fn).astype(np.float64)


def dequant(q: np.ndarray, s: np.ndarray) -> np.ndarray:
    return decode_fp4(q) * np.repeat(decode_scales(s), 32, axis=1)


def expected_quantize(x: np.ndarray, mode: str) -> tuple[np.ndarray, np.ndarray]:
    """docs/semantics.md for finite input, with ml_dtypes rounding each element to E2M1."""
    x = x.astype(np.float32).astype(np.float64)
    rows, k = x.shape
    blocks = x.reshape(rows, k // 32, 32)
    amax = np.abs(blocks).max(axis=2)
    m, e2 = np.frexp(amax)  # amax = m * 2^e2, m in [0.5, 1)
    m, big_e = m * 2, e2 - 1  # m in [1, 2)
    bump = {"floor": np.zeros_like(m, bool), "rceil": m > 1.5, "even": m >= 1.75}[mode]
    e = np.clip(big_e - 2 + bump, -127, 127)
    e = np.where(amax == 0, -127, e)
    scaled = np.clip(blocks * np.exp2(-e)[..., None], -6, 6)  # saturation (FLOOR may exceed 6)
    codes = scaled.astype(np.float32).astype(ml_dtypes.float4_e2m1fn).view(np.uint8) & 0x0F
    return a4w4.pack_fp4(codes.reshape(rows, k)), (e + 127).astype(np.uint8)

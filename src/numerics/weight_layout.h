// The prepared weight layout, version 1 (A4W4_LAYOUT_PREPARED_V1). See docs/weight-layout.md.
//
// B [N, K] is cut into tiles of 16 rows x 128 K (4 scale blocks). Tiles are stored row-group
// major: tile (g, t) for row group g = n / 16 and K tile t = k / 128 starts at byte
// (g * k_tiles + t) * 1024. Inside a tile, lane L = (r % 8) * 4 + p (r = n % 16, p = the 8-element
// piece of the 32-element block, 0..3) owns 32 bytes: 16 for row r % 8 then 16 for row r % 8 + 8,
// each 16 = four 4-byte words, one per block j of the tile. So one warp reads a tile with two
// coalesced 16-byte loads per lane, and lane L's words are exactly its int8 MMA fragments (the
// element order inside a block is permuted identically for both operands, which leaves every
// block's dot product unchanged).
// Scales: tile (g, t) has 64 bytes at (g * k_tiles + t) * 64: for each r8 = 0..7, 4 bytes (blocks
// j = 0..3) of row r8 and then 4 bytes of row r8 + 8.
// N is padded to a multiple of 16 and K to a multiple of 128; padding bytes are zero.
#pragma once

#include <cstdint>

#include "numerics/host_device.h"

namespace a4w4::layout {

inline constexpr int64_t kTileRows = 16;
inline constexpr int64_t kTileK = 128;
inline constexpr int64_t kTileBlocks = kTileK / 32;
inline constexpr int64_t kTileBytes = kTileRows * kTileK / 2;            // 1024
inline constexpr int64_t kTileScaleBytes = kTileRows * kTileBlocks;      // 64

A4W4_HOST_DEVICE int64_t row_groups(int64_t n) { return (n + kTileRows - 1) / kTileRows; }
A4W4_HOST_DEVICE int64_t k_tiles(int64_t k) { return (k + kTileK - 1) / kTileK; }
A4W4_HOST_DEVICE int64_t prepared_weight_bytes(int64_t n, int64_t k) {
  return row_groups(n) * k_tiles(k) * kTileBytes;
}
A4W4_HOST_DEVICE int64_t prepared_scale_bytes(int64_t n, int64_t k) {
  return row_groups(n) * k_tiles(k) * kTileScaleBytes;
}

// Byte holding elements (k, k+1) of row n (k even) in the prepared buffer.
A4W4_HOST_DEVICE int64_t prepared_weight_offset(int64_t n, int64_t k, int64_t k_tile_count) {
  const int64_t tile = (n / kTileRows) * k_tile_count + k / kTileK;
  const int64_t r = n % kTileRows, block = (k / 32) % kTileBlocks, e = k % 32;
  const int64_t lane = (r % 8) * 4 + e / 8;
  return tile * kTileBytes + lane * 32 + (r / 8) * 16 + block * 4 + (e % 8) / 2;
}

// Byte holding the scale of block `block` (= k / 32) of row n.
A4W4_HOST_DEVICE int64_t prepared_scale_offset(int64_t n, int64_t block, int64_t k_tile_count) {
  const int64_t tile = (n / kTileRows) * k_tile_count + block / kTileBlocks;
  const int64_t r = n % kTileRows;
  return tile * kTileScaleBytes + (r % 8) * 8 + (r / 8) * 4 + block % kTileBlocks;
}

}  // namespace a4w4::layout

// The prepared weight layouts (A4W4_LAYOUT_PREPARED_V1, _V2). See docs/weight-layout.md.
//
// Both cut B [N, K] into tiles of 16 rows x 128 K (4 scale blocks). Tiles are stored row-group
// major: tile (g, t) for row group g = n / 16 and K tile t = k / 128 starts at byte
// (g * k_tiles + t) * 1024. Inside a tile, lane L = (r % 8) * 4 + p (r = n % 16, p = the 8-element
// piece of the 32-element block, 0..3) owns 32 bytes: 16 for row r % 8 then 16 for row r % 8 + 8,
// each 16 = four 4-byte words, one per block j of the tile. So one warp reads a tile with two
// coalesced 16-byte loads per lane, and lane L's words are exactly its int8 MMA fragments (the
// element order inside a block is permuted identically for both operands, which leaves every
// block's dot product unchanged).
// Version 2 keeps the tiles and the scales and stores each row's 64 bytes of a tile in turn
// (row r at r * 64, in plain order): a tile is a plain [16][64] sub-matrix, so a kernel reads it
// with its plain-B code (a lane's 16 bytes are one whole block) and TMA loads it as a plain box,
// while a warp still reads whole 1 KB tiles and the scales stay aligned.
// Scales (both versions): tile (g, t) has 64 bytes at (g * k_tiles + t) * 64: for each r8 = 0..7, 4
// bytes (blocks j = 0..3) of row r8 and then 4 bytes of row r8 + 8. N is padded to a multiple of 16
// and K to a multiple of 128; padding bytes are zero.
#pragma once

#include <cstdint>

#include "a4w4/a4w4.h"

#include "numerics/host_device.h"

namespace a4w4::layout {

inline constexpr int64_t kTileRows = 16;
inline constexpr int64_t kTileK = 128;
inline constexpr int64_t kTileBlocks = kTileK / 32;
inline constexpr int64_t kTileBytes = kTileRows * kTileK / 2;            // 1024
inline constexpr int64_t kTileScaleBytes = kTileRows * kTileBlocks;      // 64
inline constexpr int64_t kRowRunBytes = kTileK / 2;  // version 2: one row's bytes of a tile
// Rows n and n + 1 of one tile half (n % 16 < 7 or 8 <= n % 16 < 15): their scale words' distance.
inline constexpr int64_t kScaleRowStep = 2 * kTileBlocks;

A4W4_HOST_DEVICE int64_t row_groups(int64_t n) { return (n + kTileRows - 1) / kTileRows; }
A4W4_HOST_DEVICE int64_t k_tiles(int64_t k) { return (k + kTileK - 1) / kTileK; }
A4W4_HOST_DEVICE int64_t prepared_weight_bytes(int64_t n, int64_t k) {
  return row_groups(n) * k_tiles(k) * kTileBytes;
}
A4W4_HOST_DEVICE int64_t prepared_scale_bytes(int64_t n, int64_t k) {
  return row_groups(n) * k_tiles(k) * kTileScaleBytes;
}

// The layout of a prepared weight's tiles: A4W4_LAYOUT_PREPARED_V2_INT8 holds version 2's tiles
// (and its int8 part after them).
A4W4_HOST_DEVICE a4w4_layout tiles_layout(a4w4_layout layout) {
  return layout == A4W4_LAYOUT_PREPARED_V2_INT8 ? A4W4_LAYOUT_PREPARED_V2 : layout;
}

// Byte of tile (group, k_tile) where row r = n % 16 of version 2 starts (64 bytes, plain order).
A4W4_HOST_DEVICE int64_t row_run_offset(int64_t n, int64_t k_tile, int64_t k_tile_count) {
  return ((n / kTileRows) * k_tile_count + k_tile) * kTileBytes + (n % kTileRows) * kRowRunBytes;
}

// Byte holding elements (k, k+1) of row n (k even) in a prepared buffer of `version`.
A4W4_HOST_DEVICE int64_t prepared_weight_offset(a4w4_layout version, int64_t n, int64_t k,
                                                int64_t k_tile_count) {
  if (version == A4W4_LAYOUT_PREPARED_V2)
    return row_run_offset(n, k / kTileK, k_tile_count) + (k % kTileK) / 2;
  const int64_t tile = (n / kTileRows) * k_tile_count + k / kTileK;
  const int64_t r = n % kTileRows, block = (k / 32) % kTileBlocks, e = k % 32;
  const int64_t lane = (r % 8) * 4 + e / 8;
  return tile * kTileBytes + lane * 32 + (r / 8) * 16 + block * 4 + (e % 8) / 2;
}

// Byte holding the scale of block `block` (= k / 32) of row n (the same in both versions).
A4W4_HOST_DEVICE int64_t prepared_scale_offset(int64_t n, int64_t block, int64_t k_tile_count) {
  const int64_t tile = (n / kTileRows) * k_tile_count + block / kTileBlocks;
  const int64_t r = n % kTileRows;
  return tile * kTileScaleBytes + (r % 8) * 8 + (r / 8) * 4 + block % kTileBlocks;
}

}  // namespace a4w4::layout

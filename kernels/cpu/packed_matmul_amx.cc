#include "kernels/cpu/packed_matmul_amx.h"

#include <sys/syscall.h>
#include <unistd.h>

#include "common/check.h"
#include "kernels/cpu/packed_tile.h"
#include "kernels/cpu/x86_intrinsics.h"

namespace tpserve::cpu {

#if defined(__x86_64__)
namespace {

#define TP_TARGET_AMX \
  __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl,amx-tile,amx-int8")))

// Linux keeps AMX's 8 KiB of tile registers off until a process asks (arch/x86 "xstate").
constexpr int kArchReqXcompPerm = 0x1023;
constexpr int kXfeatureXtiledata = 18;

// ldtilecfg's operand (Intel SDM, "TILECFG"): palette 1, bytes per row and rows per tile.
struct alignas(64) TileConfig {
  uint8_t palette_id = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Tiles 0-2 and 3-5 are two sets (A: rows_m x 32 activation bytes, B: 8 x 64 weight bytes, C:
// rows_m x 16 int32) so that consecutive blocks do not wait on one another's registers.
TP_TARGET_AMX void ConfigureFor(int rows_m) {
  thread_local int configured = 0;  // tile configuration is per thread
  if (configured == rows_m) return;
  TileConfig config;
  for (int set = 0; set < 2; ++set) {
    config.rows[3 * set] = static_cast<uint8_t>(rows_m);
    config.colsb[3 * set] = 32;
    config.rows[3 * set + 1] = 8;
    config.colsb[3 * set + 1] = 64;
    config.rows[3 * set + 2] = static_cast<uint8_t>(rows_m);
    config.colsb[3 * set + 2] = 64;
  }
  // Not _tile_loadconfig: GCC 12 declares its memory operand as one pointer wide, so the stores
  // to rows and colsb above were dropped as dead. The operand here is all 64 bytes.
  asm volatile("ldtilecfg %0" : : "m"(config));
  configured = rows_m;
}

// Adds block `blk`'s integer tile c (rows of 16 int32, one per activation row), scaled as
// packed_matmul.h states, into acc.
template <BlockFormat kFormat, int kM>
TP_TARGET_AMX __attribute__((always_inline)) inline void ScaleIn(const QuantizedActivations& a,
                                                                 int64_t i0, const PackedWeight& w,
                                                                 int64_t group, int64_t blk,
                                                                 const int32_t* c, __m512* acc) {
  const int64_t blocks = a.blocks();
  __m512 dw, mw;
  LoadBlockScalesZmm<kFormat>(w.record(group, blk) + w.code_bytes(), &dw, &mw);
#pragma GCC unroll 16
  for (int i = 0; i < kM; ++i) {
    const int64_t ab = (i0 + i) * blocks + blk;
    __m512i isum = _mm512_load_si512(c + i * kGroupRows);
    if constexpr (kFormat == BlockFormat::kQ4_0) {
      isum = _mm512_sub_epi32(isum, _mm512_set1_epi32(8 * a.sum[ab]));
    }
    acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(dw, _mm512_set1_ps(a.d[ab])),
                             acc[i]);
    if constexpr (kFormat == BlockFormat::kQ4_1) {
      acc[i] = _mm512_fmadd_ps(mw, _mm512_set1_ps(a.d_sum[ab]), acc[i]);
    }
  }
}

// Block products in two tile sets, written out per set because the tile intrinsics take their
// register numbers as literals: set 0 is tiles 0-2, set 1 tiles 3-5 (A, B, C).
TP_TARGET_AMX inline void StartInSet0(const int8_t* x, int64_t k, const uint8_t* b) {
  _tile_loadd(0, x, k);
  _tile_loadd(1, b, 64);
  _tile_zero(2);
  _tile_dpbssd(2, 0, 1);
}
TP_TARGET_AMX inline void StartInSet1(const int8_t* x, int64_t k, const uint8_t* b) {
  _tile_loadd(3, x, k);
  _tile_loadd(4, b, 64);
  _tile_zero(5);
  _tile_dpbssd(5, 3, 4);
}

// Software-pipelined over blocks: block b + 1's product runs in the tile unit while the vector
// unit scales block b's, so neither waits for the other's latency.
template <BlockFormat kFormat, int kM>
TP_TARGET_AMX void Tile(const QuantizedActivations& a, int64_t i0, const PackedWeight& w,
                        int64_t group, const uint8_t* weight_tiles, float* out) {
  const int64_t blocks = a.blocks();
  const int64_t tile_stride = kFormat == BlockFormat::kQ8_0 ? w.record_bytes() : 512;
  const int8_t* x = a.q.data() + i0 * a.k;
  const auto x_of = [&](int64_t blk) { return x + blk * kBlockElements; };
  const auto b_of = [&](int64_t blk) { return weight_tiles + blk * tile_stride; };
  alignas(64) int32_t c[2][kGroupRows * kGroupRows];
  __m512 acc[kM];
#pragma GCC unroll 16
  for (int i = 0; i < kM; ++i) acc[i] = _mm512_setzero_ps();
  if (blocks > 0) StartInSet0(x_of(0), a.k, b_of(0));
  for (int64_t blk = 0; blk < blocks; blk += 2) {
    if (blk + 1 < blocks) StartInSet1(x_of(blk + 1), a.k, b_of(blk + 1));
    _tile_stored(2, c[0], 64);
    ScaleIn<kFormat, kM>(a, i0, w, group, blk, c[0], acc);
    if (blk + 1 == blocks) break;
    if (blk + 2 < blocks) StartInSet0(x_of(blk + 2), a.k, b_of(blk + 2));
    _tile_stored(5, c[1], 64);
    ScaleIn<kFormat, kM>(a, i0, w, group, blk + 1, c[1], acc);
  }
#pragma GCC unroll 16
  for (int i = 0; i < kM; ++i) _mm512_storeu_ps(out + i * kGroupRows, acc[i]);
}

TP_TARGET_AMX void UnpackNibbles(const uint8_t* record, uint8_t* tiles) {
  const __m512i mask = _mm512_set1_epi8(0x0F);
  for (int p = 0; p < 4; ++p) {
    const __m512i raw = _mm512_loadu_si512(record + 64 * p);
    _mm512_store_si512(tiles + 128 * p, _mm512_and_si512(raw, mask));
    _mm512_store_si512(tiles + 128 * p + 64, _mm512_and_si512(_mm512_srli_epi16(raw, 4), mask));
  }
}

}  // namespace

bool AmxAvailable() {
  static const bool available = __builtin_cpu_supports("amx-tile") &&
                                __builtin_cpu_supports("amx-int8") &&
                                __builtin_cpu_supports("avx512f") &&
                                syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  return available;
}

const uint8_t* AmxWeightTiles(const PackedWeight& w, int64_t group, std::vector<uint8_t>* scratch) {
  if (w.format == BlockFormat::kQ8_0) return w.record(group, 0);
  // 64 spare bytes let the first tile start on a cache line whatever the allocation's alignment.
  scratch->resize(w.blocks() * 512 + 64);
  uint8_t* tiles = scratch->data() + (64 - reinterpret_cast<uintptr_t>(scratch->data()) % 64) % 64;
  for (int64_t blk = 0; blk < w.blocks(); ++blk)
    UnpackNibbles(w.record(group, blk), tiles + blk * 512);
  return tiles;
}

void AmxTile(const QuantizedActivations& a, int64_t i0, int rows_m, const PackedWeight& w,
             int64_t group, const uint8_t* weight_tiles, float* out) {
  ConfigureFor(rows_m);
  WithRows(rows_m, [&]<int kM>() {
    switch (w.format) {
      case BlockFormat::kQ4_0:
        return Tile<BlockFormat::kQ4_0, kM>(a, i0, w, group, weight_tiles, out);
      case BlockFormat::kQ4_1:
        return Tile<BlockFormat::kQ4_1, kM>(a, i0, w, group, weight_tiles, out);
      case BlockFormat::kQ8_0:
        return Tile<BlockFormat::kQ8_0, kM>(a, i0, w, group, weight_tiles, out);
      case BlockFormat::kQ4_K:
      case BlockFormat::kQ5_K:
      case BlockFormat::kQ6_K:
        TP_CHECK_MSG(false, "K-quants are not tiled on AMX (PackedMatmulBT routes them to VNNI)");
    }
  });
}

#else
bool AmxAvailable() { return false; }
const uint8_t* AmxWeightTiles(const PackedWeight&, int64_t, std::vector<uint8_t>*) {
  TP_CHECK(false);
  return nullptr;
}
void AmxTile(const QuantizedActivations&, int64_t, int, const PackedWeight&, int64_t,
             const uint8_t*, float*) {
  TP_CHECK(false);
}
#endif  // __x86_64__

}  // namespace tpserve::cpu

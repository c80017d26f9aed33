// The packed product's tiles on AMX (Intel Sapphire Rapids and later): one TDPBSSD per block
// computes a 16 x 16 tile of exact block dot products, which is 16 x 8 VNNI instructions' work;
// the scaling that follows is packed_matmul.h's, so results equal the other instruction sets' bit
// for bit.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cpu/packed_weight.h"
#include "kernels/cpu/quantized_activations.h"

namespace tpserve::cpu {

// The CPU has AMX-INT8 and Linux granted this process the tile state (arch_prctl).
bool AmxAvailable();

// The B operands of a group's blocks, 8 rows of 64 bytes each: Q4 codes unpacked to bytes into
// `scratch` ([blocks][8][64]); Q8_0's records already are them (returns the first record).
const uint8_t* AmxWeightTiles(const PackedWeight& w, int64_t group, std::vector<uint8_t>* scratch);

// Rows [i0, i0 + rows_m) of `a` against group `group` (its AmxWeightTiles): out[i * 16 + r].
void AmxTile(const QuantizedActivations& a, int64_t i0, int rows_m, const PackedWeight& w,
             int64_t group, const uint8_t* weight_tiles, float* out);

}  // namespace tpserve::cpu

// The allow-list a sample's next token is drawn from: its output constraint's (TokenMatcher),
// narrowed by the request's allowed_token_ids and bad_words, and, before min_tokens, without the
// end-of-generation tokens and stop token ids. Rank 0 applies it as the step's bitmask row.
#pragma once

#include <cstdint>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "coordinator/sequence.h"

namespace tpserve {

// Sets seq.mask for the sample's next token (cleared when nothing restricts it). When nothing at
// all may come next, the sample must end: INVALID_ARGUMENT naming the field whose restriction left
// no token (the constraint's param, allowed_token_ids, bad_words), or what the grammar engine
// failed with. min_tokens gives way to a constraint that allows only the end.
absl::Status UpdateSampleMask(Sequence& seq, const absl::flat_hash_set<int32_t>& end_of_generation,
                              int64_t vocab_size);

}  // namespace tpserve

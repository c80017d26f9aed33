// A member of a JSON object read by reference: nlohmann's value(key, default) returns a copy,
// which for a tokenizer.json's vocabulary or merges is the whole of it.
#pragma once

#include "nlohmann/json.hpp"

namespace tpserve {

// `object[key]`, or a null value when `object` is not an object or has no such member.
inline const nlohmann::json& JsonField(const nlohmann::json& object, const char* key) {
  static const nlohmann::json kNull;
  if (!object.is_object()) return kNull;
  const auto it = object.find(key);
  return it == object.end() ? kNull : *it;
}

}  // namespace tpserve

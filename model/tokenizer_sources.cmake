# Text side of tp_model: byte-level BPE tokenizer, its pre-tokenizer, the streaming
# detokenizer and chat templates. Unicode classes come from ICU.
target_sources(tp_model PRIVATE
  ${CMAKE_CURRENT_SOURCE_DIR}/chat_template.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/detokenizer.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/pre_tokenizer.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/tokenizer.cc
)
target_link_libraries(tp_model PUBLIC ICU::uc ICU::i18n absl::flat_hash_set)

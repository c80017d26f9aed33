# Tokenizer tests. They read the bundled model and the golden files through the environment
# (TPSERVE_MODEL_PATH, TPSERVE_GOLDEN_DIR); a missing model file fails the test with a hint to
# run scripts/fetch-model.sh, it never skips.
foreach(name tokenizer_matches_llamacpp detokenizer chat_template)
  add_executable(${name}_test ${name}_test.cc)
  target_link_libraries(${name}_test PRIVATE
    tp_model nlohmann_json::nlohmann_json GTest::gtest GTest::gtest_main)
  add_test(NAME ${name} COMMAND ${name}_test)
  set_tests_properties(${name} PROPERTIES
    LABELS "unit;model"
    ENVIRONMENT "TPSERVE_MODEL_PATH=${TPSERVE_MODEL_PATH};TPSERVE_GOLDEN_DIR=${TPSERVE_GOLDEN_DIR}")
endforeach()

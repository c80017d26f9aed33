// SharedLibrary against the C library's own math library: a function bound through it computes
// what the linked one does; a missing library, file or symbol is NOT_FOUND naming what was asked.
#include "common/shared_library.h"

#include <cmath>
#include <cstdlib>

#include "gtest/gtest.h"

namespace tpserve {
namespace {

constexpr const char* kVariable = "TPSERVE_SHARED_LIBRARY_TEST_PATH";

TEST(SharedLibraryTest, BindsAFunctionThatComputes) {
  unsetenv(kVariable);
  absl::StatusOr<SharedLibrary> libm =
      SharedLibrary::Open("the math library", kVariable, {"libnot-here.so.1", "libm.so.6"});
  ASSERT_TRUE(libm.ok()) << libm.status();
  EXPECT_EQ(libm->name(), "libm.so.6");  // the first name that loads
  double (*cosine)(double) = nullptr;
  ASSERT_TRUE(libm->Bind("cos", &cosine).ok());
  EXPECT_EQ(cosine(0.5), std::cos(0.5));
}

TEST(SharedLibraryTest, MissingLibraryNamesEveryNameAndTheWayToPointAtIt) {
  unsetenv(kVariable);
  absl::StatusOr<SharedLibrary> library =
      SharedLibrary::Open("Frobnicator", kVariable, {"libfrob.so.7", "libfrob.so"});
  ASSERT_EQ(library.status().code(), absl::StatusCode::kNotFound);
  const std::string message(library.status().message());
  EXPECT_NE(message.find("Frobnicator"), std::string::npos) << message;
  EXPECT_NE(message.find("libfrob.so.7, libfrob.so"), std::string::npos) << message;
  EXPECT_NE(message.find("LD_LIBRARY_PATH"), std::string::npos) << message;
  EXPECT_NE(message.find(kVariable), std::string::npos) << message;
}

TEST(SharedLibraryTest, TheVariableOverridesTheNames) {
  setenv(kVariable, "/nonexistent/libm.so.6", 1);
  absl::StatusOr<SharedLibrary> library =
      SharedLibrary::Open("the math library", kVariable, {"libm.so.6"});
  unsetenv(kVariable);
  ASSERT_EQ(library.status().code(), absl::StatusCode::kNotFound);
  const std::string message(library.status().message());
  EXPECT_NE(message.find("/nonexistent/libm.so.6"), std::string::npos) << message;
  EXPECT_NE(message.find(kVariable), std::string::npos) << message;
}

TEST(SharedLibraryTest, MissingSymbolIsNamed) {
  unsetenv(kVariable);
  absl::StatusOr<SharedLibrary> libm =
      SharedLibrary::Open("the math library", kVariable, {"libm.so.6"});
  ASSERT_TRUE(libm.ok()) << libm.status();
  void (*function)() = nullptr;
  const absl::Status status = libm->Bind("tpserve_no_such_function", &function);
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(status.message().find("tpserve_no_such_function"), std::string::npos) << status;
  EXPECT_NE(status.message().find("libm.so.6"), std::string::npos) << status;
  EXPECT_EQ(function, nullptr);
}

}  // namespace
}  // namespace tpserve

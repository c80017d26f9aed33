// The filters and tests rendering implements (builtins.cc), and jinja2's rule for where a
// template may name others.
#pragma once

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "model/jinja/ast.h"

namespace tpserve::jinja {

bool IsKnownFilter(absl::string_view name);
bool IsKnownTest(absl::string_view name);

// INVALID_ARGUMENT naming the first unknown filter or test that jinja2 would refuse when it
// compiles the template; those it only refuses when they run are left to rendering.
absl::Status CheckFilterAndTestNames(const Body& body);

}  // namespace tpserve::jinja

#include "worker/load_policy.h"

#include <algorithm>
#include <filesystem>

#include "absl/strings/str_cat.h"

namespace tpserve {
namespace {

bool Under(const std::string& dir_path, const std::string& path) {
  if (dir_path.empty()) return false;
  std::error_code error;
  const std::filesystem::path dir = std::filesystem::weakly_canonical(dir_path, error);
  if (error) return false;
  const std::filesystem::path file = std::filesystem::weakly_canonical(path, error);
  if (error) return false;
  const auto [end, _] = std::mismatch(dir.begin(), dir.end(), file.begin(), file.end());
  return end == dir.end() && file != dir;
}

}  // namespace

bool LoadPolicy::MayLoad(const std::string& path) const {
  return path == model_path || Under(model_dir, path);
}

bool LoadPolicy::MayLoadDraft(const std::string& path) const {
  return path == draft_model_path || (path != model_path && MayLoad(path));
}

bool LoadPolicy::MayLoadLora(const std::string& path) const {
  return std::find(lora_paths.begin(), lora_paths.end(), path) != lora_paths.end() ||
         std::any_of(lora_dirs.begin(), lora_dirs.end(),
                     [&path](const std::string& dir) { return Under(dir, path); }) ||
         Under(model_dir, path);
}

absl::Status LoadPolicy::Check(const v1::InitRequest& request) const {
  const std::string under =
      model_dir.empty() ? "" : absl::StrCat(" or one under --model-dir ", model_dir);
  if (!request.model_path().empty() && !MayLoad(request.model_path())) {
    return absl::PermissionDeniedError(
        absl::StrCat("Init: this worker loads only the model it was started with (--model ",
                     model_path, ")", under));
  }
  if (!request.draft_model_path().empty() && !MayLoadDraft(request.draft_model_path())) {
    return absl::PermissionDeniedError(absl::StrCat(
        "Init: this worker loads as a draft only the model it was started with (--draft-model",
        draft_model_path.empty() ? ": none" : absl::StrCat(" ", draft_model_path), ")", under));
  }
  for (const v1::InitRequest::LoraAdapter& lora : request.lora_adapters()) {
    if (!MayLoadLora(lora.path())) {
      return absl::PermissionDeniedError(absl::StrCat(
          "Init: this worker loads only the LoRA adapters it was started with (--lora-path, "
          "--lora-dir)",
          under));
    }
  }
  return absl::OkStatus();
}

}  // namespace tpserve

// Which files an Init (or LoadAdapter) may make a worker open: the model it was started with
// (--model), its draft (--draft-model), its LoRA adapters (--lora-path, and anything under
// --lora-dir), and anything under --model-dir. A path the
// policy refuses is never opened, and the refusal names only what the worker allows.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "tpserve/v1/worker.pb.h"

namespace tpserve {

struct LoadPolicy {
  std::string model_path;
  std::string model_dir;  // empty: none
  std::string draft_model_path;
  std::vector<std::string> lora_paths;
  std::vector<std::string> lora_dirs;  // adapters under these may load too

  bool MayLoad(const std::string& path) const;  // the model, or a file under model_dir
  bool MayLoadDraft(const std::string& path) const;
  bool MayLoadLora(const std::string& path) const;
  // PERMISSION_DENIED for the first file `request` names that this worker may not open.
  absl::Status Check(const v1::InitRequest& request) const;
};

}  // namespace tpserve

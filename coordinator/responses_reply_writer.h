// /v1/responses replies (ReplyWriter) in the Responses API's shapes: a response object whose
// output holds a reasoning item (the model's thinking), a message with one output_text part, and
// a function_call item per call; status completed, or incomplete with reason max_output_tokens.
// Streaming sends response.created and response.in_progress, then each item as
// output_item.added, its parts and deltas (reasoning_text, output_text, function_call_arguments)
// with their .done events and output_item.done, then response.completed (or
// response.incomplete) holding the whole response; every event carries its sequence_number.
// With store, the response and its conversation go to the ResponseStore when it completes.
// One sample (the API has no n).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "coordinator/reply_writer.h"
#include "coordinator/response_store.h"
#include "coordinator/responses_request.h"

namespace tpserve {

class ResponsesReplyWriter : public ReplyWriter {
 public:
  // `store`: where the response goes when the request has store true; must outlive the writer.
  ResponsesReplyWriter(const ResponsesRequest& request, std::string model, absl::Time created,
                       ResponseStore* store);

  std::string Open() override;
  std::string Add(const SampleNews& news) override;
  std::string Close(const Usage& usage) override;
  std::string Fail(const absl::Status& status) override;
  HttpReply Whole(std::vector<ChoiceOutput>& choices, const Usage& usage) override;

 private:
  enum class Kind { kReasoning, kMessage, kCall };
  struct OutputItem {
    Kind kind;
    std::string id;
    std::string text;     // reasoning or message text
    ParsedToolCall call;  // kCall
  };
  std::string Event(const std::string& type, nlohmann::json fields);
  // Events that end the open item (reasoning or message), if any.
  std::string CloseOpen();
  // Events that append `text` to the open item of `kind`, opening one first if needed.
  std::string AppendText(Kind kind, const std::string& text);
  std::string AddCall(const ParsedToolCall& call);
  nlohmann::json ItemJson(const OutputItem& item, bool done) const;
  // The response object with the output so far; `usage` null while in progress.
  nlohmann::json Snapshot(const std::string& status, const nlohmann::json& usage) const;
  // Keeps the finished response for previous_response_id (store true).
  void Store(const nlohmann::json& response) const;

  const std::string id_;
  const std::string model_;
  const int64_t created_;
  const nlohmann::ordered_json echo_;
  const nlohmann::ordered_json messages_;
  ResponseStore* const store_;  // null: store false
  int64_t sequence_ = 0;
  std::vector<OutputItem> output_;
  bool open_ = false;  // the last item is a reasoning or message item still streaming
  std::optional<FinishReason> finish_;
};

}  // namespace tpserve

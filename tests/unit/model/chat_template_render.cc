// The C++ side of chat_templates_match_jinja2 (chat_templates_match_jinja2_test.py): renders
// conversations with tpserve's ChatTemplate so that the test can compare with jinja2.
//
//   chat_template_render CASES.json   → JSON on stdout
//     CASES: {"template": source, "bos_token", "eos_token", "now": [y, m, d, H, M, S],
//             "cases": [{"messages", "tools", "add_generation_prompt", "extra"}]}
//     out:   {"parse_error": msg} or {"results": [{"text": ...} | {"error": ...}]}
//   chat_template_render --gguf-template MODEL.gguf → {"template", "bos_token", "eos_token"}
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "model/chat_template.h"
#include "model/gguf_file.h"
#include "model/tokenizer.h"
#include "nlohmann/json.hpp"

namespace tpserve {
namespace {

using ojson = nlohmann::ordered_json;

int Fail(const std::string& message) {
  std::fprintf(stderr, "chat_template_render: %s\n", message.c_str());
  return 1;
}

std::string Dump(const ojson& value) {
  return value.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

int PrintGgufTemplate(const std::string& path) {
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(path);
  if (!file.ok()) return Fail(std::string(file.status().message()));
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::FromGguf(**file);
  if (!tokenizer.ok()) return Fail(std::string(tokenizer.status().message()));
  absl::StatusOr<std::string> source = (*file)->GetString("tokenizer.chat_template");
  if (!source.ok()) return Fail(std::string(source.status().message()));
  const Tokenizer& t = **tokenizer;
  ojson out = {{"template", *source},
               {"bos_token", t.bos_id() >= 0 ? std::string(t.TokenBytes(t.bos_id())) : ""},
               {"eos_token", t.eos_id() >= 0 ? std::string(t.TokenBytes(t.eos_id())) : ""}};
  std::cout << Dump(out) << "\n";
  return 0;
}

int Render(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Fail("cannot read " + path);
  std::stringstream text;
  text << in.rdbuf();
  ojson input;
  try {
    input = ojson::parse(text.str());
  } catch (const ojson::exception& e) {
    return Fail(std::string("bad cases file: ") + e.what());
  }
  absl::StatusOr<ChatTemplate> chat = ChatTemplate::Parse(
      input.value("template", ""), input.value("bos_token", ""), input.value("eos_token", ""));
  if (!chat.ok()) {
    std::cout << Dump({{"parse_error", std::string(chat.status().message())}}) << "\n";
    return 0;
  }
  if (input.contains("now")) {
    const ojson& now = input["now"];
    std::tm tm{};
    tm.tm_year = now[0].get<int>() - 1900;
    tm.tm_mon = now[1].get<int>() - 1;
    tm.tm_mday = now[2].get<int>();
    tm.tm_hour = now[3].get<int>();
    tm.tm_min = now[4].get<int>();
    tm.tm_sec = now[5].get<int>();
    std::time_t t = timegm(&tm);
    gmtime_r(&t, &tm);  // fills the weekday and day of the year
    chat->set_now(tm);
  }
  ojson results = ojson::array();
  for (const ojson& c : input["cases"]) {
    absl::StatusOr<std::string> rendered =
        chat->Apply(c["messages"], c.value("tools", ojson()),
                    c.value("add_generation_prompt", false), c.value("extra", ojson()));
    if (rendered.ok()) {
      results.push_back({{"text", *rendered}});
    } else {
      results.push_back({{"error", std::string(rendered.status().message())}});
    }
  }
  std::cout << Dump({{"results", results}}) << "\n";
  return 0;
}

}  // namespace
}  // namespace tpserve

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--gguf-template") {
    return tpserve::PrintGgufTemplate(argv[2]);
  }
  if (argc != 2)
    return tpserve::Fail("usage: chat_template_render CASES.json | --gguf-template MODEL");
  return tpserve::Render(argv[1]);
}

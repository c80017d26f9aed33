// One HTTP request as a handler sees it, one reply it gives, and the limits a connection keeps.
// Plain data: no HTTP library's types cross this line, so the routes (http_server.cc) and the
// protocol (http_connection.cc) compile apart.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"

namespace tpserve {

struct HttpRequest {
  std::string method;         // "GET", "POST", ...
  std::string path;           // the target without its query string
  std::string authorization;  // the Authorization header, "" when absent
  std::string body;
  std::string peer;  // "address:port" of the client, for logs
};

struct HttpReply {
  int status = 200;
  std::string content_type;  // "" for none
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  // For the request's log line: the engine's request id, 0 when none was given.
  unsigned long long request_id = 0;
};

struct HttpLimits {
  // Open connections; one more is answered 503 and closed. Slow and idle clients count, so this
  // bounds the file descriptors and memory that clients can hold, not the requests in flight.
  int max_connections = 2048;
  // A larger body is answered 413 before it is read.
  size_t max_body_bytes = 8 << 20;
  size_t max_header_bytes = 64 << 10;
  // The whole request head must arrive within this, counted from the connection's start or the
  // end of the previous response on a kept-alive one, so a client that sends it byte by byte
  // holds a connection no longer than this.
  absl::Duration header_timeout = absl::Seconds(10);
  absl::Duration body_timeout = absl::Seconds(60);
  // One write to a client that does not read (a response, an event of a stream).
  absl::Duration write_timeout = absl::Seconds(30);
  // Threads serving the connections, each connection on one at a time (its strand); 0: a
  // quarter of the cores, 2 to 4. A step's tokens go out in parallel over them.
  int io_threads = 0;
};

}  // namespace tpserve

// What a route handler holds of one HTTP request in flight: the ways to answer it and whether
// anybody still listens. Implemented by HttpConnection (http_connection.h); the routes see only
// this, so they compile without the HTTP library.
//
// Every exchange ends exactly once: with Reply, or with StartStream, WriteChunk... and
// EndStream. Reply may be called on any thread and returns at once. The stream calls wait for
// their write and must come from a thread of the handler's own, never the I/O thread.
#pragma once

#include <string>

#include "coordinator/http_message.h"

namespace tpserve {

class HttpExchange {
 public:
  virtual ~HttpExchange() = default;

  // The whole response; `reply.request_id` goes into the request's log line.
  virtual void Reply(HttpReply reply) = 0;

  // A chunked response: `head`'s status, headers and content type (its body is ignored), then
  // the chunks. False when the client is gone or the write timed out: the caller stops writing
  // and calls EndStream.
  virtual bool StartStream(const HttpReply& head) = 0;
  virtual bool WriteChunk(std::string data) = 0;
  virtual void EndStream() = 0;

  // The client closed its connection (or a write to it failed): nobody reads what follows.
  // Handlers waiting on the engine poll this to cancel the work.
  virtual bool client_gone() const = 0;
  // Reply or EndStream has been called.
  virtual bool ended() const = 0;
};

}  // namespace tpserve

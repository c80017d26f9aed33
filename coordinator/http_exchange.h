// What a route handler holds of one HTTP request in flight: the ways to answer it and whether
// anybody still listens. Implemented by HttpConnection (http_connection.h); the routes see only
// this, so they compile without the HTTP library.
//
// Every exchange ends exactly once: with Reply, or with StartStream, WriteChunk... and
// EndStream. Every call returns at once and may come from any thread: the connection queues the
// writes on its strand (I/O thread) in the order it was called (callers on several threads
// order their calls themselves, e.g. by making them from tasks they Post).
#pragma once

#include <functional>
#include <string>

#include "coordinator/http_message.h"

namespace tpserve {

class HttpExchange {
 public:
  virtual ~HttpExchange() = default;

  // The whole response; `reply.request_id` goes into the request's log line.
  virtual void Reply(HttpReply reply) = 0;

  // A chunked response: `head`'s status, headers and content type (its body is ignored), then
  // the chunks. Once the client is gone (or a write failed or timed out) writes are dropped.
  virtual void StartStream(const HttpReply& head) = 0;
  // `written`, if any, runs on the I/O thread when the chunk has gone to the socket.
  virtual void WriteChunk(std::string data, std::function<void()> written = {}) = 0;
  virtual void EndStream() = 0;

  // Runs `task` on the connection's strand: never at the same time as its other handlers.
  virtual void Post(std::function<void()> task) = 0;
  // `on_gone` runs once, on the I/O thread, when the client closes its connection or a write to
  // it fails: nobody reads what follows, so the work for it can stop. At once if that happened.
  virtual void SetOnGone(std::function<void()> on_gone) = 0;
  // `on_end` runs once, on the I/O thread, when the exchange is over: its last byte written, or
  // the connection failed. Set it before ending the exchange.
  virtual void SetOnEnd(std::function<void()> on_end) = 0;
  virtual bool client_gone() const = 0;
  // Reply or EndStream has been called.
  virtual bool ended() const = 0;
};

}  // namespace tpserve

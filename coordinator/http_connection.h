// One client's TCP connection to the HTTP front end (Boost.Beast): reads requests one at a time
// within the limits (head and body deadlines, header and body sizes), hands each to the
// listener's dispatch function as an HttpExchange, writes what the handler answers, and keeps
// the connection alive between requests when the client asks.
//
// What the connection answers itself, each then closing it: 413 for a body over the limit
// (refused from its Content-Length, before any of it is read), 431 for an oversized head, 408
// for a head or body that does not arrive in time, 400 for what does not parse as HTTP/1.1, and
// 503 for a connection over the listener's limit.
//
// While a handler runs, the connection waits for the socket to become readable: end of stream
// then means the client went away (client_gone(), the on_gone callback), so that work nobody
// will read is cancelled.
//
// Threads: everything runs on the connection's strand (one of the listener's I/O threads at a
// time); the HttpExchange calls run inline when made on it, and are posted to it otherwise.
// A stream's chunks queue there and go out one write at a time, those queued meanwhile merged
// into one. Pending operations hold the connection (shared_ptr), so it lives until the last of
// them ends.
#pragma once

#include <array>
#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "coordinator/http_exchange.h"
#include "coordinator/http_message.h"

namespace tpserve {

class HttpConnection : public HttpExchange, public std::enable_shared_from_this<HttpConnection> {
 public:
  using Strand = boost::asio::strand<boost::asio::io_context::executor_type>;

  // What every connection of one listener shares; outlives them all (each holds it).
  struct Shared {
    HttpLimits limits;
    // Called on the I/O thread for each request; must not block.
    std::function<void(std::shared_ptr<HttpExchange>, HttpRequest)> dispatch;
    // The body of a refusal the connection makes itself, in the API's error format.
    std::function<HttpReply(int status, const std::string& message)> error_reply;
    // Called on the I/O thread with a request's head (the body empty, not read yet): a reply
    // refuses the request before its body costs anything, and closes the connection.
    std::function<std::optional<HttpReply>(const HttpRequest& head)> admit;
    std::atomic<int> open{0};  // connections counted against limits.max_connections
    std::atomic<bool> stopping{false};
  };

  // Serves `socket` from now on. With `refusal`, answers only that and closes (the connection
  // limit's 503); such a connection is not counted in `open`.
  static std::shared_ptr<HttpConnection> Start(boost::asio::ip::tcp::socket socket,
                                               std::shared_ptr<Shared> shared,
                                               std::optional<HttpReply> refusal = std::nullopt);
  ~HttpConnection() override;

  // On the strand: closes the socket now; whatever is pending ends with an error.
  void CloseNow();

  void Reply(HttpReply reply) override;
  void StartStream(const HttpReply& head) override;
  void WriteChunk(std::string data, std::function<void()> written) override;
  void EndStream() override;
  void Post(std::function<void()> task) override;
  void SetOnGone(std::function<void()> on_gone) override;
  void SetOnEnd(std::function<void()> on_end) override;
  bool client_gone() const override { return client_gone_.load(); }
  bool ended() const override { return ended_.load(); }

  HttpConnection(boost::asio::ip::tcp::socket socket, std::shared_ptr<Shared> shared,
                 bool counted);

 private:
  using Response = boost::beast::http::response<boost::beast::http::string_body>;
  using StreamHead = boost::beast::http::response<boost::beast::http::empty_body>;

  void ReadHead();
  void OnHead(boost::beast::error_code error);
  void ReadBody();
  void OnRequest();
  void OnReadError(boost::beast::error_code error);
  void WatchForClose(uint64_t exchange);

  // I/O thread: writes `reply` and ends the exchange.
  void WriteReply(HttpReply reply);
  // Called when the exchange's last write is done: logs it, then reads the next request or
  // closes.
  void EndExchange(boost::beast::error_code error);
  // Sends what is buffered, then reads and drops what the client still sends for a moment
  // before closing, so that a client still writing its body sees the answer, not a reset.
  void LingerAndClose();
  void Drain();
  // The client is gone: tells on_gone once.
  void MarkGone();
  // Starts the next write of the stream, if none runs: the head, the chunks queued (as one), or
  // the last chunk, which ends the exchange. Once the client is gone, drops what is queued.
  void Flush();
  // The first `chunks` queued were written: drops them, tells their callers, and flushes on.
  void Written(size_t chunks);
  // Writing the first `chunks` failed: the client is gone.
  void WriteFailed(size_t chunks);
  template <typename Message>
  void SetCommonFields(Message& message, const HttpReply& reply);

  const std::shared_ptr<Shared> shared_;
  const bool counted_;
  std::string peer_;
  // The socket's executor, kept as its concrete type: running_in_this_thread, and posting
  // without the type-erased executor's copies.
  const Strand strand_;
  boost::beast::tcp_stream stream_;
  boost::beast::flat_buffer buffer_;
  std::optional<boost::beast::http::request_parser<boost::beast::http::string_body>> parser_;

  // The exchange in progress (I/O thread, except the atomics).
  uint64_t exchange_ = 0;  // counts requests; a close watch of an older one is stale
  bool keep_alive_ = false;
  std::string method_;
  std::string path_;
  int status_ = 0;
  unsigned long long request_id_ = 0;
  std::string why_;  // the start of an error body, for the log line
  std::unique_ptr<StreamHead> stream_head_;
  std::unique_ptr<boost::beast::http::response_serializer<boost::beast::http::empty_body>>
      stream_serializer_;
  std::atomic<bool> client_gone_{false};
  std::atomic<bool> ended_{false};
  std::function<void()> on_gone_;
  std::function<void()> on_end_;
  // The stream's writes not yet started: chunk data (with what to call once written) or the end.
  struct Outgoing {
    enum class Kind { kHead, kChunk, kLast } kind;
    std::string data;
    std::function<void()> written;
  };
  std::deque<Outgoing> outgoing_;
  bool writing_ = false;
  std::array<char, 4096> drain_buffer_{};
  size_t drained_bytes_ = 0;
};

}  // namespace tpserve

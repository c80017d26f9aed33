#include "coordinator/http_connection.h"

#include <sys/socket.h>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <cerrno>
#include <chrono>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/check.h"
#include "common/logging.h"

namespace tpserve {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;

constexpr char kLog[] = "http";
constexpr size_t kLoggedErrorBytes = 300;
// After a refusal the client may still be sending its body (clients that write the whole body
// before they read get a reset instead of the answer if the socket closes with data unread):
// read and drop up to this much, for up to this long, into a fixed buffer.
constexpr size_t kMaxDrainBytes = 64 << 20;
constexpr absl::Duration kDrainTime = absl::Seconds(5);

// The request's credential: the Authorization header, or Anthropic's x-api-key, which its clients
// send instead (as a bearer token, so that one set of keys serves both APIs).
template <typename Head>
std::string AuthorizationOf(const Head& head) {
  std::string authorization(head[http::field::authorization]);
  if (authorization.empty()) {
    const auto key = head.find("x-api-key");
    if (key != head.end()) authorization = absl::StrCat("Bearer ", std::string(key->value()));
  }
  return authorization;
}

std::chrono::steady_clock::duration ToSteady(absl::Duration d) {
  return absl::ToChronoNanoseconds(d);
}

std::string PeerOf(const net::ip::tcp::socket& socket) {
  beast::error_code error;
  const net::ip::tcp::endpoint peer = socket.remote_endpoint(error);
  if (error) return "unknown peer";
  return absl::StrCat(peer.address().to_string(), ":", peer.port());
}

// The listener accepts every socket on a strand of its own.
HttpConnection::Strand StrandOf(net::ip::tcp::socket& socket) {
  const auto* strand = socket.get_executor().target<HttpConnection::Strand>();
  TP_CHECK(strand != nullptr);
  return *strand;
}

}  // namespace

HttpConnection::HttpConnection(net::ip::tcp::socket socket, std::shared_ptr<Shared> shared,
                               bool counted)
    : shared_(std::move(shared)),
      counted_(counted),
      peer_(PeerOf(socket)),
      strand_(StrandOf(socket)),
      stream_(std::move(socket)) {
  if (counted_) shared_->open.fetch_add(1);
  // Chunks are first written at once (Flush); a full socket buffer must not block the thread.
  beast::error_code ignored;
  stream_.socket().non_blocking(true, ignored);
}

HttpConnection::~HttpConnection() {
  if (counted_) shared_->open.fetch_sub(1);
}

std::shared_ptr<HttpConnection> HttpConnection::Start(net::ip::tcp::socket socket,
                                                      std::shared_ptr<Shared> shared,
                                                      std::optional<HttpReply> refusal) {
  auto connection =
      std::make_shared<HttpConnection>(std::move(socket), std::move(shared), !refusal.has_value());
  net::dispatch(connection->strand_, [connection, refusal = std::move(refusal)]() mutable {
    if (refusal.has_value()) {
      connection->ended_.store(true);
      connection->WriteReply(*std::move(refusal));
    } else {
      connection->ReadHead();
    }
  });
  return connection;
}

void HttpConnection::CloseNow() {
  beast::error_code ignored;
  stream_.socket().shutdown(net::ip::tcp::socket::shutdown_both, ignored);
  stream_.socket().close(ignored);
}

void HttpConnection::ReadHead() {
  parser_.emplace();
  parser_->header_limit(static_cast<uint32_t>(shared_->limits.max_header_bytes));
  parser_->body_limit(shared_->limits.max_body_bytes);
  stream_.expires_after(ToSteady(shared_->limits.header_timeout));
  http::async_read_header(
      stream_, buffer_, *parser_,
      [self = shared_from_this()](beast::error_code error, size_t) { self->OnHead(error); });
}

void HttpConnection::OnHead(beast::error_code error) {
  if (error) return OnReadError(error);
  const auto& head = parser_->get();
  method_ = std::string(head.method_string());
  path_ = std::string(head.target().substr(0, head.target().find('?')));
  const HttpRequest request_head{method_, path_, AuthorizationOf(head), "", peer_};
  if (std::optional<HttpReply> refusal = shared_->admit(request_head)) {
    ended_.store(true);
    keep_alive_ = false;
    return WriteReply(*std::move(refusal));
  }
  if (parser_->is_done()) return OnRequest();
  // curl and others send a large body only after this interim answer (or a 1 s wait).
  if (absl::EqualsIgnoreCase(std::string(head[http::field::expect]), "100-continue")) {
    static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    stream_.expires_after(ToSteady(shared_->limits.write_timeout));
    return net::async_write(stream_, net::buffer(kContinue),
                            [self = shared_from_this()](beast::error_code error, size_t) {
                              if (error) return self->CloseNow();
                              self->ReadBody();
                            });
  }
  ReadBody();
}

void HttpConnection::ReadBody() {
  stream_.expires_after(ToSteady(shared_->limits.body_timeout));
  http::async_read(stream_, buffer_, *parser_,
                   [self = shared_from_this()](beast::error_code error, size_t) {
                     if (error) return self->OnReadError(error);
                     self->OnRequest();
                   });
}

void HttpConnection::OnReadError(beast::error_code error) {
  const HttpLimits& limits = shared_->limits;
  auto refuse = [this](int status, const std::string& message) {
    if (method_.empty()) {
      // A refusal from the head (its size, its Content-Length) comes before OnHead.
      const auto& head = parser_->get();
      method_ = head.method_string().empty() ? "-" : std::string(head.method_string());
      path_ = std::string(head.target().substr(0, head.target().find('?')));
    }
    ended_.store(true);
    keep_alive_ = false;
    WriteReply(shared_->error_reply(status, message));
  };
  if (error == http::error::body_limit) {
    return refuse(413, absl::StrCat("the request body is larger than the limit of ",
                                    limits.max_body_bytes, " bytes"));
  }
  if (error == http::error::header_limit) {
    return refuse(431, absl::StrCat("the request head is larger than the limit of ",
                                    limits.max_header_bytes, " bytes"));
  }
  if (error == beast::error::timeout) {
    // An idle kept-alive connection just ends; a request that stalled halfway is told why.
    if (!parser_->got_some()) return CloseNow();
    const bool in_body = parser_->is_header_done();
    return refuse(
        408,
        absl::StrCat("the request ", in_body ? "body" : "head", " did not arrive within ",
                     absl::FormatDuration(in_body ? limits.body_timeout : limits.header_timeout)));
  }
  if (error == http::error::end_of_stream || error == net::error::eof ||
      error == net::error::operation_aborted || error == net::error::connection_reset ||
      error == http::error::partial_message) {
    return CloseNow();
  }
  refuse(400, absl::StrCat("malformed HTTP request: ", error.message()));
}

void HttpConnection::OnRequest() {
  stream_.expires_never();
  auto& head = parser_->get();
  keep_alive_ = head.keep_alive();
  status_ = 0;
  request_id_ = 0;
  why_.clear();
  ended_.store(false);
  client_gone_.store(false);
  ++exchange_;
  HttpRequest request{method_, path_, AuthorizationOf(head), std::move(head.body()), peer_};
  WatchForClose(exchange_);
  shared_->dispatch(shared_from_this(), std::move(request));
}

void HttpConnection::WatchForClose(uint64_t exchange) {
  stream_.socket().async_wait(net::ip::tcp::socket::wait_read, [self = shared_from_this(),
                                                                exchange](beast::error_code error) {
    if (error || exchange != self->exchange_) return;
    char byte;
    const ssize_t n =
        ::recv(self->stream_.socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0) return;  // the next request, pipelined: read once this one is answered
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      return self->WatchForClose(exchange);
    }
    self->MarkGone();
  });
}

template <typename Message>
void HttpConnection::SetCommonFields(Message& message, const HttpReply& reply) {
  message.set(http::field::server, "tpserve");
  if (!reply.content_type.empty()) message.set(http::field::content_type, reply.content_type);
  for (const auto& [name, value] : reply.headers) message.set(name, value);
  message.keep_alive(keep_alive_ && !shared_->stopping.load());
  status_ = reply.status;
  request_id_ = reply.request_id;
}

void HttpConnection::Reply(HttpReply reply) {
  ended_.store(true);
  net::dispatch(strand_, [self = shared_from_this(), reply = std::move(reply)]() mutable {
    // A handler that failed halfway through a stream: its head is out, so the stream
    // just ends.
    if (self->stream_head_ != nullptr) {
      self->why_ = reply.body.substr(0, kLoggedErrorBytes);
      return self->EndExchange(net::error::connection_aborted);
    }
    self->WriteReply(std::move(reply));
  });
}

void HttpConnection::WriteReply(HttpReply reply) {
  auto response = std::make_shared<Response>(static_cast<http::status>(reply.status), 11);
  SetCommonFields(*response, reply);
  if (reply.status >= 400) why_ = reply.body.substr(0, kLoggedErrorBytes);
  response->body() = std::move(reply.body);
  response->prepare_payload();
  stream_.expires_after(ToSteady(shared_->limits.write_timeout));
  http::async_write(stream_, *response,
                    [self = shared_from_this(), response](beast::error_code error, size_t) {
                      self->EndExchange(error);
                    });
}

void HttpConnection::Post(std::function<void()> task) { net::post(strand_, std::move(task)); }

void HttpConnection::SetOnGone(std::function<void()> on_gone) {
  net::dispatch(strand_, [self = shared_from_this(), on_gone = std::move(on_gone)] {
    if (self->client_gone_.load()) return on_gone();
    self->on_gone_ = on_gone;
  });
}

void HttpConnection::SetOnEnd(std::function<void()> on_end) {
  net::dispatch(
      strand_, [self = shared_from_this(), on_end = std::move(on_end)] { self->on_end_ = on_end; });
}

void HttpConnection::MarkGone() {
  client_gone_.store(true);
  if (on_gone_) std::exchange(on_gone_, nullptr)();
}

void HttpConnection::StartStream(const HttpReply& head) {
  net::dispatch(strand_, [self = shared_from_this(), head] {
    self->stream_head_ = std::make_unique<StreamHead>(static_cast<http::status>(head.status), 11);
    self->SetCommonFields(*self->stream_head_, head);
    self->stream_head_->chunked(true);
    self->stream_serializer_ =
        std::make_unique<http::response_serializer<http::empty_body>>(*self->stream_head_);
    self->outgoing_.push_back({Outgoing::Kind::kHead, "", nullptr});
    self->Flush();
  });
}

void HttpConnection::WriteChunk(std::string data, std::function<void()> written) {
  if (!strand_.running_in_this_thread()) {
    return net::post(strand_, [self = shared_from_this(), data = std::move(data),
                               written = std::move(written)]() mutable {
      self->WriteChunk(std::move(data), std::move(written));
    });
  }
  outgoing_.push_back({Outgoing::Kind::kChunk, std::move(data), std::move(written)});
  Flush();
}

void HttpConnection::EndStream() {
  ended_.store(true);
  net::dispatch(strand_, [self = shared_from_this()] {
    self->outgoing_.push_back({Outgoing::Kind::kLast, "", nullptr});
    self->Flush();
  });
}

void HttpConnection::Flush() {
  if (writing_ || outgoing_.empty()) return;
  if (client_gone_.load()) {
    const bool ends = outgoing_.back().kind == Outgoing::Kind::kLast;
    outgoing_.clear();
    if (ends) {
      why_ = "the client went away";
      EndExchange(net::error::connection_aborted);
    }
    return;
  }
  writing_ = true;
  const Outgoing::Kind kind = outgoing_.front().kind;
  if (kind != Outgoing::Kind::kChunk) {
    stream_.expires_after(ToSteady(shared_->limits.write_timeout));
    outgoing_.pop_front();
  }
  if (kind == Outgoing::Kind::kHead) {
    return http::async_write_header(stream_, *stream_serializer_,
                                    [self = shared_from_this()](beast::error_code error, size_t) {
                                      self->writing_ = false;
                                      if (error) self->MarkGone();
                                      self->Flush();
                                    });
  }
  if (kind == Outgoing::Kind::kLast) {
    return net::async_write(stream_, http::make_chunk_last(),
                            [self = shared_from_this()](beast::error_code error, size_t) {
                              self->writing_ = false;
                              if (error) self->MarkGone();
                              self->EndExchange(error);
                            });
  }
  // Every chunk queued goes in one: SSE events stay whole, and a burst costs one write. They stay
  // queued until written.
  size_t chunks = 0;
  size_t bytes = 0;
  for (auto it = outgoing_.begin(); it != outgoing_.end() && it->kind == Outgoing::Kind::kChunk;
       ++it) {
    ++chunks;
    bytes += it->data.size();
  }
  if (bytes == 0) return Written(chunks);  // an empty chunk would end the stream
  // Framed here, so that a partial write goes on from where it stopped.
  auto frame = std::make_shared<std::string>();
  frame->reserve(bytes + 16);
  absl::StrAppend(frame.get(), absl::Hex(bytes), "\r\n");
  for (size_t k = 0; k < chunks; ++k) frame->append(outgoing_[k].data);
  frame->append("\r\n");
  // Most chunks fit the socket's buffer: written now, they leave without a handler's round trip
  // through the I/O queue, behind every other stream's news of the same step.
  beast::error_code error;
  const size_t now = stream_.socket().write_some(net::buffer(*frame), error);
  if (!error && now == frame->size()) return Written(chunks);
  if (error && error != net::error::would_block) return WriteFailed(chunks);
  // Only a write that waits for the client needs the deadline.
  stream_.expires_after(ToSteady(shared_->limits.write_timeout));
  net::async_write(stream_, net::buffer(frame->data() + now, frame->size() - now),
                   [self = shared_from_this(), frame, chunks](beast::error_code error, size_t) {
                     if (error) return self->WriteFailed(chunks);
                     self->Written(chunks);
                   });
}

void HttpConnection::Written(size_t chunks) {
  writing_ = false;
  for (size_t k = 0; k < chunks; ++k) {
    std::function<void()> written = std::move(outgoing_.front().written);
    outgoing_.pop_front();
    if (written) written();
  }
  Flush();
}

void HttpConnection::WriteFailed(size_t chunks) {
  writing_ = false;
  outgoing_.erase(outgoing_.begin(), outgoing_.begin() + static_cast<std::ptrdiff_t>(chunks));
  MarkGone();
  Flush();
}

void HttpConnection::EndExchange(beast::error_code error) {
  ++exchange_;  // the close watch, if still waiting, is stale now
  if (status_ != 0) {
    LogInfo(kLog, "%s %s from %s: %d%s%s%s%s", method_, path_, peer_, status_,
            request_id_ == 0 ? "" : ", request ",
            request_id_ == 0 ? "" : std::to_string(request_id_), why_.empty() ? "" : " ", why_);
  }
  stream_serializer_.reset();
  stream_head_.reset();
  on_gone_ = nullptr;
  if (on_end_) std::exchange(on_end_, nullptr)();
  if (error) return CloseNow();
  if (!keep_alive_ || shared_->stopping.load()) return LingerAndClose();
  beast::error_code ignored;
  stream_.socket().cancel(ignored);  // the close watch
  method_.clear();
  path_.clear();
  ReadHead();
}

void HttpConnection::LingerAndClose() {
  beast::error_code ignored;
  stream_.socket().shutdown(net::ip::tcp::socket::shutdown_send, ignored);
  stream_.expires_after(ToSteady(kDrainTime));
  drained_bytes_ = 0;
  Drain();
}

void HttpConnection::Drain() {
  stream_.async_read_some(net::buffer(drain_buffer_),
                          [self = shared_from_this()](beast::error_code error, size_t n) {
                            self->drained_bytes_ += n;
                            if (error || self->drained_bytes_ > kMaxDrainBytes) {
                              return self->CloseNow();
                            }
                            self->Drain();
                          });
}

}  // namespace tpserve

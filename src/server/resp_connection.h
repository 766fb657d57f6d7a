// A connection speaking RESP, the Redis protocol (proto/RESP.md): segstore's
// second front end, on a port of its own ([resp] listen). Internal to the
// front end (server.cc).
//
// It is a translator over the same Service as the binary port: a command
// becomes one or more requests of the binary protocol (the body a client of
// PROTOCOL.md would send), handed to the loop's Handler; their answers are
// turned into the command's reply. Reads (get, batch get) go as values
// both ways (Handler::HandleGet, Responder::SendValue): a 1,000-segment
// profile is not encoded in MessagePack only to be decoded here. So every
// operation, its checks and its errors are the binary protocol's. Commands about the connection
// itself (PING, HELLO, AUTH, CLIENT, COMMAND, ...) are answered here.
//
// Replies go out in the order commands came, as RESP requires: each command
// read gets a place in a queue, which is written from the front as the
// places fill. Everything else (TLS, the shared secret's deadline,
// backpressure, timeouts, draining) is the base Connection's.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "proto/resp.h"
#include "server/connection.h"
#include "server/resp_commands.h"

namespace segstore::server {

class RespConnection final : public Connection {
 public:
  RespConnection(Loop* loop, boost::asio::ip::tcp::socket socket, const ServerOptions& options,
                 std::shared_ptr<const Credentials> credentials);

  // One command's place in the reply queue.
  struct Pending;
  // What a command does with each answer of a request it sent (Ask): `h`
  // is the answer's header (its status, its flags), `body` its body.
  using OnAnswer =
      std::function<void(Pending& p, const proto::FrameHeader& h, std::string_view body)>;
  // What a command does with the outcome of a read it sent (Call with a get
  // or batch get): `flags` are the answer's (kFlagStale).
  using OnReadValue = std::function<void(Pending& p, uint8_t flags, ReadValue& value)>;
  struct Pending {
    std::string reply;      // the command's reply, complete once nothing is awaited
    uint32_t sequence = 0;  // the request ID of the requests it sends
    uint32_t awaiting = 0;  // requests sent to the handler and not yet answered
    bool serving = true;    // its command is still being read (more requests may follow)
    bool error = false;     // the reply is an error (counted)
    bool quit = false;      // close once this reply is written (QUIT)
    uint16_t command = 0;   // its slot in the command table
    int64_t sum = 0;        // what a command sending many requests adds up
    int32_t slot = -1;      // in a cluster: the slot of its keys (-1: none)
    bool moving = false;    // a WrongNode answer came: the map was asked for MOVED
    std::chrono::steady_clock::time_point started;
    OnAnswer on_answer;
    OnReadValue on_value;
  };

  // ---- for the commands (resp_commands.cc) ----
  proto::RespWriter Writer(Pending& p) { return proto::RespWriter(&p.reply, resp3_); }
  // What Call answers a user without a profile with: null.
  std::function<void(Pending&)> NullReply() {
    return [this](Pending& q) { Writer(q).Null(); };
  }
  // Sets the reply to an error.
  void ReplyError(Pending& p, std::string_view prefix, std::string_view message);
  // The reply for a request's error answer (its status and message).
  void ReplyStatus(Pending& p, const proto::FrameHeader& h, std::string_view body);
  void ReplyStatus(Pending& p, const Status& status);
  // Sends one request to the handler: `op` with `body`; `on_answer` gets
  // its answer (possibly before Ask returns).
  void Ask(Pending& p, proto::Op op, std::string_view body, OnAnswer on_answer);
  // Sends `request` as the binary protocol's `op`; `then(q, answer, header)`
  // gets its decoded answer (the header for its flags). A NotFound answer
  // is `missing(q)` when that is given; any other error is the reply. A get
  // or batch get goes to the handler as a value and its answer comes back as
  // one (Handler::HandleGet): no encoding either way.
  template <typename Answer, typename Request, typename Then>
  void Call(Pending& p, proto::Op op, Request&& request, Then then,
            std::function<void(Pending&)> missing = nullptr);
  // The body scratch the commands encode requests into (reused).
  std::string& scratch() {
    scratch_.clear();
    return scratch_;
  }
  bool resp3() const { return resp3_; }

 private:
  proto::InputBuffer& input() override { return in_; }
  bool ServeNext() override;
  void OnReply(std::string frame, std::chrono::steady_clock::time_point started) override;
  void OnValue(uint32_t request_id, uint8_t flags, ReadValue value) override;
  // The command awaiting the answer to request `request_id`.
  Pending& AwaitingAnswer(uint32_t request_id);
  // Runs `answer` for `p`, which got an answer, bounds its reply
  // (BoundReply), then writes what is complete.
  template <typename Run>
  void Answered(Pending& p, Run answer);
  // Sends a read to the handler as a value (Call): its outcome comes to
  // p.on_value, as a value or (an error found before the read) a frame.
  void AskRead(Pending& p, proto::GetRequest request);
  void AskRead(Pending& p, proto::BatchGetRequest request);
  // What both AskReads do first: `op`'s header, its frame answer routed to
  // ReadFrame<Answer>, one more answer awaited.
  template <typename Answer>
  proto::FrameHeader BeginRead(Pending& p, proto::Op op);
  // The frame answering a read (AskRead), made the value on_value takes.
  template <typename Answer>
  void ReadFrame(Pending& p, const proto::FrameHeader& h, std::string_view body);
  // A reply over resp_max_reply_bytes (the binary protocol's largest answer)
  // becomes the error the binary protocol answers then (LimitExceeded).
  // Checked after every answer (Answered); a read whose segments alone
  // would exceed it is refused before its reply is built (TooLarge).
  void BoundReply(Pending& p);
  bool TooLarge(Pending& p, const GetResult& r);
  bool TooLarge(Pending& p, const BatchGetResult& all);
  void ReplyTooLarge(Pending& p);
  void AppendFailure(const Status& status, std::string* out) override;

  // Runs one command into `p`: checks its arity and the connection's
  // authentication, then dispatches.
  void Serve(const RespCommandDef* def, RespArgs args, Pending& p);
  // Writes the complete replies at the front of the queue.
  void Flush();
  // Stops reading: the commands taken are answered, then the connection
  // closes (QUIT, a wrong secret).
  void CloseAfterReplies();

  // The cluster commands (resp_cluster.cc).
  void Cluster(RespArgs args, Pending& p);
  // In a cluster, a command's keys must share one slot; false when they do
  // not (the reply is then CROSSSLOT). Sets p.slot.
  bool OneSlot(const RespCommandDef& def, RespArgs args, Pending& p);
  // A WrongNode answer in a cluster: asks for the map, then replies MOVED.
  void ReplyMoved(Pending& p, std::string message);
  // A batch answer with a WrongNode entry, in a cluster (its keys share one
  // slot, so all of them moved): ReplyMoved, and true.
  bool MovedEntry(Pending& p, const BatchGetResult& all);

  // The connection's own commands.
  void Hello(RespArgs args, Pending& p);
  void Auth(RespArgs args, Pending& p);
  // Checks a secret given by AUTH or HELLO; false when wrong (the reply is
  // then the error and the connection closes after it).
  bool CheckSecret(std::string_view user, std::string_view secret, Pending& p);
  void Client(RespArgs args, Pending& p);
  void Command(RespArgs args, Pending& p);
  void Info(RespArgs args, Pending& p);
  void Reset(Pending& p);
  // A command answered from the server's statistics (INFO, DBSIZE).
  void AskStats(Pending& p, std::function<void(Pending& p, const Stats& stats)> then);

  // The data commands: each one request of the binary protocol, or one per key.
  void SegGet(RespArgs args, Pending& p);
  void SegMget(RespArgs args, Pending& p);
  void SegCount(RespArgs args, Pending& p);
  void SegUpsert(RespArgs args, Pending& p);
  void SegRemove(RespArgs args, Pending& p);
  void SegTrim(RespArgs args, Pending& p);
  void SegDel(RespArgs args, Pending& p);
  // Profile bridging: link, unlink, master_of, links, connected.
  void SegLink(RespArgs args, Pending& p);
  void SegUnlink(RespArgs args, Pending& p);
  void SegMasterof(RespArgs args, Pending& p);
  void SegLinks(RespArgs args, Pending& p);
  void SegConnected(RespArgs args, Pending& p);
  // Profile fields: field_set, field_del, field_incr, field_max.
  void SegFieldset(RespArgs args, Pending& p);
  void SegFielddel(RespArgs args, Pending& p);
  void SegIncr(RespArgs args, Pending& p);
  void SegFieldmax(RespArgs args, Pending& p);
  void Type(RespArgs args, Pending& p);
  void Del(RespArgs args, Pending& p);
  void Exists(RespArgs args, Pending& p);

  // The hash commands (resp_hash.cc): a hash is a user's profile, a field a
  // segment ID, a value the segment's attributes.
  void HashRead(RespCmd cmd, RespArgs args, Pending& p);  // every read of fields
  void Hlen(RespArgs args, Pending& p);
  void Hexists(RespArgs args, Pending& p);
  void Hdel(RespArgs args, Pending& p);
  void Hset(RespCmd cmd, RespArgs args, Pending& p);        // HSET, HMSET, HSETEX
  void HashExpire(RespCmd cmd, RespArgs args, Pending& p);  // HEXPIRE..., HPERSIST
  void Hgetex(RespArgs args, Pending& p);
  // Asks for `user`'s segments under `o`; `then` gets them, or null when
  // the user has no profile (an error is the reply without calling it).
  void AskGet(Pending& p, std::string_view user, const GetOptions& o,
              std::function<void(Pending& q, const GetResult* r)> then);

  proto::RespReader in_;
  std::vector<std::string_view> args_;  // the command being served
  std::deque<Pending> pending_;         // replies in the order of their commands
  std::string scratch_;
  uint32_t next_sequence_ = 0;
  bool resp3_ = false;      // HELLO 3
  bool closing_ = false;    // QUIT or a wrong secret: nothing more is taken
  int answering_ = 0;       // OnReply calls on the stack: no reply leaves the queue meanwhile
  std::string name_;        // CLIENT SETNAME
  std::string library_[2];  // CLIENT SETINFO LIB-NAME, LIB-VER
  uint64_t id_ = 0;         // CLIENT ID
  const Clock* clock_;      // what TTL replies count from
  std::chrono::steady_clock::time_point opened_ = std::chrono::steady_clock::now();
};

template <typename Answer, typename Request, typename Then>
void RespConnection::Call(Pending& p, [[maybe_unused]] proto::Op op, Request&& request, Then then,
                          std::function<void(Pending&)> missing) {
  if constexpr (std::is_same_v<Answer, GetResult> || std::is_same_v<Answer, BatchGetResult>) {
    p.on_value = [this, then = std::move(then), missing = std::move(missing)](
                     Pending& q, uint8_t flags, ReadValue& value) {
      Result<Answer>& r = std::get<Result<Answer>>(value);
      if (!r.ok()) {
        if (r.status().IsNotFound() && missing) return missing(q);
        return ReplyStatus(q, r.status());
      }
      if (TooLarge(q, *r)) return;
      proto::FrameHeader h;
      h.flags = flags;
      then(q, *r, h);
    };
    AskRead(p, std::decay_t<Request>(std::forward<Request>(request)));
  } else {
    std::string& body = scratch();
    proto::Encode(request, &body);
    Ask(p, op, body,
        [this, then = std::move(then), missing = std::move(missing)](
            Pending& q, const proto::FrameHeader& h, std::string_view answer) {
          if (h.status == static_cast<uint8_t>(Status::Code::kNotFound) && missing) {
            return missing(q);
          }
          if (h.status != 0) return ReplyStatus(q, h, answer);
          Answer a;
          if (Status s = proto::Decode(answer, RespAnswerLimits(), &a); !s.ok()) {
            return ReplyError(q, "ERR", s.message());
          }
          then(q, a, h);
        });
  }
}

}  // namespace segstore::server

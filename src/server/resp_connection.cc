#include "server/resp_connection.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cctype>

#include "proto/wire.h"

namespace segstore::server {

namespace asio = boost::asio;

namespace {

constexpr size_t kReadChunk = 64 * 1024;
// Before authentication a command may take no more than this (as a binary
// frame before its hello).
constexpr uint32_t kMaxUnauthenticatedCommand = 64 * 1024;
// The Redis version whose commands this front end follows, for clients that
// look at HELLO's "version" or INFO's redis_version before using a command
// (HEXPIRE came in 7.4). segstore's own version is beside it.
constexpr std::string_view kRedisVersion = "7.4.0";

std::atomic<uint64_t> next_client_id{1};

bool HasFlag(const RespCommandDef& def, std::string_view flag) {
  size_t at = def.flags.find(flag);
  while (at != std::string_view::npos) {
    const size_t end = at + flag.size();
    if ((at == 0 || def.flags[at - 1] == ' ') && (end == def.flags.size() || def.flags[end] == ' '))
      return true;
    at = def.flags.find(flag, end);
  }
  return false;
}

// The value of one statistic, as INFO writes it.
std::string StatText(const Stats& stats, std::string_view name) {
  for (const StatEntry& e : stats.entries) {
    if (e.name != name) continue;
    if (const auto* u = std::get_if<uint64_t>(&e.value)) return std::to_string(*u);
    if (const auto* d = std::get_if<double>(&e.value)) return fmt::format("{}", *d);
    return std::get<std::string>(e.value);
  }
  return "0";
}

}  // namespace

RespConnection::RespConnection(Loop* loop, asio::ip::tcp::socket socket,
                               const ServerOptions& options,
                               std::shared_ptr<const Credentials> credentials)
    : Connection(loop, std::move(socket), options, std::move(credentials)),
      in_(kReadChunk, 4 * kReadChunk, options.max_frame_bytes),
      id_(next_client_id.fetch_add(1, std::memory_order_relaxed)),
      clock_(options.clock != nullptr ? options.clock : Clock::System()) {
  if (!authenticated_) {
    in_.set_max_command_bytes(std::min(options.max_frame_bytes, kMaxUnauthenticatedCommand));
  }
}

// ---- the reply queue ----

bool RespConnection::ServeNext() {
  if (closing_) return false;
  std::string error;
  const proto::RespReader::Next next = in_.Take(&args_, &error);
  if (next == proto::RespReader::Next::kNeedMore) return false;
  // A place in the reply queue, behind the replies to the commands before.
  Pending& p = pending_.emplace_back();
  p.sequence = next_sequence_++;
  p.started = std::chrono::steady_clock::now();
  ++in_flight_;
  if (next == proto::RespReader::Next::kBroken) {
    LoopCounters::Add(loop_->counters.broken_frames, 1);
    p.command = kRespCommands;
    ReplyError(p, "ERR", error);
    p.serving = false;
    spdlog::warn("closing RESP connection from {}: {}", Peer(), error);
    CloseAfterReplies();
    Flush();
    return false;
  }
  const RespCommandDef* def = FindRespCommand(args_[0]);
  p.command = static_cast<uint16_t>(RespSlot(def));
  Serve(def, args_, p);
  p.serving = false;
  Flush();
  return state_ != State::kFailing;
}

void RespConnection::Flush() {
  // A command answering (OnReply) may be asking again: its place stays.
  if (answering_ > 0) return;
  while (!pending_.empty()) {
    Pending& p = pending_.front();
    if (p.serving || p.awaiting > 0) break;
    LoopCounters& c = loop_->counters;
    LoopCounters::Add(c.resp_commands[p.command], 1);
    if (p.error) LoopCounters::Add(c.resp_errors[p.command], 1);
    const auto us = std::chrono::duration_cast<std::chrono::microseconds>(
                        std::chrono::steady_clock::now() - p.started)
                        .count();
    c.resp_latency_us[p.command].Record(static_cast<uint64_t>(std::max<int64_t>(us, 0)));
    if (state_ != State::kClosed) Queue(std::move(p.reply));
    pending_.pop_front();
    --in_flight_;
  }
}

void RespConnection::CloseAfterReplies() {
  closing_ = true;
  in_.Clear();
  if (state_ == State::kOpen) state_ = State::kInputEnded;
}

RespConnection::Pending& RespConnection::AwaitingAnswer(uint32_t request_id) {
  if (pending_.empty()) AnsweredTwice();
  const uint32_t index = request_id - pending_.front().sequence;
  if (index >= pending_.size() || pending_[index].awaiting == 0) AnsweredTwice();
  Pending& p = pending_[index];
  --p.awaiting;
  return p;
}

template <typename Run>
void RespConnection::Answered(Pending& p, Run answer) {
  ++answering_;
  answer();
  BoundReply(p);
  --answering_;
  Flush();
  Pump();
}

void RespConnection::OnReply(std::string frame, std::chrono::steady_clock::time_point) {
  proto::FrameHeader h;
  if (frame.size() < proto::kHeaderSize ||
      proto::DecodeHeader(reinterpret_cast<const uint8_t*>(frame.data()), UINT32_MAX, &h) !=
          proto::HeaderCheck::kOk) {
    AnsweredTwice();  // the handler writes whole frames: anything else is a bug
  }
  Pending& p = AwaitingAnswer(h.request_id);
  Answered(p, [&] {
    p.on_answer(p, h, std::string_view(frame).substr(proto::kHeaderSize, h.body_length));
  });
}

void RespConnection::OnValue(uint32_t request_id, uint8_t flags, ReadValue value) {
  Pending& p = AwaitingAnswer(request_id);
  Answered(p, [&] { p.on_value(p, flags, value); });
}

template <typename Answer>
void RespConnection::ReadFrame(Pending& p, const proto::FrameHeader& h, std::string_view body) {
  if (h.status != 0) {
    ReadValue value(Result<Answer>(Status::FromCode(h.status, proto::DecodeError(body))));
    return p.on_value(p, h.flags, value);
  }
  // From a handler that answers reads as frames (Handler's default).
  Answer a;
  if (Status s = proto::Decode(body, RespAnswerLimits(), &a); !s.ok()) {
    return ReplyError(p, "ERR", s.message());
  }
  ReadValue value(Result<Answer>(std::move(a)));
  p.on_value(p, h.flags, value);
}

template <typename Answer>
proto::FrameHeader RespConnection::BeginRead(Pending& p, proto::Op op) {
  p.on_answer = [this](Pending& q, const proto::FrameHeader& h, std::string_view body) {
    ReadFrame<Answer>(q, h, body);
  };
  ++p.awaiting;
  proto::FrameHeader h;
  h.op = static_cast<uint8_t>(op);
  h.request_id = p.sequence;
  JoinBurst();
  return h;
}

void RespConnection::AskRead(Pending& p, proto::GetRequest request) {
  const proto::FrameHeader h = BeginRead<GetResult>(p, proto::Op::kGet);
  loop_->handler->HandleGet(h, std::move(request), Responder(shared_from_this(), p.started, true));
}

void RespConnection::AskRead(Pending& p, proto::BatchGetRequest request) {
  const proto::FrameHeader h = BeginRead<BatchGetResult>(p, proto::Op::kBatchGet);
  loop_->handler->HandleBatchGet(h, std::move(request),
                                 Responder(shared_from_this(), p.started, true));
}

// The smallest a listed segment can be in a reply: its ID ("$1\r\n0\r\n").
constexpr size_t kLeastBytesPerSegment = 7;

bool RespConnection::TooLarge(Pending& p, const GetResult& r) {
  if (r.size() * kLeastBytesPerSegment <= options_.resp_max_reply_bytes) return false;
  ReplyTooLarge(p);
  return true;
}

bool RespConnection::TooLarge(Pending& p, const BatchGetResult& all) {
  size_t segments = 0;
  for (const Result<GetResult>& r : all) segments += r.ok() ? r->size() : 0;
  if (segments * kLeastBytesPerSegment <= options_.resp_max_reply_bytes) return false;
  ReplyTooLarge(p);
  return true;
}

void RespConnection::BoundReply(Pending& p) {
  if (p.reply.size() > options_.resp_max_reply_bytes) ReplyTooLarge(p);
}

void RespConnection::ReplyTooLarge(Pending& p) {
  ReplyError(p, "LIMIT",
             "the reply would be over " + std::to_string(options_.resp_max_reply_bytes) +
                 " bytes: ask for fewer users, a LIMIT or IDSONLY");
  p.reply.shrink_to_fit();
}

void RespConnection::AppendFailure(const Status& status, std::string* out) {
  proto::RespWriter w(out, resp3_);
  w.Error(RespErrorPrefix(status.code()), status.message());
}

bool RespConnection::MovedEntry(Pending& p, const BatchGetResult& all) {
  if (!options_.cluster || p.slot < 0) return false;
  for (const Result<GetResult>& r : all) {
    if (!r.ok() && r.status().code() == Status::Code::kWrongNode) {
      ReplyMoved(p, std::string(r.status().message()));
      return true;
    }
  }
  return false;
}

void RespConnection::ReplyError(Pending& p, std::string_view prefix, std::string_view message) {
  p.reply.clear();
  p.error = true;
  Writer(p).Error(prefix, message);
}

void RespConnection::ReplyStatus(Pending& p, const proto::FrameHeader& h, std::string_view body) {
  std::string message = proto::DecodeError(body);
  ReplyStatus(p, Status::FromCode(h.status, std::move(message)));
}

void RespConnection::ReplyStatus(Pending& p, const Status& status) {
  const Status::Code code = status.code();
  if (options_.cluster && code == Status::Code::kWrongNode && p.slot >= 0) {
    return ReplyMoved(p, std::string(status.message()));
  }
  // A cluster node serving nothing yet: Redis Cluster clients retry TRYAGAIN.
  if (options_.cluster && code == Status::Code::kBusy) {
    return ReplyError(p, "TRYAGAIN", status.message());
  }
  ReplyError(p, RespErrorPrefix(code), status.message());
}

void RespConnection::Ask(Pending& p, proto::Op op, std::string_view body, OnAnswer on_answer) {
  if (on_answer) p.on_answer = std::move(on_answer);
  ++p.awaiting;
  proto::FrameHeader h;
  h.op = static_cast<uint8_t>(op);
  h.request_id = p.sequence;
  h.body_length = static_cast<uint32_t>(body.size());
  JoinBurst();
  loop_->handler->Handle(h, body, Responder(shared_from_this(), p.started));
}

// ---- dispatch ----

void RespConnection::Serve(const RespCommandDef* def, RespArgs args, Pending& p) {
  if (def == nullptr) {
    std::string words;
    for (size_t i = 1; i < args.size() && i < 4; ++i) {
      words += fmt::format("'{}' ", args[i].substr(0, 64));
    }
    return ReplyError(
        p, "ERR",
        fmt::format("unknown command '{}', with args beginning with: {}(segstore answers the "
                    "commands COMMAND lists; proto/RESP.md)",
                    args[0].substr(0, 64), words));
  }
  if (!authenticated_ && !HasFlag(*def, "noauth")) {
    return ReplyError(p, "NOAUTH", "Authentication required.");
  }
  const auto n = static_cast<int>(std::min<size_t>(args.size(), INT32_MAX));
  if ((def->arity > 0 && n != def->arity) || (def->arity < 0 && n < -def->arity)) {
    return ReplyError(p, "ERR",
                      fmt::format("wrong number of arguments for '{}' command", def->name));
  }
  if (options_.cluster && def->keys != RespKeys::kNone && !OneSlot(*def, args, p)) return;
  switch (def->id) {
    case RespCmd::kPing:
      if (args.size() > 2) {
        return ReplyError(p, "ERR", "wrong number of arguments for 'ping' command");
      }
      if (args.size() == 2) return Writer(p).Bulk(args[1]);
      return Writer(p).Simple("PONG");
    case RespCmd::kEcho:
      return Writer(p).Bulk(args[1]);
    case RespCmd::kHello:
      return Hello(args, p);
    case RespCmd::kAuth:
      return Auth(args, p);
    case RespCmd::kSelect:
      if (args[1] != "0") return ReplyError(p, "ERR", "DB index is out of range");
      return Writer(p).Simple("OK");
    case RespCmd::kClient:
      return Client(args, p);
    case RespCmd::kCommand:
      return Command(args, p);
    case RespCmd::kInfo:
      return Info(args, p);
    case RespCmd::kQuit:
      Writer(p).Simple("OK");
      return CloseAfterReplies();
    case RespCmd::kReset:
      return Reset(p);
    case RespCmd::kDbsize:
      return AskStats(p, [](Pending& q, const Stats& stats) {
        proto::RespWriter(&q.reply, false)
            .Integer(static_cast<int64_t>(std::stoull(StatText(stats, "storage.index_entries"))));
      });
    case RespCmd::kType:
      return Type(args, p);
    case RespCmd::kCluster:
      return Cluster(args, p);
    case RespCmd::kReadonly:
    case RespCmd::kReadwrite:
    case RespCmd::kAsking:
      if (!options_.cluster) {
        return ReplyError(p, "ERR", "This instance has cluster support disabled");
      }
      return Writer(p).Simple("OK");
    case RespCmd::kSegGet:
      return SegGet(args, p);
    case RespCmd::kSegMget:
      return SegMget(args, p);
    case RespCmd::kSegCount:
      return SegCount(args, p);
    case RespCmd::kSegUpsert:
      return SegUpsert(args, p);
    case RespCmd::kSegRemove:
      return SegRemove(args, p);
    case RespCmd::kSegTrim:
      return SegTrim(args, p);
    case RespCmd::kSegDel:
      return SegDel(args, p);
    case RespCmd::kSegLink:
      return SegLink(args, p);
    case RespCmd::kSegUnlink:
      return SegUnlink(args, p);
    case RespCmd::kSegMasterof:
      return SegMasterof(args, p);
    case RespCmd::kSegLinks:
      return SegLinks(args, p);
    case RespCmd::kSegConnected:
      return SegConnected(args, p);
    case RespCmd::kSegFieldset:
      return SegFieldset(args, p);
    case RespCmd::kSegFielddel:
      return SegFielddel(args, p);
    case RespCmd::kSegIncr:
      return SegIncr(args, p);
    case RespCmd::kSegFieldmax:
      return SegFieldmax(args, p);
    case RespCmd::kDel:
    case RespCmd::kUnlink:
      return Del(args, p);
    case RespCmd::kExists:
      return Exists(args, p);
    case RespCmd::kHget:
    case RespCmd::kHmget:
    case RespCmd::kHgetall:
    case RespCmd::kHkeys:
    case RespCmd::kHvals:
    case RespCmd::kHttl:
    case RespCmd::kHpttl:
    case RespCmd::kHexpiretime:
    case RespCmd::kHpexpiretime:
      return HashRead(def->id, args, p);
    case RespCmd::kHlen:
      return Hlen(args, p);
    case RespCmd::kHexists:
      return Hexists(args, p);
    case RespCmd::kHdel:
      return Hdel(args, p);
    case RespCmd::kHset:
    case RespCmd::kHmset:
    case RespCmd::kHsetex:
      return Hset(def->id, args, p);
    case RespCmd::kHexpire:
    case RespCmd::kHpexpire:
    case RespCmd::kHexpireat:
    case RespCmd::kHpexpireat:
    case RespCmd::kHpersist:
      return HashExpire(def->id, args, p);
    case RespCmd::kHgetex:
      return Hgetex(args, p);
    case RespCmd::kCount:
      break;
  }
  ReplyError(p, "ERR", "command not served");
}

// ---- the connection's own commands ----

bool RespConnection::CheckSecret(std::string_view user, std::string_view secret, Pending& p) {
  if (!credentials_->auth_required()) {
    ReplyError(p, "ERR",
               "AUTH called without any password configured for the default user. Are you sure "
               "your configuration is correct?");
    return false;
  }
  if (user != "default" || !credentials_->Authenticate(secret)) {
    LoopCounters::Add(loop_->counters.auth_failures, 1);
    ReplyError(p, "WRONGPASS",
               "invalid username-password pair or user is disabled (the connection closes)");
    spdlog::warn("closing RESP connection from {}: wrong shared secret", Peer());
    CloseAfterReplies();
    return false;
  }
  authenticated_ = true;
  in_.set_max_command_bytes(options_.max_frame_bytes);
  return true;
}

void RespConnection::Auth(RespArgs args, Pending& p) {
  if (args.size() > 3) return ReplyError(p, "ERR", "syntax error");
  const std::string_view user = args.size() == 3 ? args[1] : "default";
  if (CheckSecret(user, args.back(), p)) Writer(p).Simple("OK");
}

void RespConnection::Hello(RespArgs args, Pending& p) {
  bool resp3 = resp3_;
  size_t i = 1;
  if (args.size() > 1) {
    if (args[1] == "2" || args[1] == "3") {
      resp3 = args[1] == "3";
    } else {
      return ReplyError(p, "NOPROTO", "unsupported protocol version");
    }
    i = 2;
  }
  std::string_view user;
  std::string_view secret;
  std::string_view name;
  bool auth = false;
  bool setname = false;
  for (; i < args.size(); ++i) {
    if (RespEqualsNoCase(args[i], "AUTH") && i + 2 < args.size()) {
      auth = true;
      user = args[i + 1];
      secret = args[i + 2];
      i += 2;
    } else if (RespEqualsNoCase(args[i], "SETNAME") && i + 1 < args.size()) {
      setname = true;
      name = args[i + 1];
      i += 1;
    } else {
      return ReplyError(p, "ERR",
                        fmt::format("Syntax error in HELLO option '{}'", args[i].substr(0, 64)));
    }
  }
  // Without a secret configured any password is taken, as Redis's default
  // user without one takes any.
  if (auth && credentials_->auth_required() && !CheckSecret(user, secret, p)) return;
  if (!authenticated_) {
    return ReplyError(p, "NOAUTH",
                      "HELLO must be called with the client already authenticated, otherwise "
                      "the HELLO <proto> AUTH <user> <pass> option can be used to authenticate "
                      "the client and select the RESP protocol version at the same time");
  }
  if (setname) {
    if (std::any_of(name.begin(), name.end(), [](char c) { return c <= ' ' || c > '~'; })) {
      return ReplyError(p, "ERR",
                        "Client names cannot contain spaces, newlines or special characters.");
    }
    name_ = std::string(name);
  }
  resp3_ = resp3;
  proto::HelloRequest hello;
  hello.client = "resp";
  std::string& body = scratch();
  proto::Encode(hello, &body);
  Ask(p, proto::Op::kHello, body,
      [this](Pending& q, const proto::FrameHeader& h, std::string_view answer) {
        ServerInfo info;
        if (h.status != 0) return ReplyStatus(q, h, answer);
        if (Status s = proto::Decode(answer, RespAnswerLimits(), &info); !s.ok()) {
          return ReplyError(q, "ERR", s.message());
        }
        proto::RespWriter w = Writer(q);
        w.Map(8);
        w.Bulk("server");
        w.Bulk("segstore");
        w.Bulk("version");
        w.Bulk(kRedisVersion);
        w.Bulk("proto");
        w.Integer(resp3_ ? 3 : 2);
        w.Bulk("id");
        w.Integer(static_cast<int64_t>(id_));
        w.Bulk("mode");
        w.Bulk(options_.cluster ? "cluster" : "standalone");
        w.Bulk("role");
        w.Bulk("master");
        w.Bulk("modules");
        w.Array(0);
        w.Bulk("segstore");
        w.Bulk(info.server);
      });
}

void RespConnection::Reset(Pending& p) {
  resp3_ = false;
  name_.clear();
  library_[0].clear();
  library_[1].clear();
  if (credentials_->auth_required()) {
    authenticated_ = false;
    in_.set_max_command_bytes(std::min(options_.max_frame_bytes, kMaxUnauthenticatedCommand));
  }
  Writer(p).Simple("RESET");
}

void RespConnection::Client(RespArgs args, Pending& p) {
  const std::string_view sub = args[1];
  if (RespEqualsNoCase(sub, "SETNAME") && args.size() == 3) {
    if (std::any_of(args[2].begin(), args[2].end(), [](char c) { return c <= ' ' || c > '~'; })) {
      return ReplyError(p, "ERR",
                        "Client names cannot contain spaces, newlines or special characters.");
    }
    name_ = std::string(args[2]);
    return Writer(p).Simple("OK");
  }
  if (RespEqualsNoCase(sub, "GETNAME") && args.size() == 2) {
    if (name_.empty()) return Writer(p).Null();
    return Writer(p).Bulk(name_);
  }
  if (RespEqualsNoCase(sub, "ID") && args.size() == 2) {
    return Writer(p).Integer(static_cast<int64_t>(id_));
  }
  if (RespEqualsNoCase(sub, "SETINFO") && args.size() == 4) {
    const bool lib_name = RespEqualsNoCase(args[2], "LIB-NAME");
    if (!lib_name && !RespEqualsNoCase(args[2], "LIB-VER")) {
      return ReplyError(p, "ERR", fmt::format("Unrecognized option '{}'", args[2].substr(0, 64)));
    }
    library_[lib_name ? 0 : 1] = std::string(args[3].substr(0, 128));
    return Writer(p).Simple("OK");
  }
  if ((RespEqualsNoCase(sub, "NO-EVICT") || RespEqualsNoCase(sub, "NO-TOUCH")) &&
      args.size() == 3) {
    return Writer(p).Simple("OK");  // nothing is evicted, nothing tracks access
  }
  if (RespEqualsNoCase(sub, "INFO") && args.size() == 2) {
    const auto now = std::chrono::steady_clock::now();
    const auto age = std::chrono::duration_cast<std::chrono::seconds>(now - opened_).count();
    return Writer(p).Verbatim(fmt::format(
        "id={} addr={} name={} age={} db=0 resp={} lib-name={} lib-ver={} in-flight={}\n", id_,
        Peer(), name_, age, resp3_ ? 3 : 2, library_[0], library_[1], in_flight_ - 1));
  }
  ReplyError(p, "ERR",
             fmt::format("unknown subcommand or wrong number of arguments for '{}'. segstore "
                         "answers CLIENT SETNAME, GETNAME, ID, INFO, SETINFO, NO-EVICT, NO-TOUCH",
                         sub.substr(0, 64)));
}

void RespConnection::Command(RespArgs args, Pending& p) {
  proto::RespWriter w = Writer(p);
  const auto table = RespCommandTable();
  if (args.size() == 1) {
    w.Array(table.size());
    for (const RespCommandDef& def : table) WriteCommandInfo(def, &w);
    return;
  }
  const std::string_view sub = args[1];
  if (RespEqualsNoCase(sub, "COUNT") && args.size() == 2) {
    return w.Integer(static_cast<int64_t>(table.size()));
  }
  if (RespEqualsNoCase(sub, "LIST") && args.size() == 2) {
    w.Array(table.size());
    for (const RespCommandDef& def : table) w.Bulk(def.name);
    return;
  }
  if (RespEqualsNoCase(sub, "INFO")) {
    if (args.size() == 2) {
      w.Array(table.size());
      for (const RespCommandDef& def : table) WriteCommandInfo(def, &w);
      return;
    }
    w.Array(args.size() - 2);
    for (size_t i = 2; i < args.size(); ++i) {
      if (const RespCommandDef* def = FindRespCommand(args[i])) {
        WriteCommandInfo(*def, &w);
      } else {
        w.NullArray();
      }
    }
    return;
  }
  if (RespEqualsNoCase(sub, "DOCS")) {
    std::vector<const RespCommandDef*> defs;
    if (args.size() == 2) {
      for (const RespCommandDef& def : table) defs.push_back(&def);
    } else {
      for (size_t i = 2; i < args.size(); ++i) {
        if (const RespCommandDef* def = FindRespCommand(args[i])) defs.push_back(def);
      }
    }
    w.Map(defs.size());
    for (const RespCommandDef* def : defs) {
      w.Bulk(def->name);
      WriteCommandDocs(*def, &w);
    }
    return;
  }
  if (RespEqualsNoCase(sub, "GETKEYS") && args.size() >= 3) {
    const RespArgs command = args.subspan(2);
    const RespCommandDef* def = FindRespCommand(command[0]);
    if (def == nullptr) return ReplyError(p, "ERR", "Invalid command specified");
    const auto n = static_cast<int>(std::min<size_t>(command.size(), INT32_MAX));
    if ((def->arity > 0 && n != def->arity) || (def->arity < 0 && n < -def->arity)) {
      return ReplyError(p, "ERR", "Invalid number of arguments specified for command");
    }
    std::vector<size_t> positions;
    if (Status s = RespKeyPositions(*def, command, &positions); !s.ok()) {
      return ReplyError(p, "ERR", s.message());
    }
    if (positions.empty()) return ReplyError(p, "ERR", "The command has no key arguments");
    w.Array(positions.size());
    for (size_t at : positions) w.Bulk(command[at]);
    return;
  }
  ReplyError(p, "ERR",
             fmt::format("unknown subcommand or wrong number of arguments for '{}'. segstore "
                         "answers COMMAND, COMMAND COUNT, LIST, INFO, DOCS, GETKEYS",
                         sub.substr(0, 64)));
}

void RespConnection::AskStats(Pending& p, std::function<void(Pending&, const Stats&)> then) {
  Ask(p, proto::Op::kStats, {},
      [then = std::move(then)](Pending& q, const proto::FrameHeader& h, std::string_view body) {
        if (h.status != 0) {
          q.reply.clear();
          q.error = true;
          const std::string message = proto::DecodeError(body);
          proto::RespWriter(&q.reply, false)
              .Error(RespErrorPrefix(Status::FromCode(h.status, message).code()), message);
          return;
        }
        Stats stats;
        if (Status s = proto::Decode(body, RespAnswerLimits(), &stats); !s.ok()) {
          q.reply.clear();
          q.error = true;
          proto::RespWriter(&q.reply, false).Error("ERR", s.message());
          return;
        }
        then(q, stats);
      });
}

void RespConnection::Info(RespArgs args, Pending& p) {
  // Sections asked for ("default", "all" and "everything": all of them).
  bool want[5] = {false, false, false, false, false};
  static constexpr std::string_view kSections[] = {"server", "clients", "stats", "keyspace",
                                                   "segstore"};
  if (args.size() == 1) std::fill(want, want + 4, true);
  for (size_t i = 1; i < args.size(); ++i) {
    if (RespEqualsNoCase(args[i], "all") || RespEqualsNoCase(args[i], "everything")) {
      std::fill(want, want + 5, true);
    } else if (RespEqualsNoCase(args[i], "default")) {
      std::fill(want, want + 4, true);
    }
    for (size_t s = 0; s < 5; ++s) {
      if (RespEqualsNoCase(args[i], kSections[s])) want[s] = true;
    }
  }
  std::array<bool, 5> sections;
  std::copy(want, want + 5, sections.begin());
  AskStats(p, [this, sections](Pending& q, const Stats& stats) {
    std::string text;
    auto line = [&](std::string_view key, const std::string& value) {
      text += fmt::format("{}:{}\r\n", key, value);
    };
    if (sections[0]) {
      text += "# Server\r\n";
      line("redis_version", std::string(kRedisVersion));
      line("segstore_version", StatText(stats, "server.version"));
      line("redis_mode", options_.cluster ? "cluster" : "standalone");
      line("process_id", StatText(stats, "process.pid"));
      line("uptime_in_seconds",
           fmt::format("{:.0f}", std::stod(StatText(stats, "server.uptime_seconds"))));
      line("io_threads_active", "1");
      text += "\r\n";
    }
    if (sections[1]) {
      text += "# Clients\r\n";
      line("connected_clients", StatText(stats, "server.connections_open"));
      text += "\r\n";
    }
    if (sections[2]) {
      text += "# Stats\r\n";
      line("total_connections_received", StatText(stats, "server.connections_accepted"));
      line("total_commands_processed",
           std::to_string(std::stoull(StatText(stats, "server.requests")) +
                          std::stoull(StatText(stats, "server.resp_commands"))));
      line("total_net_input_bytes", StatText(stats, "server.received_bytes"));
      line("total_net_output_bytes", StatText(stats, "server.sent_bytes"));
      line("rejected_connections", StatText(stats, "server.connections_refused"));
      text += "\r\n";
    }
    if (sections[0]) {
      text += "# Cluster\r\n";
      line("cluster_enabled", options_.cluster ? "1" : "0");
      text += "\r\n";
    }
    if (sections[3]) {
      text += "# Keyspace\r\n";
      line("db0",
           fmt::format("keys={},expires=0,avg_ttl=0", StatText(stats, "storage.index_entries")));
      text += "\r\n";
    }
    if (sections[4]) {
      text += "# Segstore\r\n";
      for (const StatEntry& e : stats.entries) line(e.name, StatText(stats, e.name));
      text += "\r\n";
    }
    if (text.size() >= 2) text.resize(text.size() - 2);  // no blank line at the end
    Writer(q).Verbatim(text);
  });
}

// ---- the data commands ----

void RespConnection::SegGet(RespArgs args, Pending& p) {
  proto::GetRequest req;
  if (Status s = ParseGetOptions(args, 2, &req.options); !s.ok()) {
    return ReplyError(p, "ERR", s.message());
  }
  req.user = std::string(args[1]);
  Call<GetResult>(
      p, proto::Op::kGet, std::move(req),
      [this](Pending& q, const GetResult& r, const proto::FrameHeader& h) {
        proto::RespWriter w = Writer(q);
        WriteGetReply(r, GetOptions{}, (h.flags & proto::kFlagStale) != 0, &w);
      },
      NullReply());
}

void RespConnection::SegMget(RespArgs args, Pending& p) {
  std::vector<size_t> keys;
  proto::BatchGetRequest req;
  if (Status s = RespKeyPositions(RespCommandOf(RespCmd::kSegMget), args, &keys); !s.ok()) {
    return ReplyError(p, "ERR", s.message());
  }
  if (Status s = ParseGetOptions(args, 2 + keys.size(), &req.options); !s.ok()) {
    return ReplyError(p, "ERR", s.message());
  }
  for (size_t at : keys) req.users.emplace_back(args[at]);
  Call<BatchGetResult>(p, proto::Op::kBatchGet, std::move(req),
                       [this](Pending& q, const BatchGetResult& all, const proto::FrameHeader& h) {
                         if (MovedEntry(q, all)) return;
                         const bool stale = (h.flags & proto::kFlagStale) != 0;
                         proto::RespWriter w = Writer(q);
                         w.Array(all.size());
                         for (const Result<GetResult>& r : all) {
                           if (r.ok()) {
                             WriteGetReply(*r, GetOptions{}, stale, &w);
                           } else if (r.status().IsNotFound()) {
                             w.Null();
                           } else {
                             w.Error(RespErrorPrefix(r.status().code()), r.status().message());
                           }
                         }
                       });
}

void RespConnection::SegCount(RespArgs args, Pending& p) {
  proto::CountRequest req;
  if (Status s = ParseCount(args, &req); !s.ok()) return ReplyError(p, "ERR", s.message());
  Call<proto::CountResponse>(
      p, proto::Op::kCount, req,
      [this](Pending& q, const proto::CountResponse& r, const proto::FrameHeader&) {
        Writer(q).Integer(r.count);
      },
      NullReply());
}

void RespConnection::SegUpsert(RespArgs args, Pending& p) {
  proto::UpsertRequest req;
  if (Status s = ParseUpsert(args, &req); !s.ok()) return ReplyError(p, "ERR", s.message());
  Call<UpsertResult>(p, proto::Op::kUpsert, req,
                     [this](Pending& q, const UpsertResult& r, const proto::FrameHeader&) {
                       proto::RespWriter w = Writer(q);
                       WriteUpsertReply(r, &w);
                     });
}

void RespConnection::SegRemove(RespArgs args, Pending& p) {
  proto::RemoveRequest req;
  if (Status s = ParseRemove(args, &req); !s.ok()) return ReplyError(p, "ERR", s.message());
  Call<proto::RemoveResponse>(
      p, proto::Op::kRemove, req,
      [this](Pending& q, const proto::RemoveResponse& r, const proto::FrameHeader&) {
        proto::RespWriter w = Writer(q);
        w.Map(2);
        w.Bulk("removed");
        w.Integer(r.removed);
        w.Bulk("duplicate");
        w.Boolean(r.duplicate);
      },
      NullReply());
}

void RespConnection::SegTrim(RespArgs args, Pending& p) {
  proto::TrimRequest req;
  if (Status s = ParseTrim(args, &req); !s.ok()) return ReplyError(p, "ERR", s.message());
  Call<TrimResult>(
      p, proto::Op::kTrim, req,
      [this](Pending& q, const TrimResult& r, const proto::FrameHeader&) {
        proto::RespWriter w = Writer(q);
        WriteTrimReply(r, &w);
      },
      NullReply());
}

void RespConnection::SegDel(RespArgs args, Pending& p) {
  proto::DeleteRequest req;
  if (Status s = ParseDelete(args, &req); !s.ok()) return ReplyError(p, "ERR", s.message());
  Call<proto::DeleteResponse>(
      p, proto::Op::kDelete, req,
      [this](Pending& q, const proto::DeleteResponse& r, const proto::FrameHeader&) {
        proto::RespWriter w = Writer(q);
        w.Map(2);
        w.Bulk("deleted");
        w.Boolean(r.deleted);
        w.Bulk("duplicate");
        w.Boolean(r.duplicate);
      });
}

void RespConnection::SegLink(RespArgs args, Pending& p) {
  proto::LinkRequest req;
  if (Status s = ParseLink(args, &req); !s.ok()) return ReplyError(p, "ERR", s.message());
  Call<LinkResult>(p, proto::Op::kLink, req,
                   [this](Pending& q, const LinkResult& r, const proto::FrameHeader&) {
                     proto::RespWriter w = Writer(q);
                     WriteLinkReply(r, &w);
                   });
}

void RespConnection::SegUnlink(RespArgs args, Pending& p) {
  proto::UnlinkRequest req;
  if (Status s = ParseUnlink(args, &req); !s.ok()) return ReplyError(p, "ERR", s.message());
  Call<proto::UnlinkResponse>(
      p, proto::Op::kUnlink, req,
      [this](Pending& q, const proto::UnlinkResponse& r, const proto::FrameHeader&) {
        Writer(q).Integer(r.unlinked ? 1 : 0);
      });
}

void RespConnection::SegMasterof(RespArgs args, Pending& p) {
  proto::MasterOfRequest req;
  req.user = std::string(args[1]);
  Call<proto::MasterOfResponse>(
      p, proto::Op::kMasterOf, req,
      [this](Pending& q, const proto::MasterOfResponse& r, const proto::FrameHeader&) {
        Writer(q).Bulk(r.master);
      },
      NullReply());
}

void RespConnection::SegLinks(RespArgs args, Pending& p) {
  proto::LinksRequest req;
  if (Status s = ParseLinks(args, &req); !s.ok()) return ReplyError(p, "ERR", s.message());
  Call<proto::LinksResponse>(
      p, proto::Op::kLinks, req,
      [this](Pending& q, const proto::LinksResponse& r, const proto::FrameHeader&) {
        proto::RespWriter w = Writer(q);
        WriteLinksReply(r, &w);
      },
      NullReply());
}

void RespConnection::SegConnected(RespArgs args, Pending& p) {
  proto::ConnectedRequest req;
  req.a = std::string(args[1]);
  req.b = std::string(args[2]);
  Call<proto::ConnectedResponse>(
      p, proto::Op::kConnected, req,
      [this](Pending& q, const proto::ConnectedResponse& r, const proto::FrameHeader&) {
        Writer(q).Integer(r.connected ? 1 : 0);
      });
}

void RespConnection::SegFieldset(RespArgs args, Pending& p) {
  proto::FieldSetRequest req;
  if (Status s = ParseFieldSet(args, &req); !s.ok()) return ReplyError(p, "ERR", s.message());
  Call<proto::FieldWriteResponse>(
      p, proto::Op::kFieldSet, req,
      [this](Pending& q, const proto::FieldWriteResponse& r, const proto::FrameHeader&) {
        proto::RespWriter w = Writer(q);
        WriteFieldWriteReply(r, &w);
      });
}

void RespConnection::SegFielddel(RespArgs args, Pending& p) {
  proto::FieldDeleteRequest req;
  if (Status s = ParseFieldDelete(args, &req); !s.ok()) return ReplyError(p, "ERR", s.message());
  Call<proto::FieldWriteResponse>(
      p, proto::Op::kFieldDelete, req,
      [this](Pending& q, const proto::FieldWriteResponse& r, const proto::FrameHeader&) {
        proto::RespWriter w = Writer(q);
        WriteFieldWriteReply(r, &w);
      },
      NullReply());
}

void RespConnection::SegIncr(RespArgs args, Pending& p) {
  proto::FieldIncrementRequest req;
  if (Status s = ParseFieldIncrement(args, &req); !s.ok()) {
    return ReplyError(p, "ERR", s.message());
  }
  // The counter after the increment; null when the cap refused it (a
  // result, not an error: nothing was written, and the bidder skips).
  Call<proto::FieldIncrementResponse>(
      p, proto::Op::kFieldIncrement, req,
      [this](Pending& q, const proto::FieldIncrementResponse& r, const proto::FrameHeader&) {
        if (r.capped) return Writer(q).Null();
        Writer(q).Integer(r.value);
      });
}

void RespConnection::SegFieldmax(RespArgs args, Pending& p) {
  proto::FieldMaxRequest req;
  if (Status s = ParseFieldMax(args, &req); !s.ok()) return ReplyError(p, "ERR", s.message());
  Call<proto::FieldMaxResponse>(
      p, proto::Op::kFieldMax, req,
      [this](Pending& q, const proto::FieldMaxResponse& r, const proto::FrameHeader&) {
        proto::RespWriter w = Writer(q);
        WriteFieldMaxReply(r, &w);
      });
}

void RespConnection::Type(RespArgs args, Pending& p) {
  proto::CountRequest req;
  req.user = std::string(args[1]);
  Call<proto::CountResponse>(
      p, proto::Op::kCount, req,
      [this](Pending& q, const proto::CountResponse& r, const proto::FrameHeader&) {
        Writer(q).Simple(r.count > 0 ? "hash" : "none");
      },
      [this](Pending& q) { Writer(q).Simple("none"); });
}

void RespConnection::Del(RespArgs args, Pending& p) {
  // One delete per key; the reply once all are answered: how many existed,
  // or the first error.
  OnAnswer count = [this](Pending& q, const proto::FrameHeader& h, std::string_view answer) {
    if (!q.error && h.status != 0 && h.status != static_cast<uint8_t>(Status::Code::kNotFound)) {
      ReplyStatus(q, h, answer);
    } else if (h.status == 0) {
      proto::DeleteResponse r;
      if (Status s = proto::Decode(answer, RespAnswerLimits(), &r); !s.ok()) {
        if (!q.error) ReplyError(q, "ERR", s.message());
      } else if (r.deleted) {
        ++q.sum;
      }
    }
    if (q.awaiting == 0 && !q.serving && !q.error) Writer(q).Integer(q.sum);
  };
  p.on_answer = std::move(count);
  for (size_t i = 1; i < args.size(); ++i) {
    proto::DeleteRequest req;
    req.user = std::string(args[i]);
    std::string& body = scratch();
    proto::Encode(req, &body);
    Ask(p, proto::Op::kDelete, body, nullptr);
  }
  // Every answer may have come already (errors are answered at once).
  if (p.awaiting == 0 && !p.error) Writer(p).Integer(p.sum);
}

void RespConnection::Exists(RespArgs args, Pending& p) {
  proto::BatchGetRequest req;
  req.options.count_only = true;
  for (size_t i = 1; i < args.size(); ++i) req.users.emplace_back(args[i]);
  Call<BatchGetResult>(p, proto::Op::kBatchGet, std::move(req),
                       [this](Pending& q, const BatchGetResult& all, const proto::FrameHeader&) {
                         if (MovedEntry(q, all)) return;
                         int64_t n = 0;
                         for (const Result<GetResult>& r : all) {
                           if (r.ok()) {
                             n += r->count > 0 ? 1 : 0;
                           } else if (!r.status().IsNotFound()) {
                             return ReplyError(q, RespErrorPrefix(r.status().code()),
                                               r.status().message());
                           }
                         }
                         Writer(q).Integer(n);
                       });
}

}  // namespace segstore::server

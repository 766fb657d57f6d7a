// Implements redis_target.h: a pipelined hiredis client on an Asio io_context,
// speaking to Redis (hashes and Lua scripts) or to segstored's RESP port
// (SEG.* commands), as RedisOptions::dialect says.
//
// Each Connection is a thin handle on a Link: one redisAsyncContext, the
// stream_descriptor that watches its socket for hiredis (an event adapter,
// like hiredis's adapters/*.h), a timer for timeouts, and the requests in
// flight. Links are shared_ptr-owned so that an Asio handler, or a hiredis
// callback running inside one, keeps its Link alive even when a callback
// destroys the Connection; the Connection's destructor still fails every
// request before returning, and frees the hiredis context (hiredis defers
// that free to the end of the reply callback it is in, if any).
//
// Replies come back in the order commands were sent, so the requests in
// flight form one queue: each hiredis reply belongs to the oldest request
// (its sequence number travels as the callback's privdata, as a check). A
// request made of several commands (BatchGet, Replace) completes on its last
// reply. Replies are not built as redisReply trees: a custom reader keeps
// only what the outcome needs (type, element count, integer, error text;
// for segstore's replies, RESP2 maps of key, value, ..., a few integers
// found by their place under the root), so a 1,000-segment HGETALL or
// SEG.GET costs no allocation on the client.
//
// hiredis (0.14 and later) calls a reply callback exactly once per command:
// with the reply, or with NULL when the context is freed (by us, or by
// hiredis itself after a socket error), and calls the adapter's cleanup just
// before it closes the socket. Link turns the first NULL reply (or a cleanup
// while open) into a broken connection and fails the whole queue at once;
// later NULL replies are ignored.
#include "bench/segbench/redis_target.h"

#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <signal.h>
#include <sys/time.h>

// Boost 1.74's Asio uses std::exchange without including <utility> (C++20).
#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace segstore::bench {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Connect timeout when RedisOptions::timeout is 0 (none for requests).
constexpr milliseconds kDefaultConnectTimeout{10000};
// Users per Replace when loading: 20 pipelined DEL + HSET (or SEG.DEL +
// SEG.UPSERT) of 1,000 pairs, about 600 KB a batch.
constexpr size_t kLoadBatch = 20;

// The Lua scripts. Two things make them several times faster than the
// obvious version on 1,000-field hashes:
// - Expiries are compared as strings when they have as many digits as
//   `now` (always, for Unix seconds between 2001 and 2286, written without
//   leading zeros): equal-length decimal strings order as their numbers,
//   and Lua's string comparison costs a fraction of tonumber(). Other
//   lengths fall back to tonumber().
// - Redis converts a returned Lua array up to its first nil, so the
//   live-get script compacts HGETALL's own table in place and returns it
//   cut short, instead of building a second table.

// KEYS[1]: a user's hash; ARGV[1]: now (Unix seconds, decimal). Returns the
// live fields (value > now) as a flat field, value array; nil when the hash
// does not exist.
constexpr char kGetLiveScript[] = R"lua(
local h = redis.call('HGETALL', KEYS[1])
local n = #h
if n == 0 then return false end
local now = ARGV[1]
local now_len = #now
local now_number = tonumber(now)
local j = 0
for i = 1, n, 2 do
  local v = h[i + 1]
  local live
  if #v == now_len then live = v > now else live = tonumber(v) > now_number end
  if live then
    if j + 1 ~= i then
      h[j + 1] = h[i]
      h[j + 2] = v
    end
    j = j + 2
  end
end
h[j + 1] = nil
return h
)lua";

// The expired-field sweep that ends the trim and upsert scripts: deletes
// the fields of hash `key` whose value <= now (ARGV[1]) and returns their
// count. The names of the dead fields are packed at the front of HGETALL's
// table (slot d <= i, already read), and deleted 4,000 at a time (unpack's
// stack limit is 8,000).
constexpr char kTrimTail[] = R"lua(
local now = ARGV[1]
local now_len = #now
local now_number = tonumber(now)
local h = redis.call('HGETALL', key)
local d = 0
for i = 1, #h, 2 do
  local v = h[i + 1]
  local dead
  if #v == now_len then dead = v <= now else dead = tonumber(v) <= now_number end
  if dead then
    d = d + 1
    h[d] = h[i]
  end
end
for i = 1, d, 4000 do
  redis.call('HDEL', key, unpack(h, i, math.min(i + 3999, d)))
end
return d
)lua";

// KEYS[1]: a user's hash; ARGV[1]: now. Deletes the fields whose value <=
// now; returns how many. (Followed by kTrimTail.)
constexpr char kTrimHead[] = R"lua(
local key = KEYS[1]
)lua";

// KEYS[1]: a user's hash; ARGV[1]: now; ARGV[2..]: segment ID, expiry
// pairs. Sets every pair (HSET, 2,000 pairs at a time), then deletes the
// fields whose value <= now; returns how many it deleted. (Followed by
// kTrimTail.)
constexpr char kUpsertHead[] = R"lua(
local key = KEYS[1]
local n = #ARGV
for i = 2, n, 4000 do
  redis.call('HSET', key, unpack(ARGV, i, math.min(i + 3999, n)))
end
)lua";

// What every connection of one target shares; immutable.
struct Config {
  RedisOptions options;
  bool segstore = false;  // options.dialect == kSegstore
  std::string address;    // "host:port"
  // "redis at host:port" or "segstore resp at host:port", the prefix of
  // every error message
  std::string label;
  milliseconds connect_timeout{};
  std::string get_live_sha;  // kRedis: SHA1s from SCRIPT LOAD
  std::string upsert_sha;
  std::string trim_sha;
};

std::string MillisText(milliseconds ms) { return std::to_string(ms.count()) + " ms"; }

timeval ToTimeval(milliseconds ms) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  return tv;
}

// hiredis writes with write(2): a server gone away would kill the process
// with SIGPIPE. Ignore it unless someone already handles it.
void IgnoreSigpipe() {
  struct sigaction current {};
  if (::sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    ::sigaction(SIGPIPE, &ignore, nullptr);
  }
}

// ---------------------------------------------------------------------------
// Replies without allocation.

// The one reply a reader is building at a time (hiredis's reader emits a
// reply before it starts the next, and creates an array before its
// elements). Only the top-level object is kept; it is a real redisReply
// because hiredis itself peeks at `type` and `str` of an unexpected reply.
// Elements of arrays are not kept: they return a placeholder, which hiredis
// only checks for NULL. What segstore's replies need from below the root
// is gathered on the way (a task's `idx` is its place in its parent,
// `parent` null at the root):
//   SEG.GET, SEG.UPSERT, SEG.TRIM: a map, [key, value, ...]: the integers
//     at its indices (count at 1; trimmed at 5 or 1);
//   SEG.MGET: an array of maps, nulls and errors: the integer at index 1 of
//     each map (its count), the nulls, and the first error.
struct ReplySink {
  static constexpr int kRootInts = 8;

  redisReply root{};
  std::string text;  // root.str points here (error, status or string replies)
  // The root's element i when it is an integer (bit i of root_int_seen).
  long long root_int[kRootInts] = {};  // NOLINT: hiredis's type
  uint32_t root_int_seen = 0;
  // The integers at index 1 of the root's elements that are arrays, summed.
  long long child_int1_sum = 0;  // NOLINT: hiredis's type
  uint32_t child_arrays = 0;     // elements of the root that are arrays,
  uint32_t child_nils = 0;       // nulls,
  uint32_t child_errors = 0;     // and errors
  std::string child_error;       // the first error element's text

  // A new reply begins: `task` is its root.
  redisReply* Begin(const redisReadTask* task) {
    root = redisReply{};
    root.type = task->type;
    root_int_seen = 0;
    child_int1_sum = 0;
    child_arrays = child_nils = child_errors = 0;
    child_error.clear();
    return &root;
  }
};

char child_placeholder;

ReplySink* SinkOf(const redisReadTask* task) { return static_cast<ReplySink*>(task->privdata); }

// An element of the root array (`task->parent` is the root).
bool UnderRoot(const redisReadTask* task) { return task->parent->parent == nullptr; }

void* CreateString(const redisReadTask* task, char* str, size_t len) {
  ReplySink* sink = SinkOf(task);
  if (task->parent != nullptr) {
    if (task->type == REDIS_REPLY_ERROR && UnderRoot(task) && sink->child_errors++ == 0) {
      sink->child_error.assign(str, len);
    }
    return &child_placeholder;
  }
  sink->text.assign(str, len);
  redisReply* root = sink->Begin(task);
  root->str = sink->text.data();
  root->len = len;
  return root;
}

void* CreateArray(const redisReadTask* task, int elements) {
  ReplySink* sink = SinkOf(task);
  if (task->parent != nullptr) {
    if (UnderRoot(task)) ++sink->child_arrays;
    return &child_placeholder;
  }
  redisReply* root = sink->Begin(task);
  root->type = REDIS_REPLY_ARRAY;
  root->elements = static_cast<size_t>(std::max(elements, 0));
  return root;
}

void* CreateInteger(const redisReadTask* task, long long value) {  // NOLINT: hiredis's type
  ReplySink* sink = SinkOf(task);
  if (task->parent != nullptr) {
    if (UnderRoot(task)) {
      if (task->idx >= 0 && task->idx < ReplySink::kRootInts) {
        sink->root_int[task->idx] = value;
        sink->root_int_seen |= 1u << task->idx;
      }
    } else if (task->parent->parent->parent == nullptr && task->idx == 1) {
      sink->child_int1_sum += value;  // the root's element is an array; this is its index 1
    }
    return &child_placeholder;
  }
  redisReply* root = sink->Begin(task);
  root->type = REDIS_REPLY_INTEGER;
  root->integer = value;
  return root;
}

void* CreateNil(const redisReadTask* task) {
  ReplySink* sink = SinkOf(task);
  if (task->parent != nullptr) {
    if (UnderRoot(task)) ++sink->child_nils;
    return &child_placeholder;
  }
  redisReply* root = sink->Begin(task);
  root->type = REDIS_REPLY_NIL;
  return root;
}

void FreeReply(void*) {}  // the sink is reused; placeholders are static

// Not const: hiredis's reader holds a non-const pointer (it never writes).
redisReplyObjectFunctions sink_functions = {CreateString, CreateArray, CreateInteger, CreateNil,
                                            FreeReply};

// ---------------------------------------------------------------------------
// Building commands.

// One RESP command ("*<argc>\r\n" then "$<len>\r\n<arg>\r\n" each), built in
// a buffer that is reused, so sending costs no allocation of ours.
class RespCommand {
 public:
  void Begin(size_t argc) {
    buf_.clear();
    buf_.push_back('*');
    AppendDecimal(argc);
    buf_.append("\r\n", 2);
  }
  void Arg(std::string_view arg) {
    buf_.push_back('$');
    AppendDecimal(arg.size());
    buf_.append("\r\n", 2);
    buf_.append(arg);
    buf_.append("\r\n", 2);
  }
  void Arg(uint64_t value) {
    char digits[24];
    const auto [end, ec] = std::to_chars(digits, digits + sizeof digits, value);
    Arg(std::string_view(digits, static_cast<size_t>(end - digits)));
  }
  const char* data() const { return buf_.data(); }
  size_t size() const { return buf_.size(); }

 private:
  void AppendDecimal(uint64_t value) {
    char digits[24];
    const auto [end, ec] = std::to_chars(digits, digits + sizeof digits, value);
    buf_.append(digits, static_cast<size_t>(end - digits));
  }

  std::string buf_;
};

// A FIFO on a power-of-two ring that only grows: no allocation per request
// once it has reached the connection's depth.
template <typename T>
class Ring {
 public:
  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }
  T& front() { return slots_[head_]; }
  void push_back(T value) {
    if (size_ == slots_.size()) Grow();
    slots_[(head_ + size_) & (slots_.size() - 1)] = std::move(value);
    ++size_;
  }
  T pop_front() {
    T value = std::move(slots_[head_]);
    slots_[head_] = T();
    head_ = (head_ + 1) & (slots_.size() - 1);
    --size_;
    return value;
  }

 private:
  void Grow() {
    std::vector<T> bigger(std::max<size_t>(16, slots_.size() * 2));
    for (size_t i = 0; i < size_; ++i) {
      bigger[i] = std::move(slots_[(head_ + i) & (slots_.size() - 1)]);
    }
    slots_ = std::move(bigger);
    head_ = 0;
  }

  std::vector<T> slots_;
  size_t head_ = 0;
  size_t size_ = 0;
};

Outcome Failed(std::string why) {
  Outcome o;
  o.ok = false;
  o.error = std::move(why);
  return o;
}

// Records a failure in `o`, keeping the first one.
void Fail(Outcome& o, std::string_view why) {
  if (!o.ok) return;
  o.ok = false;
  o.error.assign(why);
}

// How to read a command's reply into an Outcome. The kSeg* kinds come last
// (OnReply hands them to ReadSegstoreReply).
enum class ReplyKind : uint8_t {
  kHash,       // HGETALL: an array of field, value; empty when the key does not exist
  kLiveHash,   // the live-get script: the same, or nil when the key does not exist
  kCount,      // an integer: segments removed (upsert, trim)
  kWrite,      // DEL, HSET, SEG.DEL, SEG.UPSERT when loading: only errors matter
  kSegGet,     // SEG.GET: its map (count at index 1), or nil: no profile
  kSegMget,    // SEG.MGET: SEG.GET's map, nil or an error for each user
  kSegUpsert,  // SEG.UPSERT: its map (trimmed at index 5)
  kSegTrim,    // SEG.TRIM: its map (trimmed at index 1), or nil: no profile
};

// One Connection-level operation: one or more commands sent back to back.
struct Request {
  Done done;
  Outcome outcome;         // accumulated over its replies
  uint64_t seq = 0;        // privdata of each of its commands
  Clock::time_point sent;  // for the timeout (set only when there is one)
  uint32_t replies_left = 0;
  ReplyKind kind = ReplyKind::kWrite;
};

// A callback decided without the server (a broken connection, an empty
// batch), delivered from a posted handler: never inside the call.
struct Deferred {
  Done done;
  Outcome outcome;
};

class RedisConnection;

// One hiredis connection on one io_context; see the file comment. All
// members run on the io_context's thread.
class Link : public std::enable_shared_from_this<Link> {
 public:
  using OpenDone = std::function<void(Result<std::unique_ptr<Connection>>)>;

  Link(boost::asio::io_context& io, std::shared_ptr<const Config> config)
      : io_(io), config_(std::move(config)), sd_(io), timer_(io) {}
  ~Link();
  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;

  // Starts connecting; `done` runs from a posted handler or a handler of
  // this Link, never inside Start. Call once, on a Link made by make_shared.
  void Start(OpenDone done);

  void Get(const std::string& user, Done done);
  void BatchGet(std::span<const std::string> users, Done done);
  void Upsert(const std::string& user, std::span<const Assignment> segments, Done done);
  void Trim(const std::string& user, Done done);
  void Replace(std::span<const std::string> users,
               std::span<const std::vector<Assignment>> profiles, Done done);
  // An operation this store does not have (profile bridging's link): fails
  // `done` from a posted handler, saying so.
  void Unsupported(std::string_view operation, Done done);
  size_t in_flight() const { return pending_.size() + deferred_.size(); }

  // The Connection is going away: fails everything in flight, now, and
  // frees the hiredis context. Later calls of the operations are a bug.
  void Close();

  // hiredis's hooks (through the C thunks below).
  void AddRead();
  void DelRead() { want_read_ = false; }
  void AddWrite();
  void DelWrite() { want_write_ = false; }
  void OnCleanup();
  void OnConnect(int status);
  void OnReply(const redisReply* reply, uint64_t seq);

 private:
  enum class State : uint8_t {
    kConnecting,  // waiting for connect(2); open_done_ not yet posted
    kOpen,        // usable
    kFailed,      // the connect failed; open_done_ gets the error
    kBroken,      // the socket failed or timed out: every request fails (error_)
    kClosed,      // the Connection was destroyed
  };

  void ArmRead();
  void ArmWrite();
  void OnReadable(const boost::system::error_code& ec);
  void OnWritable(const boost::system::error_code& ec);
  void Flush();
  void ArmTimer(Clock::time_point at);
  void OnTimer(uint64_t generation, const boost::system::error_code& ec);

  void PostOpenResult();
  void DeliverOpen();

  // Sends the command in `cmd_` as part of request `seq`; false if hiredis
  // refused it (the context is going away).
  bool Send(uint64_t seq);
  bool SendRead(std::string_view user, uint64_t seq);
  // Puts SEG.UPSERT user id expiry ... in `cmd_` (mode SET, absolute expiries).
  void BeginSegUpsert(std::string_view user, std::span<const Assignment> segments);
  ReplyKind ReadKind() const {
    if (config_->options.whole_profiles) return ReplyKind::kHash;
    return config_->segstore ? ReplyKind::kSegGet : ReplyKind::kLiveHash;
  }
  // Reads the reply to a SEG.* command (any kSeg* kind) into `r`'s outcome.
  void ReadSegstoreReply(const redisReply* reply, Request& r);
  // Queues a request whose `sent` commands went out (all of `wanted` if
  // sent == wanted); fails it from a posted handler if none did.
  void Track(Done done, uint64_t seq, uint32_t sent, uint32_t wanted, ReplyKind kind);
  void Defer(Done done, Outcome outcome);
  void DeliverDeferred();
  Outcome Unusable() const;
  // Now, in Unix seconds, as decimal text (cached for the current second).
  std::string_view NowText();

  // The connection failed under us: fails everything in flight with `why`.
  void Break(std::string why);
  void FailPending(const std::string& why);
  // Frees the hiredis context, unless hiredis is already freeing it.
  void FreeContext();
  std::string ContextError() const;

  boost::asio::io_context& io_;
  const std::shared_ptr<const Config> config_;
  redisAsyncContext* ac_ = nullptr;  // null once hiredis has cleaned up (it frees it)
  bool freeing_ = false;             // redisAsyncFree called, or hiredis freeing on its own
  State state_ = State::kConnecting;
  OpenDone open_done_;
  std::string open_error_;  // why the connect failed (kFailed)
  std::string error_;       // why the connection broke (kBroken), with the address

  // The event adapter: the socket (hiredis's fd, watched only) and what
  // hiredis wants to hear about.
  boost::asio::posix::stream_descriptor sd_;
  bool want_read_ = false;
  bool want_write_ = false;
  bool read_armed_ = false;    // an async_wait(wait_read) is outstanding
  bool write_armed_ = false;   // an async_wait(wait_write) is outstanding
  bool flush_posted_ = false;  // a posted Flush is outstanding
  bool in_flush_ = false;      // inside redisAsyncHandleWrite

  // One timer: the connect deadline, then the oldest request's deadline.
  boost::asio::steady_timer timer_;
  bool timer_armed_ = false;
  uint64_t timer_generation_ = 0;  // a handler of an older arming ignores itself

  Ring<Request> pending_;  // sent, oldest first
  Ring<Deferred> deferred_;
  bool deferred_posted_ = false;
  uint64_t next_seq_ = 1;

  RespCommand cmd_;
  ReplySink sink_;
  int64_t now_seconds_ = -1;
  char now_text_[24] = {};
  size_t now_len_ = 0;
};

// Connection::Link below hides the class's name inside RedisConnection.
using RedisLink = Link;

// The handle segbench holds; destroying it closes the Link.
class RedisConnection final : public Connection {
 public:
  explicit RedisConnection(std::shared_ptr<RedisLink> link) : link_(std::move(link)) {}
  ~RedisConnection() override { link_->Close(); }

  void Get(const std::string& user, Done done) override { link_->Get(user, std::move(done)); }
  void BatchGet(std::span<const std::string> users, Done done) override {
    link_->BatchGet(users, std::move(done));
  }
  void Upsert(const std::string& user, std::span<const Assignment> segments, Done done) override {
    link_->Upsert(user, segments, std::move(done));
  }
  void Trim(const std::string& user, Done done) override { link_->Trim(user, std::move(done)); }
  void Replace(std::span<const std::string> users,
               std::span<const std::vector<Assignment>> profiles, Done done) override {
    link_->Replace(users, profiles, std::move(done));
  }
  void Link(const std::string&, const std::string&, Done done) override {
    link_->Unsupported("link (profile bridging: segstore's binary protocol only)", std::move(done));
  }
  void SetFields(const std::string&, std::span<const ReferenceField>, Done done) override {
    link_->Unsupported("field_set (profile fields: segstore's binary protocol only)",
                       std::move(done));
  }
  void Increment(const std::string&, const std::string&, uint32_t, Done done) override {
    link_->Unsupported("field_incr (profile fields: segstore's binary protocol only)",
                       std::move(done));
  }
  void GetFields(const std::string&, const std::string&, Done done) override {
    link_->Unsupported("get with fields (profile fields: segstore's binary protocol only)",
                       std::move(done));
  }
  size_t in_flight() const override { return link_->in_flight(); }

 private:
  std::shared_ptr<RedisLink> link_;
};

// C entry points for hiredis. ev.data and ac->data point to the Link, which
// outlives the context (it frees it at the latest in its destructor).
Link* LinkOf(void* p) { return static_cast<Link*>(p); }
void EvAddRead(void* p) { LinkOf(p)->AddRead(); }
void EvDelRead(void* p) { LinkOf(p)->DelRead(); }
void EvAddWrite(void* p) { LinkOf(p)->AddWrite(); }
void EvDelWrite(void* p) { LinkOf(p)->DelWrite(); }
void EvCleanup(void* p) { LinkOf(p)->OnCleanup(); }
void OnConnectThunk(const redisAsyncContext* ac, int status) {
  LinkOf(ac->data)->OnConnect(status);
}
void OnReplyThunk(redisAsyncContext* ac, void* reply, void* privdata) {
  LinkOf(ac->data)->OnReply(static_cast<const redisReply*>(reply),
                            static_cast<uint64_t>(reinterpret_cast<uintptr_t>(privdata)));
}

Link::~Link() {
  state_ = State::kClosed;  // NULL replies from the free below are ignored
  FreeContext();
}

void Link::Start(OpenDone done) {
  open_done_ = std::move(done);
  const RedisOptions& o = config_->options;
  redisAsyncContext* ac = redisAsyncConnect(o.host.c_str(), o.port);
  if (ac == nullptr || ac->err != 0) {
    open_error_ = ac == nullptr ? "out of memory" : ac->c.errstr;
    if (ac != nullptr) redisAsyncFree(ac);  // no adapter yet: nothing calls back
    state_ = State::kFailed;
    PostOpenResult();
    return;
  }
  boost::system::error_code ec;
  sd_.assign(ac->c.fd, ec);
  if (ec) {
    open_error_ = "cannot watch the socket: " + ec.message();
    redisAsyncFree(ac);
    state_ = State::kFailed;
    PostOpenResult();
    return;
  }
  ac_ = ac;
  ac->data = this;
  ac->c.reader->fn = &sink_functions;
  ac->c.reader->privdata = &sink_;
  ac->c.reader->maxbuf = 0;  // keep the read buffer: whole profiles are ~28 KB a reply
  ac->ev.data = this;
  ac->ev.addRead = EvAddRead;
  ac->ev.delRead = EvDelRead;
  ac->ev.addWrite = EvAddWrite;
  ac->ev.delWrite = EvDelWrite;
  ac->ev.cleanup = EvCleanup;
  ArmTimer(Clock::now() + config_->connect_timeout);
  // Asks for writability (AddWrite): the first write event is connect(2)'s outcome.
  redisAsyncSetConnectCallback(ac, OnConnectThunk);
}

// --- The event adapter ---------------------------------------------------------

void Link::AddRead() {
  want_read_ = true;
  if (!read_armed_) ArmRead();
}

void Link::AddWrite() {
  want_write_ = true;
  if (write_armed_ || flush_posted_) return;
  if (state_ == State::kOpen && !in_flush_) {
    // Commands were queued: the socket is most likely writable, so try it
    // from a posted handler (batching every command sent until then)
    // rather than asking epoll first. Flush waits for writability only if
    // hiredis cannot write everything.
    flush_posted_ = true;
    boost::asio::post(io_, [self = shared_from_this()] {
      self->flush_posted_ = false;
      self->Flush();
    });
  } else {
    ArmWrite();
  }
}

void Link::ArmRead() {
  if (!sd_.is_open()) return;
  read_armed_ = true;
  sd_.async_wait(
      boost::asio::posix::stream_descriptor::wait_read,
      [self = shared_from_this()](const boost::system::error_code& ec) { self->OnReadable(ec); });
}

void Link::ArmWrite() {
  if (!sd_.is_open()) return;
  write_armed_ = true;
  sd_.async_wait(
      boost::asio::posix::stream_descriptor::wait_write,
      [self = shared_from_this()](const boost::system::error_code& ec) { self->OnWritable(ec); });
}

void Link::OnReadable(const boost::system::error_code& ec) {
  read_armed_ = false;
  // Aborted: the descriptor was released (cleanup); the context is gone.
  if (ec == boost::asio::error::operation_aborted || ac_ == nullptr || !want_read_) return;
  // Reads once, then runs the callbacks of every complete reply; re-arms
  // through AddRead. May free the context (OnCleanup clears ac_).
  redisAsyncHandleRead(ac_);
}

void Link::OnWritable(const boost::system::error_code& ec) {
  write_armed_ = false;
  if (ec == boost::asio::error::operation_aborted) return;
  Flush();
}

void Link::Flush() {
  if (ac_ == nullptr || !want_write_) return;
  in_flush_ = true;
  redisAsyncHandleWrite(ac_);  // connects, or writes; calls AddWrite if not all went
  in_flush_ = false;
}

void Link::OnCleanup() {
  // hiredis is about to close the socket and free the context: stop
  // watching the fd (without closing it: hiredis owns it) and forget both.
  want_read_ = false;
  want_write_ = false;
  if (sd_.is_open()) sd_.release();  // cancels the waits: their handlers see aborted
  const std::string why = ContextError();
  ac_ = nullptr;
  freeing_ = true;
  if (state_ == State::kConnecting) {
    state_ = State::kFailed;
    open_error_ = why;
    timer_.cancel();
    PostOpenResult();
  } else if (state_ == State::kOpen) {
    // Not through a NULL reply: nothing was in flight (or a hiredis that
    // cleans up first). Either way, fail what is left.
    state_ = State::kBroken;
    error_ = config_->label + ": connection lost: " + why;
    timer_.cancel();
    FailPending(error_);
  }
}

// --- Connecting ------------------------------------------------------------------

void Link::OnConnect(int status) {
  if (state_ != State::kConnecting) return;
  if (status == REDIS_OK) {
    state_ = State::kOpen;  // the connect timer, when it fires, starts watching requests
  } else {
    state_ = State::kFailed;  // hiredis frees the context next
    open_error_ = ContextError();
    timer_.cancel();
  }
  PostOpenResult();
}

void Link::PostOpenResult() {
  boost::asio::post(io_, [self = shared_from_this()] { self->DeliverOpen(); });
}

void Link::DeliverOpen() {
  OpenDone done = std::move(open_done_);
  open_done_ = nullptr;
  if (!done) return;
  if (state_ == State::kOpen) {
    done(std::unique_ptr<Connection>(std::make_unique<RedisConnection>(shared_from_this())));
    return;
  }
  timer_.cancel();
  FreeContext();
  done(Status::Unavailable(
      state_ == State::kBroken ? error_ : config_->label + ": cannot connect: " + open_error_));
}

// --- Timeouts --------------------------------------------------------------------

void Link::ArmTimer(Clock::time_point at) {
  timer_armed_ = true;
  timer_.expires_at(at);  // an older wait, if any, completes as aborted
  timer_.async_wait([self = shared_from_this(), generation = ++timer_generation_](
                        const boost::system::error_code& ec) { self->OnTimer(generation, ec); });
}

void Link::OnTimer(uint64_t generation, const boost::system::error_code& ec) {
  if (generation != timer_generation_) return;
  timer_armed_ = false;
  if (ec == boost::asio::error::operation_aborted) return;
  if (state_ == State::kConnecting) {
    state_ = State::kFailed;
    open_error_ = "no answer within " + MillisText(config_->connect_timeout);
    FreeContext();
    DeliverOpen();
    return;
  }
  const milliseconds timeout = config_->options.timeout;
  if (state_ != State::kOpen || pending_.empty() || timeout.count() <= 0) return;
  const Clock::time_point deadline = pending_.front().sent + timeout;
  if (deadline <= Clock::now()) {
    Break(config_->label + ": no reply within " + MillisText(timeout) + "; connection dropped");
  } else {
    ArmTimer(deadline);
  }
}

// --- Requests --------------------------------------------------------------------

std::string_view Link::NowText() {
  const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  if (now != now_seconds_) {
    now_seconds_ = now;
    const auto [end, ec] = std::to_chars(now_text_, now_text_ + sizeof now_text_, now);
    now_len_ = static_cast<size_t>(end - now_text_);
  }
  return std::string_view(now_text_, now_len_);
}

bool Link::Send(uint64_t seq) {
  return redisAsyncFormattedCommand(ac_, OnReplyThunk,
                                    reinterpret_cast<void*>(static_cast<uintptr_t>(seq)),
                                    cmd_.data(), cmd_.size()) == REDIS_OK;
}

bool Link::SendRead(std::string_view user, uint64_t seq) {
  if (config_->segstore && !config_->options.whole_profiles) {
    const bool ids_only = config_->options.ids_only;
    cmd_.Begin(ids_only ? 3 : 2);
    cmd_.Arg("SEG.GET");
    cmd_.Arg(user);
    if (ids_only) cmd_.Arg("IDSONLY");
  } else if (config_->options.whole_profiles) {
    cmd_.Begin(2);
    cmd_.Arg("HGETALL");
    cmd_.Arg(user);
  } else {
    cmd_.Begin(5);
    cmd_.Arg("EVALSHA");
    cmd_.Arg(config_->get_live_sha);
    cmd_.Arg("1");
    cmd_.Arg(user);
    cmd_.Arg(NowText());
  }
  return Send(seq);
}

Outcome Link::Unusable() const {
  return Failed(state_ == State::kBroken ? error_ : config_->label + ": connection closed");
}

void Link::Track(Done done, uint64_t seq, uint32_t sent, uint32_t wanted, ReplyKind kind) {
  if (sent == 0) {
    Defer(std::move(done), Failed(config_->label + ": hiredis refused the command"));
    return;
  }
  Request r;
  r.done = std::move(done);
  r.seq = seq;
  r.replies_left = sent;
  r.kind = kind;
  if (sent < wanted) {
    Fail(r.outcome, config_->label + ": hiredis refused part of the pipeline");
  }
  const milliseconds timeout = config_->options.timeout;
  if (timeout.count() > 0) r.sent = Clock::now();
  pending_.push_back(std::move(r));
  if (timeout.count() > 0 && !timer_armed_) ArmTimer(pending_.front().sent + timeout);
}

void Link::Get(const std::string& user, Done done) {
  if (state_ != State::kOpen) return Defer(std::move(done), Unusable());
  const uint64_t seq = next_seq_++;
  const uint32_t sent = SendRead(user, seq) ? 1 : 0;
  Track(std::move(done), seq, sent, 1, ReadKind());
}

void Link::BatchGet(std::span<const std::string> users, Done done) {
  if (state_ != State::kOpen) return Defer(std::move(done), Unusable());
  if (users.empty()) return Defer(std::move(done), Outcome{});
  const uint64_t seq = next_seq_++;
  if (config_->segstore && !config_->options.whole_profiles) {
    // One command: SEG.MGET numusers user... [IDSONLY].
    const bool ids_only = config_->options.ids_only;
    cmd_.Begin(2 + users.size() + (ids_only ? 1 : 0));
    cmd_.Arg("SEG.MGET");
    cmd_.Arg(uint64_t{users.size()});
    for (const std::string& user : users) cmd_.Arg(user);
    if (ids_only) cmd_.Arg("IDSONLY");
    Track(std::move(done), seq, Send(seq) ? 1 : 0, 1, ReplyKind::kSegMget);
    return;
  }
  uint32_t sent = 0;
  for (const std::string& user : users) {
    if (!SendRead(user, seq)) break;
    ++sent;
  }
  Track(std::move(done), seq, sent, static_cast<uint32_t>(users.size()), ReadKind());
}

void Link::Upsert(const std::string& user, std::span<const Assignment> segments, Done done) {
  if (state_ != State::kOpen) return Defer(std::move(done), Unusable());
  const uint64_t seq = next_seq_++;
  if (config_->segstore) {  // mode SET (the default), absolute expiries
    BeginSegUpsert(user, segments);
    Track(std::move(done), seq, Send(seq) ? 1 : 0, 1, ReplyKind::kSegUpsert);
    return;
  }
  cmd_.Begin(5 + 2 * segments.size());
  cmd_.Arg("EVALSHA");
  cmd_.Arg(config_->upsert_sha);
  cmd_.Arg("1");
  cmd_.Arg(user);
  cmd_.Arg(NowText());
  for (const Assignment& a : segments) {
    cmd_.Arg(a.id);
    cmd_.Arg(uint64_t{a.expires});
  }
  Track(std::move(done), seq, Send(seq) ? 1 : 0, 1, ReplyKind::kCount);
}

void Link::BeginSegUpsert(std::string_view user, std::span<const Assignment> segments) {
  cmd_.Begin(2 + 2 * segments.size());
  cmd_.Arg("SEG.UPSERT");
  cmd_.Arg(user);
  for (const Assignment& a : segments) {
    cmd_.Arg(a.id);
    cmd_.Arg(uint64_t{a.expires});
  }
}

void Link::Trim(const std::string& user, Done done) {
  if (state_ != State::kOpen) return Defer(std::move(done), Unusable());
  const uint64_t seq = next_seq_++;
  if (config_->segstore) {
    cmd_.Begin(2);
    cmd_.Arg("SEG.TRIM");
    cmd_.Arg(user);
    Track(std::move(done), seq, Send(seq) ? 1 : 0, 1, ReplyKind::kSegTrim);
    return;
  }
  cmd_.Begin(5);
  cmd_.Arg("EVALSHA");
  cmd_.Arg(config_->trim_sha);
  cmd_.Arg("1");
  cmd_.Arg(user);
  cmd_.Arg(NowText());
  Track(std::move(done), seq, Send(seq) ? 1 : 0, 1, ReplyKind::kCount);
}

void Link::Replace(std::span<const std::string> users,
                   std::span<const std::vector<Assignment>> profiles, Done done) {
  if (state_ != State::kOpen) return Defer(std::move(done), Unusable());
  if (users.size() != profiles.size()) {
    return Defer(std::move(done),
                 Failed("Replace: " + std::to_string(users.size()) + " users but " +
                        std::to_string(profiles.size()) + " profiles"));
  }
  if (users.empty()) return Defer(std::move(done), Outcome{});
  uint32_t wanted = 0;
  for (const std::vector<Assignment>& profile : profiles) wanted += profile.empty() ? 1 : 2;
  const uint64_t seq = next_seq_++;
  uint32_t sent = 0;
  for (size_t i = 0; i < users.size(); ++i) {
    const std::vector<Assignment>& profile = profiles[i];
    cmd_.Begin(2);
    cmd_.Arg(config_->segstore ? "SEG.DEL" : "DEL");
    cmd_.Arg(users[i]);
    if (!Send(seq)) break;
    ++sent;
    if (profile.empty()) continue;
    if (config_->segstore) {
      BeginSegUpsert(users[i], profile);
    } else {
      cmd_.Begin(2 + 2 * profile.size());
      cmd_.Arg("HSET");
      cmd_.Arg(users[i]);
      for (const Assignment& a : profile) {
        cmd_.Arg(a.id);
        cmd_.Arg(uint64_t{a.expires});
      }
    }
    if (!Send(seq)) break;
    ++sent;
  }
  Track(std::move(done), seq, sent, wanted, ReplyKind::kWrite);
}

// --- Replies ---------------------------------------------------------------------

void Link::OnReply(const redisReply* reply, uint64_t seq) {
  if (state_ != State::kOpen) return;  // its request was already failed
  if (reply == nullptr) {
    // hiredis is freeing the context (a socket error, or our free) and
    // fails each command: fail every request now, once.
    freeing_ = true;
    Break(config_->label + ": connection lost: " + ContextError());
    return;
  }
  if (pending_.empty() || pending_.front().seq != seq) {
    Break(config_->label + ": a reply came for no request in flight (internal error)");
    return;
  }
  Request& r = pending_.front();
  Outcome& o = r.outcome;
  if (r.kind >= ReplyKind::kSegGet) {
    ReadSegstoreReply(reply, r);
  } else {
    switch (reply->type) {
      case REDIS_REPLY_ERROR:
        Fail(o, std::string_view(reply->str, reply->len));
        break;
      case REDIS_REPLY_ARRAY:
        if (r.kind == ReplyKind::kHash || r.kind == ReplyKind::kLiveHash) {
          o.segments += static_cast<uint32_t>(reply->elements / 2);
          if (reply->elements == 0 && r.kind == ReplyKind::kHash) ++o.missing;
        } else if (r.kind != ReplyKind::kWrite) {
          Fail(o, config_->label + ": unexpected array reply");
        }
        break;
      case REDIS_REPLY_NIL:
        if (r.kind == ReplyKind::kLiveHash) {
          ++o.missing;
        } else if (r.kind != ReplyKind::kWrite) {
          Fail(o, config_->label + ": unexpected nil reply");
        }
        break;
      case REDIS_REPLY_INTEGER:
        if (r.kind == ReplyKind::kCount) {
          o.segments += static_cast<uint32_t>(std::max<long long>(reply->integer, 0));  // NOLINT
        } else if (r.kind != ReplyKind::kWrite) {
          Fail(o, config_->label + ": unexpected integer reply");
        }
        break;
      default:
        if (r.kind != ReplyKind::kWrite) Fail(o, config_->label + ": unexpected reply");
        break;
    }
  }
  if (--r.replies_left > 0) return;
  Request finished = pending_.pop_front();
  finished.done(std::move(finished.outcome));  // may send more, or destroy the Connection
}

void Link::ReadSegstoreReply(const redisReply* reply, Request& r) {
  Outcome& o = r.outcome;
  if (reply->type == REDIS_REPLY_ERROR) return Fail(o, std::string_view(reply->str, reply->len));
  const ReplySink& sink = sink_;
  const bool nil = reply->type == REDIS_REPLY_NIL;
  const bool array = reply->type == REDIS_REPLY_ARRAY;
  // Adds the integer at index `i` of the root map, which must have `elements`.
  // `elements` 0: an even number from 6 to 12 (SEG.GET's map: count, stale,
  // ids, then expires, attr1 and attr2 when there are any).
  auto count_at = [&](size_t elements, int i, const char* command) {
    const bool size_ok =
        elements != 0 ? reply->elements == elements
                      : reply->elements >= 6 && reply->elements <= 12 && reply->elements % 2 == 0;
    if (!size_ok || (sink.root_int_seen & (1u << i)) == 0) {
      return Fail(o, config_->label + ": unexpected reply to " + command + ": an array of " +
                         std::to_string(reply->elements));
    }
    o.segments += static_cast<uint32_t>(std::max<long long>(sink.root_int[i], 0));  // NOLINT
  };
  switch (r.kind) {
    case ReplyKind::kSegGet:  // [count, n, stale, 0/1, ids, [...], ...], or nil: no profile
      if (nil) {
        ++o.missing;
        return;
      }
      if (array) return count_at(0, 1, "SEG.GET");
      break;
    case ReplyKind::kSegMget:  // per user: SEG.GET's map, nil or an error
      if (!array) break;
      if (sink.child_arrays + sink.child_nils + sink.child_errors != reply->elements) {
        return Fail(o, config_->label + ": unexpected element in a reply to SEG.MGET");
      }
      if (sink.child_errors > 0) return Fail(o, sink.child_error);  // fails the whole request
      o.segments += static_cast<uint32_t>(std::max<long long>(sink.child_int1_sum, 0));  // NOLINT
      o.missing += sink.child_nils;
      return;
    case ReplyKind::kSegUpsert:  // [inserted, n, updated, n, trimmed, n, count, n, duplicate, 0/1]
      if (array) return count_at(10, 5, "SEG.UPSERT");
      break;
    case ReplyKind::kSegTrim:  // [trimmed, n, remaining, n, duplicate, 0/1], or nil: no profile
      if (nil) return;         // nothing to trim (the other targets' answer too)
      if (array) return count_at(6, 1, "SEG.TRIM");
      break;
    default:
      break;
  }
  Fail(o, config_->label + ": unexpected reply (type " + std::to_string(reply->type) + ")");
}

// --- Failure ---------------------------------------------------------------------

std::string Link::ContextError() const {
  if (ac_ != nullptr && ac_->c.err != 0) return ac_->c.errstr;
  return "connection closed";
}

void Link::FreeContext() {
  if (ac_ == nullptr || freeing_) return;
  freeing_ = true;
  // Now, or when the reply callback we are in returns; either way hiredis
  // runs the remaining reply callbacks with NULL (ignored: no longer open),
  // then OnCleanup, then closes the socket.
  redisAsyncFree(ac_);
}

void Link::Break(std::string why) {
  if (state_ != State::kOpen) return;
  state_ = State::kBroken;
  error_ = std::move(why);
  timer_.cancel();
  FreeContext();
  FailPending(error_);
}

void Link::FailPending(const std::string& why) {
  // One at a time from the queue itself: a callback that destroys the
  // Connection (Close) fails the rest before its destructor returns. No
  // request joins the queue once the state is not kOpen.
  while (!pending_.empty()) {
    Request r = pending_.pop_front();
    r.done(Failed(why));
  }
}

void Link::Unsupported(std::string_view operation, Done done) {
  Defer(std::move(done), Failed(std::string(operation) + ": not supported by " + config_->label));
}

void Link::Defer(Done done, Outcome outcome) {
  deferred_.push_back(Deferred{std::move(done), std::move(outcome)});
  if (deferred_posted_) return;
  deferred_posted_ = true;
  boost::asio::post(io_, [self = shared_from_this()] { self->DeliverDeferred(); });
}

void Link::DeliverDeferred() {
  deferred_posted_ = false;
  // Only those queued so far: a callback that retries at once on a broken
  // connection is answered from the next post, not in a loop here.
  for (size_t n = deferred_.size(); n > 0 && !deferred_.empty(); --n) {
    Deferred d = deferred_.pop_front();
    d.done(std::move(d.outcome));
  }
}

void Link::Close() {
  if (state_ == State::kClosed) return;
  state_ = State::kClosed;
  timer_.cancel();
  FreeContext();
  const std::string why = config_->label + ": connection closed with the request in flight";
  while (!pending_.empty()) {
    Request r = pending_.pop_front();
    r.done(Failed(why));
  }
  while (!deferred_.empty()) {
    Deferred d = deferred_.pop_front();
    if (d.outcome.ok) d.outcome = Failed(why);
    d.done(std::move(d.outcome));
  }
}

// ---------------------------------------------------------------------------
// Synchronous commands (NewRedisTarget, Sample).

struct ContextDeleter {
  void operator()(redisContext* c) const { redisFree(c); }
};
using SyncContext = std::unique_ptr<redisContext, ContextDeleter>;

struct ReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using ReplyPtr = std::unique_ptr<redisReply, ReplyDeleter>;

Result<SyncContext> ConnectSync(const Config& config) {
  SyncContext c(redisConnectWithTimeout(config.options.host.c_str(), config.options.port,
                                        ToTimeval(config.connect_timeout)));
  if (c == nullptr) return Status::Unavailable(config.label + ": cannot connect: out of memory");
  if (c->err != 0) {
    return Status::Unavailable(config.label + ": cannot connect: " + c->errstr);
  }
  if (config.options.timeout.count() > 0 &&
      redisSetTimeout(c.get(), ToTimeval(config.options.timeout)) != REDIS_OK) {
    return Status::Unavailable(config.label + ": cannot set the timeout: " + c->errstr);
  }
  return Result<SyncContext>(std::move(c));
}

// Runs one command; Unavailable, naming the command, on an error reply or
// a connection error.
Result<ReplyPtr> Command(redisContext* c, const Config& config,
                         std::initializer_list<std::string_view> args) {
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (std::string_view a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  // The command's name for messages: "INFO", "SCRIPT LOAD", "CONFIG GET",
  // "INFO segstore".
  std::string name(*args.begin());
  if (args.size() > 1 && (name == "SCRIPT" || name == "CONFIG" || name == "INFO")) {
    name += ' ';
    name += *(args.begin() + 1);
  }
  ReplyPtr reply(static_cast<redisReply*>(
      redisCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lens.data())));
  if (reply == nullptr) {
    const bool timed_out = c->err == REDIS_ERR_IO && (errno == EAGAIN || errno == EWOULDBLOCK);
    return Status::Unavailable(config.label + ": " + name + ": " +
                               (timed_out ? "no reply within " + MillisText(config.options.timeout)
                                          : std::string(c->err != 0 ? c->errstr : "no reply")));
  }
  if (reply->type == REDIS_REPLY_ERROR) {
    return Status::Unavailable(config.label + ": " + name + ": " +
                               std::string(reply->str, reply->len));
  }
  return Result<ReplyPtr>(std::move(reply));
}

// The value of `key` in INFO's text ("key:value" lines); empty if absent.
std::string_view InfoValue(std::string_view info, std::string_view key) {
  size_t at = 0;
  while (at < info.size()) {
    size_t end = info.find('\n', at);
    if (end == std::string_view::npos) end = info.size();
    std::string_view line = info.substr(at, end - at);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.size() > key.size() && line.starts_with(key) && line[key.size()] == ':') {
      return line.substr(key.size() + 1);
    }
    at = end + 1;
  }
  return {};
}

uint64_t LeadingNumber(std::string_view text) {
  uint64_t value = 0;
  std::from_chars(text.data(), text.data() + text.size(), value);
  return value;
}

// CONFIG GET's value for `name` (a [name, value] array).
Result<std::string> ConfigValue(redisContext* c, const Config& config, std::string_view name) {
  auto reply = Command(c, config, {"CONFIG", "GET", name});
  if (!reply.ok()) return reply.status();
  const redisReply* r = reply->get();
  if (r->type != REDIS_REPLY_ARRAY || r->elements < 2 ||
      r->element[1]->type != REDIS_REPLY_STRING) {
    return Status::Unavailable(config.label + ": CONFIG GET " + std::string(name) +
                               ": unexpected reply");
  }
  return std::string(r->element[1]->str, r->element[1]->len);
}

// INFO's text (a bulk string in RESP2, verbatim text in RESP3).
Result<std::string> InfoText(redisContext* c, const Config& config,
                             std::initializer_list<std::string_view> args) {
  auto info = Command(c, config, args);
  if (!info.ok()) return info.status();
  const redisReply* r = info->get();
  if (r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_STATUS) {
    return Status::Unavailable(config.label + ": INFO: unexpected reply");
  }
  return std::string(r->str, r->len);
}

// segstored's figures from `INFO segstore` (its stats, "name:value"): the
// same statistics as the segstore target's sample (segstore_target.cc).
ServerSample SegstoreSampleOf(std::string_view info) {
  auto number = [&](std::string_view name) { return LeadingNumber(InfoValue(info, name)); };
  ServerSample s;
  s.pid = static_cast<int64_t>(number("process.pid"));
  s.memory_bytes = number("process.resident_memory_bytes");
  s.device_bytes_used = (number("storage.write_blocks") - number("storage.write_blocks_free")) *
                        number("storage.write_block_bytes");
  s.live_bytes = number("storage.live_bytes");
  s.records = number("storage.index_entries");
  s.sweeper_segments_removed = number("sweeper.segments_removed");
  s.sweeper_records_rewritten = number("sweeper.records_rewritten");
  s.defrag_blocks = number("storage.defrag_blocks");
  s.durability = std::string(InfoValue(info, "config.storage.durability"));
  s.device = std::string(InfoValue(info, "config.storage.path"));
  return s;
}

class RedisTarget final : public Target {
 public:
  explicit RedisTarget(std::shared_ptr<const Config> config) : config_(std::move(config)) {}

  std::string name() const override { return config_->segstore ? "segstore resp" : "redis"; }
  std::string address() const override { return config_->address; }

  void Open(boost::asio::io_context& io,
            std::function<void(Result<std::unique_ptr<Connection>>)> done) override {
    std::make_shared<Link>(io, config_)->Start(std::move(done));
  }

  Result<ServerSample> Sample() override {
    auto c = ConnectSync(*config_);
    if (!c.ok()) return c.status();
    redisContext* ctx = c->get();
    if (config_->segstore) {
      auto info = InfoText(ctx, *config_, {"INFO", "segstore"});
      if (!info.ok()) return info.status();
      return SegstoreSampleOf(*info);
    }
    auto info = InfoText(ctx, *config_, {"INFO"});
    if (!info.ok()) return info.status();
    const std::string_view text = *info;
    ServerSample s;
    s.pid = static_cast<int64_t>(LeadingNumber(InfoValue(text, "process_id")));
    s.memory_bytes = LeadingNumber(InfoValue(text, "used_memory"));
    const std::string_view db0 = InfoValue(text, "db0");  // "keys=N,expires=...,avg_ttl=..."
    if (db0.starts_with("keys=")) s.records = LeadingNumber(db0.substr(5));
    auto appendonly = ConfigValue(ctx, *config_, "appendonly");
    if (!appendonly.ok()) return appendonly.status();
    auto save = ConfigValue(ctx, *config_, "save");
    if (!save.ok()) return save.status();
    s.durability = "appendonly " + *appendonly + ", save \"" + *save + "\"";
    s.device = "memory";
    return s;
  }

  size_t load_batch() const override { return kLoadBatch; }

 private:
  std::shared_ptr<const Config> config_;
};

}  // namespace

Result<std::unique_ptr<Target>> NewRedisTarget(const RedisOptions& options) {
  const bool segstore = options.dialect == RedisOptions::Dialect::kSegstore;
  const std::string kind = segstore ? "segstore resp" : "redis";
  if (options.host.empty()) return Status::InvalidArgument(kind + " target: empty host");
  if (options.port == 0) return Status::InvalidArgument(kind + " target: port 0");
  if (options.timeout.count() < 0) {
    return Status::InvalidArgument(kind + " target: negative timeout");
  }
  if (segstore && options.whole_profiles && options.ids_only) {
    return Status::InvalidArgument(
        "segstore resp target: whole_profiles (HGETALL) and ids_only (IDSONLY) together");
  }
  if (!segstore && options.ids_only) {
    return Status::InvalidArgument("redis target: ids_only is segstore's (IDSONLY)");
  }
  IgnoreSigpipe();
  auto config = std::make_shared<Config>();
  config->options = options;
  config->segstore = segstore;
  config->address = options.host + ":" + std::to_string(options.port);
  config->label = kind + " at " + config->address;
  config->connect_timeout = options.timeout.count() > 0 ? options.timeout : kDefaultConnectTimeout;

  auto c = ConnectSync(*config);
  if (!c.ok()) return c.status();
  if (segstore) {
    // A segstored's INFO has a segstore section naming its process; a
    // Redis answers INFO segstore with nothing.
    auto info = InfoText(c->get(), *config, {"INFO", "segstore"});
    if (!info.ok()) return info.status();
    if (InfoValue(*info, "process.pid").empty()) {
      return Status::Unavailable(config->label +
                                 ": INFO segstore has no process.pid: not segstored's RESP port");
    }
    return std::unique_ptr<Target>(std::make_unique<RedisTarget>(std::move(config)));
  }
  const struct {
    std::string script;
    std::string* sha;
  } scripts[] = {{kGetLiveScript, &config->get_live_sha},
                 {std::string(kUpsertHead) + kTrimTail, &config->upsert_sha},
                 {std::string(kTrimHead) + kTrimTail, &config->trim_sha}};
  for (const auto& s : scripts) {
    auto reply = Command(c->get(), *config, {"SCRIPT", "LOAD", s.script});
    if (!reply.ok()) return reply.status();
    if ((*reply)->type != REDIS_REPLY_STRING) {
      return Status::Unavailable(config->label + ": SCRIPT LOAD: unexpected reply");
    }
    s.sha->assign((*reply)->str, (*reply)->len);
  }
  return std::unique_ptr<Target>(std::make_unique<RedisTarget>(std::move(config)));
}

}  // namespace segstore::bench

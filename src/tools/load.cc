#include "tools/load.h"

// Boost 1.74's Asio uses std::exchange without including <utility> (C++20).
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <boost/asio.hpp>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <deque>
#include <functional>
#include <iterator>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "loader/line_reader.h"
#include "segstore/async_cluster_client.h"

namespace segstore::tools {
namespace {

using Clock = std::chrono::steady_clock;

// One batch upsert on its way, with what is needed to retry or report it.
struct Batch {
  std::vector<UpsertItem> items;
  uint64_t segments = 0;
  size_t bytes = 0;  // about what its items take in a request
  unsigned attempt = 0;
  std::string node;  // where its users went first ("host:port"), for flow control
};

// What the loader sends again after a pause: the server (or the cluster)
// was busy, unreachable, did not answer in time, or (through a log) could
// not tell whether the write was made. Loads are set or extend upserts, so a
// resent item changes nothing it had already done; in a cluster with a log
// it carries its first write ID, and is not applied twice.
bool Transient(const Status& s) {
  switch (s.code()) {
    case Status::Code::kBusy:
    case Status::Code::kUnavailable:
    case Status::Code::kTimeout:
    case Status::Code::kLogUnavailable:
    case Status::Code::kInDoubt:
      return true;
    default:
      return false;
  }
}

std::string Human(double v) {
  char buf[32];
  if (v >= 1e9) {
    std::snprintf(buf, sizeof buf, "%.2fG", v / 1e9);
  } else if (v >= 1e6) {
    std::snprintf(buf, sizeof buf, "%.2fM", v / 1e6);
  } else if (v >= 1e3) {
    std::snprintf(buf, sizeof buf, "%.1fk", v / 1e3);
  } else {
    std::snprintf(buf, sizeof buf, "%.0f", v);
  }
  return buf;
}

// User ID -> its index in the loader's user list: open addressing with
// linear probing over (digest, index) slots, so a lookup is about one cache
// line (std::unordered_map spent half the loader's time walking node chains
// on a shuffled row file, and comparing the keys themselves another sixth).
// Users are told apart by their XXH3-128 digest: two of a hundred million
// IDs share one with a probability near 1e-23.
class UserIndex {
 public:
  // The index of `key`, or `fresh` (inserted, *inserted set) when it is new.
  uint32_t FindOrInsert(std::string_view key, uint32_t fresh, bool* inserted) {
    if ((used_ + 1) * 2 > slots_.size()) Grow();
    const XXH128_hash_t h = XXH3_128bits(key.data(), key.size());
    for (size_t i = h.low64 & mask_;; i = (i + 1) & mask_) {
      Slot& slot = slots_[i];
      if (slot.index == kEmpty) {
        slot = Slot{h.low64, h.high64, fresh};
        ++used_;
        *inserted = true;
        return fresh;
      }
      if (slot.lo == h.low64 && slot.hi == h.high64) {
        *inserted = false;
        return slot.index;
      }
    }
  }
  void Clear() {
    slots_.assign(slots_.size(), Slot{});
    used_ = 0;
  }

 private:
  static constexpr uint32_t kEmpty = UINT32_MAX;
  struct Slot {
    uint64_t lo = 0;
    uint64_t hi = 0;
    uint32_t index = kEmpty;
  };
  void Grow() {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(std::max<size_t>(1024, old.size() * 2), Slot{});
    mask_ = slots_.size() - 1;
    for (const Slot& s : old) {
      if (s.index == kEmpty) continue;
      size_t i = s.lo & mask_;
      while (slots_[i].index != kEmpty) i = (i + 1) & mask_;
      slots_[i] = s;
    }
  }
  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t used_ = 0;
};

// What both loads share: the options, the routing client on its own
// io_context, the input's size, bad rows, error reports, the progress line
// and the stop (exit status 2). Single-threaded: everything, the client's
// callbacks included (inside io_.run_one and io_.poll), runs on the thread
// that calls Run.
class LoadBase {
 protected:
  explicit LoadBase(const LoadOptions& o) : o_(o) {}

  // Notes the start and the input's size (of the files that have one).
  void Begin() {
    start_ = Clock::now();
    tty_ = ::isatty(2) != 0;
    for (const std::string& f : o_.files) {
      struct stat st {};
      if (f != "-" && ::stat(f.c_str(), &st) == 0)
        total_bytes_ += static_cast<uint64_t>(st.st_size);
    }
  }

  // Connects to the server named (any node of a cluster) and learns the
  // map: a cluster's users are routed to their nodes, over o_.connections
  // connections to each.
  Status Connect() {
    client::AsyncClusterClientOptions co;
    co.node = o_.client;
    co.connections_per_node = std::max(1u, o_.connections);
    std::optional<Result<std::unique_ptr<client::AsyncClusterClient>>> r;
    client::AsyncClusterClient::Connect(
        io_, co,
        [&r](Result<std::unique_ptr<client::AsyncClusterClient>> c) { r.emplace(std::move(c)); });
    while (!r) io_.run_one();
    if (!r->ok()) return r->status();
    client_ = std::move(*r).value();
    return Status::OK();
  }

  // The load stops: nothing more is read or sent, and the exit status is 2.
  void Stop() {
    stopped_ = true;
    exit_ = 2;
  }

  // Whether `s` says the server takes no `what` at all (Unsupported: a
  // cluster where a node runs a build without them; ReadOnly: a passive
  // cluster): the load then stops, said once, instead of failing every row.
  bool TakesNone(const Status& s, const char* what) {
    if (s.code() != Status::Code::kUnsupported && s.code() != Status::Code::kReadOnly) {
      return false;
    }
    if (!stopped_) {
      std::fprintf(stderr, "segctl load: the server takes no %s: %s\n", what, s.ToString().c_str());
      Stop();
    }
    return true;
  }

  // A request out of attempts without an answer: the server is gone for
  // good, and the load stops.
  void StopIfGone(const Status& s, unsigned attempts) {
    if ((s.code() == Status::Code::kUnavailable || s.code() == Status::Code::kTimeout) &&
        !stopped_) {
      std::fprintf(stderr, "segctl load: stopping: no answer after %u attempts: %s\n", attempts,
                   s.ToString().c_str());
      Stop();
    }
  }

  // Opens `path`; null when it cannot be read (said, and the load stopped).
  std::unique_ptr<loader::LineReader> Open(const std::string& path) {
    std::unique_ptr<loader::LineReader> reader;
    if (Status s = loader::LineReader::Open(path, &reader); !s.ok()) {
      std::fprintf(stderr, "segctl load: %s\n", s.ToString().c_str());
      Stop();
      return nullptr;
    }
    return reader;
  }

  // A line the parser refused: counted, and reported as PATH:LINE: reason
  // (within Report's limit). False when --max-errors stops the load.
  bool BadRow(const std::string& path, uint64_t line, const Status& s) {
    ++bad_rows_;
    if (Report()) {
      std::fprintf(stderr, "%s:%llu: %s\n", path.c_str(), static_cast<unsigned long long>(line),
                   std::string(s.message()).c_str());
    }
    if (o_.max_errors != 0 && bad_rows_ >= o_.max_errors) {
      std::fprintf(stderr, "segctl load: stopping after %llu bad rows (--max-errors)\n",
                   static_cast<unsigned long long>(bad_rows_));
      Stop();
      return false;
    }
    return true;
  }

  // Line 1 skipped as a header: not an error, but said (a first data line
  // taken for a header would be lost).
  static void SkippedHeader(const std::string& path, uint64_t line) {
    std::fprintf(stderr, "%s:%llu: skipped as a header line\n", path.c_str(),
                 static_cast<unsigned long long>(line));
  }

  // After the last line of a file: false (said, and the load stopped) when
  // it could not be read to its end.
  bool EndFile(const loader::LineReader& reader) {
    if (!reader.status().ok()) {
      std::fprintf(stderr, "segctl load: %s\n", reader.status().ToString().c_str());
      Stop();
      return false;
    }
    done_bytes_ += reader.bytes_read();
    return true;
  }

  // Whether to print one more error: the first kMaxReported, then one line
  // saying the rest are only counted (a nightly file with a systematic
  // problem must not print a hundred million lines).
  bool Report() {
    constexpr uint64_t kMaxReported = 100;
    if (++reported_ <= kMaxReported) return true;
    if (reported_ == kMaxReported + 1) {
      std::fprintf(stderr, "segctl load: more errors; only counted from here on\n");
    }
    return false;
  }

  // Shows how far the load is, `counts` between the bytes read and the time
  // left: a bar on a terminal (every 250 ms), else a line every 5 s.
  // `reader`: the file being read, if any.
  void ShowProgress(const loader::LineReader* reader, bool final, const std::string& counts) {
    if (!o_.progress) return;
    const auto now = Clock::now();
    const auto every = tty_ ? std::chrono::milliseconds(250) : std::chrono::milliseconds(5000);
    if (!final && now - last_progress_ < every) return;
    last_progress_ = now;
    const double secs = Seconds();
    const uint64_t read = done_bytes_ + (reader ? reader->bytes_read() : 0);
    const double share =
        total_bytes_ > 0 ? std::min(1.0, static_cast<double>(read) / total_bytes_) : 0.0;
    const double eta = share > 0.01 ? secs / share - secs : 0;
    char line[320];
    std::snprintf(line, sizeof line, "%5.1f%% %s of %s bytes  %s  left %.0f s", share * 100,
                  Human(static_cast<double>(read)).c_str(),
                  total_bytes_ > 0 ? Human(static_cast<double>(total_bytes_)).c_str() : "?",
                  counts.c_str(), eta);
    if (tty_) {
      const int width = 24;
      const int filled = static_cast<int>(share * width);
      std::fprintf(stderr, "\r[%.*s%.*s] %s", filled, "========================", width - filled,
                   "                        ", line);
      shown_ = true;
    } else {
      std::fprintf(stderr, "progress: %s\n", line);
    }
  }

  void EndProgress() {
    if (shown_) std::fprintf(stderr, "\n");
  }

  // "1.2k (300/s)": a count and its rate since the start.
  std::string CountAndRate(uint64_t n) const {
    return Human(static_cast<double>(n)) + " (" + Human(n / std::max(Seconds(), 1e-3)) + "/s)";
  }

  double Seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

  LoadOptions o_;
  boost::asio::io_context io_;
  std::unique_ptr<client::AsyncClusterClient> client_;  // declared after io_: destroyed first
  bool closing_ = false;                                // Drain is dropping what is left
  Clock::time_point start_;
  Clock::time_point last_progress_;
  uint64_t total_bytes_ = 0, done_bytes_ = 0;
  uint64_t bad_rows_ = 0, retries_ = 0;
  uint64_t reported_ = 0;
  bool stopped_ = false;
  bool tty_ = false;  // standard error is a terminal: a bar, not lines
  bool shown_ = false;
  int exit_ = 0;
};

class Loader : public LoadBase {
 public:
  explicit Loader(const LoadOptions& o)
      : LoadBase(o), batch_users_(std::max<uint32_t>(o.batch_users, 1)) {}

  int Run() {
    Begin();
    if (!o_.dry_run) {
      if (Status s = Connect(); !s.ok()) {
        std::fprintf(stderr, "segctl load: %s\n", s.ToString().c_str());
        return 2;
      }
      const ServerInfo& info = client_->server_info();
      if (info.max_batch != 0) batch_users_ = std::min<uint32_t>(o_.batch_users, info.max_batch);
      if (info.max_frame_bytes != 0) frame_budget_ = info.max_frame_bytes / 2;
    }
    for (const std::string& f : o_.files) {
      if (!ReadFile(f)) break;
    }
    if (!stopped_) Flush();
    Drain();
    EndProgress();
    return Summary();
  }

 private:
  // Batches in flight (or waiting to be sent again) to `node` at most.
  unsigned NodeCapacity() const {
    return std::max(1u, o_.connections) * std::max(1u, o_.in_flight);
  }

  // Reads and groups one file; false when the load must stop.
  bool ReadFile(const std::string& path) {
    std::unique_ptr<loader::LineReader> reader = Open(path);
    if (!reader) return false;
    loader::LineParser parser(o_.parse);
    loader::ParsedLine parsed;
    std::string_view line;
    uint64_t since_poll = 0;
    while (reader->Next(&line)) {
      const uint64_t n = reader->line_number();
      Status s = parser.Parse(line, n, &parsed);
      if (!s.ok()) {
        if (!BadRow(path, n, s)) return false;
        continue;
      }
      if (parsed.segments.empty()) {
        if (parsed.header) SkippedHeader(path, n);
        continue;
      }
      ++rows_;
      Add(parsed);
      if (++since_poll >= 4096) {
        since_poll = 0;
        if (!o_.dry_run) io_.poll();
        Progress(reader.get(), false);
        if (stopped_) return false;
      }
    }
    if (!EndFile(*reader)) return false;
    Progress(nullptr, false);
    return true;
  }

  // Groups one line's segments under its user. Rows are appended to one flat
  // array (sequential writes: a shuffled row file touches 100,000 users at
  // random, and a vector per user would make every row a cache and TLB
  // miss); Flush sorts them by user. Segments with attributes, rare in DMP
  // files, take a slower per-user side table.
  void Add(const loader::ParsedLine& parsed) {
    bool inserted = false;
    const uint32_t index =
        user_index_.FindOrInsert(parsed.user, static_cast<uint32_t>(users_.size()), &inserted);
    if (inserted) {
      users_.emplace_back(parsed.user);
      group_bytes_ += parsed.user.size() + 64;
    }
    for (const SegmentUpdate& s : parsed.segments) {
      if (s.attr1 || s.attr2) {
        with_attrs_[index].push_back(s);
        group_bytes_ += 2 * sizeof(SegmentUpdate);
        continue;
      }
      grouped_.push_back(Row{index | (s.ttl ? kTtlBit : 0), s.value, s.id});
    }
    // A row costs itself and its copy in Flush's sort.
    if (group_bytes_ + grouped_.size() * 2 * sizeof(Row) >= o_.memory_bytes) Flush();
  }

  // Sends every grouped user (one upsert each) and forgets them.
  void Flush() {
    // Counting sort of the rows by user: stable, so for a segment given twice
    // the later row stays later (and wins below).
    const size_t n_users = users_.size();
    std::vector<uint64_t> start(n_users + 1, 0);
    for (const Row& r : grouped_) ++start[(r.user & ~kTtlBit) + 1];
    for (size_t u = 0; u < n_users; ++u) start[u + 1] += start[u];
    // Both arrays keep their memory from one flush to the next: giving it
    // back and faulting it in again cost more than the sort itself.
    sorted_.resize(grouped_.size());
    std::vector<Row>& sorted = sorted_;
    {
      std::vector<uint64_t> next(start.begin(), start.end() - 1);
      for (const Row& r : grouped_) sorted[next[r.user & ~kTtlBit]++] = r;
    }
    grouped_.clear();

    // One open batch per node: a cluster's users are grouped by the node
    // that holds them, so that each batch goes to one node whole (a single
    // server is one node).
    std::vector<Batch> open;
    std::unordered_map<std::string, size_t> open_of;
    const bool named = client_ && client_->map().log;  // items carry write IDs
    std::vector<SegmentUpdate> segs;
    for (uint32_t u = 0; u < n_users; ++u) {
      segs.clear();
      for (uint64_t i = start[u]; i < start[u + 1]; ++i) {
        const Row& r = sorted[i];
        segs.push_back(SegmentUpdate{r.id, r.value, (r.user & kTtlBit) != 0, {}, {}});
      }
      if (auto a = with_attrs_.find(u); a != with_attrs_.end()) {
        segs.insert(segs.end(), a->second.begin(), a->second.end());
      }
      // An absolute expiry that was ahead when its row was read may have
      // passed since (a large file takes a while): such a segment is dropped
      // and counted, rather than failing the user's whole upsert.
      const auto now = static_cast<uint32_t>(std::time(nullptr)) + 1;
      const size_t before = segs.size();
      std::erase_if(segs, [now](const SegmentUpdate& x) {
        return !x.ttl && x.value != kNever && x.value <= now;
      });
      expired_rows_ += before - segs.size();
      if (segs.empty()) continue;
      // The same segment twice for one user: the last row wins.
      auto by_id = [](const SegmentUpdate& a, const SegmentUpdate& b) { return a.id < b.id; };
      if (!std::is_sorted(segs.begin(), segs.end(), by_id)) {  // grouped files usually are
        std::stable_sort(segs.begin(), segs.end(), by_id);
      }
      std::vector<SegmentUpdate> unique;
      unique.reserve(segs.size());
      for (const SegmentUpdate& s : segs) {
        if (!unique.empty() && unique.back().id == s.id) {
          unique.back() = s;
        } else {
          unique.push_back(s);
        }
      }
      std::string& user = users_[u];  // moved into the batch below: users_ is cleared after
      users_seen_.insert(std::hash<std::string_view>{}(user));
      const size_t bytes = user.size() + unique.size() * 14 + 16 + (named ? 28 : 0);
      std::string node = client_ ? client_->NodeOf(user) : std::string();
      auto [at, fresh] = open_of.try_emplace(node, open.size());
      if (fresh) {
        open.emplace_back();
        open.back().node = std::move(node);
      }
      Batch& batch = open[at->second];
      if (!batch.items.empty() &&
          (batch.items.size() >= batch_users_ || batch.bytes + bytes > frame_budget_)) {
        std::string same = batch.node;
        Send(std::move(batch));
        batch = Batch();
        batch.node = std::move(same);
      }
      batch.segments += unique.size();
      batch.bytes += bytes;
      // In a cluster with a log each item is named once, here, so that a
      // retry of it (by the client or by Retry below) is applied at most once.
      batch.items.push_back(UpsertItem{std::move(user), std::move(unique), o_.mode,
                                       client_ ? client_->NewWriteId() : WriteId{}});
    }
    for (Batch& batch : open) {
      if (!batch.items.empty()) Send(std::move(batch));
    }
    user_index_.Clear();
    users_.clear();
    with_attrs_.clear();
    group_bytes_ = 0;
  }

  void Send(Batch batch) {
    if (o_.dry_run) {
      upserts_ += batch.items.size();
      segments_written_ += batch.segments;
      return;
    }
    // Wait while the batch's node has as many as it may (a slow node holds
    // back only the reading, never another node's batches in flight).
    while (!stopped_ && in_flight_by_node_[batch.node] >= NodeCapacity()) io_.run_one();
    if (stopped_) return;
    ++in_flight_;
    ++in_flight_by_node_[batch.node];
    SendNow(std::make_shared<Batch>(std::move(batch)));
  }

  // Sends `batch`, counted in flight, and handles its answer: each item
  // written, refused (reported) or sent again after a pause.
  void SendNow(std::shared_ptr<Batch> batch) {
    client_->BatchUpsert(batch->items, [this, batch](Result<BatchUpsertResult> r) {
      if (closing_) return;  // the load stopped: what was in flight is left
      if (!r.ok()) {
        if (Transient(r.status()) && batch->attempt < o_.retries) return Retry(batch);
        return Done(*batch, r.status());
      }
      // Items to send again, as a batch of their own (the same write IDs).
      auto again = std::make_shared<Batch>();
      again->node = batch->node;
      again->attempt = batch->attempt;
      Batch gave_up;  // out of attempts on a transient failure
      gave_up.attempt = batch->attempt;
      Status gave_up_on;
      for (size_t i = 0; i < r->size() && i < batch->items.size(); ++i) {
        const Result<UpsertResult>& one = (*r)[i];
        UpsertItem& item = batch->items[i];
        if (one.ok()) {
          ++upserts_;
          segments_written_ += item.segments.size();
        } else if (const bool read_only = one.status().code() == Status::Code::kReadOnly;
                   read_only || Transient(one.status())) {
          // Sent again, or out of attempts; ReadOnly (a passive cluster takes
          // no writes at all) never is, and is what FailBatch gets: it stops
          // the load.
          Batch& to = !read_only && batch->attempt < o_.retries ? *again : gave_up;
          if (&to == &gave_up && gave_up_on.code() != Status::Code::kReadOnly) {
            gave_up_on = one.status();
          }
          to.segments += item.segments.size();
          to.items.push_back(std::move(item));
        } else {
          ++failed_users_;
          if (Report()) {
            std::fprintf(stderr, "user %s: %s\n", item.user.c_str(),
                         one.status().ToString().c_str());
          }
        }
      }
      if (!gave_up.items.empty()) FailBatch(gave_up, gave_up_on);
      if (!again->items.empty()) return Retry(again);
      Finished(*batch);
    });
  }

  // Sends `batch` again after a pause (200 ms, doubling, at most 3.2 s): it
  // stays counted in flight meanwhile.
  void Retry(std::shared_ptr<Batch> batch) {
    ++batch->attempt;
    ++retries_;
    auto timer = std::make_shared<boost::asio::steady_timer>(
        io_, std::chrono::milliseconds(200 << std::min(batch->attempt - 1, 4u)));
    timer->async_wait([this, timer, batch](const boost::system::error_code&) {
      if (closing_) return;
      SendNow(batch);
    });
  }

  // The batch is out of attempts on `s` (or refused whole for good).
  void Done(const Batch& batch, const Status& s) {
    FailBatch(batch, s);
    Finished(batch);
  }

  void Finished(const Batch& batch) {
    --in_flight_;
    --in_flight_by_node_[batch.node];
  }

  // Reports a batch (or what is left of one) as failed. No answer at all
  // after every attempt (unreachable, or not answering): the server, or a
  // node of the cluster, is gone for good, and the load stops; so it does
  // when the cluster takes no writes at all (a passive one: ReadOnly).
  void FailBatch(const Batch& batch, const Status& s) {
    failed_users_ += batch.items.size();
    const bool unanswered =
        s.code() == Status::Code::kUnavailable || s.code() == Status::Code::kTimeout;
    const bool read_only = s.code() == Status::Code::kReadOnly;
    if ((unanswered || read_only) && !stopped_) Stop();
    std::string users;
    for (size_t i = 0; i < batch.items.size() && i < 5; ++i) {
      users += (i > 0 ? ", " : "") + batch.items[i].user;
    }
    if (batch.items.size() > 5) users += ", ...";
    std::fprintf(stderr, "batch of %zu users (%s) failed after %u attempts: %s\n",
                 batch.items.size(), users.c_str(), batch.attempt + 1, s.ToString().c_str());
  }

  // Waits for every batch, resending the ones to retry; after a stop, leaves
  // what is in flight.
  void Drain() {
    if (o_.dry_run) return;
    while (!stopped_ && in_flight_ > 0) io_.run_one();
    closing_ = true;
    client_.reset();  // fails (and so forgets) whatever is still in flight
  }

  void Progress(const loader::LineReader* reader, bool final) {
    ShowProgress(reader, final,
                 "rows " + CountAndRate(rows_) + "  users " + CountAndRate(upserts_) + "  errors " +
                     std::to_string(bad_rows_));
  }

  int Summary() {
    const double secs = Seconds();
    const double per_user =
        users_seen_.empty() ? 0
                            : static_cast<double>(upserts_ + failed_users_) / users_seen_.size();
    if (o_.json) {
      std::printf(
          "{\"rows\":%llu,\"users\":%zu,\"segments\":%llu,\"upserts\":%llu,"
          "\"upserts_per_user\":%.2f,\"bad_rows\":%llu,\"expired_rows\":%llu,"
          "\"failed_users\":%llu,\"retries\":%llu,"
          "\"seconds\":%.3f,\"rows_per_second\":%.0f,\"dry_run\":%s}\n",
          static_cast<unsigned long long>(rows_), users_seen_.size(),
          static_cast<unsigned long long>(segments_written_),
          static_cast<unsigned long long>(upserts_), per_user,
          static_cast<unsigned long long>(bad_rows_),
          static_cast<unsigned long long>(expired_rows_),
          static_cast<unsigned long long>(failed_users_), static_cast<unsigned long long>(retries_),
          secs, rows_ / std::max(secs, 1e-9), o_.dry_run ? "true" : "false");
    } else {
      std::printf(
          "%s%llu rows, %zu users, %llu segments %s in %.1f s (%.0f rows/s, %.0f users/s); "
          "%llu upserts (%.2f a user); %llu bad rows, %llu expired before sending, %llu users "
          "failed, %llu retries\n",
          o_.dry_run ? "dry run: " : "", static_cast<unsigned long long>(rows_), users_seen_.size(),
          static_cast<unsigned long long>(segments_written_), o_.dry_run ? "valid" : "written",
          secs, rows_ / std::max(secs, 1e-9), users_seen_.size() / std::max(secs, 1e-9),
          static_cast<unsigned long long>(upserts_), per_user,
          static_cast<unsigned long long>(bad_rows_),
          static_cast<unsigned long long>(expired_rows_),
          static_cast<unsigned long long>(failed_users_),
          static_cast<unsigned long long>(retries_));
    }
    if (exit_ != 0) return exit_;
    return bad_rows_ == 0 && failed_users_ == 0 && expired_rows_ == 0 ? 0 : 1;
  }

  unsigned in_flight_ = 0;  // batches sent and not done (waiting to be resent included)
  std::unordered_map<std::string, unsigned> in_flight_by_node_;
  // One grouped row: 16 bytes. `user` indexes users_; its top bit is the TTL flag.
  struct Row {
    uint32_t user;
    uint32_t value;
    uint64_t id;
  };
  static constexpr uint32_t kTtlBit = 1u << 31;
  std::vector<Row> grouped_;
  std::vector<Row> sorted_;  // Flush's scratch
  std::deque<std::string> users_;
  UserIndex user_index_;
  std::unordered_map<uint32_t, std::vector<SegmentUpdate>> with_attrs_;
  std::unordered_set<size_t> users_seen_;  // hashes of the users sent, for the rewrite ratio
  uint64_t group_bytes_ = 0;
  uint32_t batch_users_ = 100;
  size_t frame_budget_ = 2u << 20;
  uint64_t rows_ = 0, segments_written_ = 0, upserts_ = 0;
  uint64_t failed_users_ = 0;
  uint64_t expired_rows_ = 0;  // valid when read, expired before they could be sent
};

// `segctl load --links`: one link request per ID of each line. Lines are
// read ahead of the sending, up to kWindow links; a link waits for every
// earlier one that names one of its two IDs (as user or master) to finish
// first, so that links sharing an ID are made in file order (the last line
// naming an ID decides its master) and the links into one master never race
// each other (the server would retry them against each other, and a hot
// master could answer Busy); the others go out side by side, at most
// o_.connections * o_.in_flight at once.
class LinkLoader : public LoadBase {
 public:
  explicit LinkLoader(const LoadOptions& o) : LoadBase(o) {}

  int Run() {
    Begin();
    if (!o_.dry_run) {
      if (Status s = Connect(); !s.ok()) {
        std::fprintf(stderr, "segctl load: %s\n", s.ToString().c_str());
        return 2;
      }
      const ServerInfo& info = client_->server_info();
      if (info.max_key_bytes != 0) o_.link_parse.max_key_bytes = info.max_key_bytes;
    }
    for (uint32_t f = 0; f < o_.files.size(); ++f) {
      if (!ReadFile(f)) break;
    }
    Drain();
    EndProgress();
    return Summary();
  }

 private:
  static constexpr size_t kWindow = 65536;  // links read and not yet finished, at most
  // Lines read twice once their file's format is known ("A<TAB>B"), at most.
  static constexpr size_t kMaxUndecidedBytes = size_t{64} << 20;

  // The line a link came from; its failures are reported together once its
  // last link has finished (a components line past a group's limit is one
  // report, not one a member).
  struct Source {
    uint32_t file = 0;
    uint64_t line = 0;
    uint32_t links = 0;       // on the line
    uint32_t left = 0;        // not finished yet
    uint32_t failed = 0;      // refused, or out of attempts
    std::string first_error;  // "LimitExceeded: ...", with the attempts made
    std::string failed_ids;   // the first few failed IDs, for the report
  };

  struct Link {
    std::string user;
    std::string master;
    uint32_t ttl = 0;
    std::shared_ptr<Source> source;
    // Its IDs' queues (hashes: two IDs sharing one only wait for each other).
    uint64_t keys[2] = {};
    unsigned n_keys = 2;
    Link* next[2] = {};  // the next link queued on keys[i]
    unsigned waits = 0;  // queues it is not first in yet
    unsigned attempt = 0;
    std::list<Link>::iterator self;
  };

  // Reads one file; false when the load must stop.
  bool ReadFile(uint32_t file) {
    const std::string& path = o_.files[file];
    std::unique_ptr<loader::LineReader> reader = Open(path);
    if (!reader) return false;
    loader::LinkParser parser(o_.link_parse);
    loader::LinkLine parsed;
    // "A<TAB>B" lines read before the format was known, to parse again then.
    std::vector<std::pair<uint64_t, std::string>> undecided;
    size_t undecided_bytes = 0;
    std::string_view line;
    uint64_t since_poll = 0;
    while (reader->Next(&line)) {
      const uint64_t n = reader->line_number();
      if (Status s = parser.Parse(line, n, &parsed); !s.ok()) {
        if (!BadRow(path, n, s)) return false;
        continue;
      }
      if (parsed.undecided) {
        undecided.emplace_back(n, std::string(line));
        undecided_bytes += line.size() + sizeof(undecided[0]);
        if (undecided_bytes > kMaxUndecidedBytes) return Undecided(path, n);
        continue;
      }
      if (parsed.members.empty()) {
        if (parsed.header) SkippedHeader(path, n);
        continue;
      }
      // This line settled the format: the lines before it go first.
      for (const auto& [at, text] : undecided) {
        loader::LinkLine again;
        if (Status s = parser.Parse(text, at, &again); !s.ok()) {
          if (!BadRow(path, at, s)) return false;
        } else {
          Add(file, at, again, reader.get());
        }
      }
      undecided.clear();
      undecided_bytes = 0;
      Add(file, n, parsed, reader.get());
      if (stopped_) return false;
      if (++since_poll >= 1024) {
        since_poll = 0;
        if (!o_.dry_run) io_.poll();
        Progress(reader.get(), false);
        if (stopped_) return false;
      }
    }
    if (!EndFile(*reader)) return false;
    if (!undecided.empty()) return Undecided(path, 0);
    Progress(nullptr, false);
    return true;
  }

  // Every data line of `path` (up to `line`; 0: to its end) reads both ways:
  // the load stops rather than guess which way its links go.
  bool Undecided(const std::string& path, uint64_t line) {
    std::fprintf(stderr,
                 "segctl load: %s: every data line %s is ID<TAB>ID, which links the first ID "
                 "to the second as a row (id<TAB>master) and the second to the first as a "
                 "components line (master<TAB>id,...): say --format rows or --format "
                 "components; nothing of it was loaded\n",
                 path.c_str(),
                 line == 0 ? std::string("of the file").c_str()
                           : ("up to line " + std::to_string(line)).c_str());
    Stop();
    return false;
  }

  // Queues the links of one parsed line (sent as their turn comes), or, in
  // a dry run, counts them. Waits while kWindow links are not finished.
  // `reader`: the file's, for the progress shown meanwhile.
  void Add(uint32_t file, uint64_t line, const loader::LinkLine& parsed,
           const loader::LineReader* reader) {
    ++lines_;
    links_ += parsed.members.size();
    if (o_.dry_run) return;
    auto source = std::make_shared<Source>();
    source->file = file;
    source->line = line;
    source->links = source->left = static_cast<uint32_t>(parsed.members.size());
    const uint64_t master_key = XXH3_64bits(parsed.master.data(), parsed.master.size());
    for (std::string_view user : parsed.members) {
      Link& l = live_.emplace_back();
      l.self = std::prev(live_.end());
      l.user = user;
      l.master = parsed.master;
      l.ttl = parsed.ttl;
      l.source = source;
      l.keys[0] = XXH3_64bits(user.data(), user.size());
      l.keys[1] = master_key;
      if (l.keys[0] == l.keys[1]) l.n_keys = 1;
      for (unsigned k = 0; k < l.n_keys; ++k) {
        auto [at, fresh] = tails_.try_emplace(l.keys[k], &l);
        if (fresh) continue;
        Link* tail = at->second;
        tail->next[Slot(*tail, l.keys[k])] = &l;
        at->second = &l;
        ++l.waits;
      }
      if (l.waits == 0) ready_.push_back(&l);
    }
    Dispatch();
    while (!stopped_ && live_.size() >= kWindow) {
      io_.run_one();
      Progress(reader, false);
    }
  }

  static unsigned Slot(const Link& l, uint64_t key) { return l.keys[0] == key ? 0 : 1; }

  // Sends what may go, while there is room in flight.
  void Dispatch() {
    const size_t room = size_t{std::max(1u, o_.connections)} * std::max(1u, o_.in_flight);
    while (!stopped_ && !ready_.empty() && in_flight_ < room) {
      Link* l = ready_.front();
      ready_.pop_front();
      ++in_flight_;
      Send(l);
    }
  }

  void Send(Link* l) {
    client_->Link(l->user, l->master, l->ttl, [this, l](Result<LinkResult> r) {
      if (closing_) return;  // the load stopped: what was in flight is left
      if (r.ok()) {
        ++linked_;
        moved_ += r->moved;
        return Finish(l);
      }
      const Status& s = r.status();
      if (TakesNone(s, "links")) {
        --in_flight_;
        return;
      }
      if (Transient(s) && l->attempt < o_.retries) return Retry(l);
      StopIfGone(s, l->attempt + 1);
      Failed(l, s);
      Finish(l);
    });
  }

  // Sends `l` again after a pause (200 ms, doubling, at most 3.2 s); it
  // stays in flight, and first in its IDs' queues, meanwhile.
  void Retry(Link* l) {
    ++l->attempt;
    ++retries_;
    auto timer = std::make_shared<boost::asio::steady_timer>(
        io_, std::chrono::milliseconds(200 << std::min(l->attempt - 1, 4u)));
    timer->async_wait([this, timer, l](const boost::system::error_code&) {
      if (closing_ || stopped_) return;
      Send(l);
    });
  }

  void Failed(Link* l, const Status& s) {
    ++failed_links_;
    Source& src = *l->source;
    if (src.failed++ == 0) {
      src.first_error = s.ToString();
      if (l->attempt > 0) {
        src.first_error += " (after " + std::to_string(l->attempt + 1) + " attempts)";
      }
    }
    if (src.failed <= 5) {
      src.failed_ids += (src.failed > 1 ? ", " : "") + l->user;
    } else if (src.failed == 6) {
      src.failed_ids += ", ...";
    }
  }

  // `l` is done (made or failed): the links waiting for it may go.
  void Finish(Link* l) {
    --in_flight_;
    Source& src = *l->source;
    if (--src.left == 0 && src.failed > 0 && Report()) {
      const std::string& path = o_.files[src.file];
      const auto line = static_cast<unsigned long long>(src.line);
      if (src.links == 1) {
        std::fprintf(stderr, "%s:%llu: link %s to %s: %s\n", path.c_str(), line, l->user.c_str(),
                     l->master.c_str(), src.first_error.c_str());
      } else {
        std::fprintf(stderr, "%s:%llu: master %s: %u of %u links failed (%s): %s\n", path.c_str(),
                     line, l->master.c_str(), src.failed, src.links, src.failed_ids.c_str(),
                     src.first_error.c_str());
      }
    }
    for (unsigned k = 0; k < l->n_keys; ++k) {
      Link* next = l->next[k];
      if (next == nullptr) {
        tails_.erase(l->keys[k]);  // it was the last queued on this ID
      } else if (--next->waits == 0) {
        ready_.push_back(next);
      }
    }
    live_.erase(l->self);
    Dispatch();
  }

  // Waits for every link, resending the ones to retry; after a stop, leaves
  // what is in flight or queued.
  void Drain() {
    if (o_.dry_run) return;
    while (!stopped_ && !live_.empty()) {
      io_.run_one();
      Progress(nullptr, false);
    }
    closing_ = true;
    client_.reset();  // fails (and so forgets) whatever is still in flight
  }

  void Progress(const loader::LineReader* reader, bool final) {
    ShowProgress(reader, final,
                 "lines " + Human(static_cast<double>(lines_)) + "  links made " +
                     CountAndRate(linked_) + "  bad rows " + std::to_string(bad_rows_) +
                     "  failed " + std::to_string(failed_links_));
  }

  int Summary() {
    const double secs = Seconds();
    const auto u = [](uint64_t v) { return static_cast<unsigned long long>(v); };
    if (o_.json) {
      std::printf(
          "{\"lines\":%llu,\"links\":%llu,\"linked\":%llu,\"moved\":%llu,\"bad_rows\":%llu,"
          "\"failed_links\":%llu,\"retries\":%llu,\"seconds\":%.3f,\"links_per_second\":%.0f,"
          "\"dry_run\":%s}\n",
          u(lines_), u(links_), u(linked_), u(moved_), u(bad_rows_), u(failed_links_), u(retries_),
          secs, linked_ / std::max(secs, 1e-9), o_.dry_run ? "true" : "false");
    } else if (o_.dry_run) {
      std::printf("dry run: %llu lines, %llu links valid in %.1f s; %llu bad rows\n", u(lines_),
                  u(links_), secs, u(bad_rows_));
    } else {
      std::printf(
          "%llu lines, %llu links: %llu made in %.1f s (%.0f links/s); %llu bad rows, %llu links "
          "failed, %llu retries\n",
          u(lines_), u(links_), u(linked_), secs, linked_ / std::max(secs, 1e-9), u(bad_rows_),
          u(failed_links_), u(retries_));
    }
    if (exit_ != 0) return exit_;
    return bad_rows_ == 0 && failed_links_ == 0 ? 0 : 1;
  }

  std::list<Link> live_;                       // read and not finished
  std::unordered_map<uint64_t, Link*> tails_;  // an ID's hash -> the last link queued on it
  std::deque<Link*> ready_;                    // first in their queues, not sent yet
  size_t in_flight_ = 0;                       // sent (or waiting to be resent)
  uint64_t lines_ = 0, links_ = 0, linked_ = 0, moved_ = 0, failed_links_ = 0;
};

// `segctl load --fields`: one field a row, its rows gathered by user into
// field_set requests. A user's group stays open while the open groups fit
// in o_.memory_bytes (as the segment loader groups rows), so that the rows
// of one user anywhere near each other in the file cost one request; it is
// sent when it holds max_fields_ fields or about frame_budget_ bytes, when
// the open groups take more memory than that (the oldest first), and at the
// end of its file. A name given twice in one group: the later row wins.
// Groups of one user are sent one after the other, in file order (a later
// row's value wins across groups too); the others go side by side, at most
// o_.connections * o_.in_flight at once, through the cluster client: a
// cluster's users go to their nodes (a group keeps one write ID across its
// resends, in a cluster with a log), a single server gets them all. A
// cluster where a node runs a build without fields answers Unsupported, and
// the load stops. A group the server refuses as a whole (InvalidArgument,
// LimitExceeded: a field over a limit the parser could not know, a profile
// past max_fields) is sent again a field at a time, so that only the bad
// rows fail, each reported with its line.
class FieldLoader : public LoadBase {
 public:
  explicit FieldLoader(const LoadOptions& o) : LoadBase(o) {}

  int Run() {
    Begin();
    if (!o_.dry_run) {
      if (Status s = ConnectAll(); !s.ok()) {
        std::fprintf(stderr, "segctl load: %s\n", s.ToString().c_str());
        return 2;
      }
    }
    for (uint32_t f = 0; f < o_.files.size(); ++f) {
      if (!ReadFile(f)) break;
    }
    Drain();
    EndProgress();
    return Summary();
  }

 private:
  static constexpr size_t kWindow = 4096;  // groups closed and not finished, at most
  // Fields in one field_set: the server's max_fields (hello says it; this
  // is its default, for a server that does not), and never more than its
  // max_segments.
  static constexpr uint32_t kMaxFieldsPerRequest = 256;

  // One field_set: a user's fields (a name once) and the lines they came from.
  struct Group {
    std::string user;
    uint64_t key = 0;  // XXH3 of the user: its queue
    uint32_t file = 0;
    std::vector<FieldUpdate> fields;
    std::vector<uint64_t> lines;  // lines[i]: the line of fields[i]
    size_t bytes = 0;             // about what it takes in a request
    size_t memory = 0;            // about what it takes here, while open
    unsigned attempt = 0;
    WriteId write_id;  // made at its first send, kept for its resends
    std::list<std::shared_ptr<Group>>::iterator open_at;  // while open
  };
  using GroupPtr = std::shared_ptr<Group>;

  // Connects (any node of a cluster); the hello gives the server's limits.
  Status ConnectAll() {
    SEGSTORE_RETURN_IF_ERROR(Connect());
    const ServerInfo& info = client_->server_info();
    if (info.max_key_bytes != 0) o_.field_parse.max_key_bytes = info.max_key_bytes;
    if (info.max_field_bytes != 0) o_.field_parse.max_value_bytes = info.max_field_bytes;
    if (info.max_fields != 0) max_fields_ = info.max_fields;
    if (info.max_segments != 0) max_fields_ = std::min(max_fields_, info.max_segments);
    if (info.max_frame_bytes != 0) frame_budget_ = info.max_frame_bytes / 2;
    return Status::OK();
  }

  // Reads one file; false when the load must stop.
  bool ReadFile(uint32_t file) {
    const std::string& path = o_.files[file];
    std::unique_ptr<loader::LineReader> reader = Open(path);
    if (!reader) return false;
    loader::FieldParser parser(o_.field_parse);
    loader::FieldRow row;
    std::string_view line;
    uint64_t since_poll = 0;
    while (reader->Next(&line)) {
      const uint64_t n = reader->line_number();
      if (Status s = parser.Parse(line, n, &row); !s.ok()) {
        if (!BadRow(path, n, s)) return false;
        continue;
      }
      if (row.user.empty()) {
        if (row.header) SkippedHeader(path, n);
        continue;
      }
      Add(file, n, row, reader.get());
      if (stopped_) return false;
      if (++since_poll >= 1024) {
        since_poll = 0;
        if (!o_.dry_run) io_.poll();
        Progress(reader.get(), false);
        if (stopped_) return false;
      }
    }
    if (!EndFile(*reader)) return false;
    while (!open_.empty() && !stopped_) Close(open_.front(), reader.get());
    Progress(nullptr, false);
    return !stopped_;
  }

  // About what a field takes in a request, and in memory while its group is open.
  static size_t FieldBytes(const FieldUpdate& f) { return f.name.size() + f.value.s.size() + 24; }
  static size_t FieldMemory(const FieldUpdate& f) {
    return sizeof(FieldUpdate) + sizeof(uint64_t) + f.name.size() + f.value.s.size();
  }
  // A group's own, beside its fields: it, its user, its list and map entries.
  static constexpr size_t kGroupMemory = sizeof(Group) + 128;

  // Puts the row's field in its user's open group (opened if need be).
  void Add(uint32_t file, uint64_t line, const loader::FieldRow& row,
           const loader::LineReader* reader) {
    ++rows_;
    const uint64_t key = XXH3_64bits(row.user.data(), row.user.size());
    users_seen_.insert(key);
    GroupPtr g;
    if (auto it = open_by_user_.find(row.user); it != open_by_user_.end()) {
      g = it->second;
    } else {
      g = std::make_shared<Group>();
      g->user = row.user;
      g->key = key;
      g->file = file;
      g->memory = kGroupMemory + g->user.size();
      g->open_at = open_.insert(open_.end(), g);
      open_by_user_.emplace(g->user, g);
      open_memory_ += g->memory;
    }
    g->bytes += FieldBytes(row.field);
    g->memory += FieldMemory(row.field);
    open_memory_ += FieldMemory(row.field);
    auto same = std::find_if(g->fields.begin(), g->fields.end(),
                             [&](const FieldUpdate& f) { return f.name == row.field.name; });
    if (same != g->fields.end()) {  // the later row wins
      g->bytes -= FieldBytes(*same);
      g->memory -= FieldMemory(*same);
      open_memory_ -= FieldMemory(*same);
      *same = row.field;
      g->lines[static_cast<size_t>(same - g->fields.begin())] = line;
    } else {
      g->fields.push_back(row.field);
      g->lines.push_back(line);
    }
    if (g->fields.size() >= max_fields_ || g->bytes >= frame_budget_) Close(g, reader);
    while (open_memory_ > o_.memory_bytes && !open_.empty()) Close(open_.front(), reader);
  }

  // Closes an open group and queues it to be sent (in a dry run, counts
  // it). Waits while kWindow groups are not finished.
  void Close(GroupPtr g, const loader::LineReader* reader) {
    open_.erase(g->open_at);
    open_by_user_.erase(g->user);
    open_memory_ -= g->memory;
    fields_ += g->fields.size();
    if (o_.dry_run) {
      ++requests_;
      return;
    }
    ++live_;
    auto [queue, fresh] = queues_.try_emplace(g->key);
    if (fresh) {
      ready_.push_back(std::move(g));
    } else {
      queue->second.push_back(std::move(g));  // after the user's earlier group
    }
    Dispatch();
    while (!stopped_ && live_ >= kWindow) {
      io_.run_one();
      Progress(reader, false);
    }
  }

  // Sends what may go, while there is room in flight. Fields whose absolute
  // expiry has passed since their row was read are dropped first, and
  // counted; a group left empty is done.
  void Dispatch() {
    const size_t room = size_t{std::max(1u, o_.connections)} * std::max(1u, o_.in_flight);
    while (!stopped_ && !ready_.empty() && in_flight_ < room) {
      GroupPtr g = std::move(ready_.front());
      ready_.pop_front();
      if (DropExpired(*g)) {
        --live_;
        Advance(g->key);
        continue;
      }
      ++in_flight_;
      Send(std::move(g));
    }
  }

  // Drops the fields of `g` that expired before sending; true when none is left.
  bool DropExpired(Group& g) {
    const auto now = static_cast<uint32_t>(std::time(nullptr)) + 1;
    size_t kept = 0;
    for (size_t i = 0; i < g.fields.size(); ++i) {
      const FieldUpdate& f = g.fields[i];
      if (!f.ttl && f.expiry != kNever && f.expiry <= now) {
        ++expired_rows_;
        continue;
      }
      if (kept != i) {
        g.fields[kept] = std::move(g.fields[i]);
        g.lines[kept] = g.lines[i];
      }
      ++kept;
    }
    g.fields.resize(kept);
    g.lines.resize(kept);
    return kept == 0;
  }

  // Sends `g`, counted in flight, to the node holding its user.
  void Send(GroupPtr g) {
    if (g->write_id.empty() && client_->map().log) g->write_id = client_->NewWriteId();
    client_->FieldSet(g->user, g->fields, g->write_id, [this, g](Result<FieldWriteResult> r) {
      if (closing_) return;  // the load stopped: what was in flight is left
      if (r.ok()) {
        ++requests_;
        fields_set_ += g->fields.size();
        return Finish(g);
      }
      Answer(g, r.status());
    });
  }

  // A failure of `g`: sent again, split, or reported.
  void Answer(GroupPtr g, const Status& s) {
    if (closing_) return;
    if (TakesNone(s, "field writes")) {
      --in_flight_;
      return;
    }
    if (Transient(s) && g->attempt < o_.retries) return Retry(g);
    StopIfGone(s, g->attempt + 1);
    const bool refused =
        s.code() == Status::Code::kInvalidArgument || s.code() == Status::Code::kLimitExceeded;
    if (refused && g->fields.size() > 1 && !stopped_) return Split(g);
    Failed(*g, s);
    Finish(g);
  }

  // Sends `g` again after a pause (200 ms, doubling, at most 3.2 s); it
  // stays in flight, and first in its user's queue, meanwhile.
  void Retry(GroupPtr g) {
    ++g->attempt;
    ++retries_;
    auto timer = std::make_shared<boost::asio::steady_timer>(
        io_, std::chrono::milliseconds(200 << std::min(g->attempt - 1, 4u)));
    timer->async_wait([this, timer, g](const boost::system::error_code&) {
      if (closing_ || stopped_) return;
      Send(g);
    });
  }

  // The server refused `g` whole: its fields go again one a request, first
  // in the user's queue, so that each bad one fails alone.
  void Split(GroupPtr g) {
    std::deque<GroupPtr>& queue = queues_[g->key];
    for (size_t i = g->fields.size(); i-- > 0;) {
      auto one = std::make_shared<Group>();
      one->user = g->user;
      one->key = g->key;
      one->file = g->file;
      one->fields.push_back(std::move(g->fields[i]));
      one->lines.push_back(g->lines[i]);
      queue.push_front(std::move(one));
      ++live_;
    }
    g->fields.clear();
    Finish(g);
  }

  void Failed(const Group& g, const Status& s) {
    failed_fields_ += g.fields.size();
    if (g.fields.empty() || !Report()) return;
    const std::string& path = o_.files[g.file];
    const std::string after =
        g.attempt > 0 ? " (after " + std::to_string(g.attempt + 1) + " attempts)" : "";
    if (g.fields.size() == 1) {
      std::fprintf(stderr, "%s:%llu: user %s, field %s: %s%s\n", path.c_str(),
                   static_cast<unsigned long long>(g.lines[0]), g.user.c_str(),
                   g.fields[0].name.c_str(), s.ToString().c_str(), after.c_str());
      return;
    }
    std::string lines;
    for (size_t i = 0; i < g.lines.size() && i < 5; ++i) {
      lines += (i > 0 ? ", " : "") + std::to_string(g.lines[i]);
    }
    if (g.lines.size() > 5) lines += ", ...";
    std::fprintf(stderr, "%s:%llu: user %s: %zu fields (lines %s) failed: %s%s\n", path.c_str(),
                 static_cast<unsigned long long>(g.lines[0]), g.user.c_str(), g.fields.size(),
                 lines.c_str(), s.ToString().c_str(), after.c_str());
  }

  // `g` is done (written, failed or split): the user's next group may go.
  void Finish(const GroupPtr& g) {
    --in_flight_;
    --live_;
    Advance(g->key);
    Dispatch();
  }

  // The group first in `key`'s queue is done: the next one is ready.
  void Advance(uint64_t key) {
    auto queue = queues_.find(key);
    if (queue->second.empty()) {
      queues_.erase(queue);
    } else {
      ready_.push_back(std::move(queue->second.front()));
      queue->second.pop_front();
    }
  }

  // Waits for every group, resending the ones to retry; after a stop,
  // leaves what is in flight or queued.
  void Drain() {
    if (o_.dry_run) return;
    while (!stopped_ && live_ > 0) {
      io_.run_one();
      Progress(nullptr, false);
    }
    closing_ = true;
    client_.reset();  // fails (and so forgets) whatever is still in flight
  }

  void Progress(const loader::LineReader* reader, bool final) {
    ShowProgress(reader, final,
                 "rows " + CountAndRate(rows_) + "  fields set " +
                     Human(static_cast<double>(fields_set_)) + "  bad rows " +
                     std::to_string(bad_rows_) + "  failed " + std::to_string(failed_fields_));
  }

  int Summary() {
    const double secs = Seconds();
    const auto u = [](uint64_t v) { return static_cast<unsigned long long>(v); };
    if (o_.json) {
      std::printf(
          "{\"rows\":%llu,\"users\":%zu,\"fields\":%llu,\"fields_set\":%llu,\"requests\":%llu,"
          "\"bad_rows\":%llu,\"expired_rows\":%llu,\"failed_fields\":%llu,\"retries\":%llu,"
          "\"seconds\":%.3f,\"rows_per_second\":%.0f,\"dry_run\":%s}\n",
          u(rows_), users_seen_.size(), u(fields_), u(fields_set_), u(requests_), u(bad_rows_),
          u(expired_rows_), u(failed_fields_), u(retries_), secs, rows_ / std::max(secs, 1e-9),
          o_.dry_run ? "true" : "false");
    } else if (o_.dry_run) {
      std::printf(
          "dry run: %llu rows, %zu users, %llu fields valid (%llu requests) in %.1f s; %llu bad "
          "rows\n",
          u(rows_), users_seen_.size(), u(fields_), u(requests_), secs, u(bad_rows_));
    } else {
      std::printf(
          "%llu rows, %zu users: %llu fields set in %llu requests in %.1f s (%.0f rows/s); %llu "
          "bad rows, %llu expired before sending, %llu fields failed, %llu retries\n",
          u(rows_), users_seen_.size(), u(fields_set_), u(requests_), secs,
          rows_ / std::max(secs, 1e-9), u(bad_rows_), u(expired_rows_), u(failed_fields_),
          u(retries_));
    }
    if (exit_ != 0) return exit_;
    return bad_rows_ == 0 && failed_fields_ == 0 && expired_rows_ == 0 ? 0 : 1;
  }

  std::list<GroupPtr> open_;                                     // open groups, oldest first
  std::unordered_map<std::string_view, GroupPtr> open_by_user_;  // keys: the groups' users
  uint64_t open_memory_ = 0;                                     // the open groups' memory
  // A user's groups after the one ready or in flight, by the user's hash
  // (two users sharing one only wait for each other); an entry while one is.
  std::unordered_map<uint64_t, std::deque<GroupPtr>> queues_;
  std::deque<GroupPtr> ready_;  // first in their queues, not sent yet
  size_t in_flight_ = 0;        // sent, or waiting to be sent again
  size_t live_ = 0;             // closed and not finished
  uint32_t max_fields_ = kMaxFieldsPerRequest;
  size_t frame_budget_ = 2u << 20;
  std::unordered_set<uint64_t> users_seen_;  // users' hashes, for the count
  uint64_t rows_ = 0, fields_ = 0, fields_set_ = 0, requests_ = 0;
  uint64_t failed_fields_ = 0, expired_rows_ = 0;
};

}  // namespace

// Each statement here is held by a test (tests/loader/parser_test.cc,
// link_parser_test.cc, field_parser_test.cc; tests/integration/server_test.cc,
// link_load_test.cc, field_load_test.cc); README's "Bulk loading" paragraph says
// the same in short. The exit codes are Summary()'s and exit_'s above.
const char kLoadHelp[] =
    R"(Files: plain or gzip (told from the bytes, not the name); '-' reads standard
input, plain or gzip too. The format is detected from the first data line
(--format and --delimiter force it):

  rows     USER,SEGMENT[,WHEN[,ATTR1[,ATTR2]]]
           one segment a line; a comma or a tab between the fields
  grouped  USER<TAB>SEGMENT[:WHEN][,SEGMENT[:WHEN]]...
           one user a line; exactly one tab, ',' between segments, ':' before
           a WHEN; a line with a bad or repeated segment is refused whole

USER is 1 to 256 bytes; SEGMENT a decimal unsigned 64-bit number; ATTR1 and
ATTR2 decimal unsigned 32-bit numbers (empty: none). Fields are taken as they
are: no quotes, no spaces around them. A CR before the newline (CRLF) and a
UTF-8 BOM at the start of a file are ignored.

Skipped: blank lines, lines starting with '#', and line 1 when it is a
header: its segment field is a name and no later field looks like data, so
user_id,segment_id,ttl is skipped (saying "FILE:1: skipped as a header line")
while u1,x42,3600 is a bad row. A header on a later line is a bad row.

WHEN is a TTL or an absolute expiry:
  86400                 TTL in seconds (a bare number of up to 9 digits)
  90s 15m 12h 30d       TTL in seconds, minutes, hours or days (one unit)
  @1767225600           expiry at this Unix time, in seconds (a bare number
                        of 10 digits or more is one too)
  2026-12-01T00:00:00Z  expiry, ISO-8601 with Z or an offset (+02:00, -05:30);
                        a time without either is refused, not taken as UTC
  never                 never expires
A TTL counts from when the server writes the segment. An empty or absent WHEN
takes --default-ttl; without it the row is bad. Bad too: a TTL of 0, an expiry
at or before the start of the load, any time after 2106-02-07T06:28:15Z.

Bad rows are reported as FILE:LINE: reason (the first 100 errors; the rest
are only counted) and skipped.

The server may be any node of a cluster: each user's upsert then goes to a
node holding the user (users are batched per node), over --connections
connections to each node. In a cluster that writes through a log, each
upsert carries a write ID, so that one sent again (its answer lost, or in
doubt) is applied once. A batch the server refuses for want of resources,
or whose answer is lost, is sent again after a pause, up to 5 times.

With --links the files are identity-graph link files: each ID joins the
group of its master (a read by any ID of a group answers for the person).
Two formats, detected as above (--format rows or components forces it):

  rows        ID,MASTER[,TTL]
              ID links to MASTER; a comma or a tab between the fields
  components  MASTER<TAB>ID[,ID]...
              each ID links to MASTER (a connected-components job's output);
              exactly one tab, ',' between IDs; a line with a bad or repeated
              ID is refused whole

IDs are 1 to 256 bytes (or the server's limit), taken as they are. TTL is a
TTL form above (86400, 90s 15m 12h 30d) or never; an absolute expiry is a
bad row. An empty or absent TTL, and every link of a components line, takes
--default-ttl; without it the link never expires. A line of just ID<TAB>ID
reads both ways, linking opposite ways (the first ID to the second as a
row, the second to the first as components): such lines wait for a line
that decides, and when none does the load stops (exit status 2) asking for
--format. Line 1 is skipped as a header when every field is a column name
(id, ids, user, users, user_id, user_ids, member, members, member_id,
member_ids, master, master_id, ttl; any case); a header of other names must
start with '#'. Bad rows too: an ID linked to itself, an empty or too long
ID, more than 3 fields, a components line without members.

Links that share an ID are made in file order, the others side by side
(--connections, --in-flight), so re-loading a components file moves every
ID whose master changed (an ID left out of the file keeps its link until it
expires or is unlinked). A group holds at most the server's max_links
members (64 by default): the links past it are refused, and reported with
their file, line and IDs. A link refused for want of resources is sent
again after a pause, up to 5 times. A server that takes no links (a
cluster with a node whose build has none, a passive cluster) stops the
load at once.

With --fields the files are profile field files: each row sets one field
of one user (a named, typed value with its own expiry; segctl field-set
sets one by hand):

  USER,NAME,VALUE[,TTL]    a comma or a tab between the fields (told from
                           the first data line, or --delimiter)

USER is 1 to 256 bytes (or the server's limit), NAME 1 to 64 bytes. VALUE's
type is its prefix, when it starts with one of these:
  int:-42                  64-bit signed integer
  double:0.5               double (decimal or exponent form)
  str:FR                   text, valid UTF-8, the rest as it is ("str:" is
                           the empty string)
  bytes:00ff               bytes, in hex
  time:1790000000          Unix seconds, or ISO-8601 with Z or an offset
                           (time:2026-12-01T00:00:00Z)
Without one, --field-type says (int, double, str, bytes or time); by default
(auto) a value that is a JSON number is a number: an int without a fraction
or an exponent (42, -7), a double with one (0.5, 1e3); anything else is a
str (FR, 01234, +33, .5, true). An empty VALUE is a bad row. A prefix always
wins: the text "int:3" is written str:int:3. A str or bytes value is at most
1,024 bytes (the server's max_field_bytes). Fields may be quoted as in CSV
(RFC 4180): "a,b" is a,b and "say ""hi""" is say "hi"; the quotes are not a
type ("42" is the int 42). An unquoted field is taken as it is.

TTL is any WHEN form above (86400, 90s 15m 12h 30d, @1767225600,
2026-12-01T00:00:00Z, never). An empty or absent TTL takes --default-ttl;
without it the field never expires. Line 1 is skipped as a header when each
of its fields is a column name (user, user_id, uid, id, name, field,
field_name, key, value, type, ttl, expiry, expires_at; any case).

The rows of one user go in one request of up to 256 fields, wherever they
are in the file, as long as the users read meanwhile fit in --memory-mib
(the oldest user's request goes first when they do not); a name given twice
for a user, the later row wins, also across requests (one user's requests
go in file order).
Bad rows (a name over 64 bytes, a value over the limit, a bad type or TTL)
are reported as FILE:LINE: reason and skipped. A request the server refuses
whole is sent again a field at a time, so that only the fields at fault
fail, each reported as FILE:LINE: user USER, field NAME: reason (a profile
holds at most the server's max_fields live fields, 256 by default). The
server may be any node of a cluster: each user's request goes to its node.
A request refused for want of resources is sent again after a pause, up to
5 times. A server that takes no field writes (a cluster where a node runs a
build without fields, a passive cluster) stops the load at once.

Exit status:
  0  every row was written (with --dry-run: every row is valid)
  1  the load ran to the end, but some rows were bad, the server refused some
     users' upserts, some links or some fields, or some absolute expiries
     passed before they could be sent (each reported, and counted in the
     summary)
  2  the load stopped or never started: a bad option, a file that cannot be
     read (missing, unreadable, a corrupt or cut gzip stream), a server that
     cannot be reached or refuses the connection (TLS, shared secret) or is
     gone for good (a cluster's node too), --max-errors reached, or with
     --links a server that takes no links or a file whose format cannot be
     told, with --fields a server that takes no field writes; part of the
     input may have been written)";

int RunLoad(const LoadOptions& options) {
  if (options.fields) {
    FieldLoader loader(options);
    return loader.Run();
  }
  if (options.links) {
    LinkLoader loader(options);
    return loader.Run();
  }
  Loader loader(options);
  return loader.Run();
}

}  // namespace segstore::tools

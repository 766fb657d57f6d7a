#include "replica/bootstrap.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <bitset>
#include <future>
#include <map>
#include <optional>
#include <set>
#include <span>

#include "proto/wire.h"
#include "replica/checkpoint.h"
#include "segstore/routing.h"

namespace segstore::replica {
namespace {

using SteadyClock = std::chrono::steady_clock;

// Listing a few records at a time: a page ends near its byte budget, and is
// cut exactly at a tag boundary once read.
constexpr size_t kListStep = 8;
// At most this many records a page: the reads of a page are all in flight at once.
constexpr size_t kMaxPageRecords = 1024;
// A page whose records moved while it was read (defragmentation) is read again, this many times.
constexpr int kPageAttempts = 5;
// A page answered Busy is asked again this many times, 100 ms apart.
constexpr int kBusyRetries = 100;
// A partition the applier has not caught up in this long is copied again.
constexpr auto kFollowTimeout = std::chrono::minutes(10);
// A source that could not be reached is tried after the others for this long.
constexpr auto kSourceBackoff = std::chrono::seconds(10);

// Waits on `worker` until `*pending` is 0.
void Drain(storage::Worker& worker, const size_t* pending) {
  while (*pending > 0) worker.Wait(std::chrono::milliseconds(50));
}

}  // namespace

void ReadPartitionRecords(storage::Store& store, storage::Worker& worker, uint32_t partition,
                          uint64_t cursor, uint32_t list_bytes,
                          std::function<void(Result<PartitionRecords>)> done) {
  struct Page {
    storage::Store* store = nullptr;
    storage::Worker* worker = nullptr;
    uint32_t partition = 0;
    uint64_t cursor = 0;
    uint32_t list_bytes = 0;
    std::function<void(Result<PartitionRecords>)> done;
    int attempt = 0;
    std::vector<storage::RecordRef> refs;
    std::vector<std::optional<storage::Record>> records;
    size_t pending = 0;
    bool moved = false;
    Status failure;
    uint64_t next_cursor = 0;
  };
  auto page = std::make_shared<Page>();
  page->store = &store;
  page->worker = &worker;
  page->partition = partition;
  page->cursor = cursor;
  page->list_bytes = list_bytes;
  page->done = std::move(done);
  // Lists the page and reads its records; a record that moved in between
  // (its block rewritten) makes it start over.
  // The callbacks of the reads in flight own it (through `finish`); it
  // holds itself weakly, so that reads dropped unanswered (a worker going
  // away) free it.
  auto read = std::make_shared<std::function<void()>>();
  *read = [page, weak = std::weak_ptr<std::function<void()>>(read)] {
    std::shared_ptr<std::function<void()>> self = weak.lock();
    if (self == nullptr) return;
    page->refs.clear();
    uint64_t from = page->cursor;
    uint64_t bytes = 0;
    while (from < storage::kPartitionListEnd && bytes < page->list_bytes &&
           page->refs.size() < kMaxPageRecords) {
      const size_t before = page->refs.size();
      page->store->ListPartition(page->partition, from, kListStep, &page->refs, &from);
      for (size_t i = before; i < page->refs.size(); ++i) bytes += page->refs[i].size;
    }
    page->next_cursor = from;
    page->records.clear();
    page->records.resize(page->refs.size());
    page->pending = page->refs.size();
    page->moved = false;
    page->failure = Status::OK();
    const auto finish = [page, self] {
      if (page->moved && ++page->attempt < kPageAttempts) {
        (*self)();
        return;
      }
      auto answer = std::move(page->done);
      if (page->moved) {
        answer(Status::Busy("the partition's records kept moving while read; retry"));
        return;
      }
      if (!page->failure.ok()) {
        answer(page->failure);
        return;
      }
      PartitionRecords out;
      out.cursor = page->next_cursor;
      for (size_t i = 0; i < page->refs.size(); ++i) {
        if (!page->records[i].has_value()) continue;  // the node's own
        out.records.push_back(ListedRecord{page->refs[i].tag, std::move(*page->records[i])});
      }
      if (out.records.empty() && out.cursor < storage::kPartitionListEnd) {
        // Only the node's own keys so far: on to the next records.
        page->cursor = out.cursor;
        page->attempt = 0;
        page->done = std::move(answer);
        (*self)();
        return;
      }
      answer(std::move(out));
    };
    if (page->refs.empty()) {
      page->worker->Defer(finish);
      return;
    }
    for (size_t i = 0; i < page->refs.size(); ++i) {
      page->worker->GetAt(page->refs[i], [page, i, finish](Result<storage::Record> r) {
        if (r.ok()) {
          if (!IsReservedKey(r->key())) page->records[i] = std::move(*r);
        } else if (r.status().IsNotFound()) {
          page->moved = true;
        } else if (page->failure.ok()) {
          page->failure = r.status();
        }
        if (--page->pending == 0) finish();
      });
    }
  };
  (*read)();
}

void ReadPartitionPage(storage::Store& store, const profile::ProfileStore* profiles,
                       storage::Worker& worker, uint32_t partition, uint64_t cursor,
                       uint32_t max_bytes,
                       std::function<void(Result<CopyPartitionResponse>)> done) {
  ReadPartitionRecords(
      store, worker, partition, cursor, max_bytes,
      [profiles, max_bytes, done = std::move(done)](Result<PartitionRecords> listed) {
        if (!listed.ok()) return done(listed.status());
        std::vector<CopiedRecord> records;
        records.reserve(listed->records.size());
        for (const ListedRecord& l : listed->records) {
          const storage::Record& r = l.record;
          std::string body;
          if (profiles != nullptr) {
            profiles->PortableBody(r.key(), r.body(), &body);
          } else {
            body.assign(r.body());
          }
          records.push_back(CopiedRecord{std::string(r.key()), std::move(body), r.sweep_at(),
                                         r.void_at(), std::string(r.reference())});
        }
        // Records in tag order while the body stays within max_bytes (the
        // first tag's whatever their size); records sharing a tag go
        // together, and the next page starts at the first tag left out.
        CopyPartitionResponse response;
        response.cursor = listed->cursor;
        const size_t cut = CutAtTags(
            listed->records, max_bytes - std::min<size_t>(max_bytes, proto::kCopyPageOverhead),
            [&](size_t i) { return proto::CopiedRecordBytes(records[i]); }, &response.cursor);
        records.resize(cut);
        response.records = std::move(records);
        done(std::move(response));
      });
}

// The bootstrapper thread's own state.
class Bootstrapper::Loop {
 public:
  Loop(Bootstrapper* b, std::unique_ptr<profile::ProfileSession> session)
      : b_(b), session_(std::move(session)), worker_(session_->worker()) {}

  void Run() {
    // Wait for a map that names this node.
    while (!b_->stopping_.load()) {
      view_ = b_->board_->view();
      if (view_ != nullptr && view_->map.has_map() && view_->serving) break;
      if (!b_->Sleep(std::chrono::milliseconds(100))) return;
    }
    // What this node still has of partitions it neither holds nor gets
    // goes after `drop_after`.
    for (uint32_t p = 0; p < kPartitions && !b_->stopping_.load(); ++p) {
      if (!Wanted(p) && HasRecords(p)) left_at_.emplace(p, SteadyClock::now());
    }
    // Copies one after the other while there are any; else looks again
    // every 100 ms.
    while (!b_->stopping_.load()) {
      if (Step()) continue;
      if (!b_->Sleep(std::chrono::milliseconds(100))) return;
    }
  }

 private:
  bool Wanted(uint32_t p) const { return view_->held.test(p) || view_->incoming.test(p); }

  bool HasRecords(uint32_t p) {
    std::vector<storage::RecordRef> refs;
    uint64_t from = 0;
    while (from < storage::kPartitionListEnd && refs.empty()) {
      b_->profiles_->store().ListPartition(p, from, 4, &refs, &from);
      // Reserved keys (checkpoints) are not the partition's records.
      for (const storage::RecordRef& ref : refs) {
        Result<storage::Record> r = worker_.GetAtSync(ref);
        if (r.ok() && !IsReservedKey(r->key())) return true;
      }
      refs.clear();
    }
    return false;
  }

  // True when it copied a partition (or tried to).
  bool Step() {
    std::shared_ptr<const cluster::ClusterView> before = view_;
    view_ = b_->board_->view();
    const auto now = SteadyClock::now();
    // Partitions leaving this node: their copies go after a while.
    for (uint32_t p = 0; p < kPartitions; ++p) {
      const bool had = before->held.test(p) || before->incoming.test(p);
      if (had && !Wanted(p)) left_at_.emplace(p, now);
      if (Wanted(p)) left_at_.erase(p);
    }
    // Ready partitions stay ready while incoming; once held, the map's view
    // has the applier follow them; gone, they are dropped (above).
    for (auto it = ready_.begin(); it != ready_.end();) {
      const uint32_t p = *it;
      if (view_->incoming.test(p)) {
        ++it;
        continue;
      }
      b_->applier_->Unfollow(p);
      it = ready_.erase(it);
    }
    Report();
    for (auto it = left_at_.begin(); it != left_at_.end() && !b_->stopping_.load();) {
      if (Wanted(it->first)) {
        it = left_at_.erase(it);
        continue;
      }
      if (now - it->second < b_->options_.drop_after) {
        ++it;
        continue;
      }
      uint64_t dropped = 0;
      Status s = Unfollow(it->first);
      if (s.ok()) s = Drop(it->first, &dropped);
      if (!s.ok()) {
        spdlog::warn("replica: partition {}: dropping this node's copy: {}; trying again later",
                     it->first, s.ToString());
        it->second = now;
        ++it;
        continue;
      }
      if (dropped > 0) {
        spdlog::info("replica: partition {}: dropped this node's copy ({} records)", it->first,
                     dropped);
      }
      std::lock_guard lock(b_->mu_);
      ++b_->stats_.partitions_dropped;
      b_->stats_.records_dropped += dropped;
      it = left_at_.erase(it);
    }
    {
      std::lock_guard lock(b_->mu_);
      b_->stats_.incoming = static_cast<uint32_t>(view_->incoming.count());
      b_->stats_.ready = static_cast<uint32_t>(ready_.size());
    }
    // One copy per step, the lowest partition not tried lately first.
    for (uint32_t p = 0; p < kPartitions && !b_->stopping_.load(); ++p) {
      if (!view_->incoming.test(p) || ready_.count(p) != 0) continue;
      auto retry = retry_at_.find(p);
      if (retry != retry_at_.end() && now < retry->second) continue;
      if (Copy(p)) {
        retry_at_.erase(p);
        ready_.insert(p);
      } else {
        retry_at_[p] = SteadyClock::now() + b_->options_.retry_interval;
        std::lock_guard lock(b_->mu_);
        ++b_->stats_.copy_failures;
      }
      return true;
    }
    return false;
  }

  // Tells the agent which incoming partitions are ready, as of the map this
  // node last saw: only those the map still has incoming here.
  void Report() {
    std::vector<uint16_t> ready;
    std::shared_ptr<const cluster::ClusterView> now = b_->board_->view();
    for (uint32_t p : ready_) {
      if (now->incoming.test(p)) ready.push_back(static_cast<uint16_t>(p));
    }
    if (ready == reported_ && now->map.revision == reported_revision_) return;
    reported_ = ready;
    reported_revision_ = now->map.revision;
    {
      std::lock_guard lock(b_->mu_);
      b_->stats_.ready = static_cast<uint32_t>(reported_.size());
    }
    b_->report_ready_(std::move(ready), now->map.revision);
  }

  // Has the applier stop applying `p` (unless the map gives it to this node)
  // and waits until it took that in.
  Status Unfollow(uint32_t p) {
    b_->applier_->Unfollow(p);
    const auto deadline = SteadyClock::now() + std::chrono::seconds(30);
    for (;;) {
      std::vector<uint16_t> f = b_->applier_->following();
      if (!std::binary_search(f.begin(), f.end(), static_cast<uint16_t>(p))) return Status::OK();
      if (SteadyClock::now() > deadline) {
        return Status::Busy("the applier did not stop following the partition");
      }
      if (!b_->Sleep(std::chrono::milliseconds(5))) return Status::Unavailable("stopping");
    }
  }

  // Deletes every record of partition `p` on this node (not the reserved
  // keys), listing it again until nothing is left; `*dropped`: how many.
  Status Drop(uint32_t p, uint64_t* dropped) {
    for (int round = 0; round < 100; ++round) {
      bool found = false;
      bool moved = false;
      Status failure;
      uint64_t from = 0;
      std::vector<storage::RecordRef> refs;
      while (from < storage::kPartitionListEnd) {
        if (b_->stopping_.load()) return Status::Unavailable("stopping");
        refs.clear();
        b_->profiles_->store().ListPartition(p, from, 256, &refs, &from);
        size_t pending = refs.size();
        for (const storage::RecordRef& ref : refs) {
          worker_.GetAt(ref, [&](Result<storage::Record> r) {
            if (!r.ok()) {
              // Moved (defragmented) since listed: the next round finds it.
              if (r.status().IsNotFound()) {
                moved = true;
              } else if (failure.ok()) {
                failure = r.status();
              }
              --pending;
              return;
            }
            if (IsReservedKey(r->key())) {
              --pending;
              return;
            }
            found = true;
            worker_.Delete(r->key(), [&](Result<storage::WriteOutcome> w) {
              if (!w.ok() && failure.ok()) failure = w.status();
              if (w.ok() && w->applied == storage::Mutation::Kind::kDelete) ++*dropped;
              --pending;
            });
          });
        }
        Drain(worker_, &pending);
        if (!failure.ok()) return failure.WithContext("dropping partition " + std::to_string(p));
      }
      if (!found && !moved) return Status::OK();
    }
    return Status::Busy("partition " + std::to_string(p) + " kept changing while dropped");
  }

  // Copies partition `p` from one of its replicas and has the applier follow
  // it; true once it is caught up.
  bool Copy(uint32_t p) {
    const auto start = SteadyClock::now();
    if (Status s = Unfollow(p); !s.ok()) return false;
    uint64_t dropped = 0;
    if (Status s = Drop(p, &dropped); !s.ok()) {
      spdlog::warn("replica: partition {}: cannot drop what this node had of it: {}", p,
                   s.ToString());
      return false;
    }
    std::span<const uint16_t> replicas = view_->map.ReplicasOf(p);
    std::vector<ClusterNode> sources;
    for (uint16_t r : replicas) {
      if (view_->map.nodes[r].id != view_->map.self) sources.push_back(view_->map.nodes[r]);
    }
    if (sources.empty()) {
      spdlog::warn("replica: partition {}: no other node holds it to copy it from", p);
      return false;
    }
    // A different first source on each attempt; sources that failed lately
    // (down, paused: a connection that hangs costs its timeout) last.
    std::rotate(sources.begin(), sources.begin() + (attempts_[p]++ % sources.size()),
                sources.end());
    const auto now = SteadyClock::now();
    std::stable_partition(sources.begin(), sources.end(), [&](const ClusterNode& n) {
      auto failed = source_failed_at_.find(n.id);
      return failed == source_failed_at_.end() || now - failed->second > kSourceBackoff;
    });
    for (const ClusterNode& source : sources) {
      if (b_->stopping_.load()) return false;
      int64_t from = -1;
      uint64_t records = 0;
      uint64_t bytes = 0;
      Status s = CopyFrom(p, source, &from, &records, &bytes);
      if (s.ok()) s = worker_.FlushSync();
      if (s.ok()) s = FollowFrom(p, from);
      if (s.ok()) {
        const double seconds = std::chrono::duration<double>(SteadyClock::now() - start).count();
        spdlog::info(
            "replica: partition {}: copied from node {} ({} records, {} bytes, {:.3f} s) and "
            "caught up from log offset {}",
            p, source.id, records, bytes, seconds, from);
        std::lock_guard lock(b_->mu_);
        ++b_->stats_.partitions_copied;
        b_->stats_.records_copied += records;
        b_->stats_.bytes_copied += bytes;
        b_->stats_.copy_seconds += seconds;
        return true;
      }
      spdlog::warn("replica: partition {}: copying from node {}: {}", p, source.id, s.ToString());
      if (s.code() == Status::Code::kUnavailable || s.code() == Status::Code::kTimeout) {
        source_failed_at_[source.id] = SteadyClock::now();
      }
      // What was copied goes, unless the map gave this node the partition
      // meanwhile (it cannot have: it was never reported ready; but never
      // drop what the node serves).
      if (b_->board_->view()->held.test(p)) return false;
      if (!Unfollow(p).ok() || !Drop(p, &dropped).ok()) return false;
    }
    return false;
  }

  // Copies every page of `p` from `source`; `*from`: the first page's next.
  Status CopyFrom(uint32_t p, const ClusterNode& source, int64_t* from, uint64_t* records,
                  uint64_t* bytes) {
    CopyPartitionRequest request;
    request.partition = p;
    request.cursor = 0;
    request.max_bytes = b_->options_.page_bytes;
    // A copy at least as recent as this node's own position in the log
    // partition: whatever the applier must read again for it was judged by
    // this node's window of write IDs after its start.
    request.min_next = static_cast<uint64_t>(std::max<int64_t>(0, b_->applier_->AppliedNext(p)));
    int busy = 0;
    for (;;) {
      if (b_->stopping_.load()) return Status::Unavailable("stopping");
      std::shared_ptr<const cluster::ClusterView> now = b_->board_->view();
      if (!now->incoming.test(p)) return Status::Unavailable("no longer incoming here");
      Result<CopyPartitionResponse> page = b_->source_->Fetch(source, request);
      if (!page.ok() && page.status().code() == Status::Code::kBusy && ++busy < kBusyRetries) {
        // Behind this node, or catching up: the same page again shortly.
        if (!b_->Sleep(std::chrono::milliseconds(100))) return Status::Unavailable("stopping");
        continue;
      }
      if (!page.ok()) return page.status();
      busy = 0;
      if (page->next > static_cast<uint64_t>(INT64_MAX)) {
        return Status::Corruption("the source's next offset is out of range");
      }
      if (*from < 0) {
        *from = static_cast<int64_t>(page->next);
        request.min_next = page->next;  // later pages: at least as recent
      }
      size_t pending = page->records.size();
      Status failure;
      for (CopiedRecord& r : page->records) {
        if (PartitionOf(r.key) != p || IsReservedKey(r.key)) {
          Drain(worker_, &pending);
          return Status::Corruption("the source sent a key of another partition");
        }
        *bytes += r.key.size() + r.body.size();
        ++*records;
        auto written = [&pending, &failure](Result<storage::WriteOutcome> w) {
          if (!w.ok() && failure.ok()) failure = w.status();
          --pending;
        };
        if (r.reference.empty()) {
          worker_.Put(r.key, std::move(r.body), r.sweep_at, r.void_at, written);
          continue;
        }
        // A linked profile keeps naming its master (the engine's reference).
        storage::Mutation m = storage::Mutation::Put(std::move(r.body), r.sweep_at, r.void_at);
        m.reference = std::move(r.reference);
        worker_.Update(
            r.key,
            [m = std::move(m)](const storage::Record*) -> Result<storage::Mutation> { return m; },
            written);
      }
      Drain(worker_, &pending);
      if (!failure.ok()) return failure.WithContext("writing the copy");
      if (page->cursor <= request.cursor && page->cursor < storage::kPartitionListEnd) {
        return Status::Corruption("the source's cursor did not advance");
      }
      if (page->cursor >= storage::kPartitionListEnd) return Status::OK();
      request.cursor = page->cursor;
    }
  }

  // Has the applier follow `p` from `from`, and waits until it caught up.
  Status FollowFrom(uint32_t p, int64_t from) {
    auto result = std::make_shared<std::promise<Status>>();
    std::future<Status> done = result->get_future();
    b_->applier_->Follow(p, from, [result](Status s) { result->set_value(std::move(s)); });
    const auto deadline = SteadyClock::now() + kFollowTimeout;
    while (done.wait_for(std::chrono::milliseconds(50)) != std::future_status::ready) {
      if (b_->stopping_.load()) return Status::Unavailable("stopping");
      if (SteadyClock::now() > deadline) {
        b_->applier_->Unfollow(p);
        return Status::Timeout("the applier did not catch the partition up in time");
      }
    }
    return done.get();
  }

  Bootstrapper* const b_;
  std::unique_ptr<profile::ProfileSession> session_;
  storage::Worker& worker_;
  std::shared_ptr<const cluster::ClusterView> view_;
  std::set<uint32_t> ready_;
  std::map<uint32_t, SteadyClock::time_point> left_at_;
  std::map<uint32_t, SteadyClock::time_point> retry_at_;
  std::map<uint32_t, uint32_t> attempts_;
  std::map<std::string, SteadyClock::time_point> source_failed_at_;
  std::vector<uint16_t> reported_;
  uint64_t reported_revision_ = 0;
};

Bootstrapper::Bootstrapper(const BootstrapOptions& options, profile::ProfileStore* profiles,
                           Applier* applier, const cluster::ViewBoard* board,
                           PartitionSource* source,
                           std::function<void(std::vector<uint16_t>, uint64_t)> report_ready)
    : options_(options),
      profiles_(profiles),
      applier_(applier),
      board_(board),
      source_(source),
      report_ready_(std::move(report_ready)) {}

Result<std::unique_ptr<Bootstrapper>> Bootstrapper::Start(
    const BootstrapOptions& options, profile::ProfileStore* profiles, Applier* applier,
    const cluster::ViewBoard* board, PartitionSource* source,
    std::function<void(std::vector<uint16_t>, uint64_t)> report_ready) {
  if (options.page_bytes == 0) return Status::InvalidArgument("bootstrap: page_bytes is 0");
  std::unique_ptr<Bootstrapper> b(
      new Bootstrapper(options, profiles, applier, board, source, std::move(report_ready)));
  b->thread_ = std::thread([p = b.get()] { p->Run(); });
  return b;
}

Bootstrapper::~Bootstrapper() { Stop(); }

void Bootstrapper::Stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  stopping_.store(true);
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool Bootstrapper::Sleep(std::chrono::milliseconds d) {
  std::unique_lock lock(mu_);
  return !wake_.wait_for(lock, d, [this] { return stop_; });
}

BootstrapStats Bootstrapper::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

void Bootstrapper::Run() {
  Result<std::unique_ptr<profile::ProfileSession>> session = profiles_->NewSession();
  if (!session.ok()) {
    spdlog::critical("replica: the bootstrapper cannot open a profile session: {}",
                     session.status().ToString());
    return;
  }
  Loop loop(this, std::move(*session));
  loop.Run();
}

}  // namespace segstore::replica

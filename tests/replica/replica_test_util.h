// Helpers shared by the replica layer's tests: a temporary directory, a
// bounded wait, a view holding given partitions, and Node, one replica (its
// own data file, clock, profile store, view board and replicator) on a
// shared in-memory log (tests/support/memory_log.h). Test-only; each test
// thread drives its own nodes.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "replica/checkpoint.h"
#include "replica/entry.h"
#include "replica/replicator.h"
#include "segstore/profile.h"
#include "segstore/routing.h"
#include "segstore/storage.h"
#include "support/memory_log.h"
#include "support/wait_for.h"

namespace segstore::replica {

using namespace std::chrono_literals;
inline constexpr UnixSeconds kStart = 1'790'000'000;
inline constexpr uint32_t kLogPartitions = 8;

class TempDir {
 public:
  TempDir() {
    std::string t = (std::filesystem::temp_directory_path() / "segstore-replica-XXXXXX").string();
    path_ = ::mkdtemp(t.data());
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string File(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// support/wait_for.h, with ten seconds' patience by default.
inline bool WaitFor(const std::function<bool()>& done, std::chrono::milliseconds limit = 10s) {
  return segstore::testing::WaitFor(done, limit);
}

// The view of a node holding `held` (all partitions when empty).
inline std::shared_ptr<const cluster::ClusterView> ViewHolding(const std::vector<uint32_t>& held) {
  auto v = std::make_shared<cluster::ClusterView>();
  v->map.cluster = true;
  v->map.revision = 1;
  v->serving = true;
  if (held.empty()) {
    v->held.set();
  } else {
    for (uint32_t p : held) v->held.set(p);
  }
  return v;
}

// One replica: its own data file, clock, profile store, view and replicator,
// on a shared log.
class Node {
 public:
  Node(const std::string& path, std::shared_ptr<testing::MemoryLog> log, UnixSeconds now,
       ReplicaOptions options = Defaults(), uint32_t max_segments = 10000)
      : path_(path),
        log_(std::move(log)),
        clock_(now),
        options_(std::move(options)),
        max_segments_(max_segments) {
    board_.Publish(ViewHolding({}));
  }
  ~Node() { Close(); }

  static ReplicaOptions Defaults() {
    ReplicaOptions o;
    o.log.partitions = kLogPartitions;
    o.applier.checkpoint_interval = 50ms;
    o.apply_timeout = 5s;
    return o;
  }

  void Open() {
    storage::StoreOptions so;
    so.path = path_;
    so.file_size = 64u << 20;
    so.write_block_size = 256u << 10;
    so.clock = &clock_;
    so.void_grace_seconds = 3600;  // as segstored sets it with a log
    auto s = storage::Store::Open(so);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(*s);
    profile::ProfileOptions po;
    po.sweeper = false;
    po.log_grace_seconds = 3600;
    po.max_segments = max_segments_;
    auto p = profile::ProfileStore::Open(store_.get(), po);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    profiles_ = std::move(*p);
    auto r =
        Replicator::Start(options_, profiles_.get(), &board_, log_->NewWriter(), log_->NewReader());
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    replicator_ = std::move(*r);
  }
  void Close() {
    replicator_.reset();
    profiles_.reset();
    store_.reset();
  }

  // A write made as a handler would: at this node's clock, through the log;
  // waits for its answer.
  template <typename Request>
  WriteAnswer Write(Request request, WriteId id = {}) {
    WriteEntry e;
    e.now = clock_.Now();
    e.write_id = id;
    e.request = std::move(request);
    auto answer = std::make_shared<std::promise<WriteAnswer>>();
    auto got = answer->get_future();
    replicator_->Submit(std::move(e), [answer](const WriteAnswer& a) { answer->set_value(a); });
    EXPECT_EQ(got.wait_for(20s), std::future_status::ready);
    return got.get();
  }
  WriteAnswer Upsert(const std::string& user, std::vector<SegmentUpdate> segs,
                     UpsertMode mode = UpsertMode::kSet, WriteId id = {}) {
    proto::UpsertRequest r;
    r.user = user;
    r.segments = std::move(segs);
    r.mode = mode;
    return Write(std::move(r), id);
  }

  // Reads through a session of the test's own thread.
  Result<GetResult> Get(const std::string& user) {
    auto s = profiles_->NewSession();
    EXPECT_TRUE(s.ok());
    return (*s)->GetSync(user);
  }
  Result<storage::Record> Raw(const std::string& key) {
    auto w = store_->NewWorker();
    EXPECT_TRUE(w.ok());
    return (*w)->GetSync(key);
  }
  // Stops the replicator (its last checkpoint written), then drops every
  // checkpoint record: the next start replays the whole log.
  void ForgetCheckpoints() {
    replicator_.reset();
    auto w = store_->NewWorker();
    ASSERT_TRUE(w.ok());
    for (uint32_t l = 0; l < kLogPartitions; ++l) (void)(*w)->DeleteSync(CheckpointKey(l));
  }
  ApplierStats Stats() { return replicator_->stats().applier; }
  bool WaitApplied(uint64_t applied) {
    return WaitFor([&] { return Stats().applied >= applied; });
  }

  ManualClock& clock() { return clock_; }
  cluster::ViewBoard& board() { return board_; }
  Replicator& replicator() { return *replicator_; }
  Applier& applier() { return *replicator_->applier(); }
  storage::Store& store() { return *store_; }
  profile::ProfileStore& profiles() { return *profiles_; }

 private:
  std::string path_;
  std::shared_ptr<testing::MemoryLog> log_;
  ManualClock clock_;
  ReplicaOptions options_;
  uint32_t max_segments_;
  cluster::ViewBoard board_;
  std::unique_ptr<storage::Store> store_;
  std::unique_ptr<profile::ProfileStore> profiles_;
  std::unique_ptr<Replicator> replicator_;
};

inline SegmentUpdate Ttl(uint64_t id, uint32_t seconds) {
  return SegmentUpdate{id, seconds, true, {}, {}};
}

inline WriteId Id(uint64_t n) { return WriteId{0xABCD, n}; }

}  // namespace segstore::replica

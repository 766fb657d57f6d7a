// WorkerImpl: one thread's access to the store: its IoQueue (io_uring ring),
// its BlockWriter (open write block), the tasks it has posted to itself, and
// its counters. Defragmentation runs on a WorkerImpl too.
//
// Not thread-safe: the thread that created it only.
#pragma once

#include <deque>
#include <functional>
#include <memory>

#include "segstore/storage.h"
#include "storage/block_writer.h"
#include "storage/io_queue.h"
#include "storage/store_impl.h"

namespace segstore::storage {

class WorkerImpl final : public Worker {
 public:
  static Result<std::unique_ptr<WorkerImpl>> Create(StoreImpl* store, const WorkerOptions& options);
  ~WorkerImpl() override;

  void Get(std::string_view key, GetCallback done) override;
  void GetWithReference(std::string_view key, GetPairCallback done) override;
  void Update(std::string_view key, UpdateFn fn, WriteCallback done) override;
  void UpdateAsOf(std::string_view key, uint32_t as_of, UpdateFn fn, WriteCallback done) override;
  void Put(std::string_view key, std::string body, uint32_t sweep_at, uint32_t void_at,
           WriteCallback done) override;
  void Delete(std::string_view key, WriteCallback done) override;
  void Flush(FlushCallback done) override;
  void Defer(std::function<void()> task) override;
  void GetAt(const RecordRef& ref, GetCallback done) override;
  void UpdateAt(const RecordRef& ref, UpdateFn fn, WriteCallback done) override;

  int event_fd() const override { return queue_->event_fd(); }
  void OnEvent() override;
  size_t Poll() override;
  size_t Wait(std::chrono::milliseconds timeout) override;
  uint32_t pending() const override { return pending_ops_; }

  // ---- For operations and defragmentation.
  StoreImpl* store() { return store_; }
  // This worker's durability (its WorkerOptions, or the store's).
  Durability durability() const { return durability_; }
  IoQueue* queue() { return queue_.get(); }
  BlockWriter& writer() { return *writer_; }
  Counters& counters() { return counters_; }
  // Runs `task` later on this thread, inside Poll().
  void Post(std::function<void()> task);
  void OpStarted() { ++pending_ops_; }
  void OpDone() { --pending_ops_; }
  // Hands queued I/O to the kernel unless a Batch or Poll() will do it.
  void MaybeSubmit();
  // Blocks until every operation, flush and timer of this worker is done.
  void Drain();
  // OK, or InvalidArgument for an empty or too long key.
  Status CheckKey(std::string_view key) const;

 protected:
  void BeginBatch() override { ++batch_depth_; }
  void EndBatch() override {
    if (--batch_depth_ == 0) MaybeSubmit();
  }

 private:
  WorkerImpl(StoreImpl* store, Durability durability) : store_(store), durability_(durability) {}
  // Completes an operation that failed before it started: `done(s)`, posted.
  template <typename Callback>
  void FailSoon(Status s, Callback done);

  StoreImpl* store_;
  const Durability durability_;
  std::unique_ptr<IoQueue> queue_;
  std::unique_ptr<BlockWriter> writer_;
  Counters counters_;
  std::deque<std::function<void()>> posted_;
  uint32_t pending_ops_ = 0;
  int batch_depth_ = 0;
  bool in_poll_ = false;
  bool notified_ = false;
};

}  // namespace segstore::storage

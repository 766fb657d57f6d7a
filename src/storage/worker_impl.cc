#include "storage/worker_impl.h"

#include <fmt/format.h>

#include <optional>

#include "storage/record_ops.h"

namespace segstore::storage {

Result<std::unique_ptr<WorkerImpl>> WorkerImpl::Create(StoreImpl* store,
                                                       const WorkerOptions& options) {
  std::unique_ptr<WorkerImpl> w(
      new WorkerImpl(store, options.durability.value_or(store->options().durability)));
  Result<std::unique_ptr<IoQueue>> q = store->device().NewQueue(store->options().queue_depth);
  if (!q.ok()) return q.status().WithContext("opening the worker's I/O queue");
  w->queue_ = std::move(q).value();
  WorkerImpl* self = w.get();
  w->writer_ = std::make_unique<BlockWriter>(
      store, w->queue_.get(), &w->counters_,
      [self](std::function<void()> t) { self->Post(std::move(t)); },
      options.flush_interval.value_or(store->options().flush_interval));
  store->RegisterCounters(&w->counters_);
  return w;
}

WorkerImpl::~WorkerImpl() {
  Drain();
  writer_.reset();
  queue_.reset();
  store_->UnregisterCounters(&counters_);
}

void WorkerImpl::Drain() {
  while (pending_ops_ > 0) Wait(std::chrono::milliseconds(10));
  bool flushed = false;
  writer_->SealOpen();
  writer_->FlushAll([&flushed](Status) { flushed = true; });
  writer_->CancelTimer();
  queue_->Submit();
  while (!flushed || !writer_->idle() || queue_->in_flight() > 0 || !posted_.empty()) {
    Wait(std::chrono::milliseconds(10));
  }
}

Status WorkerImpl::CheckKey(std::string_view key) const {
  if (key.empty()) return Status::InvalidArgument("empty key");
  if (key.size() > store_->max_key_size()) {
    return Status::InvalidArgument(
        fmt::format("key of {} bytes is over the limit of {}", key.size(), store_->max_key_size()));
  }
  return Status::OK();
}

void WorkerImpl::Post(std::function<void()> task) {
  posted_.push_back(std::move(task));
  if (!in_poll_ && !notified_) {
    notified_ = true;
    queue_->Notify();  // wake an event loop watching event_fd()
  }
}

void WorkerImpl::MaybeSubmit() {
  if (batch_depth_ == 0 && !in_poll_) queue_->Submit();
}

template <typename Callback>
void WorkerImpl::FailSoon(Status s, Callback done) {
  OpStarted();
  Post([this, s = std::move(s), done = std::move(done)] {
    done(s);
    OpDone();
  });
}

void WorkerImpl::Get(std::string_view key, GetCallback done) {
  if (Status s = CheckKey(key); !s.ok()) {
    FailSoon(std::move(s), std::move(done));
    return;
  }
  (new GetOp(this, key, std::move(done)))->Start();
  MaybeSubmit();
}

void WorkerImpl::GetWithReference(std::string_view key, GetPairCallback done) {
  if (Status s = CheckKey(key); !s.ok()) {
    OpStarted();
    Post([this, s = std::move(s), done = std::move(done)] {
      done(s, Status::NotFound("no reference"));
      OpDone();
    });
    return;
  }
  (new PairOp(this, key, std::move(done)))->Start();
  MaybeSubmit();
}

void WorkerImpl::Update(std::string_view key, UpdateFn fn, WriteCallback done) {
  if (Status s = CheckKey(key); !s.ok()) {
    FailSoon(std::move(s), std::move(done));
    return;
  }
  (new UpdateOp(this, key, std::move(fn), std::move(done)))->Start();
  MaybeSubmit();
}

void WorkerImpl::UpdateAsOf(std::string_view key, uint32_t as_of, UpdateFn fn, WriteCallback done) {
  if (Status s = CheckKey(key); !s.ok()) {
    FailSoon(std::move(s), std::move(done));
    return;
  }
  auto* op = new UpdateOp(this, key, std::move(fn), std::move(done));
  op->SetAsOf(as_of);
  op->Start();
  MaybeSubmit();
}

void WorkerImpl::Put(std::string_view key, std::string body, uint32_t sweep_at, uint32_t void_at,
                     WriteCallback done) {
  auto shared = std::make_shared<std::string>(std::move(body));
  Update(
      key,
      [shared, sweep_at, void_at](const Record*) -> Result<Mutation> {
        Mutation m = Mutation::Put(*shared, sweep_at, void_at);
        m.reference.emplace();  // a whole new version: it names no key
        return m;
      },
      std::move(done));
}

void WorkerImpl::Delete(std::string_view key, WriteCallback done) {
  Update(
      key, [](const Record*) -> Result<Mutation> { return Mutation::Delete(); }, std::move(done));
}

void WorkerImpl::Flush(FlushCallback done) {
  OpStarted();
  writer_->FlushAll([this, done = std::move(done)](Status s) {
    done(std::move(s));
    OpDone();
  });
  MaybeSubmit();
}

void WorkerImpl::GetAt(const RecordRef& ref, GetCallback done) {
  (new ReadAtOp(this, ref, std::move(done)))->Start();
  MaybeSubmit();
}

void WorkerImpl::UpdateAt(const RecordRef& ref, UpdateFn fn, WriteCallback done) {
  (new UpdateOp(this, ref, std::move(fn), std::move(done)))->Start();
  MaybeSubmit();
}

void WorkerImpl::Defer(std::function<void()> task) {
  OpStarted();
  Post([this, task = std::move(task)] {
    task();
    OpDone();
  });
}

size_t WorkerImpl::Poll() {
  bool outer = !in_poll_;
  in_poll_ = true;
  notified_ = false;
  if (writer_->open_seq() < store_->seal_below()) writer_->SealIfOlderThan(store_->seal_below());
  size_t ran = queue_->Poll();
  while (!posted_.empty()) {
    std::deque<std::function<void()>> tasks;
    tasks.swap(posted_);
    for (auto& t : tasks) t();
    ran += tasks.size();
    ran += queue_->Poll();
  }
  if (outer) {
    in_poll_ = false;
    queue_->Submit();
  }
  return ran;
}

size_t WorkerImpl::Wait(std::chrono::milliseconds timeout) {
  if (!posted_.empty()) return Poll();
  queue_->Submit();
  in_poll_ = true;
  size_t ran = queue_->Wait(timeout);
  in_poll_ = false;
  return ran + Poll();
}

void WorkerImpl::OnEvent() {
  queue_->ClearEvent();
  Poll();
}

// ---- Blocking helpers of the public Worker interface.

namespace {
template <typename T, typename Start>
T RunSync(Worker* w, Start start) {
  std::optional<T> out;
  start([&out](T r) { out.emplace(std::move(r)); });
  while (!out) w->Wait(std::chrono::milliseconds(100));
  return std::move(*out);
}
}  // namespace

Result<Record> Worker::GetSync(std::string_view key) {
  return RunSync<Result<Record>>(this, [&](GetCallback cb) { Get(key, std::move(cb)); });
}

Result<Record> Worker::GetAtSync(const RecordRef& ref) {
  return RunSync<Result<Record>>(this, [&](GetCallback cb) { GetAt(ref, std::move(cb)); });
}

Result<WriteOutcome> Worker::UpdateAtSync(const RecordRef& ref, UpdateFn fn) {
  return RunSync<Result<WriteOutcome>>(
      this, [&](WriteCallback cb) { UpdateAt(ref, std::move(fn), std::move(cb)); });
}

Result<WriteOutcome> Worker::UpdateSync(std::string_view key, UpdateFn fn) {
  return RunSync<Result<WriteOutcome>>(
      this, [&](WriteCallback cb) { Update(key, std::move(fn), std::move(cb)); });
}

Result<WriteOutcome> Worker::PutSync(std::string_view key, std::string body, uint32_t sweep_at,
                                     uint32_t void_at) {
  return RunSync<Result<WriteOutcome>>(
      this, [&](WriteCallback cb) { Put(key, std::move(body), sweep_at, void_at, std::move(cb)); });
}

Result<WriteOutcome> Worker::DeleteSync(std::string_view key) {
  return RunSync<Result<WriteOutcome>>(this, [&](WriteCallback cb) { Delete(key, std::move(cb)); });
}

std::pair<Result<Record>, Result<Record>> Worker::GetWithReferenceSync(std::string_view key) {
  std::optional<std::pair<Result<Record>, Result<Record>>> out;
  GetWithReference(key, [&out](Result<Record> record, Result<Record> referenced) {
    out.emplace(std::move(record), std::move(referenced));
  });
  while (!out) Wait(std::chrono::milliseconds(100));
  return std::move(*out);
}

Status Worker::FlushSync() {
  return RunSync<Status>(this, [&](FlushCallback cb) { Flush(std::move(cb)); });
}

}  // namespace segstore::storage

// MemoryLog: an in-memory log (src/log/log.h) for tests of what sits above
// the log: every log partition a vector of entries, shared by any number of
// writers and readers in one process. A test can take it down (appends fail
// as not written), make appends fail as maybe written (after writing them, or
// not), drop a partition's oldest entries (retention: DropBefore) and drop
// its newest (a topic made again, or truncated: Truncate). A reader keeps
// log.h's contract for both: a partition whose next offset is before the
// oldest held, or past the end, goes on from the oldest held (the offsets it
// delivers jump forward, or go back), with a warning naming both offsets;
// Poll never fails. Header-only.
//
// Thread-safe. A writer's callbacks run on a thread of its own, never inside
// Append; a reader's event_fd is written whenever an entry is appended (or
// the log truncated).
#pragma once

#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "log/log.h"

namespace segstore::testing {

class MemoryLog : public std::enable_shared_from_this<MemoryLog> {
 public:
  struct Entry {
    std::string key;
    std::string value;
    int64_t timestamp_ms = 0;
  };

  explicit MemoryLog(uint32_t partitions) : parts_(partitions) {}

  static std::shared_ptr<MemoryLog> Make(uint32_t partitions) {
    return std::make_shared<MemoryLog>(partitions);
  }

  // Appends fail as not written while down.
  void SetDown(bool down) {
    std::lock_guard lock(mu_);
    down_ = down;
  }
  // The next `n` appends fail as maybe written; with `write`, they are
  // written all the same (the acknowledgement was what got lost), just
  // after their callback ran.
  void FailNextMaybeWritten(int n, bool write) {
    std::lock_guard lock(mu_);
    maybe_failures_ = n;
    maybe_write_ = write;
  }
  // While held, the `reader`th reader made (0: the first) gets no entries
  // (its positions still show the log's end): a node falling behind.
  void HoldReads(int reader, bool hold) {
    {
      std::lock_guard lock(mu_);
      if (hold) {
        held_readers_.insert(reader);
      } else {
        held_readers_.erase(reader);
      }
    }
    Notify();
  }
  // Drops the entries of `partition` before `offset` (retention; not past
  // the end).
  void DropBefore(uint32_t partition, int64_t offset) {
    std::lock_guard lock(mu_);
    Part& part = parts_[partition];
    part.start = std::max(part.start, std::min(offset, static_cast<int64_t>(part.entries.size())));
  }
  // Drops the entries of `partition` from `new_end` on, as a topic made
  // again or truncated would: the next append gets offset `new_end` (or the
  // end, if that is before). A reader whose next offset is past the new end
  // starts over from the oldest held.
  void Truncate(uint32_t partition, int64_t new_end) {
    {
      std::lock_guard lock(mu_);
      Part& part = parts_[partition];
      if (new_end < 0) new_end = 0;
      if (new_end < static_cast<int64_t>(part.entries.size())) {
        part.entries.resize(static_cast<size_t>(new_end));
      }
      part.start = std::min(part.start, static_cast<int64_t>(part.entries.size()));
    }
    Notify();
  }
  int64_t Start(uint32_t partition) const {
    std::lock_guard lock(mu_);
    return parts_[partition].start;
  }
  // Appends raw bytes as a writer would (an entry no node made, say).
  int64_t AppendRaw(uint32_t partition, std::string key, std::string value) {
    int64_t offset;
    {
      std::lock_guard lock(mu_);
      offset = Push(partition, std::move(key), std::move(value));
    }
    Notify();
    return offset;
  }
  std::vector<Entry> Entries(uint32_t partition) const {
    std::lock_guard lock(mu_);
    return parts_[partition].entries;
  }
  int64_t End(uint32_t partition) const {
    std::lock_guard lock(mu_);
    return static_cast<int64_t>(parts_[partition].entries.size());
  }
  uint32_t partitions() const { return static_cast<uint32_t>(parts_.size()); }

  std::unique_ptr<log::LogWriter> NewWriter();
  std::unique_ptr<log::LogReader> NewReader();

 private:
  friend class MemoryLogWriter;
  friend class MemoryLogReader;
  struct Part {
    std::vector<Entry> entries;
    int64_t start = 0;
  };

  // Under mu_.
  int64_t Push(uint32_t partition, std::string key, std::string value) {
    const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
    parts_[partition].entries.push_back(Entry{std::move(key), std::move(value), now});
    return static_cast<int64_t>(parts_[partition].entries.size()) - 1;
  }
  void Notify() {
    std::lock_guard lock(mu_);
    for (int fd : reader_fds_) {
      uint64_t one = 1;
      (void)!::write(fd, &one, sizeof one);
    }
  }

  mutable std::mutex mu_;
  std::vector<Part> parts_;
  bool down_ = false;
  std::set<int> held_readers_;
  int readers_made_ = 0;
  int maybe_failures_ = 0;
  bool maybe_write_ = false;
  std::set<int> reader_fds_;
};

class MemoryLogWriter final : public log::LogWriter {
 public:
  explicit MemoryLogWriter(std::shared_ptr<MemoryLog> log)
      : log_(std::move(log)), thread_([this] { Run(); }) {}
  ~MemoryLogWriter() override {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  void Append(uint32_t partition, std::string_view key, std::string_view value,
              log::AppendCallback done) override {
    log::AppendOutcome out;
    bool written = false;
    std::optional<Deferred> later;
    if (partition >= log_->partitions()) {
      out.status = Status::InvalidArgument("log partition out of range");
    } else {
      std::lock_guard lock(log_->mu_);
      if (log_->down_) {
        out.status = Status::Unavailable("the memory log is down");
      } else if (log_->maybe_failures_ > 0) {
        --log_->maybe_failures_;
        out.status = Status::Unavailable("timed out (memory log)");
        out.maybe_written = true;
        if (log_->maybe_write_) later = Deferred{partition, std::string(key), std::string(value)};
      } else {
        out.offset = log_->Push(partition, std::string(key), std::string(value));
        written = true;
      }
    }
    if (written) log_->Notify();
    {
      std::lock_guard lock(mu_);
      if (out.status.ok()) {
        ++stats_.appended;
      } else if (out.maybe_written) {
        ++stats_.maybe_written;
      } else {
        ++stats_.failed;
      }
      queue_.push_back(Queued{std::move(done), std::move(out), std::move(later)});
    }
    cv_.notify_all();
  }
  uint32_t partitions() const override { return log_->partitions(); }
  log::LogWriterStats stats() const override {
    std::lock_guard lock(mu_);
    return stats_;
  }

 private:
  void Run() {
    std::unique_lock lock(mu_);
    for (;;) {
      cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      Queued q = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      q.done(q.out);
      if (q.later) log_->AppendRaw(q.later->partition, q.later->key, q.later->value);
      lock.lock();
    }
  }

  // An entry written only once its append's failure was reported.
  struct Deferred {
    uint32_t partition;
    std::string key;
    std::string value;
  };
  struct Queued {
    log::AppendCallback done;
    log::AppendOutcome out;
    std::optional<Deferred> later;
  };

  std::shared_ptr<MemoryLog> log_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Queued> queue_;
  log::LogWriterStats stats_;
  bool stop_ = false;
  std::thread thread_;
};

class MemoryLogReader final : public log::LogReader {
 public:
  explicit MemoryLogReader(std::shared_ptr<MemoryLog> log) : log_(std::move(log)) {
    fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    std::lock_guard lock(log_->mu_);
    log_->reader_fds_.insert(fd_);
    index_ = log_->readers_made_++;
  }
  ~MemoryLogReader() override {
    {
      std::lock_guard lock(log_->mu_);
      log_->reader_fds_.erase(fd_);
    }
    ::close(fd_);
  }

  Status Assign(std::span<const std::pair<uint32_t, int64_t>> from) override {
    std::lock_guard lock(log_->mu_);
    next_.assign(log_->partitions(), -3);  // -3: not assigned
    for (const auto& [p, offset] : from) {
      if (p >= log_->partitions() || next_[p] != -3) {
        return Status::InvalidArgument("bad assignment");
      }
      const auto& part = log_->parts_[p];
      next_[p] = offset == log::kFromBeginning ? part.start
                 : offset == log::kFromEnd     ? static_cast<int64_t>(part.entries.size())
                                               : offset;
    }
    uint64_t one = 1;
    (void)!::write(fd_, &one, sizeof one);
    return Status::OK();
  }

  Result<size_t> Poll(size_t max, const std::function<void(const log::LogEntry&)>& fn) override {
    uint64_t v;
    (void)!::read(fd_, &v, sizeof v);
    std::vector<std::pair<uint32_t, int64_t>> taken;
    std::vector<MemoryLog::Entry> entries;
    {
      std::lock_guard lock(log_->mu_);
      const bool held = log_->held_readers_.count(index_) != 0;
      for (uint32_t p = 0; p < next_.size() && taken.size() < max && !held; ++p) {
        if (next_[p] < 0) continue;
        const auto& part = log_->parts_[p];
        const auto end = static_cast<int64_t>(part.entries.size());
        // An offset no longer held: on from the oldest held (log.h).
        if (next_[p] < part.start) {
          spdlog::warn(
              "log: memory reader: log partition {}: offsets {} to {} are no longer in the log "
              "(retention passed them); reading on from offset {}, the oldest it holds",
              p, next_[p], part.start - 1, part.start);
          next_[p] = part.start;
        } else if (next_[p] > end) {
          spdlog::warn(
              "log: memory reader: log partition {}: offset {} is past the log's end ({}); "
              "reading again from offset {}, the oldest it holds",
              p, next_[p], end, part.start);
          next_[p] = part.start;
        }
        while (next_[p] < static_cast<int64_t>(part.entries.size()) && taken.size() < max) {
          taken.emplace_back(p, next_[p]);
          entries.push_back(part.entries[static_cast<size_t>(next_[p])]);
          ++next_[p];
        }
      }
    }
    for (size_t i = 0; i < taken.size(); ++i) {
      log::LogEntry e;
      e.partition = taken[i].first;
      e.offset = taken[i].second;
      e.key = entries[i].key;
      e.value = entries[i].value;
      e.timestamp_ms = entries[i].timestamp_ms;
      fn(e);
    }
    if (taken.size() == max) {
      uint64_t one = 1;
      (void)!::write(fd_, &one, sizeof one);  // more may wait
    }
    return taken.size();
  }

  int event_fd() const override { return fd_; }

  std::vector<log::PartitionPosition> positions() const override {
    std::lock_guard lock(log_->mu_);
    std::vector<log::PartitionPosition> out;
    for (uint32_t p = 0; p < next_.size(); ++p) {
      if (next_[p] == -3) continue;
      out.push_back({p, next_[p], static_cast<int64_t>(log_->parts_[p].entries.size()),
                     log_->parts_[p].start});
    }
    return out;
  }
  Status health(std::chrono::milliseconds /*stale_after*/) const override {
    std::lock_guard lock(log_->mu_);
    return log_->down_ ? Status::Unavailable("the memory log is down") : Status::OK();
  }
  uint32_t partitions() const override { return log_->partitions(); }

 private:
  std::shared_ptr<MemoryLog> log_;
  int fd_ = -1;
  int index_ = 0;              // made as the index_-th reader of the log
  std::vector<int64_t> next_;  // guarded by log_->mu_; -3: not assigned
};

inline std::unique_ptr<log::LogWriter> MemoryLog::NewWriter() {
  return std::make_unique<MemoryLogWriter>(shared_from_this());
}
inline std::unique_ptr<log::LogReader> MemoryLog::NewReader() {
  return std::make_unique<MemoryLogReader>(shared_from_this());
}

}  // namespace segstore::testing

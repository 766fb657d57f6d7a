#include "replica/replicator.h"

#include <fmt/format.h>

#include <random>

#include "segstore/routing.h"

namespace segstore::replica {

Status PassiveRefusal() {
  return Status::ReadOnly(
      "this node belongs to a passive cluster, which applies another cluster's log and takes no "
      "writes: send writes to the active cluster");
}

Result<std::unique_ptr<Replicator>> Replicator::Start(const ReplicaOptions& options,
                                                      profile::ProfileStore* profiles,
                                                      const cluster::ViewBoard* board) {
  std::unique_ptr<log::LogWriter> writer;
  if (!options.passive) {
    Result<std::unique_ptr<log::LogWriter>> opened = log::OpenKafkaWriter(options.log);
    if (!opened.ok()) return opened.status().WithContext("the cluster's log");
    writer = std::move(*opened);
  }
  Result<std::unique_ptr<log::LogReader>> reader = log::OpenKafkaReader(options.log);
  if (!reader.ok()) return reader.status().WithContext("the cluster's log");
  return Start(options, profiles, board, std::move(writer), std::move(*reader));
}

Result<std::unique_ptr<Replicator>> Replicator::Start(const ReplicaOptions& options,
                                                      profile::ProfileStore* profiles,
                                                      const cluster::ViewBoard* board,
                                                      std::unique_ptr<log::LogWriter> writer,
                                                      std::unique_ptr<log::LogReader> reader) {
  if ((writer == nullptr) != options.passive) {
    return Status::InvalidArgument(options.passive ? "a passive node writes nothing to the log"
                                                   : "no log writer");
  }
  if (writer != nullptr && writer->partitions() != options.log.partitions) {
    return Status::InvalidArgument(fmt::format("the log writer has {} partitions, not {}",
                                               writer->partitions(), options.log.partitions));
  }
  std::unique_ptr<Replicator> r(new Replicator(options));
  std::random_device rd;
  r->id_prefix_ = (uint64_t{rd()} << 32) | rd();
  if (r->id_prefix_ == 0) r->id_prefix_ = 1;
  r->writer_ = std::move(writer);
  ApplierOptions ao = options.applier;
  ao.log_partitions = options.log.partitions;
  ao.origin = r->id_prefix_;
  Result<std::unique_ptr<Applier>> applier =
      Applier::Start(ao, profiles, std::move(reader), board, &r->pending_);
  if (!applier.ok()) return applier.status();
  r->applier_ = std::move(*applier);
  return r;
}

Replicator::~Replicator() { Stop(); }

void Replicator::Stop() {
  if (stopped_.exchange(true)) return;
  applier_->Stop();
  std::unique_ptr<log::LogWriter> writer;
  {
    std::lock_guard lock(writer_mu_);
    writer = std::move(writer_);
  }
  writer.reset();  // runs every append's callback
  WriteAnswer down;
  down.status = Status::Unavailable("the server is shutting down");
  pending_.FailAll(down);
}

void Replicator::Submit(WriteEntry entry, PendingWrites::Done done) {
  if (options_.passive) {
    WriteAnswer a;
    a.status = PassiveRefusal();
    done(a);
    return;
  }
  if (Status failed = applier_->failure(); !failed.ok() || stopped_.load()) {
    WriteAnswer a;
    a.status = Status::Unavailable(failed.ok() ? std::string("the server is shutting down")
                                               : "this node cannot apply the cluster's log: " +
                                                     std::string(failed.message()));
    done(a);
    return;
  }
  if (entry.write_id.empty()) {
    entry.write_id = WriteId{id_prefix_, id_counter_.fetch_add(1, std::memory_order_relaxed) + 1};
  }
  const uint32_t log_partition = LogPartitionOf(PartitionOf(entry.user()), log_partitions());
  submitted_.fetch_add(1, std::memory_order_relaxed);
  const uint64_t ticket =
      pending_.Add(PendingWrites::Clock::now() + options_.apply_timeout, std::move(done));
  entry.origin = id_prefix_;
  entry.ticket = ticket;
  std::string bytes;
  EncodeEntry(entry, &bytes);
  writer_->Append(
      log_partition, entry.user(), bytes, [this, ticket](const log::AppendOutcome& outcome) {
        if (outcome.status.ok()) return;  // the applier answers
        WriteAnswer a;
        if (outcome.status.code() == Status::Code::kInvalidArgument) {
          log_refused_.fetch_add(1, std::memory_order_relaxed);
          a.status = outcome.status.WithContext("the cluster's log refused the write");
        } else if (outcome.maybe_written) {
          in_doubt_.fetch_add(1, std::memory_order_relaxed);
          a.status = Status::InDoubt(
              fmt::format("the cluster's log may or may not have taken the write ({}); retry it "
                          "with the same write_id to learn its outcome",
                          outcome.status.message()));
        } else {
          log_refused_.fetch_add(1, std::memory_order_relaxed);
          a.status = Status::LogUnavailable(
              fmt::format("the cluster's log did not take the write, nothing was written: {}",
                          outcome.status.message()));
        }
        pending_.Settle(ticket, a);
      });
}

ReplicaStats Replicator::stats() const {
  ReplicaStats s;
  {
    std::lock_guard lock(writer_mu_);
    if (writer_ != nullptr) s.writer = writer_->stats();
  }
  s.applier = applier_->stats();
  s.submitted = submitted_.load(std::memory_order_relaxed);
  s.log_refused = log_refused_.load(std::memory_order_relaxed);
  s.in_doubt = in_doubt_.load(std::memory_order_relaxed) + s.applier.expired_waiters;
  s.waiting = pending_.size();
  return s;
}

}  // namespace segstore::replica

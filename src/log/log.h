// The replicated log a segstore cluster writes through (issue 18): an
// ordered, durable sequence of entries per log partition, shared by every
// node. segstore does not implement the log; it talks to an engine that
// does. This interface is all the rest of segstore knows of it, so a second
// engine (NATS JetStream, say) can follow the first (Kafka, through
// librdkafka: kafka_log.h).
//
// Words: a **log partition** is one of the topic's partitions (numbered 0 to
// partitions()-1), never a routing partition; an **offset** is an entry's
// place in its log partition (0, 1, 2, ... as the engine assigns them).
//
// What an engine must guarantee (Kafka with acks=all and
// min.insync.replicas=2 does): an append acknowledged with an offset is
// durable and stays at that offset; every reader sees the entries of one log
// partition in offset order, each once per read; an append that fails as
// "not written" was not written.
//
// Threads: a LogWriter is thread-safe; its callbacks run on a thread of its
// own. A LogReader is used by one thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "segstore/result.h"

namespace segstore::log {

struct LogOptions {
  // "host:port,host:port": the engine's bootstrap servers.
  std::string brokers;
  std::string topic = "segstore";
  // Log partitions of the topic: a power of two that divides 4,096. Opening
  // checks the topic has exactly this many (InvalidArgument naming both).
  uint32_t partitions = 64;
  // Names this node to the engine (its logs, quotas).
  std::string client_id = "segstored";
  // An append not acknowledged within this fails (librdkafka's
  // message.timeout.ms): as "not written" when the engine never took it, as
  // "maybe written" when it may have.
  std::chrono::milliseconds append_timeout{5000};
  // How long an engine call at open (metadata) may take.
  std::chrono::milliseconds open_timeout{10000};
  // Engine properties passed as they are (librdkafka's, for Kafka: TLS, SASL,
  // socket settings), applied after segstore's own, so they win.
  std::vector<std::pair<std::string, std::string>> properties;
};

// How an append ended.
struct AppendOutcome {
  Status status;              // OK: written at `offset`
  int64_t offset = -1;        // when OK
  // When not OK: true if the entry may have been written all the same (a
  // timeout after it was sent): the caller cannot know, and must not treat
  // it as refused.
  bool maybe_written = false;
};
using AppendCallback = std::function<void(const AppendOutcome&)>;

struct LogWriterStats {
  uint64_t appended = 0;        // acknowledged
  uint64_t failed = 0;          // failed, not written
  uint64_t maybe_written = 0;   // failed, outcome unknown
  uint64_t in_flight = 0;       // appended, not yet acknowledged or failed
};

class LogWriter {
 public:
  // Waits up to the append timeout for appends in flight; each callback runs
  // exactly once, before the destructor returns (failed, maybe written, when
  // it could not finish).
  virtual ~LogWriter() = default;
  // Appends `value` to log partition `partition` (below partitions()),
  // keyed by `key` (the engine's record key, for tools and compaction).
  // `done` runs once, on the writer's thread, never inside this call:
  // OK with the offset once the engine acknowledged it, Unavailable when it
  // was not written (engine unreachable, refused: NOT_ENOUGH_REPLICAS, ...,
  // the message says which), Unavailable with maybe_written when it may
  // have been, InvalidArgument for a partition out of range or a value the
  // engine refuses as too large.
  virtual void Append(uint32_t partition, std::string_view key, std::string_view value,
                      AppendCallback done) = 0;
  virtual uint32_t partitions() const = 0;
  virtual LogWriterStats stats() const = 0;
};

// One entry as read.
struct LogEntry {
  uint32_t partition = 0;
  int64_t offset = 0;
  std::string_view key;    // valid during the Poll callback only
  std::string_view value;  // valid during the Poll callback only
  // When the engine took it, -1 if unknown. Kafka: the broker's clock for a
  // topic with message.timestamp.type=LogAppendTime, else (CreateTime, the
  // default) the writer's clock at Append.
  int64_t timestamp_ms = 0;
};

// Where reading a log partition starts.
inline constexpr int64_t kFromBeginning = -2;  // the oldest entry the log still holds
// Entries appended from now on. Kafka resolves "now" when the reader first
// reaches the broker, just after Assign returns (an entry appended in between
// is not read); positions().next is known (>= 0) once it is resolved.
inline constexpr int64_t kFromEnd = -1;

// What a reader knows of one assigned log partition.
struct PartitionPosition {
  uint32_t partition = 0;
  int64_t next = 0;            // the next offset Poll will deliver (-1: not known yet)
  int64_t end = -1;            // the log's end (high watermark) as last heard; -1 unknown
  int64_t start = -1;          // the oldest offset the log still holds; -1 unknown
};

class LogReader {
 public:
  virtual ~LogReader() = default;
  // Replaces the assignment: reads exactly these log partitions, each from
  // its given offset (an exact offset, kFromBeginning or kFromEnd).
  // InvalidArgument for a partition out of range or listed twice.
  virtual Status Assign(std::span<const std::pair<uint32_t, int64_t>> from) = 0;
  // Hands up to `max` entries already fetched to `fn`, in offset order within
  // each log partition, without blocking; returns how many. Transient engine
  // trouble (a broker down, a leader moving) is retried inside and shows in
  // health(), not here. Not OK only for what the caller must act on:
  // NotFound, naming the log partition, the offset and the oldest one held,
  // when an assigned offset is no longer in the log (retention passed it;
  // also an offset past the log's end); that partition is then no longer
  // read (Assign again), and the others go on in later calls.
  virtual Result<size_t> Poll(size_t max, const std::function<void(const LogEntry&)>& fn) = 0;
  // Becomes readable when entries may be waiting, for an epoll or Asio loop.
  // The caller then calls Poll until it returns fewer than `max` (which
  // clears it); a spurious wake-up is harmless.
  virtual int event_fd() const = 0;
  // Each assigned partition's position, as of the last fetch.
  virtual std::vector<PartitionPosition> positions() const = 0;
  // OK while the engine answers fetches; Unavailable (why) when no fetch has
  // succeeded for longer than `stale_after` (the reader cannot tell how far
  // behind it is).
  virtual Status health(std::chrono::milliseconds stale_after) const = 0;
  virtual uint32_t partitions() const = 0;
};

// The Kafka engine (librdkafka): kafka_log.cc.
Result<std::unique_ptr<LogWriter>> OpenKafkaWriter(const LogOptions& options);
Result<std::unique_ptr<LogReader>> OpenKafkaReader(const LogOptions& options);

}  // namespace segstore::log

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
// What it cannot guarantee, and a reader therefore shows rather than hides:
// the log may stop holding entries a reader has not read yet (retention
// deleted them), or stop holding offsets a reader already passed (the topic
// was deleted and made again, or truncated). The reader then goes on from
// the oldest entry the log holds (LogReader::Poll): the offsets it delivers
// jump forward, or go back, and the caller sees it by comparing them with
// the ones before.
//
// Opening: OpenKafkaWriter and OpenKafkaReader fail only for what cannot
// work whatever the engine says (InvalidArgument: bad options, a property
// refused); they never wait for the engine. With no broker answering they
// return a working object: appends wait, then fail as not written
// (Unavailable); the reader's health() is Unavailable; Assign works, and
// reading starts once the brokers answer. The topic (that it exists, with
// `partitions` log partitions) is checked when the engine first answers
// about it: when it is wrong, the writer refuses every append with
// InvalidArgument naming both counts ("topic 'segstore' has 8 partitions,
// segstore is configured for 64 log partitions", or that it does not
// exist), the reader delivers nothing and its health() returns that same
// InvalidArgument, and each logs it once, at error. The engine is asked
// again every second while the topic is wrong; once it is right, the
// refusals end (the check is not made again after it passed).
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
  // Log partitions of the topic: a power of two that divides 4,096. The
  // topic must have exactly this many; this is checked when the engine first
  // answers about the topic, not at open (see "Opening" below).
  uint32_t partitions = 64;
  // Names this node to the engine (its logs, quotas).
  std::string client_id = "segstored";
  // An append not acknowledged within this fails (librdkafka's
  // message.timeout.ms): as "not written" when the engine never took it, as
  // "maybe written" when it may have. An append made before the engine first
  // answered about the topic (or while the writer replaces its producer)
  // waits for that up to this long, and then has this long again.
  std::chrono::milliseconds append_timeout{5000};
  // Engine properties passed as they are (librdkafka's, for Kafka: TLS, SASL,
  // socket settings), applied after segstore's own, so they win; those that
  // would break the guarantees below are refused (CheckProperties).
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
  // it could not finish; failed, not written, when it never reached the
  // engine).
  virtual ~LogWriter() = default;
  // Appends `value` to log partition `partition` (below partitions()),
  // keyed by `key` (the engine's record key, for tools and compaction).
  // `done` runs exactly once, on the writer's thread, never inside this
  // call:
  // - OK with the offset once the engine acknowledged it;
  // - Unavailable when it was not written: engine unreachable (also since
  //   the writer was opened: the append waited append_timeout for a first
  //   answer), refused (NOT_ENOUGH_REPLICAS, ...), a batch of entries
  //   refused as too large although this entry is within the engine's
  //   limit (retry it), the writer's queue full; the message says which;
  // - Unavailable with maybe_written when it may have been (a timeout after
  //   it was sent, the engine's client failing with appends in flight);
  // - InvalidArgument, not written, for a partition out of range, an entry
  //   itself over the engine's size limit, or a topic that is not as
  //   configured (missing, another partition count: see "Opening" above).
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
  // InvalidArgument for a partition out of range or listed twice. Needs no
  // answer from the engine (reading starts once it answers).
  virtual Status Assign(std::span<const std::pair<uint32_t, int64_t>> from) = 0;
  // Hands up to `max` entries already fetched to `fn`, in offset order within
  // each log partition, without blocking; returns how many.
  //
  // An offset the log no longer holds never stops a partition: when the
  // offset a partition is to be read from (assigned, or reached) is older
  // than the oldest entry the log holds (retention passed it), the reader
  // goes on from the oldest held, so the next offset delivered is larger
  // than the last one plus one; when it is past the log's end (the topic was
  // made again, or truncated), the reader starts over from the oldest held,
  // so the offsets delivered go back. Either way it logs a warning naming
  // the log partition and both offsets, and positions() follows (`next`
  // becomes the offset it goes on from); nothing is delivered twice but what
  // the log holds again at offsets already delivered.
  //
  // Transient engine trouble (a broker down, a leader moving) is retried
  // inside and shows in health(), not here; so does a topic that is not as
  // configured (nothing is delivered then). Poll does not fail in the Kafka
  // engine (nor in tests' MemoryLog): a Result is kept for an engine that
  // meets an error it cannot get past by itself, which the caller should
  // log, counting the reader unhealthy.
  virtual Result<size_t> Poll(size_t max, const std::function<void(const LogEntry&)>& fn) = 0;
  // Becomes readable when entries may be waiting, for an epoll or Asio loop.
  // The caller then calls Poll until it returns fewer than `max` (which
  // clears it); a spurious wake-up is harmless.
  virtual int event_fd() const = 0;
  // Each assigned partition's position, as of the last fetch. Every assigned
  // partition is listed until the next Assign.
  virtual std::vector<PartitionPosition> positions() const = 0;
  // OK while the engine answers fetches. Unavailable (why) before the engine
  // first answered about the topic, and when no fetch has succeeded for
  // longer than `stale_after` (the reader cannot tell how far behind it is).
  // InvalidArgument (why, naming both partition counts) while the topic is
  // not as configured (see "Opening" above): nothing is read then.
  virtual Status health(std::chrono::milliseconds stale_after) const = 0;
  virtual uint32_t partitions() const = 0;
};

// The Kafka engine (librdkafka): kafka_log.cc. Both check
// `options.properties` with CheckProperties first.
Result<std::unique_ptr<LogWriter>> OpenKafkaWriter(const LogOptions& options);
Result<std::unique_ptr<LogReader>> OpenKafkaReader(const LogOptions& options);

// Checks engine properties (LogOptions::properties) without opening
// anything: InvalidArgument, naming the property and why, for one segstore
// must set itself because another value would break the guarantees above
// (acks, enable.idempotence, transactional.id, message.timeout.ms /
// delivery.timeout.ms (append_timeout says it), enable.auto.commit,
// enable.auto.offset.store, auto.offset.reset, group.id, isolation.level,
// enable.partition.eof, queuing.strategy, client.rack, and their librdkafka
// aliases, with or without a "topic." prefix), and for one librdkafka
// itself refuses (an unknown name, a bad value). OK otherwise. A few
// combinations librdkafka refuses only when a client is made (e.g.
// max.in.flight above 5 with idempotence) are refused by Open, also as
// InvalidArgument.
Status CheckProperties(const std::vector<std::pair<std::string, std::string>>& properties);

}  // namespace segstore::log

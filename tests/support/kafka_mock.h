// A Kafka cluster for tests: librdkafka's mock cluster (rdkafka_mock.h,
// librdkafka 2.0.2) run in a process of its own (segstore-test-kafka,
// kafka_mock_main.cc), so that it outlives the processes a test kills and
// clients in any process reach it on loopback. The test drives it through
// the child's stdin (one command a line, one answer a line: ok or error).
// Only the PID this harness started is ever signalled; the child dies with
// the test (PR_SET_PDEATHSIG) and ends by itself when its stdin closes.
//
// What the 2.0.2 mock does, as found by tests/log/log_test.cc (and the
// measurements in src/log/kafka_log.cc):
// - Several brokers (IDs 1..N) on 127.0.0.1 ephemeral ports, reached by
//   clients in other processes; Produce (idempotent too), Fetch,
//   ListOffsets, Metadata; manual assignment (rd_kafka_assign) from exact
//   offsets, OFFSET_BEGINNING and OFFSET_END; watermarks (the low one comes
//   with each fetch answer).
// - Metadata v0-2 only, so a client cannot ask it not to create topics: it
//   creates any topic asked for, with 4 partitions. SetTopicError(name,
//   "UNKNOWN_TOPIC_OR_PART") is how a test makes a topic missing.
// - BrokerDown drops the broker's connections and refuses new ones (clients
//   see "Connection refused"); BrokerUp takes them again. Leaders do NOT
//   move: a partition whose leader is down cannot be written or read until
//   SetLeader moves it. librdkafka then finds the new leader by itself
//   within a second or so, and its idempotent producer resends what was in
//   flight there without duplicates (each partition is one log, whichever
//   broker leads it).
// - Each partition is one in-memory log: acks=all and min.insync.replicas
//   are not modelled (a produce is acknowledged as soon as it is appended).
//   PushErrors injects broker errors instead; they are cluster-wide (the
//   next <count> requests of that API, to any broker, fail). librdkafka
//   retries NOT_ENOUGH_REPLICAS (retriable): a few only delay an append;
//   more than the append timeout covers fail it as "Message timed out", not
//   written. "_TRANSPORT" makes the broker drop the connection instead of
//   answering (before writing anything), which librdkafka must count as
//   possibly written.
// - Retention: a partition keeps at most 5 MiB (checked: after seven
//   900 KB entries the log starts at offset 2, and a fetch of offset 0 is
//   OFFSET_OUT_OF_RANGE) or 100,000 message sets (librdkafka's source; not
//   exercised).
// - An empty Fetch is answered after the full fetch.wait.max.ms, even when
//   data arrives meanwhile (a real broker answers as soon as it has data):
//   the mock adds up to that wait to an entry's way to a reader.
// - A fetch past a partition's end is OFFSET_OUT_OF_RANGE too (as on a real
//   broker), which is how a test stands in for a topic truncated or made
//   again: the 2.0.2 mock can neither delete, truncate nor recreate a topic.
//   SetTopicError(name, "NO_ERROR") ends a topic error set before.
// - A batch refused as too large: PushErrors("Produce",
//   "MSG_SIZE_TOO_LARGE" or "RECORD_LIST_TOO_LARGE", 1) fails every entry
//   of the batch (librdkafka neither retries nor splits it).
// - Fatal errors of the idempotent producer (librdkafka 2.0.2):
//   PushErrors("InitProducerId", "CLUSTER_AUTHORIZATION_FAILED", 1) raises
//   one as the producer starts (what it queued is purged, not written);
//   PushErrors("Produce", "OUT_OF_ORDER_SEQUENCE_NUMBER", 1) raises one with
//   appends in flight (that batch fails as possibly persisted).
//   INVALID_PRODUCER_EPOCH on Produce is not fatal (the producer bumps its
//   epoch and retries).
// - Tearing a mock cluster down takes librdkafka about a second, so the
//   process exits without it (the kernel closes its sockets).
//
// Not thread-safe: one test thread drives it.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <string_view>

namespace segstore::testing {

struct KafkaMockOptions {
  int brokers = 3;
  std::string topic = "segstore";
  int partitions = 4;  // replication factor min(3, brokers)
};

class KafkaMock {
 public:
  explicit KafkaMock(KafkaMockOptions options = {});
  // Closes the child's stdin (it exits), waits up to 5 s, then SIGKILLs it;
  // reaps it.
  ~KafkaMock();
  KafkaMock(const KafkaMock&) = delete;
  KafkaMock& operator=(const KafkaMock&) = delete;

  // Starts the child and waits (bounded, 30 s) for its bootstrap line. The
  // child is killed when the thread that started it ends (PR_SET_PDEATHSIG
  // follows the thread): start it from the test's main thread.
  bool Start(std::string* why);

  // "127.0.0.1:port,...": the brokers' addresses, for LogOptions::brokers.
  const std::string& bootstrap() const { return bootstrap_; }
  const KafkaMockOptions& options() const { return options_; }
  pid_t pid() const { return pid_; }

  // Each sends one command and waits (bounded, 10 s) for its answer; false
  // with `why` (when not null) on an error answer or none.
  bool BrokerDown(int broker_id, std::string* why = nullptr);
  bool BrokerUp(int broker_id, std::string* why = nullptr);
  bool SetLeader(int partition, int broker_id, std::string* why = nullptr);
  // The next `count` requests of `api` (a protocol name such as "Produce",
  // or its number) fail with broker error `error` (a name such as
  // "NOT_ENOUGH_REPLICAS", or its code, 19).
  bool PushErrors(std::string_view api, std::string_view error, int count,
                  std::string* why = nullptr);
  // Drops the errors pushed and not yet returned.
  bool ClearErrors(std::string* why = nullptr);
  // Delays every answer of broker `broker_id` (-1: all) by `rtt`.
  bool SetRtt(int broker_id, std::chrono::milliseconds rtt, std::string* why = nullptr);
  // Creates another topic of `partitions` partitions.
  bool CreateTopic(std::string_view name, int partitions, std::string* why = nullptr);
  // Metadata requests for topic `name` get broker error `error` (e.g.
  // "UNKNOWN_TOPIC_OR_PART": the mock creates whatever topic a client asks
  // for, so this is how a test makes one missing; "NO_ERROR" ends it).
  bool SetTopicError(std::string_view name, std::string_view error, std::string* why = nullptr);
  // Sends `line` and waits for the answer; true on "ok".
  bool Command(const std::string& line, std::string* why);

 private:
  // Reads one line from the child's stdout by `deadline`.
  bool ReadLine(std::chrono::steady_clock::time_point deadline, std::string* line);
  void End();

  const KafkaMockOptions options_;
  pid_t pid_ = -1;
  int to_child_ = -1;    // the child's stdin
  int from_child_ = -1;  // the child's stdout
  std::string buffer_;   // read from the child, not yet a whole line
  std::string bootstrap_;
};

}  // namespace segstore::testing

#include "log/kafka_log.h"

#include <librdkafka/rdkafka.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string_view>
#include <thread>
#include <unordered_map>

namespace segstore::log {

using Clock = std::chrono::steady_clock;

namespace {

// --- Settings (KafkaWriterProperties / KafkaReaderProperties) -------------
//
// Latencies below are from Append to the entry reaching another reader's
// Poll, on librdkafka's mock (3 brokers, 4 partitions, loopback, this 2-core
// VM while others built: load 3-4), 3,000 appends, median / p99:
//   one append at a time   linger 0  fetch wait 1: 1.3 / 7.5 ms   5: 4.4 / 9.2   10: 4.3 / 11.0
//                          linger 1               1.3 / 2.5        5.5 / 9.8      10.5 / 15.7
//                          linger 5               6.5 / 12.0       5.4 / 12.5     10.5 / 28.4
//   16 at a time           linger 1, fetch wait 5: 4.7 / 12.3;  linger 0: 3.7 / 16.0
//   one at a time, 0-20 ms apart (random)   linger 1, wait 5: 4.5 / 24.2;  wait 10: 7.4 / 28.2
// The acknowledgement alone (Append to callback, one at a time) takes 0.1 ms
// with linger 0, 1.2 ms with 1, 5.2 ms with 5.
//
// linger.ms: how long the producer waits to batch entries. One millisecond
// costs about that much on each append but caps the produce requests at
// about one per millisecond per broker (appends made together share one)
// and spares librdkafka a wake-up of its broker thread per entry.
constexpr int kLingerMs = 1;
// fetch.wait.max.ms: how long a broker may hold a Fetch that has nothing to
// return. A real broker answers as soon as there is data (fetch.min.bytes=1),
// so there this only sets the idle fetch rate: one Fetch per broker every
// 5 ms. librdkafka's mock always holds an empty fetch the full time, so on
// it an entry waits up to this long for the next fetch (the table above).
constexpr int kFetchWaitMs = 5;
// reconnect.backoff.max.ms: librdkafka's default (10 s) would leave a broker
// that came back unused for up to 10 s.
constexpr int kReconnectBackoffMaxMs = 1000;
// fetch.error.backoff.ms: the default (500 ms) delays reading again after a
// leader moved.
constexpr int kFetchErrorBackoffMs = 100;
// A group.id librdkafka requires for rd_kafka_assign; the reader never joins
// the group nor commits to it.
constexpr const char* kReaderGroup = "segstore-log-reader";

// How long one metadata request (the topic check, the reader's leader
// watch) may wait for an answer.
constexpr auto kMetadataTimeout = std::chrono::milliseconds(1000);
// Until the brokers first answered about the topic, and while it is wrong,
// it is asked about this often (each request waits up to kMetadataTimeout).
constexpr auto kTopicRetry = std::chrono::milliseconds(250);
constexpr auto kTopicRecheck = std::chrono::seconds(1);
// How often the reader's watch thread asks for the topic's leaders once the
// topic was found right.
constexpr auto kWatchInterval = std::chrono::seconds(1);
// After the destructor (or a fatal error) purged what was left, how long the
// writer waits for librdkafka to report those entries before failing them
// itself.
constexpr auto kPurgeWait = std::chrono::seconds(2);
// When a new producer cannot be made after a fatal error, it is tried again
// after this.
constexpr auto kReplaceRetry = std::chrono::seconds(1);
// A repeated librdkafka log line is shown once per this.
constexpr auto kRepeatInterval = std::chrono::seconds(10);
// Entries taken from librdkafka's queue at once by Poll.
constexpr size_t kBatch = 256;
// librdkafka's largest per-record overhead (RD_KAFKAP_MESSAGE_V2_MAX_OVERHEAD:
// length, attributes, timestamp and offset deltas, key and value lengths and
// header count, as varints at their widest). rd_kafka_produce refuses an
// entry when this plus its key and value exceed message.max.bytes.
constexpr size_t kRecordOverhead = 5 + 1 + 10 + 5 + 5 + 5 + 5;

constexpr int16_t kFetchApiKey = 1;

int64_t Nanos(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}
int64_t NowNanos() { return Nanos(Clock::now()); }
int64_t MillisSince(int64_t ns, int64_t now_ns) { return (now_ns - ns) / 1000000; }
int64_t Millis(Clock::duration d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

Status ValidateOptions(const LogOptions& options) {
  if (options.brokers.empty()) return Status::InvalidArgument("kafka: no brokers given");
  if (options.topic.empty()) return Status::InvalidArgument("kafka: no topic given");
  if (options.partitions == 0 || options.partitions > 4096 || 4096 % options.partitions != 0) {
    return Status::InvalidArgument("kafka: log partitions " + std::to_string(options.partitions) +
                                   " is not a power of two dividing 4096");
  }
  if (options.append_timeout.count() <= 0 || options.append_timeout.count() > INT32_MAX) {
    return Status::InvalidArgument("kafka: append timeout must be positive");
  }
  return CheckProperties(options.properties);
}

// Properties segstore sets itself (KafkaWriterProperties,
// KafkaReaderProperties, or by design), and why another value would break
// what log.h promises. Aliases are listed too; librdkafka also takes a
// topic property with a "topic." prefix, which CheckProperties strips.
struct RefusedProperty {
  const char* name;
  const char* why;
};
constexpr RefusedProperty kRefusedProperties[] = {
    {"acks",
     "segstore sets acks=all: an append acknowledged by the leader alone would be lost with it"},
    {"request.required.acks", "an alias of acks, which segstore sets to all"},
    {"enable.idempotence",
     "segstore's writer is idempotent, so an append librdkafka retries is written once and in "
     "order"},
    {"transactional.id", "segstore appends outside transactions"},
    {"message.timeout.ms", "set by segstore from the log's append timeout (append_timeout_ms)"},
    {"delivery.timeout.ms", "an alias of message.timeout.ms, set from the log's append timeout"},
    {"queuing.strategy", "any strategy but fifo reorders the appends of a log partition"},
    {"enable.auto.commit", "the reader never commits offsets: segstore keeps its own"},
    {"auto.commit.enable", "the reader never commits offsets: segstore keeps its own"},
    {"enable.auto.offset.store", "the reader never stores offsets: segstore keeps its own"},
    {"auto.offset.reset",
     "the reader goes on from the oldest entry held when an offset is no longer in the log "
     "(earliest), and says so; another value would stop the partition or skip to the end"},
    {"group.id", "the reader uses a fixed group it never joins (manual assignment)"},
    {"isolation.level", "segstore writes no transactions; the reader reads up to the end"},
    {"enable.partition.eof",
     "the reader needs the end-of-partition events to know where it is and that it is fetching"},
    {"client.rack",
     "fetching from followers would leave the leaders the reader watches for its health quiet"},
};

// --- librdkafka's log lines, into spdlog ----------------------------------

// Shows librdkafka's log lines through spdlog, limiting repeats. Called on
// librdkafka's threads (log_cb) and the handle's own (error_cb); thread-safe.
class EngineLog {
 public:
  // `level`: syslog's (0 emergency .. 7 debug), as librdkafka gives it.
  void Line(const char* name, int level, const char* fac, const char* text) {
    spdlog::level::level_enum to = spdlog::level::debug;
    if (level <= 3) {
      to = spdlog::level::err;
    } else if (level == 4) {
      to = spdlog::level::warn;
    } else if (level <= 6) {
      to = spdlog::level::info;
    }
    // A broker going away is routine for a replicated log: a warning.
    const std::string_view f(fac);
    if (to == spdlog::level::err && (f == "FAIL" || f == "ERROR" || f == "REQTMOUT")) {
      to = spdlog::level::warn;
    }
    // Said on every metadata request to a broker older than 0.11 (and to
    // librdkafka's mock); whether the topic exists is checked by segstore.
    if (f == "AUTOCREATE") to = spdlog::level::debug;
    // An offset reset (an offset the log no longer holds): the reader warns
    // itself, naming both offsets, when it sees the jump.
    if (f == "OFFSET" && to == spdlog::level::warn) to = spdlog::level::info;
    Limited(to, f, fmt::format("log: kafka {}: [{}] {}", name, fac, text));
  }

  // Logs `line` at `level`, or at debug when a line of the same key was
  // shown less than kRepeatInterval ago (counted, and said with the next).
  void Limited(spdlog::level::level_enum level, std::string_view fac, const std::string& line) {
    if (level <= spdlog::level::debug || !spdlog::should_log(level)) {
      spdlog::log(level, "{}", line);
      return;
    }
    // The key: the facility and the text without its digits (ports, broker
    // IDs, counts), so that one broker's failures and the next one's count
    // as repeats.
    std::string key(fac);
    key += '|';
    for (char c : line) {
      if (c < '0' || c > '9') key += c;
    }
    const Clock::time_point now = Clock::now();
    uint64_t quiet = 0;
    {
      std::lock_guard lock(mu_);
      if (seen_.size() > 256) seen_.clear();
      Seen& s = seen_[key];
      if (s.shown != Clock::time_point{} && now - s.shown < kRepeatInterval) {
        ++s.quiet;
        level = spdlog::level::debug;
      } else {
        quiet = s.quiet;
        s.quiet = 0;
        s.shown = now;
      }
    }
    if (quiet > 0) {
      spdlog::log(level, "{} (and {} like it in the last {} s)", line, quiet,
                  std::chrono::duration_cast<std::chrono::seconds>(kRepeatInterval).count());
    } else {
      spdlog::log(level, "{}", line);
    }
  }

 private:
  struct Seen {
    Clock::time_point shown{};  // when a line of this key was last shown
    uint64_t quiet = 0;         // lines of this key logged at debug since
  };
  std::mutex mu_;
  std::unordered_map<std::string, Seen> seen_;
};

// What librdkafka's callbacks reach through a handle's opaque: a base of the
// writer and of the reader, so that OnLog needs to know neither.
struct EngineSide {
  EngineLog log;
};

// librdkafka's log_cb, on any of its threads.
void OnLog(const rd_kafka_t* rk, int level, const char* fac, const char* text) {
  auto* side = static_cast<EngineSide*>(rd_kafka_opaque(rk));
  if (side != nullptr) side->log.Line(rd_kafka_name(rk), level, fac, text);
}

// --- Configuration ---------------------------------------------------------

struct ConfDeleter {
  void operator()(rd_kafka_conf_t* conf) const { rd_kafka_conf_destroy(conf); }
};
using ConfPtr = std::unique_ptr<rd_kafka_conf_t, ConfDeleter>;

Status SetAll(rd_kafka_conf_t* conf, const KafkaProperties& properties) {
  char errstr[512];
  for (const auto& [name, value] : properties) {
    if (rd_kafka_conf_set(conf, name.c_str(), value.c_str(), errstr, sizeof errstr) !=
        RD_KAFKA_CONF_OK) {
      return Status::InvalidArgument("kafka: property " + name + "=" + value + ": " + errstr);
    }
  }
  return Status::OK();
}

// A numeric property of `conf` (as set, or librdkafka's default); `fallback`
// when it cannot be read.
int64_t NumberProperty(const rd_kafka_conf_t* conf, const char* name, int64_t fallback) {
  char value[64];
  size_t size = sizeof value;
  if (rd_kafka_conf_get(conf, name, value, &size) != RD_KAFKA_CONF_OK) return fallback;
  char* end = nullptr;
  const long long n = std::strtoll(value, &end, 10);
  return end != value && n > 0 ? n : fallback;
}

// The common part of both properties lists.
KafkaProperties CommonProperties(const LogOptions& options) {
  return {
      {"bootstrap.servers", options.brokers},
      {"client.id", options.client_id},
      // Small requests on a latency path: no Nagle delay.
      {"socket.nagle.disable", "true"},
      {"reconnect.backoff.max.ms", std::to_string(kReconnectBackoffMaxMs)},
      // The topic must exist, with the partitions asked for (checked once the
      // brokers answer).
      {"allow.auto.create.topics", "false"},
      // Brokers closing idle connections is not news.
      {"log.connection.close", "false"},
  };
}

// What one metadata request said about the topic.
struct TopicAnswer {
  enum class Kind {
    kNone,   // no answer (brokers unreachable) or none that settles it
    kRight,  // it exists, with options.partitions partitions
    kWrong,  // it does not exist, or has another number of partitions
  };
  Kind kind = Kind::kNone;
  // kWrong: InvalidArgument (naming both counts); kNone: why (Unavailable).
  Status status;
  std::vector<int32_t> leaders;  // kRight: a broker ID per partition, -1 unknown
};

// Asks the brokers about the topic, waiting up to kMetadataTimeout.
TopicAnswer AskTopic(rd_kafka_t* rk, rd_kafka_topic_t* rkt, const LogOptions& options) {
  TopicAnswer answer;
  const rd_kafka_metadata_t* md = nullptr;
  const rd_kafka_resp_err_t err =
      rd_kafka_metadata(rk, 0, rkt, &md, static_cast<int>(Millis(kMetadataTimeout)));
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    answer.status = Status::Unavailable(
        fmt::format("no answer from brokers {} about topic '{}': {}", options.brokers,
                    options.topic, rd_kafka_err2str(err)));
    return answer;
  }
  std::unique_ptr<const rd_kafka_metadata_t, void (*)(const rd_kafka_metadata_t*)> hold(
      md, rd_kafka_metadata_destroy);
  const rd_kafka_metadata_topic_t* topic = nullptr;
  for (int i = 0; i < md->topic_cnt; ++i) {
    if (options.topic == md->topics[i].topic) topic = &md->topics[i];
  }
  if (topic == nullptr || topic->err == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART) {
    answer.kind = TopicAnswer::Kind::kWrong;
    answer.status = Status::InvalidArgument(
        fmt::format("kafka: topic '{}' does not exist on brokers {} (segstore expects it with "
                    "{} partitions)",
                    options.topic, options.brokers, options.partitions));
    return answer;
  }
  if (topic->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    // LEADER_NOT_AVAILABLE (being made), an authorization error, ...: asked
    // again.
    answer.status = Status::Unavailable(fmt::format(
        "metadata of topic '{}' from brokers {}: {}", options.topic, options.brokers,
        rd_kafka_err2str(topic->err)));
    return answer;
  }
  if (topic->partition_cnt != static_cast<int>(options.partitions)) {
    answer.kind = TopicAnswer::Kind::kWrong;
    answer.status = Status::InvalidArgument(fmt::format(
        "kafka: topic '{}' has {} partitions, segstore is configured for {} log partitions",
        options.topic, topic->partition_cnt, options.partitions));
    return answer;
  }
  answer.kind = TopicAnswer::Kind::kRight;
  answer.leaders.assign(options.partitions, -1);
  for (int i = 0; i < topic->partition_cnt; ++i) {
    const rd_kafka_metadata_partition_t& p = topic->partitions[i];
    if (p.id >= 0 && p.id < topic->partition_cnt) answer.leaders[p.id] = p.leader;
  }
  return answer;
}

// The topic, as a writer or reader knows it.
enum class TopicState {
  kUnknown,  // no answer that settles it yet
  kRight,    // checked: right (never checked again)
  kWrong,    // missing or another partition count (asked again)
};

// An eventfd, non-blocking (librdkafka requires it for its queue events).
Result<int> NewEventFd() {
  const int fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (fd < 0) {
    return Status::IOError(std::string("kafka: eventfd: ") + std::strerror(errno));
  }
  return fd;
}

void Signal(int fd) {
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(fd, &one, sizeof one);
}

void Drain(int fd) {
  uint64_t value = 0;
  [[maybe_unused]] ssize_t n = ::read(fd, &value, sizeof value);
}

// What librdkafka's queue writes to the eventfd (an eventfd counts 8 bytes).
constexpr uint64_t kQueueEvent = 1;

// --- Writer -----------------------------------------------------------------

class KafkaWriter final : public LogWriter, public EngineSide {
 public:
  explicit KafkaWriter(const LogOptions& options) : options_(options) {}
  ~KafkaWriter() override;

  Status Open();

  void Append(uint32_t partition, std::string_view key, std::string_view value,
              AppendCallback done) override;
  uint32_t partitions() const override { return options_.partitions; }
  LogWriterStats stats() const override;

 private:
  struct Pending {
    AppendCallback done;
    bool sent = false;  // rd_kafka_produce took it (the current producer has it)
  };
  // An append not handed to librdkafka yet: the topic is not checked yet, or
  // the producer is being replaced.
  struct Held {
    uint64_t id = 0;
    uint32_t partition = 0;
    std::string key;
    std::string value;
    Clock::time_point deadline;  // fails as not written then
  };
  enum class Produced { kSent, kRefused, kFatal };

  static void OnDelivery(rd_kafka_t* rk, const rd_kafka_message_t* msg, void* opaque);
  static void OnError(rd_kafka_t* rk, int err, const char* reason, void* opaque);
  // Makes a producer and its topic handle, its main queue writing to
  // wake_fd_. `first`: also reads the limits the writer keeps.
  Status NewProducer(bool first, rd_kafka_t** rk, rd_kafka_topic_t** rkt);
  static void DestroyProducer(rd_kafka_t* rk, rd_kafka_topic_t* rkt);
  // The writer thread.
  void Run();
  // The topic check's thread: asks until the topic is found right.
  void Watch();
  // Replaces a producer that raised a fatal error. Writer thread.
  void Replace();
  // rd_kafka_produce. Refused: the outcome is in refused_. Fatal: nothing
  // was done (the producer is unusable; replacing_ is set). Under mu_.
  Produced ProduceLocked(uint64_t id, uint32_t partition, std::string_view key,
                         std::string_view value);
  // Keeps the append for later (or refuses it when too many wait). Under mu_.
  void HoldLocked(uint64_t id, uint32_t partition, std::string_view key, std::string_view value);
  // Hands `status` to the writer thread as append `id`'s outcome (not
  // written). Under mu_.
  void RefuseLocked(uint64_t id, Status status);
  // The held appends: produced once the topic is right and the producer
  // usable, refused when the topic is wrong, failed past their deadline.
  // Under mu_, writer thread.
  void ReleaseLocked(Clock::time_point now);
  // Why held appends wait. Under mu_.
  std::string WaitingFor() const;
  // The outcome of a delivery report.
  AppendOutcome Outcome(const rd_kafka_message_t* msg) const;
  // Runs append `id`'s callback, if it did not run yet. Writer thread only.
  void Finish(uint64_t id, const AppendOutcome& outcome);
  void RunRefused();
  // Waits until no append is pending or `deadline`; true when none is.
  bool WaitDrained(Clock::time_point deadline);

  const LogOptions options_;
  std::string name_;  // the first producer's name, for the logs
  // Read from the properties at open: message.max.bytes, and librdkafka's
  // queue bounds (queue.buffering.max.messages and .kbytes), which bound
  // the held appends too.
  size_t max_message_bytes_ = 1000000;
  size_t max_held_ = 100000;
  size_t max_held_bytes_ = size_t{1} << 30;
  // Readable when the writer thread has work: librdkafka's queue went from
  // empty to not, an append was refused or held, the topic was checked, or
  // the destructor wants it to stop.
  int wake_fd_ = -1;
  std::thread thread_;
  std::thread watch_;
  // Writer thread only: when to try again to make a producer.
  Clock::time_point replace_retry_at_{};

  // The producer and its topic handle. Replaced only by the writer thread,
  // holding handle_mu_ exclusively and mu_; read holding either (the writer
  // thread reads them freely). handle_mu_ is taken before mu_, never after.
  std::shared_mutex handle_mu_;
  rd_kafka_t* rk_ = nullptr;
  rd_kafka_topic_t* rkt_ = nullptr;

  mutable std::mutex mu_;
  std::condition_variable drained_;     // notified when pending_ becomes empty
  std::condition_variable wake_watch_;  // notified when stop_ is set
  uint64_t next_id_ = 1;                // guarded by mu_
  // Every append whose callback has not run yet, by the ID librdkafka carries
  // as the message's opaque. Guarded by mu_.
  std::unordered_map<uint64_t, Pending> pending_;
  std::deque<Held> held_;  // guarded by mu_, in the order appended
  size_t held_bytes_ = 0;  // guarded by mu_
  // Appends refused (still in pending_), for the writer thread.
  std::vector<std::pair<uint64_t, AppendOutcome>> refused_;  // guarded by mu_
  TopicState topic_ = TopicState::kUnknown;                  // guarded by mu_
  // kWrong: why (InvalidArgument); kUnknown: why the last request did not
  // settle it (Unavailable), OK before the first. Guarded by mu_.
  Status topic_status_;
  bool replacing_ = false;  // guarded by mu_: the producer raised a fatal error
  bool stop_ = false;       // guarded by mu_: the writer and watch threads end

  std::atomic<uint64_t> appended_{0};
  std::atomic<uint64_t> failed_{0};
  std::atomic<uint64_t> maybe_written_{0};
};

Status KafkaWriter::Open() {
  Result<int> fd = NewEventFd();
  if (!fd.ok()) return fd.status();
  wake_fd_ = *fd;
  SEGSTORE_RETURN_IF_ERROR(NewProducer(true, &rk_, &rkt_));
  name_ = rd_kafka_name(rk_);
  thread_ = std::thread([this] { Run(); });
  watch_ = std::thread([this] { Watch(); });
  spdlog::info("log: kafka writer {} on topic '{}' ({} partitions) at {}", name_, options_.topic,
               options_.partitions, options_.brokers);
  return Status::OK();
}

Status KafkaWriter::NewProducer(bool first, rd_kafka_t** rk_out, rd_kafka_topic_t** rkt_out) {
  ConfPtr conf(rd_kafka_conf_new());
  SEGSTORE_RETURN_IF_ERROR(SetAll(conf.get(), KafkaWriterProperties(options_)));
  SEGSTORE_RETURN_IF_ERROR(SetAll(conf.get(), options_.properties));
  if (first) {
    max_message_bytes_ = static_cast<size_t>(
        NumberProperty(conf.get(), "message.max.bytes", static_cast<int64_t>(max_message_bytes_)));
    max_held_ = static_cast<size_t>(NumberProperty(conf.get(), "queue.buffering.max.messages",
                                                   static_cast<int64_t>(max_held_)));
    max_held_bytes_ = static_cast<size_t>(
        NumberProperty(conf.get(), "queue.buffering.max.kbytes", 1048576) * 1024);
  }
  rd_kafka_conf_set_opaque(conf.get(), static_cast<EngineSide*>(this));
  rd_kafka_conf_set_log_cb(conf.get(), OnLog);
  rd_kafka_conf_set_dr_msg_cb(conf.get(), OnDelivery);
  rd_kafka_conf_set_error_cb(conf.get(), OnError);
  char errstr[512];
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf.get(), errstr, sizeof errstr);
  if (rk == nullptr) return Status::InvalidArgument(std::string("kafka: producer: ") + errstr);
  conf.release();  // rd_kafka_new took it

  rd_kafka_queue_t* main_queue = rd_kafka_queue_get_main(rk);
  rd_kafka_queue_io_event_enable(main_queue, wake_fd_, &kQueueEvent, sizeof kQueueEvent);
  rd_kafka_queue_destroy(main_queue);

  rd_kafka_topic_t* rkt = rd_kafka_topic_new(rk, options_.topic.c_str(), nullptr);
  if (rkt == nullptr) {
    Status s = Status::InvalidArgument("kafka: topic '" + options_.topic +
                                       "': " + rd_kafka_err2str(rd_kafka_last_error()));
    DestroyProducer(rk, nullptr);
    return s;
  }
  *rk_out = rk;
  *rkt_out = rkt;
  return Status::OK();
}

void KafkaWriter::DestroyProducer(rd_kafka_t* rk, rd_kafka_topic_t* rkt) {
  if (rkt != nullptr) rd_kafka_topic_destroy(rkt);
  if (rk == nullptr) return;
  rd_kafka_queue_t* main_queue = rd_kafka_queue_get_main(rk);
  rd_kafka_queue_io_event_enable(main_queue, -1, nullptr, 0);
  rd_kafka_queue_destroy(main_queue);
  rd_kafka_destroy(rk);
}

KafkaWriter::~KafkaWriter() {
  if (thread_.joinable()) {
    // What is in flight has append_timeout to finish (librdkafka fails it
    // then by itself, but checks for timeouts only once a second); held
    // appends fail by then too (their deadline).
    if (!WaitDrained(Clock::now() + options_.append_timeout)) {
      size_t left = 0;
      {
        std::lock_guard lock(mu_);
        left = pending_.size();
      }
      spdlog::warn("log: kafka writer {}: {} appends unfinished after {} ms; purging them", name_,
                   left, options_.append_timeout.count());
      // librdkafka reports each purged entry: __PURGE_QUEUE (never sent: not
      // written) or __PURGE_INFLIGHT (sent: maybe written).
      {
        std::shared_lock handle(handle_mu_);
        rd_kafka_purge(rk_, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
      }
      WaitDrained(Clock::now() + kPurgeWait);
    }
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    wake_watch_.notify_all();
    Signal(wake_fd_);
    if (watch_.joinable()) watch_.join();
    thread_.join();  // it fails whatever is still pending
  }
  DestroyProducer(rk_, rkt_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

bool KafkaWriter::WaitDrained(Clock::time_point deadline) {
  std::unique_lock lock(mu_);
  return drained_.wait_until(lock, deadline, [this] { return pending_.empty(); });
}

void KafkaWriter::Append(uint32_t partition, std::string_view key, std::string_view value,
                         AppendCallback done) {
  bool wake = true;
  {
    std::lock_guard lock(mu_);
    const uint64_t id = next_id_++;
    pending_.emplace(id, Pending{std::move(done), false});
    if (partition >= options_.partitions) {
      RefuseLocked(id, Status::InvalidArgument(fmt::format(
                           "kafka: log partition {} out of range (0..{})", partition,
                           options_.partitions - 1)));
    } else if (topic_ == TopicState::kWrong) {
      RefuseLocked(id, topic_status_);
    } else if (topic_ == TopicState::kRight && !replacing_ && held_.empty()) {
      switch (ProduceLocked(id, partition, key, value)) {
        case Produced::kSent:
          wake = false;  // librdkafka's queue wakes the writer thread
          break;
        case Produced::kRefused:
          break;
        case Produced::kFatal:
          HoldLocked(id, partition, key, value);  // for the next producer
          break;
      }
    } else {
      HoldLocked(id, partition, key, value);
    }
  }
  if (wake) Signal(wake_fd_);
}

KafkaWriter::Produced KafkaWriter::ProduceLocked(uint64_t id, uint32_t partition,
                                                 std::string_view key, std::string_view value) {
  // RD_KAFKA_MSG_F_COPY: librdkafka copies the bytes, so the caller's views
  // need not outlive this call (librdkafka takes non-const pointers).
  // librdkafka calls no callback of ours inside rd_kafka_produce (delivery
  // reports and errors come through rd_kafka_poll, on the writer thread), so
  // holding mu_ here is safe.
  if (rd_kafka_produce(rkt_, static_cast<int32_t>(partition), RD_KAFKA_MSG_F_COPY,
                       const_cast<char*>(value.data()), value.size(), key.data(), key.size(),
                       reinterpret_cast<void*>(static_cast<uintptr_t>(id))) == 0) {
    pending_[id].sent = true;
    return Produced::kSent;
  }
  const rd_kafka_resp_err_t err = rd_kafka_last_error();
  if (err == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE) {
    RefuseLocked(id, Status::InvalidArgument(fmt::format(
                         "kafka: entry of {} bytes (key {}, value {}) is larger than the "
                         "engine takes (message.max.bytes {} with {} bytes of record overhead)",
                         key.size() + value.size(), key.size(), value.size(),
                         max_message_bytes_, kRecordOverhead)));
  } else if (err == RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION) {
    RefuseLocked(id, Status::InvalidArgument(
                         fmt::format("kafka: log partition {}: {}", partition,
                                     rd_kafka_err2str(err))));
  } else if (err == RD_KAFKA_RESP_ERR__FATAL) {
    // The writer thread replaces the producer (Replace); the append waits
    // for the new one.
    replacing_ = true;
    return Produced::kFatal;
  } else {
    RefuseLocked(id, Status::Unavailable(fmt::format(
                         "kafka: append to log partition {} refused: {}; not written", partition,
                         rd_kafka_err2str(err))));
  }
  return Produced::kRefused;
}

void KafkaWriter::HoldLocked(uint64_t id, uint32_t partition, std::string_view key,
                             std::string_view value) {
  const size_t bytes = key.size() + value.size();
  if (held_.size() >= max_held_ || held_bytes_ + bytes > max_held_bytes_) {
    RefuseLocked(id, Status::Unavailable(fmt::format(
                         "kafka: {} appends ({} bytes) already wait ({}); not written",
                         held_.size(), held_bytes_, WaitingFor())));
    return;
  }
  held_.push_back(Held{id, partition, std::string(key), std::string(value),
                       Clock::now() + options_.append_timeout});
  held_bytes_ += bytes;
}

void KafkaWriter::RefuseLocked(uint64_t id, Status status) {
  AppendOutcome outcome;
  outcome.status = std::move(status);
  refused_.emplace_back(id, std::move(outcome));
}

std::string KafkaWriter::WaitingFor() const {
  if (replacing_) return "the writer is replacing its producer after a fatal error";
  if (topic_ == TopicState::kUnknown) {
    std::string why = fmt::format("no broker of {} has answered about topic '{}' yet",
                                  options_.brokers, options_.topic);
    if (!topic_status_.ok()) why += fmt::format(" ({})", topic_status_.message());
    return why;
  }
  return "waiting";
}

void KafkaWriter::ReleaseLocked(Clock::time_point now) {
  if (topic_ == TopicState::kWrong) {
    for (const Held& h : held_) RefuseLocked(h.id, topic_status_);
    held_.clear();
    held_bytes_ = 0;
    return;
  }
  while (topic_ == TopicState::kRight && !replacing_ && !held_.empty()) {
    Held& h = held_.front();
    if (ProduceLocked(h.id, h.partition, h.key, h.value) == Produced::kFatal) {
      Signal(wake_fd_);  // the writer thread replaces the producer at once
      break;
    }
    held_bytes_ -= h.key.size() + h.value.size();
    held_.pop_front();
  }
  // One append_timeout for all: the deadlines are in order.
  while (!held_.empty() && held_.front().deadline <= now) {
    const Held& h = held_.front();
    RefuseLocked(h.id, Status::Unavailable(fmt::format(
                           "kafka: not appended within {} ms: {}; not written",
                           options_.append_timeout.count(), WaitingFor())));
    held_bytes_ -= h.key.size() + h.value.size();
    held_.pop_front();
  }
}

LogWriterStats KafkaWriter::stats() const {
  LogWriterStats s;
  s.appended = appended_.load(std::memory_order_relaxed);
  s.failed = failed_.load(std::memory_order_relaxed);
  s.maybe_written = maybe_written_.load(std::memory_order_relaxed);
  std::lock_guard lock(mu_);
  s.in_flight = pending_.size();
  return s;
}

void KafkaWriter::Run() {
  for (;;) {
    // librdkafka's queue signals when it goes from empty to not; the timeout
    // is a safety net, and the next held append's deadline.
    int64_t wait_ms = 1000;
    {
      std::lock_guard lock(mu_);
      if (!held_.empty()) {
        wait_ms = std::clamp<int64_t>(Millis(held_.front().deadline - Clock::now()) + 1, 0, 1000);
      }
    }
    pollfd p{wake_fd_, POLLIN, 0};
    ::poll(&p, 1, static_cast<int>(wait_ms));
    Drain(wake_fd_);  // before serving, so that what comes after wakes us again
    rd_kafka_poll(rk_, 0);
    if (rd_kafka_fatal_error(rk_, nullptr, 0) != RD_KAFKA_RESP_ERR_NO_ERROR) Replace();
    {
      std::lock_guard lock(mu_);
      ReleaseLocked(Clock::now());
    }
    RunRefused();
    std::lock_guard lock(mu_);
    if (stop_) break;
  }
  rd_kafka_poll(rk_, 0);
  {
    std::lock_guard lock(mu_);
    for (const Held& h : held_) {
      RefuseLocked(h.id, Status::Unavailable(fmt::format(
                             "kafka: writer closed before the append was made ({}); not written",
                             WaitingFor())));
    }
    held_.clear();
    held_bytes_ = 0;
  }
  RunRefused();
  // Whatever librdkafka did not report even after the purge.
  std::vector<uint64_t> left;
  {
    std::lock_guard lock(mu_);
    for (const auto& [id, pending] : pending_) left.push_back(id);
  }
  if (!left.empty()) {
    spdlog::warn("log: kafka writer {}: failing {} appends librdkafka never reported", name_,
                 left.size());
  }
  AppendOutcome unknown;
  unknown.status = Status::Unavailable("kafka: writer closed before the engine answered");
  unknown.maybe_written = true;
  for (uint64_t id : left) Finish(id, unknown);
}

void KafkaWriter::Replace() {
  const Clock::time_point now = Clock::now();
  if (now < replace_retry_at_) return;
  char reason[512] = "";
  rd_kafka_fatal_error(rk_, reason, sizeof reason);
  bool first = false;
  {
    std::lock_guard lock(mu_);
    first = replace_retry_at_ == Clock::time_point{};
    replacing_ = true;  // appends wait for the new producer
  }
  if (first) {
    spdlog::error(
        "log: kafka writer {}: the producer ({}) stopped on a fatal error: {}; failing its "
        "appends in flight as maybe written and starting a new producer",
        name_, rd_kafka_name(rk_), reason);
  }
  // librdkafka already failed what it had not sent (__PURGE_QUEUE: not
  // written); what was sent and is not answered yet fails as maybe written
  // (__PURGE_INFLIGHT). Their reports are served here.
  rd_kafka_purge(rk_, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
  const Clock::time_point until = Clock::now() + kPurgeWait;
  while (rd_kafka_outq_len(rk_) > 0 && Clock::now() < until) rd_kafka_poll(rk_, 10);
  // What it did not report.
  std::vector<uint64_t> lost;
  {
    std::lock_guard lock(mu_);
    for (const auto& [id, pending] : pending_) {
      if (pending.sent) lost.push_back(id);
    }
  }
  AppendOutcome unknown;
  unknown.status = Status::Unavailable(fmt::format(
      "kafka: the producer stopped on a fatal error ({}) before it reported the append; it may "
      "have been written",
      reason));
  unknown.maybe_written = true;
  for (uint64_t id : lost) Finish(id, unknown);

  rd_kafka_t* rk = nullptr;
  rd_kafka_topic_t* rkt = nullptr;
  if (Status s = NewProducer(false, &rk, &rkt); !s.ok()) {
    spdlog::error("log: kafka writer {}: cannot make a new producer: {}; trying again in {} ms",
                  name_, s.ToString(), Millis(kReplaceRetry));
    replace_retry_at_ = now + kReplaceRetry;
    return;
  }
  rd_kafka_t* old_rk = nullptr;
  rd_kafka_topic_t* old_rkt = nullptr;
  {
    std::unique_lock handle(handle_mu_);  // the topic check is not using it
    std::lock_guard lock(mu_);
    old_rk = rk_;
    old_rkt = rkt_;
    rk_ = rk;
    rkt_ = rkt;
    replacing_ = false;
  }
  replace_retry_at_ = Clock::time_point{};
  DestroyProducer(old_rk, old_rkt);
  spdlog::info("log: kafka writer {}: producer {} replaced the one that failed", name_,
               rd_kafka_name(rk_));
}

void KafkaWriter::Watch() {
  Clock::time_point next = Clock::now();
  std::unique_lock lock(mu_);
  while (!wake_watch_.wait_until(lock, next, [this] { return stop_; })) {
    lock.unlock();
    TopicAnswer answer;
    {
      std::shared_lock handle(handle_mu_);
      answer = AskTopic(rk_, rkt_, options_);
    }
    lock.lock();
    const Clock::time_point now = Clock::now();
    switch (answer.kind) {
      case TopicAnswer::Kind::kNone:
        if (topic_ == TopicState::kUnknown) topic_status_ = answer.status;
        next = now + (topic_ == TopicState::kWrong ? Clock::duration(kTopicRecheck)
                                                   : Clock::duration(kTopicRetry));
        break;
      case TopicAnswer::Kind::kRight:
        if (topic_ == TopicState::kWrong) {
          spdlog::info("log: kafka writer {}: topic '{}' now has the {} partitions expected; "
                       "appends are taken again",
                       name_, options_.topic, options_.partitions);
        }
        topic_ = TopicState::kRight;
        topic_status_ = Status::OK();
        Signal(wake_fd_);  // the held appends go
        return;            // checked: not asked again
      case TopicAnswer::Kind::kWrong:
        if (topic_ != TopicState::kWrong || topic_status_.message() != answer.status.message()) {
          spdlog::error("log: kafka writer {}: {}; every append is refused until it is",
                        name_, answer.status.message());
        }
        topic_ = TopicState::kWrong;
        topic_status_ = answer.status;
        Signal(wake_fd_);  // the held appends are refused
        next = now + kTopicRecheck;
        break;
    }
  }
}

void KafkaWriter::RunRefused() {
  std::vector<std::pair<uint64_t, AppendOutcome>> refused;
  {
    std::lock_guard lock(mu_);
    refused.swap(refused_);
  }
  for (const auto& [id, outcome] : refused) Finish(id, outcome);
}

void KafkaWriter::Finish(uint64_t id, const AppendOutcome& outcome) {
  AppendCallback done;
  {
    std::lock_guard lock(mu_);
    auto it = pending_.find(id);
    if (it == pending_.end()) return;  // already finished
    done = std::move(it->second.done);
    pending_.erase(it);
    if (pending_.empty()) drained_.notify_all();
  }
  if (outcome.status.ok()) {
    appended_.fetch_add(1, std::memory_order_relaxed);
  } else if (outcome.maybe_written) {
    maybe_written_.fetch_add(1, std::memory_order_relaxed);
  } else {
    failed_.fetch_add(1, std::memory_order_relaxed);
  }
  if (!done) return;
  try {
    done(outcome);
  } catch (const std::exception& e) {
    // Callbacks must not throw; this one did, inside librdkafka's poll.
    spdlog::error("log: kafka writer: an append callback threw: {}", e.what());
  } catch (...) {
    spdlog::error("log: kafka writer: an append callback threw");
  }
}

AppendOutcome KafkaWriter::Outcome(const rd_kafka_message_t* msg) const {
  AppendOutcome out;
  if (msg->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
    out.offset = msg->offset;
    return out;
  }
  std::string what = fmt::format("kafka: append to log partition {}: {} ({})", msg->partition,
                                 rd_kafka_err2str(msg->err), rd_kafka_err2name(msg->err));
  out.maybe_written = rd_kafka_message_status(msg) != RD_KAFKA_MSG_STATUS_NOT_PERSISTED;
  switch (msg->err) {
    case RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE:
    case RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE: {
      // The broker answers for a whole batch (a partition's records in one
      // produce request), and librdkafka fails every entry of it with that
      // error, never splitting it: only an entry itself over the limit is
      // the caller's fault.
      const size_t size = kRecordOverhead + msg->key_len + msg->len;
      if (size > max_message_bytes_) {
        out.status = Status::InvalidArgument(fmt::format(
            "{}: the entry ({} bytes with its record overhead) is over message.max.bytes ({})",
            what, size, max_message_bytes_));
        out.maybe_written = false;
        return out;
      }
      what += fmt::format(
          "; the engine refused the batch the entry was sent in, not the entry ({} bytes with its "
          "record overhead, message.max.bytes {}): retry it (if this repeats, the topic's "
          "max.message.bytes is below message.max.bytes)",
          size, max_message_bytes_);
      break;
    }
    case RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION:
      out.status = Status::InvalidArgument(what);
      out.maybe_written = false;
      return out;
    default:
      break;
  }
  out.status = Status::Unavailable(out.maybe_written ? what + "; it may have been written"
                                                     : what + "; not written");
  return out;
}

void KafkaWriter::OnDelivery(rd_kafka_t* rk, const rd_kafka_message_t* msg, void*) {
  auto* self = static_cast<KafkaWriter*>(static_cast<EngineSide*>(rd_kafka_opaque(rk)));
  const auto id = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(msg->_private));
  self->Finish(id, self->Outcome(msg));
}

void KafkaWriter::OnError(rd_kafka_t* rk, int err, const char* reason, void*) {
  // On the writer thread (rd_kafka_poll).
  auto* side = static_cast<EngineSide*>(rd_kafka_opaque(rk));
  const auto code = static_cast<rd_kafka_resp_err_t>(err);
  // A fatal error: librdkafka logged it (OnLog, at error); the writer thread
  // sees it after this poll (rd_kafka_fatal_error) and replaces the producer.
  if (code == RD_KAFKA_RESP_ERR__FATAL) return;
  // Transport errors were logged by librdkafka already (OnLog); all brokers
  // down is worth a warning of its own.
  side->log.Limited(
      code == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN ? spdlog::level::warn : spdlog::level::debug,
      "error", fmt::format("log: kafka writer {}: {}", rd_kafka_name(rk), reason));
}

// --- Reader -----------------------------------------------------------------

class KafkaReader final : public LogReader, public EngineSide {
 public:
  explicit KafkaReader(const LogOptions& options) : options_(options) {}
  ~KafkaReader() override;

  Status Open();

  Status Assign(std::span<const std::pair<uint32_t, int64_t>> from) override;
  Result<size_t> Poll(size_t max, const std::function<void(const LogEntry&)>& fn) override;
  int event_fd() const override { return event_fd_; }
  std::vector<PartitionPosition> positions() const override;
  Status health(std::chrono::milliseconds stale_after) const override;
  uint32_t partitions() const override { return options_.partitions; }

 private:
  // One log partition, as the reader's thread sees it.
  struct Part {
    bool assigned = false;
    int64_t next = -1;        // the next offset Poll delivers; -1 not known yet
    int64_t assigned_ns = 0;  // steady clock
    int64_t progress_ns = 0;  // last entry or end-of-partition polled
  };

  static rd_kafka_resp_err_t OnNew(rd_kafka_t* rk, const rd_kafka_conf_t* conf, void* opaque,
                                   char* errstr, size_t errstr_size);
  static rd_kafka_resp_err_t OnResponse(rd_kafka_t* rk, int sockfd, const char* brokername,
                                        int32_t brokerid, int16_t api_key, int16_t api_version,
                                        int32_t corr_id, size_t size, int64_t rtt,
                                        rd_kafka_resp_err_t err, void* opaque);
  static void OnError(rd_kafka_t* rk, int err, const char* reason, void* opaque);
  // The watch thread: the topic check, then the leaders.
  void Watch();
  // Keeps `what` for health() and logs it (`err` chooses the level).
  void RecordError(rd_kafka_resp_err_t err, const std::string& what);
  // An error event polled: end of partition (a position), else recorded for
  // health().
  void OnErrorEvent(const rd_kafka_message_t* msg, int64_t now_ns);
  // `partition` goes on from `offset` (an entry's, or its end's when `end`)
  // instead of part.next: librdkafka reset it to the oldest offset held
  // (auto.offset.reset=earliest) because the log no longer holds part.next.
  // Warns, naming both.
  void Jumped(uint32_t partition, int64_t expected, int64_t offset, bool end) const;
  void DropBatch();
  // rd_kafka_get_watermark_offsets, with -1 for unknown.
  void Watermarks(uint32_t partition, int64_t* low, int64_t* high) const;

  const LogOptions options_;
  rd_kafka_t* rk_ = nullptr;
  rd_kafka_queue_t* queue_ = nullptr;  // the consumer queue
  rd_kafka_topic_t* rkt_ = nullptr;    // for the watch thread's metadata requests
  int event_fd_ = -1;
  int64_t opened_ns_ = 0;

  // The reader's thread's own state.
  std::vector<Part> parts_;                 // by log partition
  std::vector<uint32_t> assigned_;          // in the order Assign got them
  std::vector<rd_kafka_message_t*> batch_;  // taken from librdkafka, not yet handed out
  size_t batch_next_ = 0;
  bool topic_right_ = false;  // topic_ was kRight (it stays so)

  // Written by librdkafka's broker threads, the watch thread and Poll.
  mutable std::mutex mu_;
  std::map<int32_t, int64_t> fetch_ok_ns_;  // broker ID -> its last Fetch answer
  std::vector<int32_t> leaders_;            // by log partition; -1 unknown
  std::string last_error_;                  // the engine's last error, for health()
  int64_t last_error_ns_ = 0;
  TopicState topic_ = TopicState::kUnknown;
  // kWrong: why (InvalidArgument); kUnknown: why the last request did not
  // settle it (Unavailable), OK before the first.
  Status topic_status_;
  bool stop_ = false;  // the watch thread ends
  std::condition_variable wake_;
  std::thread watch_;
};

Status KafkaReader::Open() {
  parts_.resize(options_.partitions);
  leaders_.assign(options_.partitions, -1);
  opened_ns_ = NowNanos();
  Result<int> fd = NewEventFd();
  if (!fd.ok()) return fd.status();
  event_fd_ = *fd;

  ConfPtr conf(rd_kafka_conf_new());
  SEGSTORE_RETURN_IF_ERROR(SetAll(conf.get(), KafkaReaderProperties(options_)));
  SEGSTORE_RETURN_IF_ERROR(SetAll(conf.get(), options_.properties));
  rd_kafka_conf_set_opaque(conf.get(), static_cast<EngineSide*>(this));
  rd_kafka_conf_set_log_cb(conf.get(), OnLog);
  // Errors of the client as a whole (brokers down); those of a partition come
  // as events Poll takes (OnErrorEvent).
  rd_kafka_conf_set_error_cb(conf.get(), OnError);
  if (rd_kafka_conf_interceptor_add_on_new(conf.get(), "segstore-log-health", OnNew, this) !=
      RD_KAFKA_RESP_ERR_NO_ERROR) {
    return Status::Internal("kafka: cannot add the reader's interceptor");
  }
  char errstr[512];
  rk_ = rd_kafka_new(RD_KAFKA_CONSUMER, conf.get(), errstr, sizeof errstr);
  if (rk_ == nullptr) return Status::InvalidArgument(std::string("kafka: consumer: ") + errstr);
  conf.release();  // rd_kafka_new took it

  // Everything (errors, logs' queue, fetched entries) comes through the
  // consumer queue, which signals event_fd_.
  rd_kafka_poll_set_consumer(rk_);
  queue_ = rd_kafka_queue_get_consumer(rk_);
  if (queue_ == nullptr) return Status::Internal("kafka: the consumer has no queue");
  rd_kafka_queue_io_event_enable(queue_, event_fd_, &kQueueEvent, sizeof kQueueEvent);

  rkt_ = rd_kafka_topic_new(rk_, options_.topic.c_str(), nullptr);
  if (rkt_ == nullptr) {
    return Status::InvalidArgument("kafka: topic '" + options_.topic +
                                   "': " + rd_kafka_err2str(rd_kafka_last_error()));
  }
  watch_ = std::thread([this] { Watch(); });
  spdlog::info("log: kafka reader {} on topic '{}' ({} partitions) at {}", rd_kafka_name(rk_),
               options_.topic, options_.partitions, options_.brokers);
  return Status::OK();
}

KafkaReader::~KafkaReader() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (watch_.joinable()) watch_.join();
  DropBatch();
  if (queue_ != nullptr) {
    rd_kafka_queue_io_event_enable(queue_, -1, nullptr, 0);
    rd_kafka_queue_destroy(queue_);
  }
  if (rkt_ != nullptr) rd_kafka_topic_destroy(rkt_);
  // Nothing to leave or commit: the reader never joined its group.
  if (rk_ != nullptr) rd_kafka_destroy_flags(rk_, RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
  if (event_fd_ >= 0) ::close(event_fd_);
}

rd_kafka_resp_err_t KafkaReader::OnNew(rd_kafka_t* rk, const rd_kafka_conf_t*, void* opaque, char*,
                                       size_t) {
  return rd_kafka_interceptor_add_on_response_received(rk, "segstore-log-health", OnResponse,
                                                       opaque);
}

rd_kafka_resp_err_t KafkaReader::OnResponse(rd_kafka_t*, int, const char*, int32_t brokerid,
                                            int16_t api_key, int16_t, int32_t, size_t, int64_t,
                                            rd_kafka_resp_err_t err, void* opaque) {
  if (api_key != kFetchApiKey || err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    return RD_KAFKA_RESP_ERR_NO_ERROR;
  }
  auto* self = static_cast<KafkaReader*>(opaque);
  const int64_t now = NowNanos();
  std::lock_guard lock(self->mu_);
  self->fetch_ok_ns_[brokerid] = now;
  return RD_KAFKA_RESP_ERR_NO_ERROR;
}

void KafkaReader::OnError(rd_kafka_t* rk, int err, const char* reason, void*) {
  // Served inside Poll (rd_kafka_consume_batch_queue), on the reader's thread.
  auto* self = static_cast<KafkaReader*>(static_cast<EngineSide*>(rd_kafka_opaque(rk)));
  const auto code = static_cast<rd_kafka_resp_err_t>(err);
  self->RecordError(code, fmt::format("{} ({})", reason, rd_kafka_err2name(code)));
}

void KafkaReader::RecordError(rd_kafka_resp_err_t err, const std::string& what) {
  {
    std::lock_guard lock(mu_);
    last_error_ = what;
    last_error_ns_ = NowNanos();
  }
  // A broken connection was logged by librdkafka itself (OnLog).
  log.Limited(err == RD_KAFKA_RESP_ERR__TRANSPORT ? spdlog::level::debug : spdlog::level::warn,
              "error", fmt::format("log: kafka reader {}: {}", rd_kafka_name(rk_), what));
}

void KafkaReader::Watch() {
  Clock::time_point next = Clock::now();
  std::unique_lock lock(mu_);
  while (!wake_.wait_until(lock, next, [this] { return stop_; })) {
    lock.unlock();
    TopicAnswer answer = AskTopic(rk_, rkt_, options_);
    lock.lock();
    const Clock::time_point now = Clock::now();
    switch (answer.kind) {
      case TopicAnswer::Kind::kNone:
        // When the brokers cannot be asked, the leaders stay as last known
        // (their fetch answers go stale, which is what health() should see).
        if (topic_ == TopicState::kUnknown) topic_status_ = answer.status;
        break;
      case TopicAnswer::Kind::kRight:
        leaders_ = std::move(answer.leaders);
        if (topic_ != TopicState::kRight) {
          if (topic_ == TopicState::kWrong) {
            spdlog::info("log: kafka reader {}: topic '{}' now has the {} partitions expected; "
                         "reading",
                         rd_kafka_name(rk_), options_.topic, options_.partitions);
          }
          topic_ = TopicState::kRight;
          topic_status_ = Status::OK();
          Signal(event_fd_);  // what was fetched meanwhile is delivered now
        }
        break;
      case TopicAnswer::Kind::kWrong:
        if (topic_ == TopicState::kRight) break;  // checked once; not again
        if (topic_ != TopicState::kWrong || topic_status_.message() != answer.status.message()) {
          spdlog::error("log: kafka reader {}: {}; nothing is read until it is",
                        rd_kafka_name(rk_), answer.status.message());
        }
        topic_ = TopicState::kWrong;
        topic_status_ = answer.status;
        break;
    }
    switch (topic_) {
      case TopicState::kUnknown:
        next = now + kTopicRetry;
        break;
      case TopicState::kWrong:
        next = now + kTopicRecheck;
        break;
      case TopicState::kRight:
        next = now + kWatchInterval;
        break;
    }
  }
}

Status KafkaReader::Assign(std::span<const std::pair<uint32_t, int64_t>> from) {
  std::vector<bool> seen(options_.partitions, false);
  for (const auto& [partition, offset] : from) {
    if (partition >= options_.partitions) {
      return Status::InvalidArgument(fmt::format("kafka: log partition {} out of range (0..{})",
                                                 partition, options_.partitions - 1));
    }
    if (seen[partition]) {
      return Status::InvalidArgument(
          fmt::format("kafka: log partition {} assigned twice", partition));
    }
    seen[partition] = true;
    if (offset < 0 && offset != kFromBeginning && offset != kFromEnd) {
      return Status::InvalidArgument(fmt::format(
          "kafka: log partition {}: offset {} is neither an offset nor kFromBeginning/kFromEnd",
          partition, offset));
    }
  }
  rd_kafka_topic_partition_list_t* list =
      rd_kafka_topic_partition_list_new(static_cast<int>(from.size()));
  for (const auto& [partition, offset] : from) {
    // kFromBeginning and kFromEnd are librdkafka's OFFSET_BEGINNING and OFFSET_END.
    rd_kafka_topic_partition_list_add(list, options_.topic.c_str(), static_cast<int32_t>(partition))
        ->offset = offset;
  }
  const rd_kafka_resp_err_t err = rd_kafka_assign(rk_, list);
  rd_kafka_topic_partition_list_destroy(list);
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    return Status::Unavailable(std::string("kafka: assign: ") + rd_kafka_err2str(err));
  }
  // What was taken from the queue belongs to the old assignment.
  DropBatch();
  const int64_t now = NowNanos();
  for (uint32_t p : assigned_) parts_[p] = Part{};
  assigned_.clear();
  for (const auto& [partition, offset] : from) {
    Part& part = parts_[partition];
    part.assigned = true;
    part.next = offset >= 0 ? offset : -1;
    part.assigned_ns = now;
    assigned_.push_back(partition);
  }
  // Entries may be waiting (the old assignment's are dropped by librdkafka).
  Signal(event_fd_);
  return Status::OK();
}

void KafkaReader::DropBatch() {
  for (size_t i = batch_next_; i < batch_.size(); ++i) rd_kafka_message_destroy(batch_[i]);
  batch_.clear();
  batch_next_ = 0;
}

Result<size_t> KafkaReader::Poll(size_t max, const std::function<void(const LogEntry&)>& fn) {
  // First, so that an event coming while we take entries leaves it readable.
  Drain(event_fd_);
  if (!topic_right_) {
    std::lock_guard lock(mu_);
    topic_right_ = topic_ == TopicState::kRight;
    // Nothing is delivered before the topic is found right; the watch thread
    // signals event_fd_ when it is.
    if (!topic_right_) return size_t{0};
  }
  size_t delivered = 0;
  const int64_t now = NowNanos();
  while (delivered < max) {
    if (batch_next_ == batch_.size()) {
      batch_.resize(kBatch);
      batch_next_ = 0;
      const ssize_t n = rd_kafka_consume_batch_queue(queue_, 0, batch_.data(), kBatch);
      batch_.resize(n > 0 ? static_cast<size_t>(n) : 0);
      if (batch_.empty()) break;
    }
    std::unique_ptr<rd_kafka_message_t, void (*)(rd_kafka_message_t*)> msg(
        batch_[batch_next_++], rd_kafka_message_destroy);
    if (msg->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      OnErrorEvent(msg.get(), now);
      continue;
    }
    const auto partition = static_cast<uint32_t>(msg->partition);
    if (partition >= options_.partitions || !parts_[partition].assigned) {
      continue;  // from an assignment since replaced
    }
    Part& part = parts_[partition];
    if (part.next >= 0 && msg->offset != part.next) {
      Jumped(partition, part.next, msg->offset, false);
    }
    LogEntry entry;
    entry.partition = partition;
    entry.offset = msg->offset;
    entry.key = std::string_view(static_cast<const char*>(msg->key), msg->key_len);
    entry.value = std::string_view(static_cast<const char*>(msg->payload), msg->len);
    rd_kafka_timestamp_type_t type = RD_KAFKA_TIMESTAMP_NOT_AVAILABLE;
    entry.timestamp_ms = rd_kafka_message_timestamp(msg.get(), &type);
    part.next = msg->offset + 1;
    part.progress_ns = now;
    ++delivered;
    fn(entry);
  }
  // Entries may remain (taken or still queued): readable again.
  if (delivered == max) Signal(event_fd_);
  return delivered;
}

void KafkaReader::OnErrorEvent(const rd_kafka_message_t* msg, int64_t now_ns) {
  const bool has_partition = msg->rkt != nullptr && msg->partition >= 0 &&
                             msg->partition < static_cast<int32_t>(options_.partitions);
  const auto partition = static_cast<uint32_t>(msg->partition);
  if (msg->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
    // The partition's end, reached: msg->offset is the offset it goes on
    // from (the next entry's). It differs from the next expected only when
    // librdkafka reset the partition to the oldest held and that is the end
    // (the log holds nothing older, or nothing at all).
    if (has_partition && parts_[partition].assigned) {
      Part& part = parts_[partition];
      if (part.next >= 0 && msg->offset != part.next) {
        Jumped(partition, part.next, msg->offset, true);
      }
      part.next = msg->offset;
      part.progress_ns = now_ns;
    }
    return;
  }
  std::string what =
      fmt::format("{} ({})", rd_kafka_message_errstr(msg), rd_kafka_err2name(msg->err));
  if (has_partition) what = fmt::format("log partition {}: {}", partition, what);
  RecordError(msg->err, what);
}

void KafkaReader::Jumped(uint32_t partition, int64_t expected, int64_t offset, bool end) const {
  int64_t low = -1;
  int64_t high = -1;
  Watermarks(partition, &low, &high);
  if (offset > expected) {
    spdlog::warn(
        "log: kafka reader {}: log partition {}: offsets {} to {} are no longer in the log "
        "(retention passed them); reading on from offset {}, the oldest it holds{}",
        rd_kafka_name(rk_), partition, expected, offset - 1, offset,
        end ? " (and its end: it holds no entry now)" : "");
  } else {
    std::string held;
    if (low >= 0 && high > low) {
      held = fmt::format(" (it holds {} to {})", low, high - 1);
    } else if (end) {
      held = " (it holds no entry now)";
    }
    spdlog::warn(
        "log: kafka reader {}: log partition {}: offset {} is past the log's end: the topic was "
        "made again, or truncated; reading again from offset {}, the oldest it holds{}",
        rd_kafka_name(rk_), partition, expected, offset, held);
  }
}

void KafkaReader::Watermarks(uint32_t partition, int64_t* low, int64_t* high) const {
  *low = -1;
  *high = -1;
  int64_t lo = RD_KAFKA_OFFSET_INVALID;
  int64_t hi = RD_KAFKA_OFFSET_INVALID;
  if (rd_kafka_get_watermark_offsets(rk_, options_.topic.c_str(), static_cast<int32_t>(partition),
                                     &lo, &hi) != RD_KAFKA_RESP_ERR_NO_ERROR) {
    return;
  }
  if (lo >= 0) *low = lo;
  if (hi >= 0) *high = hi;
}

std::vector<PartitionPosition> KafkaReader::positions() const {
  std::vector<PartitionPosition> out;
  out.reserve(assigned_.size());
  for (uint32_t p : assigned_) {
    PartitionPosition pos;
    pos.partition = p;
    pos.next = parts_[p].next;
    Watermarks(p, &pos.start, &pos.end);
    out.push_back(pos);
  }
  return out;
}

Status KafkaReader::health(std::chrono::milliseconds stale_after) const {
  const int64_t now = NowNanos();
  const int64_t stale_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(stale_after).count();
  std::lock_guard lock(mu_);
  if (topic_ == TopicState::kWrong) return topic_status_;
  if (topic_ == TopicState::kUnknown) {
    std::string msg = fmt::format(
        "kafka: no broker of {} has answered about topic '{}' yet ({} ms since the reader was "
        "opened)",
        options_.brokers, options_.topic, MillisSince(opened_ns_, now));
    if (!topic_status_.ok()) msg += fmt::format("; last: {}", topic_status_.message());
    return Status::Unavailable(msg);
  }
  size_t stale = 0;
  std::string first;
  for (uint32_t p : assigned_) {
    const Part& part = parts_[p];
    int64_t last = std::max(part.assigned_ns, part.progress_ns);
    const int32_t leader = p < leaders_.size() ? leaders_[p] : -1;
    auto it = leader >= 0 ? fetch_ok_ns_.find(leader) : fetch_ok_ns_.end();
    if (it != fetch_ok_ns_.end()) last = std::max(last, it->second);
    if (now - last <= stale_ns) continue;
    if (stale++ == 0) {
      first = leader >= 0 ? fmt::format("log partition {} (leader broker {}) last read {} ms ago",
                                        p, leader, MillisSince(last, now))
                          : fmt::format("log partition {} (no leader known) last read {} ms ago", p,
                                        MillisSince(last, now));
    }
  }
  if (stale == 0) return Status::OK();
  std::string msg =
      fmt::format("kafka: {} of {} assigned log partitions not fetched for over {} ms; {}", stale,
                  assigned_.size(), stale_after.count(), first);
  if (!last_error_.empty()) {
    msg += fmt::format("; last engine error {} ms ago: {}", MillisSince(last_error_ns_, now),
                       last_error_);
  }
  return Status::Unavailable(msg);
}

}  // namespace

KafkaProperties KafkaWriterProperties(const LogOptions& options) {
  KafkaProperties p = CommonProperties(options);
  p.insert(p.end(), {
                        // Retried entries are written once, in order (and acks=all).
                        {"enable.idempotence", "true"},
                        {"acks", "all"},
                        {"linger.ms", std::to_string(kLingerMs)},
                        {"message.timeout.ms", std::to_string(options.append_timeout.count())},
                    });
  return p;
}

KafkaProperties KafkaReaderProperties(const LogOptions& options) {
  KafkaProperties p = CommonProperties(options);
  p.insert(p.end(), {
                        {"group.id", kReaderGroup},
                        {"enable.auto.commit", "false"},
                        {"enable.auto.offset.store", "false"},
                        // An offset the log no longer holds (below its start,
                        // or past its end): librdkafka goes on from the oldest
                        // held, and the reader warns (log.h).
                        {"auto.offset.reset", "earliest"},
                        {"enable.partition.eof", "true"},
                        {"fetch.wait.max.ms", std::to_string(kFetchWaitMs)},
                        {"fetch.min.bytes", "1"},
                        {"fetch.error.backoff.ms", std::to_string(kFetchErrorBackoffMs)},
                        // No transactions are used: no need to wait for the stable offset.
                        {"isolation.level", "read_uncommitted"},
                    });
  return p;
}

Status CheckProperties(const std::vector<std::pair<std::string, std::string>>& properties) {
  for (const auto& [name, value] : properties) {
    // librdkafka takes a topic property with this prefix too.
    std::string_view bare(name);
    if (bare.starts_with("topic.")) bare.remove_prefix(6);
    for (const RefusedProperty& refused : kRefusedProperties) {
      if (bare == refused.name) {
        return Status::InvalidArgument(fmt::format(
            "kafka: property {} is refused: segstore sets it itself ({})", name, refused.why));
      }
    }
  }
  // What librdkafka itself refuses: an unknown name, a bad value.
  ConfPtr conf(rd_kafka_conf_new());
  return SetAll(conf.get(), properties);
}

Result<std::unique_ptr<LogWriter>> OpenKafkaWriter(const LogOptions& options) {
  SEGSTORE_RETURN_IF_ERROR(ValidateOptions(options));
  auto writer = std::make_unique<KafkaWriter>(options);
  SEGSTORE_RETURN_IF_ERROR(writer->Open());
  return std::unique_ptr<LogWriter>(std::move(writer));
}

Result<std::unique_ptr<LogReader>> OpenKafkaReader(const LogOptions& options) {
  SEGSTORE_RETURN_IF_ERROR(ValidateOptions(options));
  auto reader = std::make_unique<KafkaReader>(options);
  SEGSTORE_RETURN_IF_ERROR(reader->Open());
  return std::unique_ptr<LogReader>(std::move(reader));
}

}  // namespace segstore::log

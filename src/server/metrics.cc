#include "server/metrics.h"

#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <string_view>
#include <type_traits>

#include "proto/protocol.h"

namespace segstore::server {

namespace {

// "NotFound" -> "not_found", "IOError" -> "io_error": status names as
// Prometheus labels and stat names. A word starts at a capital after a small
// letter, or at the last capital of a run followed by a small letter.
std::string SnakeName(Status::Code code) {
  const std::string_view camel = Status::CodeName(code);
  auto upper = [&](size_t i) { return std::isupper(static_cast<unsigned char>(camel[i])) != 0; };
  std::string out;
  for (size_t i = 0; i < camel.size(); ++i) {
    if (i > 0 && upper(i) &&
        (!upper(i - 1) || (i + 1 < camel.size() && !upper(i + 1)))) {
      out.push_back('_');
    }
    out.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(camel[i]))));
  }
  return out;
}

std::string SlotName(size_t slot) {
  return slot < proto::kOpCount ? std::string(proto::OpName(static_cast<uint8_t>(proto::kOps[slot])))
                                : std::string("unknown");
}

// Latency histogram bucket bounds: microseconds, and as Prometheus writes
// them (seconds).
struct LatencyBound {
  uint64_t us;
  const char* le;
};
constexpr LatencyBound kLatencyBounds[] = {
    {50, "5e-05"},        {100, "0.0001"},  {250, "0.00025"}, {500, "0.0005"},
    {1'000, "0.001"},     {2'500, "0.0025"}, {5'000, "0.005"}, {10'000, "0.01"},
    {25'000, "0.025"},    {50'000, "0.05"},  {100'000, "0.1"}, {250'000, "0.25"},
    {500'000, "0.5"},     {1'000'000, "1"},  {2'500'000, "2.5"}, {5'000'000, "5"},
    {10'000'000, "10"},
};

// Writes metric families in Prometheus text format 0.0.4.
class PromWriter {
 public:
  // HELP and TYPE lines; every sample of the family follows.
  void Family(std::string_view name, std::string_view type, std::string_view help) {
    fmt::format_to(std::back_inserter(out_), "# HELP segstore_{} {}\n# TYPE segstore_{} {}\n",
                   name, help, name, type);
  }
  template <typename V>
  void Sample(std::string_view name, std::string_view labels, V value) {
    out_ += "segstore_";
    out_ += name;
    if (!labels.empty()) {
      out_ += '{';
      out_ += labels;
      out_ += '}';
    }
    out_ += ' ';
    if constexpr (std::is_floating_point_v<V>) {
      fmt::format_to(std::back_inserter(out_), "{}", static_cast<double>(value));
    } else {
      fmt::format_to(std::back_inserter(out_), "{}", static_cast<uint64_t>(value));
    }
    out_ += '\n';
  }
  // A family of one unlabelled sample.
  template <typename V>
  void One(std::string_view name, std::string_view type, std::string_view help, V value) {
    Family(name, type, help);
    Sample(name, "", value);
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

// A label value with \, " and newline escaped.
std::string LabelValue(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') {
      out.push_back('\\');
      out.push_back(c);
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

}  // namespace

void ReadProcessFigures(MetricsSnapshot* m) {
  m->pid = static_cast<uint64_t>(::getpid());
  m->resident_bytes = 0;
  if (std::FILE* f = std::fopen("/proc/self/statm", "r")) {
    unsigned long long size = 0, resident = 0;
    if (std::fscanf(f, "%llu %llu", &size, &resident) == 2) {
      m->resident_bytes = resident * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    }
    std::fclose(f);
  }
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6;
  };
  m->cpu_user_seconds = seconds(usage.ru_utime);
  m->cpu_system_seconds = seconds(usage.ru_stime);
}

Stats ToStats(const MetricsSnapshot& m) {
  Stats out;
  auto add = [&](std::string name, auto v) {
    using V = decltype(v);
    if constexpr (std::is_floating_point_v<V>) {
      out.entries.push_back({std::move(name), static_cast<double>(v)});
    } else if constexpr (std::is_integral_v<V>) {
      out.entries.push_back({std::move(name), static_cast<uint64_t>(v)});
    } else {
      out.entries.push_back({std::move(name), std::string(v)});
    }
  };
  add("server.version", m.version);
  add("server.uptime_seconds", static_cast<uint64_t>(m.uptime_seconds));
  add("process.pid", m.pid);
  add("process.resident_bytes", m.resident_bytes);
  add("process.cpu_user_seconds", m.cpu_user_seconds);
  add("process.cpu_system_seconds", m.cpu_system_seconds);
  if (m.server) {
    const ServerCounters& c = *m.server;
    add("server.connections_open", c.connections_open);
    add("server.connections_accepted", c.connections_accepted);
    add("server.connections_refused", c.connections_refused);
    add("server.connections_idle_closed", c.connections_idle_closed);
    add("server.connections_slow_closed", c.connections_slow_closed);
    add("server.tls_handshake_failures", c.tls_handshake_failures);
    add("server.auth_failures", c.auth_failures);
    if (c.tls_certificate_not_after != 0) {
      add("server.tls_certificate_not_after", static_cast<uint64_t>(c.tls_certificate_not_after));
    }
    add("server.broken_frames", c.broken_frames);
    add("server.requests", c.requests);
    add("server.error_responses", c.error_responses);
    add("server.backpressure_pauses", c.backpressure_pauses);
    add("server.bytes_in", c.bytes_in);
    add("server.bytes_out", c.bytes_out);
    for (proto::Op op : proto::kOps) {
      const auto code = static_cast<uint8_t>(op);
      add("server.requests." + std::string(proto::OpName(code)), c.requests_by_op[code]);
    }
    // Errors by operation and status, only those that happened.
    for (size_t slot = 0; slot < kOpSlots; ++slot) {
      for (size_t code = 1; code < kStatusCodes; ++code) {
        if (c.responses[slot][code] == 0) continue;
        add("server.errors." + SlotName(slot) + "." +
                SnakeName(static_cast<Status::Code>(code)),
            c.responses[slot][code]);
      }
    }
    // Service time by operation, for those served at all.
    for (size_t slot = 0; slot < kOpSlots; ++slot) {
      const Histogram& h = c.latency_us[slot];
      if (h.count() == 0) continue;
      const std::string p = "latency." + SlotName(slot) + ".";
      add(p + "count", h.count());
      add(p + "mean_us", static_cast<double>(c.latency_sum_us[slot]) /
                             static_cast<double>(h.count()));
      add(p + "p50_us", h.Percentile(0.50));
      add(p + "p90_us", h.Percentile(0.90));
      add(p + "p99_us", h.Percentile(0.99));
      add(p + "p999_us", h.Percentile(0.999));
      add(p + "max_us", h.max());
    }
  }
  const storage::StoreStats& s = m.storage;
  add("storage.io_backend", s.io_backend);
  add("storage.device_bytes", s.device_bytes);
  add("storage.block_size", s.block_size);
  add("storage.blocks_total", s.blocks_total);
  add("storage.blocks_free", s.blocks_free);
  add("storage.live_bytes", s.live_bytes);
  add("storage.records", s.index_entries);
  add("storage.index_tombstones", s.index_tombstones);
  add("storage.index_bytes", s.index_bytes);
  add("storage.gets", s.gets);
  add("storage.writes", s.writes);
  add("storage.update_retries", s.update_retries);
  add("storage.device_reads", s.device_reads);
  add("storage.memory_reads", s.memory_reads);
  add("storage.corruptions", s.corruptions);
  add("storage.flushes", s.flushes);
  add("storage.defrag_blocks", s.defrag_blocks);
  add("storage.defrag_records_moved", s.defrag_records_moved);
  add("storage.rotated_blocks", s.rotated_blocks);
  add("storage.tombstones_reclaimed", s.tombstones_reclaimed);
  add("storage.expired_dropped", s.expired_dropped);
  add("storage.writes_refused", s.write_error.empty() ? 0u : 1u);
  if (!s.write_error.empty()) add("storage.write_error", s.write_error);
  const storage::RecoveryStats& r = m.recovery;
  add("recovery.seconds", r.seconds);
  add("recovery.blocks_scanned", r.blocks_scanned);
  add("recovery.records_scanned", r.records_scanned);
  add("recovery.live_records", r.live_records);
  add("recovery.damaged_regions", r.damaged_regions);
  const profile::SweeperStats& w = m.sweeper;
  add("sweeper.records_visited", w.records_visited);
  add("sweeper.records_rewritten", w.records_rewritten);
  add("sweeper.records_deleted", w.records_deleted);
  add("sweeper.segments_removed", w.segments_removed);
  add("sweeper.bytes_reclaimed", w.bytes_reclaimed);
  for (const StatEntry& e : m.config) out.entries.push_back(e);
  return out;
}

std::string ToPrometheus(const MetricsSnapshot& m) {
  PromWriter w;
  const storage::StoreStats& s = m.storage;
  w.Family("info", "gauge", "The server's version and I/O backend (always 1).");
  w.Sample("info",
           fmt::format("version=\"{}\",io_backend=\"{}\"", LabelValue(m.version),
                       LabelValue(s.io_backend)),
           1);
  w.One("uptime_seconds", "gauge", "Seconds since the server started.", m.uptime_seconds);
  w.One("process_resident_memory_bytes", "gauge", "Resident set of the process.",
        m.resident_bytes);
  w.Family("process_cpu_seconds_total", "counter", "CPU time of the process since its start.");
  w.Sample("process_cpu_seconds_total", "mode=\"user\"", m.cpu_user_seconds);
  w.Sample("process_cpu_seconds_total", "mode=\"system\"", m.cpu_system_seconds);

  if (m.server) {
    const ServerCounters& c = *m.server;
    w.One("connections_open", "gauge", "Client connections open now.", c.connections_open);
    w.One("connections_accepted_total", "counter", "Client connections accepted.",
          c.connections_accepted);
    w.One("connections_refused_total", "counter",
          "Connections refused (Busy) over server.max_connections.", c.connections_refused);
    w.One("connections_idle_closed_total", "counter",
          "Connections closed after server.idle_timeout_seconds without traffic.",
          c.connections_idle_closed);
    w.One("connections_slow_closed_total", "counter",
          "Connections closed because a request frame, or the TLS handshake and authenticated "
          "hello, did not arrive within server.frame_timeout_seconds.",
          c.connections_slow_closed);
    w.One("tls_handshake_failures_total", "counter",
          "TLS handshakes that failed or timed out (the connection was closed).",
          c.tls_handshake_failures);
    w.One("auth_failures_total", "counter",
          "Hellos with a wrong shared secret (the connection was closed).", c.auth_failures);
    if (c.tls_certificate_not_after != 0) {
      w.One("tls_certificate_expiry_timestamp_seconds", "gauge",
            "When the server's TLS certificate expires (its notAfter, Unix seconds).",
            c.tls_certificate_not_after);
    }
    w.One("broken_frames_total", "counter",
          "Frames with a bad magic or an oversize length (their connection was closed).",
          c.broken_frames);
    w.One("backpressure_pauses_total", "counter",
          "Times a connection stopped being read (max_in_flight or max_pending_bytes).",
          c.backpressure_pauses);
    w.One("received_bytes_total", "counter", "Bytes read from clients.", c.bytes_in);
    w.One("sent_bytes_total", "counter", "Bytes written to clients.", c.bytes_out);

    w.Family("requests_total", "counter", "Request frames received, by operation.");
    uint64_t unknown = c.requests;
    for (proto::Op op : proto::kOps) {
      const auto code = static_cast<uint8_t>(op);
      w.Sample("requests_total", fmt::format("op=\"{}\"", proto::OpName(code)),
               c.requests_by_op[code]);
      unknown -= std::min(unknown, c.requests_by_op[code]);
    }
    w.Sample("requests_total", "op=\"unknown\"", unknown);

    w.Family("responses_total", "counter",
             "Responses sent, by operation and status (ok, or the error's code).");
    for (size_t slot = 0; slot < kOpSlots; ++slot) {
      for (size_t code = 0; code < kStatusCodes; ++code) {
        // Every known operation's ok series always; other series once seen.
        const bool always = code == 0 && slot < proto::kOpCount;
        if (!always && c.responses[slot][code] == 0) continue;
        w.Sample("responses_total",
                 fmt::format("op=\"{}\",status=\"{}\"", SlotName(slot),
                             code == 0 ? std::string("ok")
                                       : SnakeName(static_cast<Status::Code>(code))),
                 c.responses[slot][code]);
      }
    }
    w.One("error_responses_total", "counter", "Responses carrying an error, all operations.",
          c.error_responses);

    w.Family("request_duration_seconds", "histogram",
             "Service time by operation: from the request's whole frame being read to its "
             "answer being ready. A value up to 3% below a bucket bound may count in the next "
             "bucket.");
    for (size_t slot = 0; slot < proto::kOpCount; ++slot) {
      const Histogram& h = c.latency_us[slot];
      const std::string op = SlotName(slot);
      for (const LatencyBound& b : kLatencyBounds) {
        w.Sample("request_duration_seconds_bucket",
                 fmt::format("op=\"{}\",le=\"{}\"", op, b.le), h.CountAtMost(b.us));
      }
      w.Sample("request_duration_seconds_bucket", fmt::format("op=\"{}\",le=\"+Inf\"", op),
               h.count());
      w.Sample("request_duration_seconds_sum", fmt::format("op=\"{}\"", op),
               static_cast<double>(c.latency_sum_us[slot]) / 1e6);
      w.Sample("request_duration_seconds_count", fmt::format("op=\"{}\"", op), h.count());
    }
  }

  w.One("device_bytes", "gauge", "Size of the data file or device.", s.device_bytes);
  w.One("write_block_bytes", "gauge", "Size of one write block.", s.block_size);
  w.One("write_blocks", "gauge", "Write blocks on the device (the superblock not counted).",
        s.blocks_total);
  w.One("write_blocks_free", "gauge", "Write blocks free for new writes.", s.blocks_free);
  w.One("live_bytes", "gauge", "Bytes of the records the index points to.", s.live_bytes);
  w.One("index_entries", "gauge", "Users with a record (index entries, tombstones excluded).",
        s.index_entries);
  w.One("index_tombstones", "gauge", "Index entries remembering a deletion.",
        s.index_tombstones);
  w.One("index_bytes", "gauge", "DRAM allocated to the index.", s.index_bytes);
  w.One("writes_refused", "gauge",
        "1 after a device write error: writes are refused until restart, reads go on.",
        s.write_error.empty() ? 0 : 1);
  w.One("store_gets_total", "counter", "Record reads by key.", s.gets);
  w.One("store_writes_total", "counter", "Record versions and tombstones written.", s.writes);
  w.One("store_update_retries_total", "counter",
        "Read-modify-writes retried after a concurrent change.", s.update_retries);
  w.One("device_reads_total", "counter", "Reads issued to the device.", s.device_reads);
  w.One("memory_reads_total", "counter", "Records served from a write block still in memory.",
        s.memory_reads);
  w.One("corruptions_total", "counter", "Records read back that failed validation.",
        s.corruptions);
  w.One("flushes_total", "counter", "Write block flushes issued.", s.flushes);
  w.One("defrag_blocks_total", "counter", "Write blocks rewritten and freed by defragmentation.",
        s.defrag_blocks);
  w.One("defrag_rotated_blocks_total", "counter",
        "Of those, blocks rewritten to advance the oldest sequence on the device.",
        s.rotated_blocks);
  w.One("defrag_records_moved_total", "counter", "Records moved by defragmentation.",
        s.defrag_records_moved);
  w.One("tombstones_reclaimed_total", "counter", "Tombstones dropped once no longer needed.",
        s.tombstones_reclaimed);
  w.One("expired_dropped_total", "counter", "Records dropped unread when all had expired.",
        s.expired_dropped);

  const storage::RecoveryStats& r = m.recovery;
  w.One("recovery_seconds", "gauge", "Time the last start spent rebuilding the index.",
        r.seconds);
  w.One("recovery_blocks_scanned", "gauge", "Write blocks the last recovery read.",
        r.blocks_scanned);
  w.One("recovery_records_scanned", "gauge", "Record versions the last recovery found.",
        r.records_scanned);
  w.One("recovery_live_records", "gauge", "Records the last recovery indexed as live.",
        r.live_records);
  w.One("recovery_damaged_regions", "gauge",
        "Stretches of bytes the last recovery found failing validation.", r.damaged_regions);

  const profile::SweeperStats& sw = m.sweeper;
  w.One("sweeper_records_visited_total", "counter", "Records the expiry sweeper read.",
        sw.records_visited);
  w.One("sweeper_records_rewritten_total", "counter",
        "Records rewritten without their expired segments.", sw.records_rewritten);
  w.One("sweeper_records_deleted_total", "counter",
        "Records deleted because no segment was left alive.", sw.records_deleted);
  w.One("sweeper_segments_removed_total", "counter", "Expired segments removed.",
        sw.segments_removed);
  w.One("sweeper_bytes_reclaimed_total", "counter", "Record bytes no longer stored.",
        sw.bytes_reclaimed);
  return w.Take();
}

}  // namespace segstore::server

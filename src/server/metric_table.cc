// The metric table: the only place a metric's name and help text are
// written. Add a metric here (and its value to the struct it comes from);
// then regenerate docs/metrics.md (the test says how).
#include "server/metric_table.h"

#include <algorithm>
#include <cctype>
#include <string>
#include <type_traits>
#include <vector>

#include "proto/protocol.h"
#include "server/metrics.h"
#include "server/resp_commands.h"

namespace segstore::server {

namespace {

using Series = std::vector<MetricSeries>;

template <typename T>
MetricValue Number(T v) {
  if constexpr (std::is_floating_point_v<T>) {
    return static_cast<double>(v);
  } else {
    return static_cast<uint64_t>(v);
  }
}

// The part of a snapshot a struct's field is read from; null when absent.
template <typename S>
const S* Part(const MetricsSnapshot& m);
template <>
const MetricsSnapshot* Part(const MetricsSnapshot& m) {
  return &m;
}
template <>
const ServerCounters* Part(const MetricsSnapshot& m) {
  return m.server.get();
}
template <>
const storage::StoreStats* Part(const MetricsSnapshot& m) {
  return &m.storage;
}
template <>
const storage::RecoveryStats* Part(const MetricsSnapshot& m) {
  return &m.recovery;
}
template <>
const profile::SweeperStats* Part(const MetricsSnapshot& m) {
  return &m.sweeper;
}
template <>
const cluster::AgentStats* Part(const MetricsSnapshot& m) {
  return m.cluster ? &*m.cluster : nullptr;
}

template <>
const replica::ReplicaStats* Part(const MetricsSnapshot& m) {
  return m.replica ? &*m.replica : nullptr;
}
template <>
const replica::ApplierStats* Part(const MetricsSnapshot& m) {
  return m.replica ? &m.replica->applier : nullptr;
}
template <>
const replica::BootstrapStats* Part(const MetricsSnapshot& m) {
  return m.bootstrap ? &*m.bootstrap : nullptr;
}
template <>
const log::LogWriterStats* Part(const MetricsSnapshot& m) {
  return m.replica ? &m.replica->writer : nullptr;
}

template <typename S, typename T>
S ClassOf(T S::*);

// One unlabelled series: a field of a snapshot's part, e.g.
// Value<&storage::StoreStats::gets>.
template <auto kField>
void Value(const MetricsSnapshot& m, Series* out) {
  using S = decltype(ClassOf(kField));
  if (const S* part = Part<S>(m)) out->push_back({{}, Number(part->*kField)});
}

void Info(const MetricsSnapshot& m, Series* out) {
  out->push_back({{m.version, m.storage.io_backend}, uint64_t{1}});
}

void CpuSeconds(const MetricsSnapshot& m, Series* out) {
  out->push_back({{"user"}, m.cpu_user_seconds});
  out->push_back({{"system"}, m.cpu_system_seconds});
}

void CertificateExpiry(const MetricsSnapshot& m, Series* out) {
  if (m.server && m.server->tls_certificate_not_after != 0) {
    out->push_back({{}, static_cast<uint64_t>(m.server->tls_certificate_not_after)});
  }
}

// Every operation, then "unknown": frames whose code is in no table.
void RequestsByOp(const MetricsSnapshot& m, Series* out) {
  if (!m.server) return;
  const ServerCounters& c = *m.server;
  uint64_t unknown = c.requests;
  for (size_t slot = 0; slot < proto::kOpCount; ++slot) {
    const uint64_t n = c.requests_by_op[static_cast<uint8_t>(proto::kOps[slot])];
    out->push_back({{OpLabel(slot)}, n});
    unknown -= std::min(unknown, n);
  }
  out->push_back({{OpLabel(proto::kOpCount)}, unknown});
}

// Every known operation's ok series always; any other once it happened.
void ResponsesByOpAndStatus(const MetricsSnapshot& m, Series* out) {
  if (!m.server) return;
  const ServerCounters& c = *m.server;
  for (size_t slot = 0; slot < kOpSlots; ++slot) {
    for (size_t code = 0; code < kStatusCodes; ++code) {
      const bool always = code == 0 && slot < proto::kOpCount;
      if (!always && c.responses[slot][code] == 0) continue;
      out->push_back(
          {{OpLabel(slot), StatusLabel(static_cast<Status::Code>(code))}, c.responses[slot][code]});
    }
  }
}

// Every known operation, served or not.
void DurationByOp(const MetricsSnapshot& m, Series* out) {
  if (!m.server) return;
  const ServerCounters& c = *m.server;
  for (size_t slot = 0; slot < proto::kOpCount; ++slot) {
    out->push_back({{OpLabel(slot)}, HistogramValue{&c.latency_us[slot], c.latency_sum_us[slot]}});
  }
}

// RESP commands: a series for each command the port has answered.
template <auto kCounts>
void RespByCommand(const MetricsSnapshot& m, Series* out) {
  if (!m.server) return;
  const ServerCounters& c = *m.server;
  for (size_t slot = 0; slot < kRespCommandSlots; ++slot) {
    if (c.resp_commands[slot] == 0) continue;
    out->push_back({{RespCommandLabel(slot)}, (c.*kCounts)[slot]});
  }
}

void RespDurationByCommand(const MetricsSnapshot& m, Series* out) {
  if (!m.server) return;
  const ServerCounters& c = *m.server;
  for (size_t slot = 0; slot < kRespCommandSlots; ++slot) {
    if (c.resp_commands[slot] == 0) continue;
    out->push_back({{RespCommandLabel(slot)},
                    HistogramValue{&c.resp_latency_us[slot], c.resp_latency_sum_us[slot]}});
  }
}

// One series per log partition, labelled with its number.
template <auto kField>
void PerLogPartition(const MetricsSnapshot& m, Series* out) {
  if (!m.replica) return;
  const std::vector<replica::LaneStats>& lanes = m.replica->applier.lanes;
  for (size_t l = 0; l < lanes.size(); ++l) {
    out->push_back({{std::to_string(l)}, Number(lanes[l].*kField)});
  }
}

void LagEntries(const MetricsSnapshot& m, Series* out) {
  if (!m.replica) return;
  const std::vector<replica::LaneStats>& lanes = m.replica->applier.lanes;
  for (size_t l = 0; l < lanes.size(); ++l) {
    const int64_t lag = lanes[l].end >= 0 ? std::max<int64_t>(0, lanes[l].end - lanes[l].next) : 0;
    out->push_back({{std::to_string(l)}, static_cast<uint64_t>(lag)});
  }
}

void StaleLogPartitions(const MetricsSnapshot& m, Series* out) {
  if (!m.replica) return;
  uint64_t n = 0;
  for (const replica::LaneStats& l : m.replica->applier.lanes) n += l.stale ? 1 : 0;
  out->push_back({{}, n});
}

void WritesRefused(const MetricsSnapshot& m, Series* out) {
  out->push_back({{}, uint64_t{m.storage.write_error.empty() ? 0u : 1u}});
}

void WriteError(const MetricsSnapshot& m, Series* out) {
  if (!m.storage.write_error.empty()) out->push_back({{}, m.storage.write_error});
}

using enum MetricSection;
using enum MetricKind;
using enum MetricUnit;
using cluster::AgentStats;
using log::LogWriterStats;
using profile::SweeperStats;
using replica::ApplierStats;
using replica::BootstrapStats;
using replica::LaneStats;
using replica::ReplicaStats;
using storage::RecoveryStats;
using storage::StoreStats;

// In the order of the renderings. Prometheus names are what dashboards and
// alerts query: never rename one. Each entry: section, kind, name, unit,
// help, where the value comes from, and its labels if any.
// clang-format off
constexpr MetricDef kMetrics[] = {
    // The process.
    {kServer, kInfo, "info", kNone, "The server's version and I/O backend (always 1).", Info,
     {"version", "io_backend"}},
    {kServer, kGauge, "uptime_seconds", kSeconds, "Seconds since the server started.",
     Value<&MetricsSnapshot::uptime_seconds>},
    {kProcess, kStatsOnly, "process_pid", kNone, "The server's process ID.",
     Value<&MetricsSnapshot::pid>},
    {kProcess, kGauge, "process_resident_memory_bytes", kBytes, "Resident set of the process.",
     Value<&MetricsSnapshot::resident_bytes>},
    {kProcess, kGauge, "process_heap_in_use_bytes", kBytes,
     "Bytes the C allocator has handed out and not had back (glibc mallinfo2).",
     Value<&MetricsSnapshot::heap_in_use_bytes>},
    {kProcess, kGauge, "process_heap_free_bytes", kBytes,
     "Bytes freed to the C allocator and held by it for reuse (resident unless trimmed).",
     Value<&MetricsSnapshot::heap_free_bytes>},
    {kProcess, kCounter, "process_heap_trims_total", kNone,
     "Times freed heap memory was given back to the kernel "
     "(malloc_trim; server.heap_trim_seconds).",
     Value<&MetricsSnapshot::heap_trims>},
    {kProcess, kCounter, "process_heap_trimmed_bytes_total", kBytes,
     "How far those trims made the resident set fall, in all.",
     Value<&MetricsSnapshot::heap_trimmed_bytes>},
    {kProcess, kCounter, "process_cpu_seconds_total", kSeconds,
     "CPU time of the process since its start.", CpuSeconds, {"mode"}},

    // The front end: connections, frames and bytes.
    {kServer, kGauge, "connections_open", kNone, "Client connections open now.",
     Value<&ServerCounters::connections_open>},
    {kServer, kCounter, "connections_accepted_total", kNone, "Client connections accepted.",
     Value<&ServerCounters::connections_accepted>},
    {kServer, kCounter, "connections_refused_total", kNone,
     "Connections refused (Busy) over server.max_connections.",
     Value<&ServerCounters::connections_refused>},
    {kServer, kCounter, "connections_idle_closed_total", kNone,
     "Connections closed after server.idle_timeout_seconds without traffic.",
     Value<&ServerCounters::connections_idle_closed>},
    {kServer, kCounter, "connections_slow_closed_total", kNone,
     "Connections closed because a request frame, or the TLS handshake and authenticated "
     "hello, did not arrive within server.frame_timeout_seconds.",
     Value<&ServerCounters::connections_slow_closed>},
    {kServer, kCounter, "tls_handshake_failures_total", kNone,
     "TLS handshakes that failed or timed out (the connection was closed).",
     Value<&ServerCounters::tls_handshake_failures>},
    {kServer, kCounter, "auth_failures_total", kNone,
     "Hellos with a wrong shared secret (the connection was closed).",
     Value<&ServerCounters::auth_failures>},
    {kServer, kGauge, "tls_certificate_expiry_timestamp_seconds", kSeconds,
     "When the server's TLS certificate expires (its notAfter, Unix seconds).",
     CertificateExpiry},
    {kServer, kCounter, "broken_frames_total", kNone,
     "Frames with a bad magic or an oversize length (their connection was closed).",
     Value<&ServerCounters::broken_frames>},
    {kServer, kCounter, "backpressure_pauses_total", kNone,
     "Times a connection stopped being read (max_in_flight or max_pending_bytes).",
     Value<&ServerCounters::backpressure_pauses>},
    {kServer, kCounter, "received_bytes_total", kBytes, "Bytes read from clients.",
     Value<&ServerCounters::bytes_in>},
    {kServer, kCounter, "sent_bytes_total", kBytes, "Bytes written to clients.",
     Value<&ServerCounters::bytes_out>},

    // The front end: requests and responses.
    {kServer, kCounter, "requests_total", kNone, "Request frames received, by operation.",
     RequestsByOp, {"op"}},
    {kServer, kCounter, "responses_total", kNone,
     "Responses sent, by operation and status (ok, or the error's code).",
     ResponsesByOpAndStatus, {"op", "status"}},
    {kServer, kCounter, "error_responses_total", kNone,
     "Responses carrying an error, all operations.", Value<&ServerCounters::error_responses>},
    {kServer, kHistogram, "request_duration_seconds", kSeconds,
     "Service time by operation: from the request's whole frame being read to its answer "
     "being ready. A value up to 3% below a bucket bound may count in the next bucket.",
     DurationByOp, {"op"}},

    // The RESP port (proto/RESP.md): its commands, counted apart from the
    // binary protocol's requests (the requests a command makes of the
    // service are not counted there).
    {kServer, kCounter, "resp_commands_total", kNone,
     "RESP commands answered, by command (a series once the command was answered).",
     RespByCommand<&ServerCounters::resp_commands>, {"command"}},
    {kServer, kCounter, "resp_error_replies_total", kNone,
     "RESP commands answered with an error, by command (a series once the command was "
     "answered).",
     RespByCommand<&ServerCounters::resp_errors>, {"command"}},
    {kServer, kHistogram, "resp_command_duration_seconds", kSeconds,
     "RESP service time by command: from the command being read whole to its reply being "
     "ready (a series once the command was answered).",
     RespDurationByCommand, {"command"}},

    // The store (src/storage): space, index and work done.
    {kStorage, kGauge, "device_bytes", kBytes, "Size of the data file or device.",
     Value<&StoreStats::device_bytes>},
    {kStorage, kGauge, "write_block_bytes", kBytes, "Size of one write block.",
     Value<&StoreStats::block_size>},
    {kStorage, kGauge, "write_blocks", kNone,
     "Write blocks on the device (the superblock not counted).",
     Value<&StoreStats::blocks_total>},
    {kStorage, kGauge, "write_blocks_free", kNone, "Write blocks free for new writes.",
     Value<&StoreStats::blocks_free>},
    {kStorage, kGauge, "live_bytes", kBytes, "Bytes of the records the index points to.",
     Value<&StoreStats::live_bytes>},
    {kStorage, kGauge, "write_block_image_bytes", kBytes,
     "Write block images mapped, counted whole: open blocks, blocks being flushed, each "
     "worker's spare (kept while writes flow), and blocks a device error left only in memory.",
     Value<&StoreStats::block_image_bytes>},
    {kStorage, kGauge, "index_entries", kNone,
     "Users with a record (index entries, tombstones excluded).",
     Value<&StoreStats::index_entries>},
    {kStorage, kGauge, "index_tombstones", kNone, "Index entries remembering a deletion.",
     Value<&StoreStats::index_tombstones>},
    {kStorage, kGauge, "index_bytes", kBytes, "DRAM allocated to the index.",
     Value<&StoreStats::index_bytes>},
    {kStorage, kGauge, "index_references", kNone,
     "Index entries of records naming another key (linked profiles' members).",
     Value<&StoreStats::index_references>},
    {kStorage, kGauge, "index_reference_bytes", kBytes,
     "Of index_bytes, the DRAM keeping those references (a member's master).",
     Value<&StoreStats::index_reference_bytes>},
    {kStorage, kGauge, "field_names", kNone,
     "Profile field names the store's name table has numbered (its highest number). A new "
     "name is stored inline until its number's record is on the device.",
     Value<&MetricsSnapshot::field_names>},
    {kStorage, kGauge, "writes_refused", kNone,
     "1 after a device write error: writes are refused until restart, reads go on.",
     WritesRefused},
    {kStorage, kStatsOnly, "write_error", kNone,
     "The device write error that made writes_refused 1; absent while writes are taken.",
     WriteError},
    {kStorage, kCounter, "store_gets_total", kNone, "Record reads by key.",
     Value<&StoreStats::gets>},
    {kStorage, kCounter, "store_writes_total", kNone, "Record versions and tombstones written.",
     Value<&StoreStats::writes>},
    {kStorage, kCounter, "store_update_retries_total", kNone,
     "Read-modify-writes retried after a concurrent change.",
     Value<&StoreStats::update_retries>},
    {kStorage, kCounter, "device_reads_total", kNone, "Reads issued to the device.",
     Value<&StoreStats::device_reads>},
    {kStorage, kCounter, "memory_reads_total", kNone,
     "Records served from a write block still in memory.", Value<&StoreStats::memory_reads>},
    {kStorage, kCounter, "corruptions_total", kNone, "Records read back that failed validation.",
     Value<&StoreStats::corruptions>},
    {kStorage, kCounter, "flushes_total", kNone, "Write block flushes issued.",
     Value<&StoreStats::flushes>},
    {kStorage, kCounter, "defrag_blocks_total", kNone,
     "Write blocks rewritten and freed by defragmentation.", Value<&StoreStats::defrag_blocks>},
    {kStorage, kCounter, "defrag_rotated_blocks_total", kNone,
     "Of those, blocks rewritten to advance the oldest sequence on the device.",
     Value<&StoreStats::rotated_blocks>},
    {kStorage, kCounter, "defrag_records_moved_total", kNone,
     "Records moved by defragmentation.", Value<&StoreStats::defrag_records_moved>},
    {kStorage, kCounter, "tombstones_reclaimed_total", kNone,
     "Tombstones dropped once no longer needed.", Value<&StoreStats::tombstones_reclaimed>},
    {kStorage, kCounter, "expired_dropped_total", kNone,
     "Records dropped unread when all had expired.", Value<&StoreStats::expired_dropped>},

    // What the last start found.
    {kRecovery, kGauge, "recovery_seconds", kSeconds,
     "Time the last start spent rebuilding the index.", Value<&RecoveryStats::seconds>},
    {kRecovery, kGauge, "recovery_from_checkpoint", kNone,
     "1 when the last start loaded the index checkpoint (storage.index_checkpoint); 0 when it "
     "scanned the device (the log says why).",
     Value<&RecoveryStats::from_checkpoint>},
    {kRecovery, kGauge, "recovery_blocks_scanned", kNone,
     "Write blocks whose header the last recovery read.", Value<&RecoveryStats::blocks_scanned>},
    {kRecovery, kGauge, "recovery_records_scanned", kNone,
     "Record versions the last recovery found in the write blocks it read whole.",
     Value<&RecoveryStats::records_scanned>},
    {kRecovery, kGauge, "recovery_blocks_from_summaries", kNone,
     "Write blocks the last scan took from their summaries (storage.block_summaries) instead "
     "of reading them whole.",
     Value<&RecoveryStats::blocks_from_summaries>},
    {kRecovery, kGauge, "recovery_blocks_read_whole", kNone,
     "Write blocks the last scan read whole: no summary (open at a crash), or one refused.",
     Value<&RecoveryStats::blocks_read_whole>},
    {kRecovery, kGauge, "recovery_summaries_refused", kNone,
     "Block summaries the last scan refused as damaged or impossible (the log says why).",
     Value<&RecoveryStats::summaries_refused>},
    {kRecovery, kGauge, "recovery_read_bytes", kBytes,
     "Bytes the last recovery read from the device (block headers, summaries, whole blocks).",
     Value<&RecoveryStats::bytes_read>},
    {kRecovery, kGauge, "recovery_live_records", kNone,
     "Records the last recovery indexed as live.", Value<&RecoveryStats::live_records>},
    {kRecovery, kGauge, "recovery_damaged_regions", kNone,
     "Stretches of bytes the last recovery found failing validation.",
     Value<&RecoveryStats::damaged_regions>},

    // The expiry sweeper (src/profile).
    {kSweeper, kCounter, "sweeper_records_visited_total", kNone,
     "Records the expiry sweeper read.", Value<&SweeperStats::records_visited>},
    {kSweeper, kCounter, "sweeper_records_rewritten_total", kNone,
     "Records rewritten without their expired segments.",
     Value<&SweeperStats::records_rewritten>},
    {kSweeper, kCounter, "sweeper_records_deleted_total", kNone,
     "Records deleted because no segment was left alive.",
     Value<&SweeperStats::records_deleted>},
    {kSweeper, kCounter, "sweeper_segments_removed_total", kNone, "Expired segments removed.",
     Value<&SweeperStats::segments_removed>},
    {kSweeper, kCounter, "sweeper_fields_removed_total", kNone, "Expired profile fields removed.",
     Value<&SweeperStats::fields_removed>},
    {kSweeper, kCounter, "sweeper_bytes_reclaimed_total", kBytes,
     "Record bytes no longer stored.", Value<&SweeperStats::bytes_reclaimed>},
    {kCluster, kGauge, "cluster_registered", kNone,
     "1 while the node is registered in etcd under a lease etcd has not reported expired "
     "(it serves only then); in a cluster only.", Value<&AgentStats::registered>},
    {kCluster, kGauge, "cluster_controller", kNone,
     "1 while this node is the cluster's controller.", Value<&AgentStats::controller>},
    {kCluster, kGauge, "cluster_map_revision", kNone,
     "Revision of the partition map this node serves by; 0 before the first map.",
     Value<&AgentStats::map_revision>},
    {kCluster, kGauge, "cluster_partitions_held", kNone,
     "Partitions the map gives this node.", Value<&AgentStats::partitions_held>},
    {kCluster, kGauge, "cluster_lease_ack_age_seconds", kSeconds,
     "Time since etcd last acknowledged the node's lease; -1 before the first. Alert when it "
     "nears the lease TTL.", Value<&AgentStats::seconds_since_lease_ack>},
    {kCluster, kCounter, "cluster_etcd_errors_total", kNone,
     "Calls to etcd that failed (unreachable, timed out, or refused).",
     Value<&AgentStats::etcd_errors>},
    {kCluster, kCounter, "cluster_lease_expirations_total", kNone,
     "Times etcd reported the node's lease expired (the node stopped serving and registered "
     "again).", Value<&AgentStats::lease_expirations>},
    {kCluster, kCounter, "cluster_maps_written_total", kNone,
     "Partition maps this node wrote as controller.", Value<&AgentStats::maps_written>},

    // Writes through the cluster's log and the applier (src/replica); in a
    // cluster with a log only.
    {kReplica, kCounter, "replica_writes_submitted_total", kNone,
     "Client writes this node sent to the cluster's log (one per batch item).",
     Value<&ReplicaStats::submitted>},
    {kReplica, kCounter, "replica_writes_log_refused_total", kNone,
     "Writes answered LogUnavailable: the log did not take them.",
     Value<&ReplicaStats::log_refused>},
    {kReplica, kCounter, "replica_writes_in_doubt_total", kNone,
     "Writes answered InDoubt: the log may have taken them without saying so, or this node "
     "did not apply them within cluster_log.apply_timeout_ms.",
     Value<&ReplicaStats::in_doubt>},
    {kReplica, kGauge, "replica_writes_waiting", kNone,
     "Writes sent to the log whose clients wait for this node to apply them.",
     Value<&ReplicaStats::waiting>},
    {kReplica, kCounter, "replica_log_appends_total", kNone,
     "Entries the log acknowledged.", Value<&LogWriterStats::appended>},
    {kReplica, kGauge, "replica_log_appends_in_flight", kNone,
     "Entries sent to the log and not yet acknowledged or failed.",
     Value<&LogWriterStats::in_flight>},
    {kReplica, kCounter, "replica_entries_applied_total", kNone,
     "Log entries this node applied (whatever the write answered).",
     Value<&ApplierStats::applied>},
    {kReplica, kCounter, "replica_entries_not_held_total", kNone,
     "Log entries of partitions this node does not hold: skipped.",
     Value<&ApplierStats::not_held>},
    {kReplica, kCounter, "replica_entries_duplicate_total", kNone,
     "Log entries whose write ID was applied before: not applied again.",
     Value<&ApplierStats::duplicates>},
    {kReplica, kCounter, "replica_entries_replayed_total", kNone,
     "Log entries found applied already after a restart (their user's record held their "
     "position): skipped.", Value<&ApplierStats::replayed>},
    {kReplica, kCounter, "replica_entries_undecodable_total", kNone,
     "Log entries that could not be read: skipped and logged. Alert on any.",
     Value<&ApplierStats::undecodable>},
    {kReplica, kCounter, "replica_apply_failures_total", kNone,
     "Attempts to apply an entry that failed on this node's device (retried every second). "
     "Alert on a steady rate.", Value<&ApplierStats::apply_failures>},
    {kReplica, kCounter, "replica_lost_entries_total", kNone,
     "Offsets this node needed that the log no longer held (retention passed them): its copy "
     "misses those writes. Alert on any.", Value<&ApplierStats::lost_entries>},
    {kReplica, kCounter, "replica_entries_reapplied_total", kNone,
     "Log entries applied again for a partition catching up after its copy (the log read "
     "again from the copy's offset).", Value<&ApplierStats::replays>},
    {kReplica, kCounter, "replica_log_rewinds_total", kNone,
     "Times a log partition was read again from an earlier offset for a copied partition.",
     Value<&ApplierStats::rewinds>},
    {kReplica, kGauge, "replica_partitions_incoming", kNone,
     "Partitions the map is moving to this node (it copies them, then serves them).",
     Value<&BootstrapStats::incoming>},
    {kReplica, kGauge, "replica_partitions_ready", kNone,
     "Incoming partitions copied and caught up, waiting for the controller to make this node "
     "their replica.", Value<&BootstrapStats::ready>},
    {kReplica, kCounter, "replica_partitions_copied_total", kNone,
     "Partitions copied from another node and caught up.",
     Value<&BootstrapStats::partitions_copied>},
    {kReplica, kCounter, "replica_records_copied_total", kNone,
     "Records copied from other nodes.", Value<&BootstrapStats::records_copied>},
    {kReplica, kCounter, "replica_bytes_copied_total", kBytes,
     "Key and record bytes copied from other nodes.", Value<&BootstrapStats::bytes_copied>},
    {kReplica, kCounter, "replica_copy_seconds_total", kSeconds,
     "Time spent copying partitions and catching them up (copies that succeeded).",
     Value<&BootstrapStats::copy_seconds>},
    {kReplica, kCounter, "replica_copy_failures_total", kNone,
     "Copies that failed (source gone, log no longer holding the offset) and start over. "
     "Alert on a steady rate.", Value<&BootstrapStats::copy_failures>},
    {kReplica, kCounter, "replica_partitions_dropped_total", kNone,
     "Partitions this node no longer holds whose copy it deleted.",
     Value<&BootstrapStats::partitions_dropped>},
    {kReplica, kCounter, "replica_records_dropped_total", kNone,
     "Records deleted with those copies.", Value<&BootstrapStats::records_dropped>},
    {kReplica, kCounter, "replica_checkpoints_total", kNone,
     "Checkpoint records written (how far each log partition was applied).",
     Value<&ApplierStats::checkpoints>},
    {kReplica, kGauge, "replica_write_ids", kNone,
     "Write IDs in the window of recent writes (cluster_log.write_id_window_seconds).",
     Value<&ApplierStats::window_ids>},
    {kReplica, kGauge, "replica_caught_up", kNone,
     "1 once every log partition was applied to the end it had when the node started.",
     Value<&ApplierStats::caught_up>},
    {kReplica, kGauge, "replica_log_healthy", kNone,
     "1 while the log answers this node's reads.", Value<&ApplierStats::log_healthy>},
    {kReplica, kGauge, "replica_log_partitions_stale", kNone,
     "Log partitions whose reads this node marks stale (behind, catching up, log or etcd "
     "unreachable, or unable to apply).", StaleLogPartitions},
    {kReplica, kGauge, "replica_applied_offset", kNone,
     "Per log partition: the next offset to apply.", PerLogPartition<&LaneStats::next>,
     {"log_partition"}},
    {kReplica, kGauge, "replica_lag_entries", kNone,
     "Per log partition: entries in the log not yet applied here.", LagEntries,
     {"log_partition"}},
    {kReplica, kGauge, "replica_lag_seconds", kSeconds,
     "Per log partition: age of the oldest entry read and not yet applied (0 when none "
     "waits). Reads are marked stale past cluster_log.max_lag_ms.",
     PerLogPartition<&LaneStats::lag_seconds>, {"log_partition"}},
};
// clang-format on

// The word a section's Prometheus names may start with.
std::string_view SectionWord(MetricSection section) {
  return section == kStorage ? "store" : SectionName(section);
}

bool DropPrefix(std::string* s, std::string_view prefix) {
  if (!s->starts_with(prefix)) return false;
  s->erase(0, prefix.size());
  return true;
}

bool DropSuffix(std::string* s, std::string_view suffix) {
  if (!s->ends_with(suffix)) return false;
  s->resize(s->size() - suffix.size());
  return true;
}

}  // namespace

std::span<const MetricDef> MetricTable() { return kMetrics; }

std::vector<MetricLabelDef> MetricLabels() {
  std::vector<std::string> ops;
  for (size_t slot = 0; slot <= proto::kOpCount; ++slot) ops.push_back(OpLabel(slot));
  std::vector<std::string> commands;
  for (size_t slot = 0; slot < kRespCommandSlots; ++slot)
    commands.push_back(RespCommandLabel(slot));
  std::vector<std::string> statuses;
  for (size_t code = 0; code < kStatusCodes; ++code) {
    statuses.push_back(StatusLabel(static_cast<Status::Code>(code)));
  }
  return {
      {"op", "the request's operation; unknown: an operation code the server does not know",
       std::move(ops)},
      {"status", "ok, or the error's status code (proto/PROTOCOL.md) in snake case",
       std::move(statuses)},
      {"command",
       "a RESP command, lower case with \"_\" for \".\" (seg_get); unknown: a name the server "
       "does not answer",
       std::move(commands)},
      {"mode", "CPU time spent in user space or in the kernel", {"user", "system"}},
      {"version", "the server's name and version: \"segstored 0.1.0\"", {}},
      {"io_backend", "how the store reaches the device: io_uring, or sync (pread/pwrite)", {}},
      {"log_partition", "a partition of the cluster's log: 0 to cluster_log.partitions - 1", {}},
  };
}

std::string_view SectionName(MetricSection section) {
  switch (section) {
    case kServer:
      return "server";
    case kProcess:
      return "process";
    case kStorage:
      return "storage";
    case kRecovery:
      return "recovery";
    case kSweeper:
      return "sweeper";
    case kCluster:
      return "cluster";
    case kReplica:
      return "replica";
  }
  return "?";
}

std::string_view KindName(MetricKind kind) {
  switch (kind) {
    case kCounter:
      return "counter";
    case kGauge:
      return "gauge";
    case kHistogram:
      return "histogram";
    case kInfo:
      return "info";
    case kStatsOnly:
      return "stats only";
  }
  return "?";
}

std::string_view UnitName(MetricUnit unit) {
  switch (unit) {
    case kNone:
      return "";
    case kBytes:
      return "bytes";
    case kSeconds:
      return "seconds";
  }
  return "?";
}

std::string StatsStem(const MetricDef& def) {
  std::string stem(def.name);
  DropPrefix(&stem, std::string(SectionWord(def.section)) + "_");
  DropSuffix(&stem, "_total");
  if (def.kind == kHistogram) DropSuffix(&stem, "_" + std::string(UnitName(def.unit)));
  return std::string(SectionName(def.section)) + "." + stem;
}

std::vector<std::string> StatsNamePatterns(const MetricDef& def) {
  const std::string stem = StatsStem(def);
  std::string labels;
  for (std::string_view label : def.labels) {
    if (!label.empty()) labels += ".<" + std::string(label) + ">";
  }
  switch (def.kind) {
    case kInfo: {
      std::vector<std::string> out;
      for (std::string_view label : def.labels) {
        if (!label.empty())
          out.push_back(std::string(SectionName(def.section)) + "." + std::string(label));
      }
      return out;
    }
    case kHistogram:
      return {stem + labels + ".<figure>"};
    case kCounter:
      if (!labels.empty()) return {stem, stem + labels};  // the total, then each series
      return {stem};
    case kGauge:
    case kStatsOnly:
      break;
  }
  return {stem + labels};
}

std::string RespCommandLabel(size_t slot) {
  std::string name(RespSlotName(slot));
  std::replace(name.begin(), name.end(), '.', '_');
  return name;
}

std::string OpLabel(size_t slot) {
  return slot < proto::kOpCount
             ? std::string(proto::OpName(static_cast<uint8_t>(proto::kOps[slot])))
             : std::string("unknown");
}

// "NotFound" -> "not_found", "IOError" -> "io_error". A word starts at a
// capital after a small letter, or at the last capital of a run followed by
// a small letter.
std::string StatusLabel(Status::Code code) {
  if (code == Status::Code::kOk) return "ok";
  const std::string_view camel = Status::CodeName(code);
  auto upper = [&](size_t i) { return std::isupper(static_cast<unsigned char>(camel[i])) != 0; };
  std::string out;
  for (size_t i = 0; i < camel.size(); ++i) {
    if (i > 0 && upper(i) && (!upper(i - 1) || (i + 1 < camel.size() && !upper(i + 1)))) {
      out.push_back('_');
    }
    out.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(camel[i]))));
  }
  return out;
}

}  // namespace segstore::server

// The Kafka engine of the replicated log (log.h), over librdkafka's C API.
// Only kafka_log.cc and its tests include this; the rest of segstore knows
// OpenKafkaWriter and OpenKafkaReader (log.h) alone.
//
// Opening (either): checks the options, then asks the brokers for the
// topic's metadata, bounded by open_timeout: Unavailable when none answers
// in time, InvalidArgument when the topic does not exist or has another
// number of partitions than `partitions` (naming both), or for a property
// librdkafka refuses.
//
// Writer (OpenKafkaWriter): one idempotent producer (acks=all), so an entry
// retried inside librdkafka is written once and the entries of a log
// partition keep the order they were appended in. It owns one thread, the
// writer thread, which runs rd_kafka_poll whenever librdkafka's queue has
// something (an eventfd the queue writes to) and calls every AppendCallback;
// an append refused inside Append is handed to that thread too, so no
// callback ever runs inside Append. Append and stats() may be called from
// any thread. Outcomes:
// - delivered: OK with the offset;
// - failed, librdkafka's message status NOT_PERSISTED: Unavailable;
// - failed, POSSIBLY_PERSISTED (it was sent, and the answer never came:
//   a timeout, a broken connection): Unavailable, maybe_written;
// - a partition out of range, an entry over message.max.bytes (at Append,
//   or the broker's MESSAGE_TOO_LARGE): InvalidArgument;
// - librdkafka's local queue full, or its fatal error: Unavailable.
// Retriable broker errors (NOT_ENOUGH_REPLICAS, a leader moving, a broker
// down) are retried inside librdkafka until append_timeout; then the append
// fails as "Message timed out", maybe written only if an attempt was left
// unanswered.
// The destructor waits up to append_timeout for what is in flight (the
// writer thread keeps serving it), then purges what is left (librdkafka
// reports each purged entry: not written when still queued, maybe written
// when in flight), and finally fails, as maybe written, whatever librdkafka
// did not report within a further bound: every callback runs exactly once,
// on the writer thread, before the destructor returns.
//
// Reader (OpenKafkaReader): one consumer with a manual assignment
// (rd_kafka_assign; it never subscribes, joins a group or commits: group.id
// is a fixed name librdkafka requires for rd_kafka_assign). Its consumer
// queue writes to the reader's eventfd when it goes from empty to not empty
// (rd_kafka_queue_io_event_enable); Poll reads that eventfd first, then
// takes what was fetched with rd_kafka_consume_batch_queue (timeout 0).
// auto.offset.reset=error: an offset no longer in the log (retention) comes
// back as an error event for its partition, which Poll returns as NotFound
// once and then pauses that partition. Other errors (a broker down, all
// brokers down) are recorded for health() and logged, never returned.
// enable.partition.eof=true: reaching a partition's end tells the reader its
// next offset even when nothing was delivered (kFromEnd), and counts as
// progress for health().
//
// The reader's health: librdkafka does not say when it last fetched a
// partition, so the reader watches its Fetch answers per broker (an
// on_response_received interceptor, on librdkafka's broker threads) and the
// leader of each partition (a metadata request every second from the
// reader's watch thread, bounded by a second; the one thread it owns, which
// never touches the consumer queue). An assigned partition is fresh while a
// message or end-of-partition event of it was polled, or its leader answered
// a Fetch, within `stale_after`; the time of the assignment counts as a
// start. A partition whose leader just moved may count as fresh for up to
// a second before the consumer follows it. (A consumer reading from
// followers, client.rack set through `properties`, would see its leaders
// quiet: do not set it.)
//
// Logging: librdkafka's log lines become spdlog lines ("log: kafka ...");
// syslog levels map to spdlog's, connection failures are downgraded to
// warnings, and a line repeated (same facility and text but for numbers)
// within 10 s is logged at debug and counted in the next one shown.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "log/log.h"

namespace segstore::log {

using KafkaProperties = std::vector<std::pair<std::string, std::string>>;

// The librdkafka properties the writer / reader set, in this order, before
// `options.properties` (which the caller may use to override any of them).
// The reasons and the latencies measured are in kafka_log.cc.
KafkaProperties KafkaWriterProperties(const LogOptions& options);
KafkaProperties KafkaReaderProperties(const LogOptions& options);

}  // namespace segstore::log

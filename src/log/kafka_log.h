// The Kafka engine of the replicated log (log.h), over librdkafka's C API.
// Only kafka_log.cc and its tests include this; the rest of segstore knows
// OpenKafkaWriter, OpenKafkaReader and CheckProperties (log.h) alone.
//
// Opening (either): checks the options and the properties (CheckProperties),
// then makes the librdkafka client, which never waits for a broker:
// InvalidArgument for bad options or a property refused (by segstore, by
// librdkafka's rd_kafka_conf_set, or by rd_kafka_new for a combination it
// refuses). A thread of the writer or reader then asks the brokers about the
// topic (a metadata request bounded by a second, every 250 ms until one
// answers, every second while the answer is wrong), and the first answer
// that settles it decides: the topic exists with `partitions` partitions
// (right: never asked again), or it does not exist or has another number of
// partitions (wrong: InvalidArgument naming both, logged once at error;
// asked again, and a right answer ends it). LEADER_NOT_AVAILABLE and other
// topic errors settle nothing.
//
// Writer (OpenKafkaWriter): one idempotent producer (acks=all), so an entry
// retried inside librdkafka is written once and the entries of a log
// partition keep the order they were appended in. It owns two threads: the
// writer thread, which runs rd_kafka_poll whenever librdkafka's queue has
// something (an eventfd the queue writes to), calls every AppendCallback and
// replaces the producer after a fatal error; and the topic check's thread,
// which ends once the topic is found right. An append refused inside Append
// is handed to the writer thread too, so no callback ever runs inside
// Append. Append and stats() may be called from any thread.
// Until the topic is found right, and while the producer is replaced,
// appends are held by the writer (in order, not yet given to librdkafka;
// bounded by librdkafka's own queue limits, queue.buffering.max.messages and
// .kbytes, beyond which they fail as not written); each waits up to
// append_timeout, then fails as not written (Unavailable, saying what it
// waited for). Once the topic is right they go to librdkafka in order, each
// with append_timeout again; when it is wrong they fail with its
// InvalidArgument, as every append does while it stays wrong.
// Outcomes, from librdkafka's delivery reports:
// - delivered: OK with the offset;
// - failed, librdkafka's message status NOT_PERSISTED: Unavailable;
// - failed, POSSIBLY_PERSISTED (it was sent, and the answer never came:
//   a timeout, a broken connection, a fatal error): Unavailable,
//   maybe_written;
// - MSG_SIZE_TOO_LARGE or RECORD_LIST_TOO_LARGE from the broker: librdkafka
//   fails every entry of the refused batch (one partition's records in one
//   produce request) with it, permanently, NOT_PERSISTED, without splitting
//   the batch or retrying (librdkafka 2.0.2). An entry is InvalidArgument
//   only when it is itself over message.max.bytes (key + value + 36 bytes,
//   librdkafka's largest per-record overhead: the same test rd_kafka_produce
//   makes); otherwise it was refused for its batch-mates, and fails as
//   Unavailable, not written: the caller may retry it. (A broker whose
//   max.message.bytes is below the producer's message.max.bytes refuses an
//   entry between the two every time, as Unavailable: keep
//   message.max.bytes at or below the topic's max.message.bytes.)
// - refused at Append (rd_kafka_produce): an entry over message.max.bytes,
//   or a partition out of range: InvalidArgument; librdkafka's queue full:
//   Unavailable.
// Retriable broker errors (NOT_ENOUGH_REPLICAS, a leader moving, a broker
// down) are retried inside librdkafka until append_timeout; then the append
// fails as "Message timed out", maybe written only if an attempt was left
// unanswered.
// A fatal error (librdkafka's idempotent producer raises one when it cannot
// go on without breaking its guarantees, e.g. OUT_OF_ORDER_SEQUENCE_NUMBER,
// or an InitProducerId refused for authorization) makes the producer
// unusable. The writer thread sees it (rd_kafka_fatal_error, after each
// rd_kafka_poll), logs it at error, purges the old producer (what it never
// sent fails as not written, what it sent and was not answered as maybe
// written; anything it does not report within 2 s fails as maybe written),
// destroys it and makes a new one with the same settings (a new producer
// ID); appends made meanwhile are held as above and go to the new producer.
// If the new one cannot be made, it is tried again every second.
// The destructor waits up to append_timeout for what is in flight or held
// (the writer thread keeps serving it), then purges what is left (librdkafka
// reports each purged entry: not written when still queued, maybe written
// when in flight), and finally fails, as maybe written, whatever librdkafka
// did not report within a further bound (held appends: not written): every
// callback runs exactly once, on the writer thread, before the destructor
// returns.
//
// Reader (OpenKafkaReader): one consumer with a manual assignment
// (rd_kafka_assign; it never subscribes, joins a group or commits: group.id
// is a fixed name librdkafka requires for rd_kafka_assign). Its consumer
// queue writes to the reader's eventfd when it goes from empty to not empty
// (rd_kafka_queue_io_event_enable); Poll reads that eventfd first, then
// takes what was fetched with rd_kafka_consume_batch_queue (timeout 0) --
// nothing until the topic is found right (the watch thread then writes the
// eventfd).
// auto.offset.reset=earliest: when a Fetch fails with OFFSET_OUT_OF_RANGE
// (the offset is below the log's start, or past its end), librdkafka resets
// that partition, in its fetcher, to the oldest offset held (the log start
// of the last Fetch answer, or a ListOffsets) and fetches on from there: the
// partition never stops, and since nothing was fetched at the offset
// refused, nothing is delivered twice. The reader sees the reset as the
// offset of the next entry (or end-of-partition event) differing from the
// one it expected, and logs a warning naming the partition and both offsets
// ("no longer in the log" when it jumps forward, "past the log's end" when
// it goes back); librdkafka's own line about the reset is shown at info.
// (librdkafka 2.1 and later also validate offsets against leader epochs
// (KIP-320) and, on a truncation they detect that way, go on from the new
// end instead of the start; the reader warns the same way.)
// Other errors (a broker down, all brokers down) are recorded for health()
// and logged, never returned.
// enable.partition.eof=true: reaching a partition's end tells the reader its
// next offset even when nothing was delivered (kFromEnd), and counts as
// progress for health().
//
// The reader's health: librdkafka does not say when it last fetched a
// partition, so the reader watches its Fetch answers per broker (an
// on_response_received interceptor, on librdkafka's broker threads) and the
// leader of each partition (a metadata request every second from the
// reader's watch thread, bounded by a second; the one thread it owns, which
// never touches the consumer queue, and which also makes the topic check).
// Before the topic is checked, health() is Unavailable; while it is wrong,
// the check's InvalidArgument. An assigned partition is fresh while a
// message or end-of-partition event of it was polled, or its leader answered
// a Fetch, within `stale_after`; the time of the assignment counts as a
// start. A partition whose leader just moved may count as fresh for up to
// a second before the consumer follows it. (A consumer reading from
// followers, client.rack, would see its leaders quiet: CheckProperties
// refuses it.)
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
// `options.properties` (which may override any of them but those
// CheckProperties refuses).
// The reasons and the latencies measured are in kafka_log.cc.
KafkaProperties KafkaWriterProperties(const LogOptions& options);
KafkaProperties KafkaReaderProperties(const LogOptions& options);

}  // namespace segstore::log

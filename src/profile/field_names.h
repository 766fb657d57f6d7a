// The store's field name table: each field name a profile stores gets a
// number, so that a body names a field in a byte or two instead of its
// bytes (field_codec.h). Aerospike keeps bin names the same way.
//
// On the device: one record per name, under the key kReservedKeyPrefix +
// "field-name:" + its number in decimal, its body a version byte (1) then
// the name. Numbers run from 1: new names are written in batches of at most
// 256 (one flush each), a batch only once the one before is on the device,
// so the only gaps are what a crash cut from one batch (numbers no body
// ever used), and Load reads them back by trying 1, 2, ... in batches of
// 256 until a whole batch is missing (a record lost to damage costs only
// its own name). A body uses a number only once its
// record is on the device (Flush), so a crash never leaves a body naming a
// number the table does not have. A name not yet registered is written
// inline (always valid); registering is asynchronous and never holds a
// write up, and a later write of the profile names it by number.
//
// Numbers are this node's own: a body sent to another node (a cluster's
// partition copy, read_records) goes with its names inline
// (ProfileStore::PortableBody).
//
// Thread-safe: lookups from any thread (Name is lock-free); registration
// runs on the worker of the session that asked for it.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "segstore/profile.h"
#include "segstore/result.h"
#include "segstore/storage.h"

namespace segstore::profile {

class FieldNames {
 public:
  // At most `max_names` numbers given (at most kMaxNames); names past them
  // stay inline. Numbers a store already holds are read whatever the limit.
  static constexpr uint32_t kMaxNames = 1 << 20;
  explicit FieldNames(uint32_t max_names);
  ~FieldNames();

  // The record key of name number `id`.
  static std::string Key(uint32_t id);

  // Reads the table from the store on `worker` (blocking): at Open, before
  // any session writes. Corruption when a record is not a name record.
  Status Load(storage::Worker& worker);

  // The number of `name`, 0 when it has none yet.
  uint32_t Find(std::string_view name) const;
  // The name of number `id`; empty when the table has no such number.
  std::string_view Name(uint32_t id) const;
  // The highest number given (names registered, unless a record was lost).
  uint32_t size() const { return published_.load(std::memory_order_acquire); }

  // Registers `names` that have no number yet (past the limit, nothing), on
  // `worker`, one after another; returns at once. The numbers are usable
  // (Find) once each record is on the device. A failed write is retried by
  // a later Register of the name.
  void Register(std::span<const std::string> names, storage::Worker& worker);

 private:
  static constexpr uint32_t kChunkBits = 10;
  static constexpr uint32_t kChunk = 1 << kChunkBits;
  // Makes `id` name `name`: with mu_ held.
  void Publish(uint32_t id, std::string name);
  // Writes the records of queue_'s first names (a batch), flushes, numbers
  // them, then the next batch, until it is empty: with mu_ not held,
  // writing_ set.
  void WriteNext(storage::Worker& worker);

  const uint32_t max_names_;
  // Name by number: chunks of kChunk names, allocated as the table grows and
  // never moved; entries up to published_ are immutable.
  std::unique_ptr<std::atomic<std::string*>[]> chunks_;
  std::atomic<uint32_t> published_{0};  // the highest number in the table
  uint32_t loaded_ = 0;                 // names Load found (holes not counted)
  mutable std::mutex mu_;
  std::unordered_map<std::string, uint32_t> ids_;  // guarded by mu_
  std::vector<std::string> queue_;                 // guarded by mu_: to register, in order
  bool writing_ = false;                           // guarded by mu_: a record is being written
};

// The name table of a store ProfileStore::Open opened (for tests and tools).
const FieldNames& FieldNamesOf(const ProfileStore& store);

}  // namespace segstore::profile

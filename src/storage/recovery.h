// Recovery: rebuilds the index and the block table of a store by scanning
// its device, before the store serves anything.
//
// Every write block with a valid header is read whole and its records parsed
// in order (BlockScanner: bytes that fail validation are skipped, so a damaged
// record or a torn flush costs only what it covers; records of an earlier
// incarnation of the block never validate, their salt differs). For each key
// the highest version wins.
// A winner that is a tombstone, or a record whose void_at has passed, is kept
// in the index as a tombstone unless its version is below the watermark (the
// lowest sequence of any block on the device): then no older version of its
// key can remain anywhere, and it is dropped.
#pragma once

#include <cstdint>

#include "segstore/storage.h"
#include "storage/io_queue.h"

namespace segstore::storage {

class StoreImpl;

// Fills `store`'s index and block table. `queue` belongs to the calling
// thread. On success `stats` says what was found; its max_seq is the highest
// sequence on the device.
Status Recover(StoreImpl* store, IoQueue* queue, RecoveryStats* stats);

}  // namespace segstore::storage

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
//
// Two steps, so that a start loading the index checkpoint
// (index_checkpoint.h) checks the device against it with the first alone.
#pragma once

#include <cstdint>
#include <vector>

#include "segstore/storage.h"
#include "storage/block_table.h"
#include "storage/io_queue.h"

namespace segstore::storage {

class StoreImpl;

// A write block holding a valid header of this device.

// Step 1: reads the first sector of every write block and lists, in block
// order, those holding a valid header of this device (its device id, block
// size and place; a damaged header counts as free, with a warning).
// Counts stats->blocks_scanned and blocks_in_use. Corruption when a block
// of this device is in a format version newer than its superblock's (see
// recovery.cc); IOError when a read fails. Writes nothing.
Status FindBlocksInUse(StoreImpl* store, IoQueue* queue, RecoveryStats* stats,
                       std::vector<BlockInUse>* in_use);

// Steps 2 and 3: reads every block of `in_use` whole and fills `store`'s index and
// block table, which must be empty. `queue` belongs to the calling thread.
// On success `stats` says what was found; its max_seq is the highest
// sequence on the device.
Status RebuildIndex(StoreImpl* store, IoQueue* queue, const std::vector<BlockInUse>& in_use,
                    RecoveryStats* stats);

}  // namespace segstore::storage

#include "storage/block_writer.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cstring>
#include <mutex>
#include <optional>

#include "common/coding.h"
#include "storage/format.h"
#include "storage/index.h"
#include "storage/store_impl.h"

namespace segstore::storage {

// One durable write of a block's range [begin, end).
struct BlockWriter::Flight final : IoCompletion {
  Open* ob = nullptr;
  uint32_t begin = 0;
  uint32_t end = 0;
  uint64_t first = UINT64_MAX;  // lowest stamp of the records it carries
  bool complete = false;
  int32_t result = 0;
  void OnIoComplete(int32_t r) override;
};

// One block this writer appends to or is still flushing.
struct BlockWriter::Open {
  BlockWriter* writer = nullptr;
  uint32_t block = 0;
  uint64_t seq = 0;
  uint64_t salt = 0;  // what its records and pad markers are checksummed with
  uint64_t base = 0;  // device offset of the block
  std::shared_ptr<BlockImage> image;
  uint32_t write_off = kBlockHeaderSize;  // next append
  uint32_t flushed = 0;  // [0, flushed) is on the device: every flush up to it completed
  uint32_t issued = 0;   // [0, issued) is on the device or in flight
  bool sealed = false;
  // The block's summary (FORMAT.md, "Block summaries"): bytes its entries
  // take so far, and the records appended. A block opened for a record too
  // large to leave room for one goes without (recovery reads it whole).
  bool summarized = true;
  bool summary_issued = false;
  uint32_t summary_bytes = 0;
  uint32_t records = 0;
  bool reflush = false;  // flush again when a flight completes (kMaxFlights were out)
  bool broken = false;   // a flush failed: nothing more is acknowledged
  std::deque<std::unique_ptr<Flight>> flights;  // in flight or done out of order, by begin
  uint64_t tail_first = UINT64_MAX;             // lowest stamp appended since the last flush
  std::deque<std::pair<uint32_t, FlushCallback>> waiters;  // by record end, ascending

  uint8_t* bytes() { return image->data(); }
  bool has_records() const { return write_off > kBlockHeaderSize || flushed > 0; }
};

struct BlockWriter::Spare {
  explicit Spare(StoreImpl* s) : store(s) {}
  ~Spare() {
    if (image) store->CountImageBytes(-static_cast<int64_t>(store->block_size()));
  }
  StoreImpl* const store;
  std::mutex mu;
  std::unique_ptr<BlockImage> image;              // may be null
  std::chrono::steady_clock::time_point kept_at;  // when `image` became the spare
  bool orphaned = false;  // the writer is gone: images are unmapped, not kept
};

void BlockWriter::Flight::OnIoComplete(int32_t r) { ob->writer->OnFlushed(ob, this, r); }

void BlockWriter::Timer::OnIoComplete(int32_t /*result*/) {
  armed = false;
  if (writer->open_) writer->Flush(writer->open_.get());
}

BlockWriter::BlockWriter(StoreImpl* store, IoQueue* queue, Counters* counters, PostFn post,
                         std::chrono::microseconds flush_interval)
    : store_(store),
      queue_(queue),
      counters_(counters),
      post_(std::move(post)),
      flush_interval_(flush_interval),
      nonces_(std::random_device{}() ^ (uint64_t{std::random_device{}()} << 32)),
      spare_(std::make_shared<Spare>(store)) {
  timer_.writer = this;
  store_->RegisterWriter(this);
}

BlockWriter::~BlockWriter() {
  BlockTable& blocks = store_->blocks();
  if (open_) {
    if (!open_->has_records()) {
      blocks.DetachImage(open_->block);
      blocks.ReleaseUnwritten(open_->block);
    } else if (open_->flushed >= open_->write_off && open_->flights.empty()) {
      blocks.DetachImage(open_->block);
      blocks.MarkUsed(open_->block);
    }
    // Otherwise a device error left records only in memory: the image stays
    // attached so reads keep finding them until the store closes.
  }
  store_->UnregisterWriter(this);
  // Images still held (by readers, or after a device error) are unmapped
  // when let go: no writer is left to reuse them, nor a store tick to reach.
  std::unique_ptr<BlockImage> spare;
  {
    std::lock_guard lock(spare_->mu);
    spare_->orphaned = true;
    spare = std::move(spare_->image);
  }
  if (spare) store_->CountImageBytes(-static_cast<int64_t>(store_->block_size()));
}

uint64_t BlockWriter::open_seq() const { return open_ ? open_->seq : UINT64_MAX; }

bool BlockWriter::idle() const {
  // Sealed blocks leave sealing_ when their last flush completes, or stay
  // there after a device error: only I/O in flight counts.
  if (timer_.armed || (open_ && !open_->flights.empty())) return false;
  return std::none_of(sealing_.begin(), sealing_.end(),
                      [](const std::unique_ptr<Open>& s) { return !s->flights.empty(); });
}

std::unique_ptr<BlockImage> BlockWriter::ReleaseSpare(
    std::chrono::steady_clock::time_point kept_before) {
  std::lock_guard lock(spare_->mu);
  if (!spare_->image || spare_->kept_at > kept_before) return nullptr;
  return std::move(spare_->image);
}

std::shared_ptr<BlockImage> BlockWriter::TakeImage(uint64_t salt) {
  std::unique_ptr<BlockImage> image;
  {
    std::lock_guard lock(spare_->mu);
    image = std::move(spare_->image);
  }
  if (image) {
    std::memset(image->data(), 0, std::min<size_t>(image->dirty, image->size()));
    image->dirty = static_cast<uint32_t>(image->size());
  } else {
    image = std::make_unique<BlockImage>(store_->block_size());
    store_->CountImageBytes(store_->block_size());
  }
  image->salt = salt;
  // The deleter runs once the last owner let go: this writer, or a reader on
  // another thread that pinned the image (shared_ptr orders every owner's
  // copy out before it; the spare's mutex orders the deleter before the next
  // TakeImage writes). It keeps the image as the spare if there is none,
  // else unmaps it; the store outlives both.
  return std::shared_ptr<BlockImage>(image.release(), [spare = spare_](BlockImage* p) {
    std::unique_ptr<BlockImage> dropped(p);  // unmapped outside the lock if not kept
    {
      std::lock_guard lock(spare->mu);
      if (!spare->image && !spare->orphaned) {
        spare->image = std::move(dropped);
        spare->kept_at = std::chrono::steady_clock::now();
        return;
      }
    }
    spare->store->CountImageBytes(-static_cast<int64_t>(spare->store->block_size()));
  });
}

void BlockWriter::OpenBlock(const BlockHeader& h) {
  auto ob = std::make_unique<Open>();
  ob->writer = this;
  ob->block = h.block_index;
  ob->seq = h.seq;
  ob->salt = h.salt();
  ob->base = store_->BlockOffset(h.block_index);
  ob->image = TakeImage(ob->salt);
  EncodeBlockHeader(h, ob->bytes());
  store_->blocks().AttachImage(h.block_index, ob->image);
  open_ = std::move(ob);
  open_seq_hint_.store(h.seq, std::memory_order_relaxed);
}

uint32_t BlockWriter::Placement(uint32_t write_off, uint32_t footprint) const {
  if (store_->options().align_records && footprint <= kSectorSize) {
    uint32_t in_sector = write_off % kSectorSize;
    if (in_sector != 0 && in_sector + footprint > kSectorSize) {
      return write_off - in_sector + kSectorSize;  // the next sector, not two halves
    }
  }
  return write_off;
}

bool BlockWriter::Fits(const Open& ob, uint32_t footprint, size_t reference) const {
  const uint32_t block_size = store_->block_size();
  const uint64_t end = uint64_t{Placement(ob.write_off, footprint)} + footprint;
  if (!ob.summarized) return end <= block_size;
  // The record's last sector, then the summary's whole sectors.
  return AlignUp(end, kSectorSize) +
             SummaryRegionSize(uint64_t{ob.summary_bytes} + SummaryEntryBytes(reference)) <=
         block_size;
}

Status BlockWriter::Reserve(uint32_t footprint, BlockTable::Purpose purpose, size_t reference) {
  if (store_->writes_failed()) {
    return Status::Unavailable(fmt::format("writes are refused after a device error ({})",
                                           store_->write_error().ToString()));
  }
  const uint32_t block_size = store_->block_size();
  if (footprint > block_size - kBlockHeaderSize) {
    return Status::InvalidArgument(
        fmt::format("a record of {} bytes does not fit in a write block", footprint));
  }
  if (!open_ || !Fits(*open_, footprint, reference)) {
    BlockHeader h;
    h.seq = store_->NextSeq();
    h.nonce = nonces_();
    h.device_id = store_->superblock().device_id;
    h.block_size = block_size;
    std::optional<uint32_t> block = store_->blocks().Allocate(purpose, h.seq, h.salt());
    if (!block) {
      return Status::DeviceFull(fmt::format(
          "device full: no free write block on {} ({} blocks of {} KiB, all holding data); "
          "delete data or use a larger device",
          store_->device().name(), store_->blocks().block_count() - 1, block_size >> 10));
    }
    h.block_index = *block;
    if (open_) Seal();
    OpenBlock(h);
    // Too large to leave room for a summary even alone: this block goes
    // without one.
    if (!Fits(*open_, footprint, reference)) open_->summarized = false;
  }
  Open* ob = open_.get();
  uint32_t at = Placement(ob->write_off, footprint);
  if (at != ob->write_off) {
    EncodePadMarker(ob->salt, ob->bytes() + ob->write_off);
    ob->write_off = at;
  }
  return Status::OK();
}

BlockWriter::Slot BlockWriter::Append(uint32_t footprint, uint64_t stamp, size_t reference) {
  Open* ob = open_.get();
  assert(ob != nullptr && Fits(*ob, footprint, reference));
  if (ob->summarized) ob->summary_bytes += SummaryEntryBytes(reference);
  ++ob->records;
  Slot s;
  s.dst = ob->bytes() + ob->write_off;
  s.offset = ob->base + ob->write_off;
  s.block_salt = ob->salt;
  ob->write_off += footprint;
  s.end_in_block = ob->write_off;
  if (ob->tail_first == UINT64_MAX) {
    ob->tail_first = stamp;
    PublishPendingMin();
  }
  return s;
}

void BlockWriter::WhenDurable(const Slot& slot, FlushCallback done) {
  Open* ob = nullptr;
  if (open_ && open_->salt == slot.block_salt) {
    ob = open_.get();
  } else {
    for (auto& s : sealing_) {
      if (s->salt == slot.block_salt) ob = s.get();
    }
  }
  if (ob == nullptr || ob->flushed >= slot.end_in_block) {
    // Already on the device (its block finished flushing).
    post_([done = std::move(done)] { done(Status::OK()); });
    return;
  }
  ob->waiters.emplace_back(slot.end_in_block, std::move(done));
  if (ob == open_.get() && !flush_posted_) {
    // Group commit: flush once the current burst of work has been appended.
    flush_posted_ = true;
    post_([this] {
      flush_posted_ = false;
      if (open_) Flush(open_.get());
    });
  }
}

void BlockWriter::FlushWithinInterval() {
  if (timer_.armed) return;
  timer_.armed = true;
  queue_->Timeout(flush_interval_, &timer_);
}

void BlockWriter::CancelTimer() {
  if (timer_.armed) queue_->CancelTimeout(&timer_);
}

void BlockWriter::FlushAll(FlushCallback done) {
  struct Join {
    int remaining = 1;
    Status status;
    FlushCallback done;
  };
  auto join = std::make_shared<Join>();
  join->done = std::move(done);
  auto arrive = [join](Status s) {
    if (!s.ok() && join->status.ok()) join->status = std::move(s);
    if (--join->remaining == 0) join->done(join->status);
  };
  auto wait_for = [&](Open* ob) {
    // A sealed block is done once its summary is on the device too.
    const uint32_t end = ob->sealed && ob->summarized ? store_->block_size() : ob->write_off;
    if (end <= ob->flushed) return;
    if (!ob->has_records()) return;
    ++join->remaining;
    ob->waiters.emplace_back(end, arrive);
    Flush(ob);
  };
  if (open_) wait_for(open_.get());
  for (auto& s : sealing_) wait_for(s.get());
  post_([arrive] { arrive(Status::OK()); });
}

void BlockWriter::Seal() {
  Open* ob = open_.get();
  ob->sealed = true;
  if (!ob->has_records()) {
    ob->image->dirty = ob->write_off;
    store_->blocks().DetachImage(ob->block);
    store_->blocks().ReleaseUnwritten(ob->block);
    open_.reset();
    open_seq_hint_.store(UINT64_MAX, std::memory_order_relaxed);
    return;
  }
  sealing_.push_back(std::move(open_));
  open_seq_hint_.store(UINT64_MAX, std::memory_order_relaxed);
  if (ob->write_off > ob->issued) {
    Flush(ob);
  } else if (ob->flights.empty() && !ob->broken) {
    Complete(ob);
  }  // else the last flight to complete finishes it, or (broken) its image
     // stays attached so its records remain readable
}

void BlockWriter::Complete(Open* ob) {
  // The summary goes last, alone, once every flush before it completed: a
  // summary on the device then vouches only for records that are there too
  // (flushes complete in any order, and a crash can lose an earlier one).
  if (ob->summarized && !ob->summary_issued && !store_->writes_failed() && EncodeSummary(ob)) {
    ob->summary_issued = true;
    const uint32_t block_size = store_->block_size();
    const uint32_t begin = block_size - SummaryRegionSize(ob->summary_bytes);
    auto f = std::make_unique<Flight>();
    f->ob = ob;
    f->begin = begin;
    f->end = block_size;
    ob->issued = block_size;
    ob->write_off = block_size;
    counters_->Bump(counters_->flushes);
    Flight* raw = f.get();
    ob->flights.push_back(std::move(f));
    queue_->Write(ob->base + begin, ob->bytes() + begin, block_size - begin, raw);
    return;
  }
  // No summary after all: whoever waits for it (FlushAll) waits no more.
  // Every record is on the device (no flight is left, none failed).
  auto waiters = std::move(ob->waiters);
  Finish(ob);  // destroys ob
  for (auto& w : waiters) w.second(Status::OK());
}

bool BlockWriter::EncodeSummary(Open* ob) {
  const uint32_t block_size = store_->block_size();
  const uint32_t records_end = ob->issued;
  std::string entries;
  entries.reserve(ob->summary_bytes);
  BlockScanner scan(ob->bytes(), records_end, ob->salt);
  RecordView v;
  uint32_t off;
  uint32_t count = 0;
  while (scan.Next(&v, &off)) {
    const Digest d = store_->DigestOf(v.key);
    SummaryEntry e;
    e.digest_lo = d.lo;
    e.digest_hi = d.hi;
    e.version = v.header.version;
    e.offset = off;
    e.footprint = v.footprint;
    e.sweep_at = v.header.sweep_at;
    e.void_at = v.header.void_at;
    e.kind = v.header.kind;
    e.partition = static_cast<uint16_t>(Index::PartitionOf(v.key));
    e.reference = v.reference;
    AppendSummaryEntry(e, &entries);
    ++count;
  }
  // Every record appended, and no more room than reserved: anything else is
  // a bug (a caller that named no reference, say), and the block goes
  // without a summary rather than with a wrong one.
  if (count != ob->records || scan.damaged() != 0 || entries.size() != ob->summary_bytes ||
      records_end > block_size - SummaryRegionSize(entries.size())) {
    assert(false && "a block summary that does not match its block");
    return false;
  }
  uint8_t* region = ob->bytes() + block_size - SummaryRegionSize(entries.size());
  std::memcpy(region, entries.data(), entries.size());
  SummaryTrailer t;
  t.count = count;
  t.entry_bytes = static_cast<uint32_t>(entries.size());
  t.records_end = records_end;
  t.seq = ob->seq;
  t.entries_sum = SummaryEntriesChecksum(region, entries.size(), ob->salt);
  EncodeSummaryTrailer(t, ob->salt, ob->bytes() + block_size - kSummaryTrailerSize);
  return true;
}

void BlockWriter::Flush(Open* ob) {
  if (ob->flights.size() >= kMaxFlights) {
    ob->reflush = true;
    return;
  }
  if (store_->writes_failed()) {
    // Records no flight carries fail now; those in flight learn from theirs
    // (on a broken block, no flight will tell them: all fail).
    Status s = Status::Unavailable(fmt::format("write block not flushed after a device error ({})",
                                               store_->write_error().ToString()));
    while (!ob->waiters.empty() && (ob->broken || ob->waiters.back().first > ob->issued)) {
      post_([s, done = std::move(ob->waiters.back().second)] { done(s); });
      ob->waiters.pop_back();
    }
    return;
  }
  if (ob->write_off <= ob->issued) return;
  // Every device write of records goes to a block this writer took from the
  // free list (BlockTable::Allocate: Free -> Open), and the block stays Open
  // until its last flush completed. A block found on the device at start
  // (recovered Used, from a scan or the index checkpoint) is never appended
  // to: a write after a restart lands in a block holding a new header (new
  // seq and salt), and a freed block's header is erased before it is free
  // (Defragmenter::FreeReady). So any write changes the set of valid block
  // headers, which is what makes a stale index checkpoint detectable
  // (index_checkpoint.cc, FORMAT.md "The index checkpoint").
  assert(store_->blocks().state(ob->block) == BlockState::kOpen);
  uint32_t end = static_cast<uint32_t>(AlignUp(ob->write_off, kSectorSize));
  if (end > ob->write_off) EncodePadMarker(ob->salt, ob->bytes() + ob->write_off);
  ob->write_off = end;  // later appends start on a fresh sector
  auto f = std::make_unique<Flight>();
  f->ob = ob;
  f->begin = ob->issued;
  f->end = end;
  f->first = ob->tail_first;
  ob->tail_first = UINT64_MAX;
  ob->issued = end;
  counters_->Bump(counters_->flushes);
  Flight* raw = f.get();
  ob->flights.push_back(std::move(f));
  queue_->Write(ob->base + raw->begin, ob->bytes() + raw->begin, raw->end - raw->begin, raw);
}

void BlockWriter::OnFlushed(Open* ob, Flight* flight, int32_t result) {
  flight->complete = true;
  flight->result = result;
  if (ob->broken) {
    // Nothing past the failed flush counts; its flights only have to land.
    std::erase_if(ob->flights, [](const std::unique_ptr<Flight>& f) { return f->complete; });
    return;
  }
  // Flights complete in any order; a record counts as on the device once its
  // flight and every earlier one of the block completed.
  std::optional<Status> failed;
  while (!ob->flights.empty() && ob->flights.front()->complete) {
    const Flight& f = *ob->flights.front();
    const uint32_t len = f.end - f.begin;
    if (f.result != static_cast<int32_t>(len)) {
      failed = f.result < 0
                   ? Status::IOError(fmt::format("write of {} bytes at offset {} of {}: {}", len,
                                                 ob->base + f.begin, store_->device().name(),
                                                 std::strerror(-f.result)))
                   : Status::IOError(fmt::format("short write at offset {} of {}: {} of {} bytes",
                                                 ob->base + f.begin, store_->device().name(),
                                                 f.result, len));
      break;
    }
    ob->flushed = f.end;
    ob->flights.pop_front();
  }
  if (failed) {
    store_->SetWriteError(*failed);
    ob->broken = true;
    ob->reflush = false;
    // The records stay in memory (readable) but are not durable: pending_min
    // keeps them, so defragmentation frees nothing they might depend on.
    for (const auto& f : ob->flights) ob->tail_first = std::min(ob->tail_first, f->first);
    std::erase_if(ob->flights, [](const std::unique_ptr<Flight>& f) { return f->complete; });
    PublishPendingMin();
    // Records before the failed flush are on the device; the rest are not.
    auto waiters = std::move(ob->waiters);
    ob->waiters.clear();
    for (auto& [end, done] : waiters) done(end <= ob->flushed ? Status::OK() : *failed);
    return;
  }
  PublishPendingMin();
  // Callbacks run last: they may start new writes, which may seal or even
  // finish this very block.
  std::vector<FlushCallback> ready;
  while (!ob->waiters.empty() && ob->waiters.front().first <= ob->flushed) {
    ready.push_back(std::move(ob->waiters.front().second));
    ob->waiters.pop_front();
  }
  if (ob->sealed) {
    if (ob->write_off > ob->issued) {
      Flush(ob);
    } else if (ob->flights.empty()) {
      Complete(ob);  // writes its summary, or destroys ob
    }
  } else if (ob->reflush || (!ob->waiters.empty() && ob->waiters.back().first > ob->issued)) {
    ob->reflush = false;
    Flush(ob);
  }
  for (FlushCallback& done : ready) done(Status::OK());
}

void BlockWriter::Finish(Open* ob) {
  BlockTable& blocks = store_->blocks();
  blocks.DetachImage(ob->block);
  blocks.MarkUsed(ob->block);
  ob->image->dirty = std::max(ob->write_off, ob->issued);
  ob->image.reset();  // the spare, or unmapped, once no reader holds it either
  auto it = std::find_if(sealing_.begin(), sealing_.end(),
                         [ob](const std::unique_ptr<Open>& s) { return s.get() == ob; });
  assert(it != sealing_.end());
  sealing_.erase(it);
  PublishPendingMin();
}

void BlockWriter::PublishPendingMin() {
  uint64_t m = UINT64_MAX;
  auto fold = [&m](const Open& ob) {
    m = std::min(m, ob.tail_first);
    for (const auto& f : ob.flights) m = std::min(m, f->first);
  };
  if (open_) fold(*open_);
  for (auto& s : sealing_) fold(*s);
  pending_min_.store(m, std::memory_order_release);
}

}  // namespace segstore::storage

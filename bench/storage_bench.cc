// storage_bench: the storage engine against the raw device, in one run.
//
//   1. Index memory: bytes per record of the DRAM index (allocated bytes,
//      slack, empty slots and partition headers included) at 0.5, 1 and 2
//      million records, cross-checked against malloc's own count.
//   2. Load: records of --record-bytes under the reference workload's keys.
//   3. Raw device: 4 KiB O_DIRECT random reads through io_uring at --depth
//      over the extents the load wrote (the physical limit).
//   4. Engine gets at the same depth, random keys, each read checked; device
//      reads per get; the ratio to the raw rate.
//   5. Engine puts (overwrites) at the same depth, in commit durability.
//
// Each phase runs on one thread, with one io_uring ring, for --seconds.
#include <getopt.h>
#include <malloc.h>
#include <sys/resource.h>
#include <sys/utsname.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench/workload.h"
#include "common/aligned_buffer.h"
#include "common/histogram.h"
#include "segstore/storage.h"
#include "storage/format.h"
#include "storage/index.h"
#include "storage/io_queue.h"

namespace segstore::bench {
namespace {

using Clock = std::chrono::steady_clock;
using storage::Durability;
using storage::Store;
using storage::StoreOptions;
using storage::Worker;

struct Options {
  std::string path = "segstore-data/storage-bench.dat";
  uint64_t file_gib = 4;
  uint64_t records = 300000;
  uint32_t record_bytes = 3072;
  uint32_t depth = 32;
  uint32_t raw_bytes = 4096;  // size of the raw device reads
  uint32_t rounds = 3;        // raw and engine reads alternate, this many times
  bool align = false;         // StoreOptions::align_records (off: the store's default)
  double seconds = 5;
  bool keep = false;
  bool reuse = false;  // skip the load: --path already holds it (from --keep)
  std::string only;    // run one phase: index, raw, get or put
};

void Usage() {
  std::printf(
      "usage: storage_bench [--path FILE] [--file-gib N] [--records N] [--record-bytes N]\n"
      "                     [--depth N] [--seconds S] [--keep] [--reuse]\n"
      "                     [--only index|raw|get|read|put] [--rounds N] [--raw-bytes N] "
      "[--align]\n"
      "Compares the storage engine with the raw device it runs on (see the file header).\n");
}

Options Parse(int argc, char** argv) {
  Options o;
  const option longs[] = {{"path", required_argument, nullptr, 'p'},
                          {"file-gib", required_argument, nullptr, 'f'},
                          {"records", required_argument, nullptr, 'n'},
                          {"record-bytes", required_argument, nullptr, 'b'},
                          {"depth", required_argument, nullptr, 'd'},
                          {"raw-bytes", required_argument, nullptr, 'R'},
                          {"rounds", required_argument, nullptr, 'N'},
                          {"align", no_argument, nullptr, 'P'},
                          {"seconds", required_argument, nullptr, 's'},
                          {"keep", no_argument, nullptr, 'k'},
                          {"reuse", no_argument, nullptr, 'r'},
                          {"only", required_argument, nullptr, 'o'},
                          {"help", no_argument, nullptr, 'h'},
                          {nullptr, 0, nullptr, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "", longs, nullptr)) != -1) {
    switch (c) {
      case 'p':
        o.path = optarg;
        break;
      case 'f':
        o.file_gib = std::stoull(optarg);
        break;
      case 'n':
        o.records = std::stoull(optarg);
        break;
      case 'b':
        o.record_bytes = static_cast<uint32_t>(std::stoul(optarg));
        break;
      case 'd':
        o.depth = static_cast<uint32_t>(std::stoul(optarg));
        break;
      case 'R':
        o.raw_bytes = static_cast<uint32_t>(std::stoul(optarg));
        break;
      case 'N':
        o.rounds = static_cast<uint32_t>(std::stoul(optarg));
        break;
      case 'P':
        o.align = true;
        break;
      case 's':
        o.seconds = std::stod(optarg);
        break;
      case 'k':
        o.keep = true;
        break;
      case 'r':
        o.reuse = true;
        break;
      case 'o':
        o.only = optarg;
        break;
      case 'h':
        Usage();
        std::exit(0);
      default:
        Usage();
        std::exit(2);
    }
  }
  return o;
}

[[noreturn]] void Die(const std::string& what, const Status& s) {
  std::fprintf(stderr, "storage_bench: %s: %s\n", what.c_str(), s.ToString().c_str());
  std::exit(1);
}

std::string Body(uint64_t user, uint32_t version, uint32_t size) {
  std::string b(size, '\0');
  std::mt19937_64 rng(user * 1000003 + version);
  for (size_t i = 0; i + 8 <= b.size(); i += 8) {
    uint64_t r = rng();
    std::memcpy(b.data() + i, &r, 8);
  }
  std::memcpy(b.data(), &user, sizeof user);  // checked on every get
  return b;
}

size_t MallocBytes() {
  struct mallinfo2 mi = mallinfo2();
  return mi.uordblks + mi.hblkhd;
}

// ---- 1. Index memory.
double IndexBytesPerRecord(uint64_t n, double* malloc_view) {
  size_t before = MallocBytes();
  auto index = std::make_unique<storage::Index>();
  for (uint64_t i = 0; i < n; ++i) {
    const std::string key = UserKey(i);
    storage::Digest d = storage::DigestKey(key, 0x5e65);
    index->Lock(storage::Index::PartitionOf(key))
        ->Insert(storage::IndexEntry::Live(storage::Index::TagOf(d), (i + 1) * 4096, 3136, 0, 0));
  }
  storage::Index::Usage u = index->usage();
  *malloc_view = static_cast<double>(MallocBytes() - before) / static_cast<double>(n);
  return static_cast<double>(u.bytes_allocated) / static_cast<double>(u.entries);
}

// Keeps `depth` operations in flight for `seconds`. `issue(n, done)` starts n
// operations, handing all of them to the kernel together (as an event loop
// does once per turn); each calls done(start time) when it completes.
template <typename IssueFn, typename WaitFn>
double RunClosedLoop(uint32_t depth, double seconds, Histogram* latency, IssueFn issue,
                     WaitFn wait) {
  uint64_t issued = 0, completed = 0;
  auto t0 = Clock::now();
  auto end =
      t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  bool stopping = false;
  std::function<void(Clock::time_point)> done = [&](Clock::time_point began) {
    ++completed;
    latency->Record(static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - began).count()));
  };
  while (true) {
    if (!stopping && issued - completed < depth) {
      uint64_t n = depth - (issued - completed);
      issue(n, done);
      issued += n;
    }
    wait();
    if (!stopping && Clock::now() >= end) stopping = true;
    if (stopping && completed == issued) break;
  }
  double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  return static_cast<double>(completed) / elapsed;
}

struct RawRead final : storage::IoCompletion {
  AlignedBuffer buf;
  uint32_t len = storage::kSectorSize;
  Clock::time_point began;
  std::function<void(Clock::time_point)>* done = nullptr;
  bool busy = false;
  void OnIoComplete(int32_t r) override {
    if (r != static_cast<int32_t>(len)) {
      std::fprintf(stderr, "raw read failed: %d\n", r);
      std::exit(1);
    }
    busy = false;
    (*done)(began);
  }
};

double RawReads(const Options& o, uint64_t region_end, Histogram* latency, const char** backend) {
  auto dev = storage::OpenFileDevice(o.path, 0, storage::IoBackend::kIoUring);
  if (!dev.ok()) Die("opening the device for raw reads", dev.status());
  *backend = (*dev)->backend_name();
  auto q = (*dev)->NewQueue(o.depth * 2);
  if (!q.ok()) Die("raw queue", q.status());
  storage::IoQueue* queue = q->get();
  std::vector<RawRead> reads(o.depth);
  for (RawRead& r : reads) {
    r.len = o.raw_bytes;
    r.buf = AlignedBuffer(o.raw_bytes);
  }
  std::mt19937_64 rng(7);
  const uint64_t first = 1u << 20, sectors = (region_end - first) / storage::kSectorSize;
  double rate = RunClosedLoop(
      o.depth, o.seconds, latency,
      [&](uint64_t n, std::function<void(Clock::time_point)>& done) {
        for (RawRead& r : reads) {
          if (n == 0) break;
          if (r.busy) continue;
          r.busy = true;
          r.done = &done;
          r.began = Clock::now();
          queue->Read(first + (rng() % (sectors - 8)) * storage::kSectorSize, r.buf.data(), r.len,
                      &r);
          --n;
        }
      },
      [&] { queue->Wait(std::chrono::milliseconds(100)); });
  return rate;
}

// CPU time of this process so far, user and system, in microseconds.
struct CpuTime {
  double user_us = 0, sys_us = 0;
  static CpuTime Now() {
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    auto us = [](const timeval& t) { return t.tv_sec * 1e6 + t.tv_usec; };
    return CpuTime{us(ru.ru_utime), us(ru.ru_stime)};
  }
  CpuTime operator-(const CpuTime& o) const { return {user_us - o.user_us, sys_us - o.sys_us}; }
  CpuTime& operator+=(const CpuTime& o) {
    user_us += o.user_us;
    sys_us += o.sys_us;
    return *this;
  }
};

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::string Join(const std::vector<double>& v) {
  std::string out;
  for (double x : v) {
    if (!out.empty()) out.push_back(' ');
    out.append(std::to_string(static_cast<long>(x)));
  }
  return out;
}

std::unique_ptr<Store> OpenStore(const Options& o, Durability d) {
  StoreOptions so;
  so.path = o.path;
  so.file_size = o.file_gib << 30;
  so.durability = d;
  so.io_backend = storage::IoBackend::kIoUring;
  so.align_records = o.align;
  auto s = Store::Open(so);
  if (!s.ok()) Die("opening the store", s.status());
  return std::move(s).value();
}

void PrintMachine(const Options& o) {
  utsname u{};
  uname(&u);
  std::printf("machine: %u cores, kernel %s; device: %s (a file on the root filesystem)\n",
              std::thread::hardware_concurrency(), u.release, o.path.c_str());
}

}  // namespace

void IndexPhase() {
  std::printf(
      "\n== index memory (allocated bytes / records; slack, empty slots and the 4096 "
      "partition headers included)\n");
  double worst = 0;
  for (uint64_t n : {500000ull, 1000000ull, 2000000ull}) {
    double via_malloc = 0;
    double b = IndexBytesPerRecord(n, &via_malloc);
    worst = std::max(worst, std::max(b, via_malloc));
    std::printf("  %8llu records: %5.1f bytes/record (malloc's count: %5.1f)\n",
                static_cast<unsigned long long>(n), b, via_malloc);
  }
  std::printf("  worst: %.1f bytes/record (goal: at most 32; Aerospike: 64)\n", worst);
}

void LoadPhase(const Options& o, const std::vector<std::string>& keys) {
  std::error_code ec;
  std::filesystem::remove(o.path, ec);
  std::printf("\n== load: %llu records of %u bytes under reference-workload keys\n",
              static_cast<unsigned long long>(o.records), o.record_bytes);
  auto store = OpenStore(o, Durability::kBuffered);
  auto w = store->NewWorker();
  if (!w.ok()) Die("worker", w.status());
  auto t0 = Clock::now();
  uint64_t next = 0, done_count = 0;
  while (done_count < o.records) {
    {
      Worker::Batch batch(**w);
      while (next < o.records && next - done_count < 256) {
        (*w)->Put(keys[next], Body(next, 0, o.record_bytes), 0, 0,
                  [&](Result<storage::WriteOutcome> r) {
                    if (!r.ok()) Die("load put", r.status());
                    ++done_count;
                  });
        ++next;
      }
    }
    (*w)->Wait(std::chrono::milliseconds(10));
  }
  if (Status s = (*w)->FlushSync(); !s.ok()) Die("flush", s);
  double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  storage::StoreStats st = store->stats();
  uint32_t blocks_used = st.blocks_total - st.blocks_free;
  std::printf("  %.0f puts/s (buffered, 256 in flight); %.0f MiB live in %u of %u blocks; io %s\n",
              static_cast<double>(o.records) / secs, static_cast<double>(st.live_bytes) / (1 << 20),
              blocks_used, st.blocks_total, st.io_backend);
  std::printf("  device bytes per record: %.0f (record footprint %u; records %s)\n",
              static_cast<double>(blocks_used) * st.block_size / static_cast<double>(o.records),
              storage::RecordFootprint(36, o.record_bytes),
              o.align ? "aligned to sectors" : "packed");
  std::printf(
      "  write buffers: one %u KiB open block per worker, plus blocks being flushed; the "
      "data is %.0fx two blocks\n",
      st.block_size >> 10, static_cast<double>(st.live_bytes) / (2.0 * st.block_size));
}

// Alternates raw-device rounds and engine rounds; true if every get was right.
bool ReadPhase(const Options& o, Store* store, Worker* worker, uint64_t region_end, bool raw,
               bool engine) {
  std::printf("\n== reads at queue depth %u, one thread; %u rounds of %.0f s, %s; medians\n",
              o.depth, o.rounds, o.seconds,
              raw && engine ? "raw and engine alternating" : (raw ? "raw" : "engine"));
  std::mt19937_64 rng(11);
  uint64_t bad = 0;
  const char* backend = "";
  std::vector<double> raw_rates, get_rates;
  Histogram raw_lat, get_lat;
  uint64_t device_reads = 0, memory_reads = 0, n_gets = 0;
  CpuTime raw_cpu, get_cpu;
  for (uint32_t round = 0; round < o.rounds; ++round) {
    if (raw) {
      CpuTime c0 = CpuTime::Now();
      raw_rates.push_back(RawReads(o, region_end, &raw_lat, &backend));
      raw_cpu += CpuTime::Now() - c0;
    }
    if (!engine) continue;
    storage::StoreStats before = store->stats();
    CpuTime c0 = CpuTime::Now();
    get_rates.push_back(RunClosedLoop(
        o.depth, o.seconds, &get_lat,
        [&](uint64_t n, std::function<void(Clock::time_point)>& done) {
          Worker::Batch batch(*worker);
          for (uint64_t i = 0; i < n; ++i) {
            uint64_t user = rng() % o.records;
            auto began = Clock::now();
            // Built per request, as a server finds it in a fresh network buffer.
            worker->Get(UserKey(user), [&, user, began](Result<storage::Record> r) {
              uint64_t stamp = 0;
              if (!r.ok() || r->body().size() != o.record_bytes) {
                ++bad;
              } else {
                std::memcpy(&stamp, r->body().data(), sizeof stamp);
                if (stamp != user) ++bad;
              }
              done(began);
            });
          }
        },
        [&] { worker->Wait(std::chrono::milliseconds(100)); }));
    get_cpu += CpuTime::Now() - c0;
    storage::StoreStats after = store->stats();
    n_gets += after.gets - before.gets;
    device_reads += after.device_reads - before.device_reads;
    memory_reads += after.memory_reads - before.memory_reads;
  }
  double raw_rate = Median(raw_rates), get_rate = Median(get_rates);
  if (raw) {
    std::printf(
        "  raw device, %u-byte random reads (%s): %8.0f reads/s  p50 %4llu us  p99 %5llu us"
        "   rounds: %s\n",
        o.raw_bytes, backend, raw_rate, static_cast<unsigned long long>(raw_lat.Percentile(0.5)),
        static_cast<unsigned long long>(raw_lat.Percentile(0.99)), Join(raw_rates).c_str());
  }
  if (engine) {
    std::printf(
        "  engine gets of %u-byte records:   %8.0f gets/s   p50 %4llu us  p99 %5llu us"
        "   rounds: %s\n",
        o.record_bytes, get_rate, static_cast<unsigned long long>(get_lat.Percentile(0.5)),
        static_cast<unsigned long long>(get_lat.Percentile(0.99)), Join(get_rates).c_str());
    std::printf(
        "  device reads per get: %.3f; served from memory: %llu; wrong or failed: %llu\n",
        static_cast<double>(device_reads) / static_cast<double>(std::max<uint64_t>(1, n_gets)),
        static_cast<unsigned long long>(memory_reads), static_cast<unsigned long long>(bad));
  }
  auto per = [](double us, uint64_t n) {
    return us / static_cast<double>(std::max<uint64_t>(1, n));
  };
  if (raw) {
    std::printf("  CPU per raw read: %.2f us user + %.2f us system\n",
                per(raw_cpu.user_us, raw_lat.count()), per(raw_cpu.sys_us, raw_lat.count()));
  }
  if (engine) {
    std::printf("  CPU per get:      %.2f us user + %.2f us system\n",
                per(get_cpu.user_us, get_lat.count()), per(get_cpu.sys_us, get_lat.count()));
  }
  if (raw && engine) {
    std::printf("  engine / raw: %.2f (goal: 0.80 or more)\n", get_rate / raw_rate);
  }
  return bad == 0;
}

void PutPhase(const Options& o, Store* store, Worker* worker,
              const std::vector<std::string>& keys) {
  std::printf(
      "\n== puts (overwrites of random keys) at queue depth %u, commit durability, %.0f s\n",
      o.depth, o.seconds);
  std::mt19937_64 rng(13);
  Histogram put_lat;
  storage::StoreStats before = store->stats();
  uint32_t version = 1;
  double puts = RunClosedLoop(
      o.depth, o.seconds, &put_lat,
      [&](uint64_t n, std::function<void(Clock::time_point)>& done) {
        Worker::Batch batch(*worker);
        for (uint64_t i = 0; i < n; ++i) {
          uint64_t user = rng() % o.records;
          auto began = Clock::now();
          worker->Put(keys[user], Body(user, version++, o.record_bytes), 0, 0,
                      [&, began](Result<storage::WriteOutcome> r) {
                        if (!r.ok()) Die("put", r.status());
                        done(began);
                      });
        }
      },
      [&] { worker->Wait(std::chrono::milliseconds(100)); });
  storage::StoreStats after = store->stats();
  std::printf(
      "  engine puts of %u-byte records: %8.0f puts/s  p50 %4llu us  p99 %5llu us  "
      "(%.1f writes per device flush)\n",
      o.record_bytes, puts, static_cast<unsigned long long>(put_lat.Percentile(0.5)),
      static_cast<unsigned long long>(put_lat.Percentile(0.99)),
      static_cast<double>(after.writes - before.writes) /
          static_cast<double>(std::max<uint64_t>(1, after.flushes - before.flushes)));
}

int Main(int argc, char** argv) {
  Options o = Parse(argc, argv);
  PrintMachine(o);
  auto runs = [&](const char* phase) { return o.only.empty() || o.only == phase; };
  if (runs("index")) IndexPhase();
  if (o.only == "index") return 0;

  std::vector<std::string> keys;
  keys.reserve(o.records);
  for (uint64_t i = 0; i < o.records; ++i) keys.push_back(UserKey(i));
  if (!o.reuse) LoadPhase(o, keys);

  auto store = OpenStore(o, Durability::kCommit);
  const storage::RecoveryStats& rec = store->recovery();
  std::printf("  restart: recovered %llu records from %u blocks in %.2f s\n",
              static_cast<unsigned long long>(rec.live_records), rec.blocks_in_use, rec.seconds);
  // The load filled blocks from block 1 on: raw reads stay within them.
  uint64_t region_end = uint64_t{store->stats().block_size} * (1 + rec.blocks_in_use);
  auto w = store->NewWorker();
  if (!w.ok()) Die("worker", w.status());
  bool ok = true;
  bool raw = runs("raw") || o.only == "read", engine = runs("get") || o.only == "read";
  if (raw || engine) ok = ReadPhase(o, store.get(), w->get(), region_end, raw, engine);
  if (runs("put")) PutPhase(o, store.get(), w->get(), keys);

  storage::StoreStats st = store->stats();
  std::printf("\n== store: %llu records, index %.1f bytes/record, %llu blocks defragmented\n",
              static_cast<unsigned long long>(st.index_entries),
              static_cast<double>(st.index_bytes) / static_cast<double>(st.index_entries),
              static_cast<unsigned long long>(st.defrag_blocks));
  w->reset();
  store.reset();
  std::error_code ec;
  if (!o.keep) std::filesystem::remove(o.path, ec);
  return ok ? 0 : 1;
}

}  // namespace segstore::bench

int main(int argc, char** argv) { return segstore::bench::Main(argc, argv); }

#include "bench/segbench/limits.h"

#include <fcntl.h>
#include <liburing.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/utsname.h>
#include <unistd.h>

// Boost 1.74's Asio uses std::exchange without including <utility> (C++20).
#include <utility>

#include <boost/asio.hpp>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include "bench/segbench/open_all.h"
#include "common/aligned_buffer.h"

namespace segstore::bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint32_t kReadBytes = 4096;

Status Errno(const std::string& what, int err) {
  return Status::IOError(what + ": " + std::strerror(err));
}

// Closes an fd and unlinks its file when it goes out of scope.
struct ScratchFile {
  std::string path;
  int fd = -1;
  ~ScratchFile() {
    if (fd >= 0) ::close(fd);
    if (!path.empty()) ::unlink(path.c_str());
  }
};

// Random 4 KiB reads of `fd` over [0, bytes) at `depth` for `seconds`.
Result<double> RandomReads(int fd, uint64_t bytes, unsigned depth, double seconds,
                           Histogram* latency) {
  io_uring ring{};
  if (int rc = io_uring_queue_init(depth, &ring, 0); rc < 0) return Errno("io_uring_queue_init", -rc);
  struct Slot {
    AlignedBuffer buf{kReadBytes};
    Clock::time_point began;
  };
  std::vector<Slot> slots(depth);
  std::mt19937_64 rng(7);
  const uint64_t pages = bytes / kReadBytes;
  auto submit = [&](unsigned i) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring);
    slots[i].began = Clock::now();
    io_uring_prep_read(sqe, fd, slots[i].buf.data(), kReadBytes, (rng() % pages) * kReadBytes);
    io_uring_sqe_set_data64(sqe, i);
  };
  for (unsigned i = 0; i < depth; ++i) submit(i);
  io_uring_submit(&ring);
  const auto t0 = Clock::now();
  const auto end = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  uint64_t done = 0;
  unsigned in_flight = depth;
  Status failure = Status::OK();
  bool stopping = false;
  while (in_flight > 0) {
    io_uring_cqe* cqe = nullptr;
    if (int rc = io_uring_wait_cqe(&ring, &cqe); rc < 0) {
      if (rc == -EINTR) continue;
      failure = Errno("io_uring_wait_cqe", -rc);
      break;
    }
    unsigned head = 0, seen = 0;
    io_uring_for_each_cqe(&ring, head, cqe) {
      ++seen;
      --in_flight;
      const auto i = static_cast<unsigned>(io_uring_cqe_get_data64(cqe));
      if (cqe->res != static_cast<int>(kReadBytes)) {
        if (failure.ok()) {
          failure = cqe->res < 0 ? Errno("reading the scratch file", -cqe->res)
                                 : Status::IOError("reading the scratch file: a short read");
        }
        stopping = true;
        continue;
      }
      ++done;
      latency->Record(static_cast<uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - slots[i].began).count()));
      if (!stopping && Clock::now() < end) {
        submit(i);
        ++in_flight;
      } else {
        stopping = true;
      }
    }
    io_uring_cq_advance(&ring, seen);
    io_uring_submit(&ring);
  }
  const double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  io_uring_queue_exit(&ring);
  if (!failure.ok()) return failure;
  return static_cast<double>(done) / elapsed;
}

std::string ReadFirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

}  // namespace

Result<DeviceLimit> MeasureDevice(const std::string& dir, uint64_t file_bytes, unsigned queue_depth,
                                  double seconds) {
  constexpr uint64_t kChunk = 1 << 20;
  if (file_bytes < kChunk || queue_depth == 0 || seconds <= 0) {
    return Status::InvalidArgument("the scratch file must be at least 1 MiB; depth and seconds positive");
  }
  file_bytes -= file_bytes % kChunk;
  DeviceLimit out;
  out.file_bytes = file_bytes;
  out.queue_depth = queue_depth;
  ScratchFile f;
  f.path = (std::filesystem::path(dir) / ("segbench-limits-" + std::to_string(::getpid()))).string();
  out.file = f.path;
  f.fd = ::open(f.path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_DIRECT | O_CLOEXEC, 0600);
  if (f.fd < 0) {
    const int err = errno;
    if (err == EINVAL) {
      f.path.clear();
      return Status::InvalidArgument(dir + " does not take O_DIRECT (tmpfs?): give a directory on the device");
    }
    if (err == EEXIST) f.path.clear();  // not ours: leave it
    return Errno("creating " + out.file, err);
  }
  // Written in full: an unwritten extent reads as zeros without the device.
  AlignedBuffer chunk(kChunk);
  std::mt19937_64 rng(1);
  for (size_t i = 0; i < kChunk; i += 8) {
    const uint64_t v = rng();
    std::memcpy(chunk.data() + i, &v, 8);
  }
  for (uint64_t off = 0; off < file_bytes; off += kChunk) {
    const ssize_t n = ::pwrite(f.fd, chunk.data(), kChunk, static_cast<off_t>(off));
    if (n != static_cast<ssize_t>(kChunk)) return Errno("writing " + f.path, n < 0 ? errno : EIO);
  }
  if (::fsync(f.fd) != 0) return Errno("fsync " + f.path, errno);
  Result<double> rate = RandomReads(f.fd, file_bytes, queue_depth, seconds, &out.latency);
  if (!rate.ok()) return rate.status();
  out.reads_per_second = *rate;
  Result<double> one = RandomReads(f.fd, file_bytes, 1, seconds / 4, &out.latency_depth1);
  if (!one.ok()) return one.status();
  return out;
}

Result<PingLimit> MeasurePing(const client::ClientOptions& options, unsigned connections,
                              double seconds) {
  if (connections == 0 || seconds <= 0) {
    return Status::InvalidArgument("connections and seconds must be positive");
  }
  PingLimit out;
  out.connections = connections;
  // One client thread, `n` connections each with one ping in flight.
  auto run = [&](unsigned n, Histogram* latency) -> Result<double> {
    boost::asio::io_context io;
    auto opened = OpenAll<client::AsyncClient>(io, n, [&](boost::asio::io_context& ctx, auto done) {
      client::AsyncClient::Connect(ctx, options, std::move(done));
    });
    if (!opened.ok()) return opened.status();
    std::vector<std::unique_ptr<client::AsyncClient>>& conns = *opened;
    Status first = Status::OK();
    uint64_t done = 0;
    bool stopping = false;
    std::function<void(unsigned)> ping = [&](unsigned c) {
      const auto began = Clock::now();
      conns[c]->Ping([&, c, began](Result<std::monostate> r) {
        if (!r.ok()) {
          if (first.ok()) first = r.status();
          stopping = true;
          return;
        }
        ++done;
        latency->Record(static_cast<uint64_t>(
            std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - began).count()));
        if (!stopping) ping(c);
      });
    };
    for (unsigned c = 0; c < n; ++c) ping(c);
    const auto t0 = Clock::now();
    const auto end = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
    while (Clock::now() < end && !stopping) io.run_for(std::chrono::milliseconds(10));
    const double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
    const uint64_t counted = done;
    stopping = true;
    DrainAll(io, conns, std::chrono::seconds(60));
    if (!first.ok()) return first;
    return static_cast<double>(counted) / elapsed;
  };
  Result<double> one = run(1, &out.round_trip);
  if (!one.ok()) return one.status();
  out.round_trips_per_second = *one;
  Histogram many;
  Result<double> rate = run(connections, &many);
  if (!rate.ok()) return rate.status();
  out.pings_per_second = *rate;
  return out;
}

Machine DescribeMachine(const std::string& path) {
  Machine m;
  m.cores = std::thread::hardware_concurrency();
  {
    std::ifstream cpuinfo("/proc/cpuinfo");
    std::string line;
    while (std::getline(cpuinfo, line)) {
      if (line.rfind("model name", 0) == 0) {
        const size_t colon = line.find(':');
        if (colon != std::string::npos) m.cpu = line.substr(colon + 2);
        break;
      }
    }
  }
  {
    std::ifstream meminfo("/proc/meminfo");
    std::string key;
    uint64_t kib = 0;
    if (meminfo >> key >> kib && key == "MemTotal:") m.memory_bytes = kib * 1024;
  }
  utsname u{};
  if (::uname(&u) == 0) m.kernel = u.release;
  struct stat st{};
  if (path.empty() || ::stat(path.c_str(), &st) != 0) return m;
  const unsigned major = ::major(st.st_dev), minor = ::minor(st.st_dev);
  const std::string dev_id = std::to_string(major) + ":" + std::to_string(minor);
  // The filesystem: the mount whose device is st_dev.
  std::string fs_type, source;
  {
    std::ifstream mounts("/proc/self/mountinfo");
    std::string line;
    while (std::getline(mounts, line)) {
      std::istringstream in(line);
      std::string id, parent, devno;
      in >> id >> parent >> devno;
      if (devno != dev_id) continue;
      const size_t dash = line.find(" - ");
      if (dash == std::string::npos) continue;
      std::istringstream tail(line.substr(dash + 3));
      tail >> fs_type >> source;
      break;
    }
  }
  // The block device and its disk (a partition's parent), its model and driver.
  const std::filesystem::path sys = "/sys/dev/block/" + dev_id;
  std::string disk_desc;
  std::error_code ec;
  if (std::filesystem::exists(sys, ec)) {
    std::filesystem::path dev = std::filesystem::canonical(sys, ec);
    if (!ec) {
      if (std::filesystem::exists(dev / "partition", ec)) dev = dev.parent_path();
      const std::string model = ReadFirstLine((dev / "device" / "model").string());
      const std::filesystem::path driver =
          std::filesystem::read_symlink(dev / "device" / "driver", ec);
      const std::string rotational = ReadFirstLine((dev / "queue" / "rotational").string());
      disk_desc = dev.filename().string();
      if (!model.empty()) disk_desc += " " + model;
      if (!ec && !driver.empty()) disk_desc += ", driver " + driver.filename().string();
      if (rotational == "0") disk_desc += ", non-rotational";
      if (rotational == "1") disk_desc += ", reports rotational";
    }
  }
  m.storage = source.empty() ? dev_id : source;
  if (!fs_type.empty()) m.storage += " (" + fs_type + ")";
  if (!disk_desc.empty()) m.storage += ", disk " + disk_desc;
  return m;
}

}  // namespace segstore::bench

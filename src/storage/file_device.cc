// FileDevice: a regular file or a raw block device opened with O_DIRECT.
#include <fcntl.h>
#include <fmt/format.h>
#include <liburing.h>
#include <linux/fs.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>

#include "common/coding.h"
#include "storage/emulated_queue.h"
#include "storage/io_queue.h"
#include "storage/uring_queue.h"

namespace segstore::storage {
namespace {

Status Errno(std::string_view what, const std::string& path) {
  return Status::IOError(fmt::format("{} {}: {}", what, path, std::strerror(errno)));
}

class FileDevice final : public Device {
 public:
  FileDevice(int fd, uint64_t size, std::string name, bool use_uring)
      : fd_(fd), size_(size), name_(std::move(name)), use_uring_(use_uring) {}
  ~FileDevice() override { ::close(fd_); }

  uint64_t size() const override { return size_; }
  const std::string& name() const override { return name_; }
  const char* backend_name() const override { return use_uring_ ? "io_uring" : "sync"; }
  Result<std::unique_ptr<IoQueue>> NewQueue(uint32_t depth) override {
    if (use_uring_) return UringQueue::Open(fd_, depth);
    return SyncQueue::Open(fd_);
  }

 private:
  int fd_;
  uint64_t size_;
  std::string name_;
  bool use_uring_;
};

}  // namespace

bool IoUringAvailable(std::string* why) {
  static std::once_flag once;
  static bool available = false;
  static std::string reason;
  std::call_once(once, [] {
    io_uring ring;
    int rc = io_uring_queue_init(2, &ring, 0);
    if (rc == 0) {
      io_uring_queue_exit(&ring);
      available = true;
      return;
    }
    reason = std::strerror(-rc);
    if (rc == -ENOSYS) {
      // Podman's default seccomp profile answers ENOSYS to the calls it
      // does not list, io_uring's among them (docs/container.md).
      reason +=
          " (this kernel has no io_uring, or a container seccomp profile forbids it: run with "
          "docker/seccomp-segstored.json)";
    }
    if (rc == -EPERM) {
      reason +=
          " (io_uring is forbidden here: a container seccomp profile, or "
          "kernel.io_uring_disabled)";
    }
  });
  if (!available && why != nullptr) *why = reason;
  return available;
}

namespace {

struct OpenedFile {
  int fd = -1;
  uint64_t size = 0;
};

// Opens `path` for this process alone, creating it at `create_size` bytes when
// missing. One process at a time: two servers appending to one device would
// overwrite each other's write blocks. A regular file is held with flock (the
// lock goes with the descriptor); a block device is opened O_EXCL, the
// kernel's exclusive claim, which also refuses a mounted one. A process just
// killed may hold either a little longer than its life (the kernel drops its
// io_uring rings, and their references to the file, asynchronously), so both
// are waited for, `patience` at most, before the open is refused with Busy.
Result<OpenedFile> OpenExclusively(const std::string& path, uint64_t create_size,
                                   std::chrono::milliseconds patience) {
  const auto deadline = std::chrono::steady_clock::now() + patience;
  bool told = false;
  // Waits a little and says true, or says false once the patience is spent.
  auto wait = [&] {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    if (!told) {
      told = true;
      spdlog::warn("{} is in use by another process; waiting up to {} ms for it to let go", path,
                   patience.count());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return true;
  };
  auto busy = [&] {
    return Status::Busy(
        fmt::format("{} is in use by another process (is another segstored serving it, or is "
                    "the device mounted?)",
                    path));
  };
  bool lock_warned = false;
  for (;;) {
    struct stat st {};
    const bool exists = ::stat(path.c_str(), &st) == 0;
    if (!exists && errno != ENOENT) return Errno("stat", path);
    if (exists && !S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode)) {
      return Status::InvalidArgument(
          fmt::format("{} is neither a regular file nor a block device", path));
    }
    const bool block_device = exists && S_ISBLK(st.st_mode);
    int flags = O_RDWR | O_DIRECT | O_CLOEXEC;
    if (!exists || block_device) flags |= O_EXCL;  // a file: create it; a device: claim it
    if (!exists) flags |= O_CREAT;
    const int fd = ::open(path.c_str(), flags, 0640);
    if (fd < 0) {
      if (errno == EEXIST && !exists) continue;  // created meanwhile by another: look again
      if (errno == EBUSY && block_device) {
        if (wait()) continue;
        return busy();
      }
      if (errno == EINVAL) {
        return Status::InvalidArgument(
            fmt::format("{}: this filesystem does not support O_DIRECT (tmpfs?); put the data file "
                        "on a disk-backed filesystem",
                        path));
      }
      return Errno("open", path);
    }
    // Closes the descriptor and says `s`: every way out past the open.
    auto give_up = [fd](Status s) {
      ::close(fd);
      return s;
    };
    if (!block_device && ::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      if (errno == EWOULDBLOCK) {
        ::close(fd);
        if (wait()) continue;
        return busy();
      }
      if (errno != ENOLCK && errno != EOPNOTSUPP) return give_up(Errno("flock", path));
      if (!lock_warned) {  // a filesystem without locks: go on, unguarded
        lock_warned = true;
        spdlog::warn(
            "{}: this filesystem cannot lock files; make sure one segstored at a time "
            "uses it",
            path);
      }
    }
    // What the lock guards is the file as it is now: a creator that failed
    // may have removed it while we waited (start over), and its size is read
    // only now.
    struct stat held {};
    if (::fstat(fd, &held) != 0) return give_up(Errno("fstat", path));
    if (S_ISREG(held.st_mode) && held.st_nlink == 0) {
      ::close(fd);
      continue;
    }
    OpenedFile f{fd, 0};
    if (block_device) {
      if (::ioctl(fd, BLKGETSIZE64, &f.size) < 0) {
        return give_up(Errno("ioctl(BLKGETSIZE64)", path));
      }
    } else if (exists) {
      f.size = static_cast<uint64_t>(held.st_size);
    } else {
      f.size = AlignDown(create_size, kSectorSize);
      int rc = ::posix_fallocate(fd, 0, static_cast<off_t>(f.size));
      if (rc == EOPNOTSUPP || rc == EINVAL) {
        rc = ::ftruncate(fd, static_cast<off_t>(f.size)) ? errno : 0;
      }
      if (rc != 0) {
        errno = rc;
        Status s = Errno("allocate", path);
        ::unlink(path.c_str());  // before letting go of the lock: no one may take it up
        return give_up(std::move(s));
      }
      spdlog::info("created data file {} of {} MiB", path, f.size >> 20);
    }
    return f;
  }
}

}  // namespace

Result<std::shared_ptr<Device>> OpenFileDevice(const std::string& path, uint64_t create_size,
                                               IoBackend backend,
                                               std::chrono::milliseconds lock_patience) {
  bool use_uring = true;
  std::string why;
  switch (backend) {
    case IoBackend::kIoUring:
      if (!IoUringAvailable(&why)) {
        return Status::Unavailable(fmt::format("io_uring is unavailable: {}", why));
      }
      break;
    case IoBackend::kAuto:
      if constexpr (kThreadSanitizer) {
        // ThreadSanitizer sees neither the kernel filling read buffers nor
        // reading write buffers through io_uring: it would miss races on
        // them. pread is intercepted, and SyncQueue declares the rest (see
        // emulated_queue.cc), so every access and every synchronisation it
        // checks is real. io_uring is covered by the plain and ASan builds.
        static std::once_flag once;
        std::call_once(once, [] {
          spdlog::warn(
              "ThreadSanitizer build: io_backend auto uses pread/pwrite, not io_uring, so that "
              "the sanitizer sees every device read and write");
        });
        use_uring = false;
        break;
      }
      if (!IoUringAvailable(&why)) {
        spdlog::error(
            "io_uring is unavailable ({}). Falling back to synchronous pread/pwrite: every "
            "device I/O now blocks its thread and throughput will be far lower. Fix the "
            "sandbox (see docker/ for a seccomp profile) rather than run like this.",
            why);
        use_uring = false;
      }
      break;
    case IoBackend::kSync:
      spdlog::warn("io_backend = sync: device I/O uses blocking pread/pwrite (diagnosis only)");
      use_uring = false;
      break;
  }

  Result<OpenedFile> f = OpenExclusively(path, create_size, lock_patience);
  if (!f.ok()) return f.status();
  const uint64_t size = AlignDown(f->size, kSectorSize);
  return std::shared_ptr<Device>(std::make_shared<FileDevice>(f->fd, size, path, use_uring));
}

}  // namespace segstore::storage

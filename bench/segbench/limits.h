// The machine's limits, measured by segbench beside the workloads so each
// result can be read as a share of what the hardware allows:
// - the device: 4 KiB O_DIRECT random reads through io_uring, at a queue
//   depth (32: what a busy server keeps in flight) and at depth 1 (the
//   latency of one read), on a scratch file written in full (reading
//   unwritten extents would never reach the device) in the data file's
//   directory, deleted afterwards;
// - the network path: a ping-pong of segstore's empty request (ping), one
//   connection with one request in flight (the round trip), and the rate of
//   pings over many connections (the front end's request ceiling).
// And a description of the machine: cores, CPU, memory, kernel, and what a
// path is stored on.
//
// Every function blocks its caller; none keeps state.
#pragma once

#include <cstdint>
#include <string>

#include "common/histogram.h"
#include "segstore/client.h"
#include "segstore/result.h"

namespace segstore::bench {

struct DeviceLimit {
  std::string file;            // the scratch file read (deleted)
  uint64_t file_bytes = 0;
  unsigned queue_depth = 0;
  double reads_per_second = 0;  // at queue_depth
  Histogram latency;            // at queue_depth, nanoseconds
  Histogram latency_depth1;     // at depth 1, nanoseconds
};

// Writes a scratch file of `file_bytes` in `dir`, reads it at random for
// `seconds` at `queue_depth`, then for `seconds` / 4 at depth 1, and
// deletes it. InvalidArgument when `dir` does not take O_DIRECT (tmpfs);
// IOError on any failed I/O.
Result<DeviceLimit> MeasureDevice(const std::string& dir, uint64_t file_bytes, unsigned queue_depth,
                                  double seconds);

struct PingLimit {
  Histogram round_trip;         // one connection, depth 1, nanoseconds
  double round_trips_per_second = 0;
  unsigned connections = 0;     // for the rate below
  double pings_per_second = 0;  // over `connections`, depth 1 each
};

// Pings the segstore server at `options` for `seconds` on one connection,
// then for `seconds` on `connections`.
Result<PingLimit> MeasurePing(const client::ClientOptions& options, unsigned connections,
                              double seconds);

struct Machine {
  unsigned cores = 0;
  std::string cpu;          // the model name
  uint64_t memory_bytes = 0;
  std::string kernel;
  std::string storage;      // what `path` is on: "/dev/vda1 (ext4), virtio disk"
};

// This machine, and what `path` (a file or a directory; "" for none) is
// stored on. Fields it cannot learn stay empty.
Machine DescribeMachine(const std::string& path);

}  // namespace segstore::bench

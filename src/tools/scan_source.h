// Where `segctl export` and `segctl backup` read profiles from: a single
// server, or each partition of a cluster from any of its replicas, page by
// page with the scan operation (proto/PROTOCOL.md, "scan"). A partition
// whose server fails (Busy, Unavailable, Timeout, WrongNode) is read again
// from its start, from the next replica (the map fetched again after a
// WrongNode), a bounded number of rounds. One Client per server, connected
// when first needed. Not thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "segstore/client.h"

namespace segstore::tools {

class ScanSource {
 public:
  // Connects to `options`' server and fetches its map.
  static Result<std::unique_ptr<ScanSource>> Connect(const client::ClientOptions& options,
                                                     unsigned retries);

  // Reads partition p: `start()` when a reading of it begins (again, after a
  // failure: what the pages before gave is to be dropped), then `page(r)`
  // for each page in order. OK once the last page was handed over; else the
  // last error, naming the partition, or the first error `page` returned.
  Status ReadPartition(uint32_t p, uint32_t page_bytes, const std::function<Status()>& start,
                       const std::function<Status(ScanResponse&)>& page);

  // The client of a server holding partition p (for other requests on its
  // users, as master_of).
  Result<client::Client*> ClientOf(uint32_t p);
  const ClusterMap& map() const { return map_; }

 private:
  ScanSource(const client::ClientOptions& options, unsigned retries)
      : options_(options), retries_(retries) {}
  Status RefreshMap();
  std::vector<std::string> SourcesOf(uint32_t p) const;
  Result<client::Client*> ClientFor(const std::string& address);
  Status ReadFrom(const std::string& source, uint32_t p, uint32_t page_bytes,
                  const std::function<Status(ScanResponse&)>& page, bool* callback_failed);

  const client::ClientOptions options_;
  const unsigned retries_;
  std::string first_;  // the address given
  std::map<std::string, std::unique_ptr<client::Client>> clients_;
  ClusterMap map_;
};

}  // namespace segstore::tools

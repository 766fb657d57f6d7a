#include "tools/scan_source.h"

#include <fmt/format.h>

#include <chrono>
#include <thread>
#include <utility>

namespace segstore::tools {
namespace {

bool Retryable(const Status& s) {
  switch (s.code()) {
    case Status::Code::kBusy:
    case Status::Code::kUnavailable:
    case Status::Code::kTimeout:
    case Status::Code::kWrongNode:
      return true;
    default:
      return false;
  }
}

}  // namespace

Result<std::unique_ptr<ScanSource>> ScanSource::Connect(const client::ClientOptions& options,
                                                        unsigned retries) {
  std::unique_ptr<ScanSource> s(new ScanSource(options, retries));
  Result<std::unique_ptr<client::Client>> c = client::Client::Connect(options);
  if (!c.ok()) return c.status();
  s->first_ = client::FormatServerAddress(options.host, options.port);
  s->clients_[s->first_] = std::move(*c);
  SEGSTORE_RETURN_IF_ERROR(s->RefreshMap());
  return s;
}

Status ScanSource::RefreshMap() {
  Status last = Status::Unavailable("no server answered cluster_map");
  for (auto& [address, c] : clients_) {
    if (c == nullptr || !c->is_open()) continue;
    Result<ClusterMap> m = c->ClusterMap();
    if (m.ok()) {
      if (m->revision >= map_.revision || !m->cluster) map_ = std::move(*m);
      return Status::OK();
    }
    last = m.status();
  }
  return last;
}

std::vector<std::string> ScanSource::SourcesOf(uint32_t p) const {
  if (!map_.cluster || map_.revision == 0) return {first_};
  std::vector<std::string> out;
  for (uint16_t n : map_.ReplicasOf(p)) out.push_back(map_.nodes[n].address);
  return out;
}

Result<client::Client*> ScanSource::ClientFor(const std::string& address) {
  std::unique_ptr<client::Client>& c = clients_[address];
  if (c != nullptr && c->is_open()) return c.get();
  client::ClientOptions o = options_;
  SEGSTORE_RETURN_IF_ERROR(client::ParseServerAddress(address, &o));
  Result<std::unique_ptr<client::Client>> made = client::Client::Connect(o);
  if (!made.ok()) return made.status();
  c = std::move(*made);
  return c.get();
}

Result<client::Client*> ScanSource::ClientOf(uint32_t p) {
  Status last = Status::Unavailable("no replica");
  for (const std::string& source : SourcesOf(p)) {
    Result<client::Client*> c = ClientFor(source);
    if (c.ok()) return c;
    last = c.status();
  }
  return last;
}

Status ScanSource::ReadPartition(uint32_t p, uint32_t page_bytes,
                                 const std::function<Status()>& start,
                                 const std::function<Status(ScanResponse&)>& page) {
  Status last;
  for (unsigned round = 0; round <= retries_; ++round) {
    if (round > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100 * round));
      (void)RefreshMap();
    }
    for (const std::string& source : SourcesOf(p)) {
      SEGSTORE_RETURN_IF_ERROR(start());
      bool callback_failed = false;
      last = ReadFrom(source, p, page_bytes, page, &callback_failed);
      if (last.ok() || callback_failed) return last;
      if (!Retryable(last)) return last.WithContext(fmt::format("partition {}", p));
    }
  }
  return last.WithContext(fmt::format("partition {}", p));
}

Status ScanSource::ReadFrom(const std::string& source, uint32_t p, uint32_t page_bytes,
                            const std::function<Status(ScanResponse&)>& page,
                            bool* callback_failed) {
  Result<client::Client*> c = ClientFor(source);
  if (!c.ok()) return c.status();
  ScanRequest req{p, 0, page_bytes};
  while (true) {
    Result<ScanResponse> r = (*c)->Scan(req);
    if (!r.ok()) return r.status();
    if (r->cursor <= req.cursor && !r->finished()) {
      return Status::Corruption(
          fmt::format("scan of partition {} from {}: the cursor did not move", p, source));
    }
    if (Status s = page(*r); !s.ok()) {
      *callback_failed = true;
      return s;
    }
    if (r->finished()) return Status::OK();
    req.cursor = r->cursor;
  }
}

}  // namespace segstore::tools

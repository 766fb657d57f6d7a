#include "server/profile_service.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "proto/wire.h"

namespace segstore::server {

using proto::FrameHeader;
using proto::Op;

namespace {

// The resident set of this process in bytes, from /proc/self/statm (0 if
// unreadable).
uint64_t ResidentBytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long long size = 0, resident = 0;
  const int n = std::fscanf(f, "%llu %llu", &size, &resident);
  std::fclose(f);
  if (n != 2) return 0;
  return resident * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
}

void ReplyError(const FrameHeader& h, const Status& s, const Reply& reply) {
  std::string frame;
  proto::AppendErrorFrame(&frame, h.op, h.request_id, s);
  reply(std::move(frame));
}

template <typename Message>
void ReplyOk(const FrameHeader& h, const Message& m, const Reply& reply) {
  std::string frame;
  if (!proto::AppendFrame(&frame, h.op, h.request_id, 0, proto::kMaxResponseBytes,
                          [&](std::string* out) { proto::Encode(m, out); })) {
    ReplyError(h,
               Status::LimitExceeded("the response would be over " +
                                     std::to_string(proto::kMaxResponseBytes) +
                                     " bytes: ask for fewer users, a limit or the ids projection"),
               reply);
    return;
  }
  reply(std::move(frame));
}

// The callback of a profile operation answering with `convert(value)`.
template <typename T, typename Convert>
auto Answer(const FrameHeader& h, Reply reply, Convert convert) {
  return [h, reply = std::move(reply), convert](Result<T> r) {
    if (r.status().IsNotFound()) {
      ReplyError(h, Status::NotFound("the user has no profile"), reply);
      return;
    }
    if (!r.ok()) {
      ReplyError(h, r.status(), reply);
      return;
    }
    ReplyOk(h, convert(std::move(*r)), reply);
  };
}

template <typename T>
auto AnswerAsIs(const FrameHeader& h, Reply reply) {
  return Answer<T>(h, std::move(reply), [](T v) { return v; });
}

}  // namespace

class ProfileHandler : public Handler {
 public:
  ProfileHandler(ProfileService* service, std::unique_ptr<profile::ProfileSession> session)
      : service_(service), session_(std::move(session)) {
    limits_.max_key_bytes = service->store_->max_key_size();
    limits_.max_batch = service->options_.max_batch;
    limits_.max_list = std::max<uint32_t>(service->options_.max_segments, 1);
  }

  int event_fd() const override { return session_->worker().event_fd(); }
  void OnEvent() override { session_->worker().OnEvent(); }
  void BeginBurst() override { burst_.emplace(session_->worker()); }
  void EndBurst() override { burst_.reset(); }

  void Handle(const FrameHeader& h, std::string_view body, Reply reply) override {
    switch (static_cast<Op>(h.op)) {
      case Op::kHello:
        return Hello(h, body, std::move(reply));
      case Op::kPing:
        return ReplyPing(h, std::move(reply));
      case Op::kStats:
        return ReplyOk(h, service_->CollectStats(), reply);
      case Op::kGet:
        return Get(h, body, std::move(reply));
      case Op::kBatchGet:
        return BatchGet(h, body, std::move(reply));
      case Op::kCount:
        return Count(h, body, std::move(reply));
      case Op::kUpsert:
        return Upsert(h, body, std::move(reply));
      case Op::kBatchUpsert:
        return BatchUpsert(h, body, std::move(reply));
      case Op::kRemove:
        return Remove(h, body, std::move(reply));
      case Op::kTrim:
        return Trim(h, body, std::move(reply));
      case Op::kDelete:
        return Delete(h, body, std::move(reply));
    }
    ReplyError(h, Status::Unsupported("unknown operation code " + std::to_string(h.op)), reply);
  }

 private:
  // Decodes `body` into *m, or answers the error and returns false.
  template <typename Message>
  bool Read(const FrameHeader& h, std::string_view body, Message* m, const Reply& reply) {
    Status s = proto::Decode(body, limits_, m);
    if (s.ok()) return true;
    ReplyError(h, s.WithContext(proto::OpName(h.op)), reply);
    return false;
  }

  void Hello(const FrameHeader& h, std::string_view body, Reply reply) {
    proto::HelloRequest req;
    if (!Read(h, body, &req, reply)) return;
    const ProfileServiceOptions& o = service_->options_;
    ServerInfo info;
    info.protocol = proto::kVersion;
    info.server = o.server_name;
    info.max_frame_bytes = o.max_frame_bytes;
    info.max_batch = o.max_batch;
    info.max_key_bytes = limits_.max_key_bytes;
    info.max_segments = o.max_segments;
    info.max_in_flight = o.max_in_flight;
    ReplyOk(h, info, reply);
  }

  static void ReplyPing(const FrameHeader& h, Reply reply) {
    std::string frame;
    (void)proto::AppendFrame(&frame, h.op, h.request_id, 0, UINT32_MAX, [](std::string*) {});
    reply(std::move(frame));
  }

  void Get(const FrameHeader& h, std::string_view body, Reply reply) {
    proto::GetRequest req;
    if (!Read(h, body, &req, reply)) return;
    session_->Get(req.user, req.options, AnswerAsIs<GetResult>(h, std::move(reply)));
  }

  void BatchGet(const FrameHeader& h, std::string_view body, Reply reply) {
    proto::BatchGetRequest req;
    if (!Read(h, body, &req, reply)) return;
    session_->BatchGet(req.users, req.options, AnswerAsIs<BatchGetResult>(h, std::move(reply)));
  }

  void Count(const FrameHeader& h, std::string_view body, Reply reply) {
    proto::CountRequest req;
    if (!Read(h, body, &req, reply)) return;
    session_->Count(req.user, req.id_from, req.id_to,
                    Answer<uint32_t>(h, std::move(reply),
                                     [](uint32_t n) { return proto::CountResponse{n}; }));
  }

  void Upsert(const FrameHeader& h, std::string_view body, Reply reply) {
    proto::UpsertRequest req;
    if (!Read(h, body, &req, reply)) return;
    session_->Upsert(req.user, req.segments, req.mode,
                     AnswerAsIs<UpsertResult>(h, std::move(reply)));
  }

  // Every user's upsert is started at once (their reads go to the device
  // together); the answer goes when the last completes.
  void BatchUpsert(const FrameHeader& h, std::string_view body, Reply reply) {
    proto::BatchUpsertRequest req;
    if (!Read(h, body, &req, reply)) return;
    struct Join {
      BatchUpsertResult results;
      size_t remaining = 0;
      FrameHeader header;
      Reply reply;
    };
    auto join = std::make_shared<Join>();
    join->results.assign(req.items.size(), Status::Internal("pending"));
    join->remaining = req.items.size();
    join->header = h;
    join->reply = std::move(reply);
    if (req.items.empty()) {
      ReplyOk(h, join->results, join->reply);
      return;
    }
    storage::Worker::Batch batch(session_->worker());
    for (size_t i = 0; i < req.items.size(); ++i) {
      const proto::UpsertRequest& item = req.items[i];
      session_->Upsert(item.user, item.segments, item.mode, [join, i](Result<UpsertResult> r) {
        join->results[i] = std::move(r);
        if (--join->remaining == 0) ReplyOk(join->header, join->results, join->reply);
      });
    }
  }

  void Remove(const FrameHeader& h, std::string_view body, Reply reply) {
    proto::RemoveRequest req;
    if (!Read(h, body, &req, reply)) return;
    session_->Remove(req.user, req.ids,
                     Answer<uint32_t>(h, std::move(reply),
                                      [](uint32_t n) { return proto::RemoveResponse{n}; }));
  }

  void Trim(const FrameHeader& h, std::string_view body, Reply reply) {
    proto::TrimRequest req;
    if (!Read(h, body, &req, reply)) return;
    session_->Trim(req.user, req.before, AnswerAsIs<TrimResult>(h, std::move(reply)));
  }

  void Delete(const FrameHeader& h, std::string_view body, Reply reply) {
    proto::DeleteRequest req;
    if (!Read(h, body, &req, reply)) return;
    session_->Delete(req.user, Answer<bool>(h, std::move(reply), [](bool existed) {
                       return proto::DeleteResponse{existed};
                     }));
  }

  ProfileService* service_;
  std::unique_ptr<profile::ProfileSession> session_;
  proto::DecodeLimits limits_;
  std::optional<storage::Worker::Batch> burst_;  // while the loop's turn lasts
};

ProfileService::ProfileService(storage::Store* store, profile::ProfileStore* profiles,
                               const ProfileServiceOptions& options)
    : store_(store), profiles_(profiles), options_(options) {}

Result<std::unique_ptr<Handler>> ProfileService::NewHandler(unsigned /*thread_index*/) {
  Result<std::unique_ptr<profile::ProfileSession>> session = profiles_->NewSession();
  if (!session.ok()) return session.status();
  return std::unique_ptr<Handler>(new ProfileHandler(this, std::move(*session)));
}

Stats ProfileService::CollectStats() const {
  Stats out;
  auto add = [&](std::string name, auto v) {
    using V = decltype(v);
    if constexpr (std::is_floating_point_v<V>) {
      out.entries.push_back({std::move(name), static_cast<double>(v)});
    } else if constexpr (std::is_integral_v<V>) {
      out.entries.push_back({std::move(name), static_cast<uint64_t>(v)});
    } else {
      out.entries.push_back({std::move(name), std::string(v)});
    }
  };
  add("server.version", options_.server_name);
  add("server.uptime_seconds",
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - started_)
          .count());
  add("process.pid", static_cast<uint64_t>(::getpid()));
  add("process.resident_bytes", ResidentBytes());
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6;
  };
  add("process.cpu_user_seconds", seconds(usage.ru_utime));
  add("process.cpu_system_seconds", seconds(usage.ru_stime));
  if (server_counters_) {
    const ServerCounters c = server_counters_();
    add("server.connections_open", c.connections_open);
    add("server.connections_accepted", c.connections_accepted);
    add("server.connections_refused", c.connections_refused);
    add("server.connections_idle_closed", c.connections_idle_closed);
    add("server.broken_frames", c.broken_frames);
    add("server.requests", c.requests);
    add("server.error_responses", c.error_responses);
    add("server.backpressure_pauses", c.backpressure_pauses);
    add("server.bytes_in", c.bytes_in);
    add("server.bytes_out", c.bytes_out);
    for (int op = 0; op < 256; ++op) {
      if (proto::IsKnownOp(static_cast<uint8_t>(op))) {
        add("server.requests." + std::string(proto::OpName(static_cast<uint8_t>(op))),
            c.requests_by_op[op]);
      }
    }
  }
  const storage::StoreStats s = store_->stats();
  add("storage.io_backend", s.io_backend);
  add("storage.device_bytes", s.device_bytes);
  add("storage.block_size", s.block_size);
  add("storage.blocks_total", s.blocks_total);
  add("storage.blocks_free", s.blocks_free);
  add("storage.live_bytes", s.live_bytes);
  add("storage.records", s.index_entries);
  add("storage.index_tombstones", s.index_tombstones);
  add("storage.index_bytes", s.index_bytes);
  add("storage.gets", s.gets);
  add("storage.writes", s.writes);
  add("storage.update_retries", s.update_retries);
  add("storage.device_reads", s.device_reads);
  add("storage.memory_reads", s.memory_reads);
  add("storage.corruptions", s.corruptions);
  add("storage.flushes", s.flushes);
  add("storage.defrag_blocks", s.defrag_blocks);
  add("storage.defrag_records_moved", s.defrag_records_moved);
  add("storage.rotated_blocks", s.rotated_blocks);
  add("storage.tombstones_reclaimed", s.tombstones_reclaimed);
  add("storage.expired_dropped", s.expired_dropped);
  const storage::RecoveryStats& r = store_->recovery();
  add("recovery.seconds", r.seconds);
  add("recovery.blocks_scanned", r.blocks_scanned);
  add("recovery.records_scanned", r.records_scanned);
  add("recovery.live_records", r.live_records);
  add("recovery.damaged_regions", r.damaged_regions);
  const profile::SweeperStats w = profiles_->sweeper_stats();
  add("sweeper.records_visited", w.records_visited);
  add("sweeper.records_rewritten", w.records_rewritten);
  add("sweeper.records_deleted", w.records_deleted);
  add("sweeper.segments_removed", w.segments_removed);
  add("sweeper.bytes_reclaimed", w.bytes_reclaimed);
  for (const StatEntry& e : options_.config) out.entries.push_back(e);
  return out;
}

}  // namespace segstore::server
